//! The core agent-sandbox controller.
pub mod desired;
pub mod error;
pub mod keys;
pub mod metrics;
pub mod ownership;
pub mod status;
