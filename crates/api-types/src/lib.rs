//! The agent-sandbox v1beta1 API types.
