//! devcluster: a local Kubernetes API server with simulated nodes.
