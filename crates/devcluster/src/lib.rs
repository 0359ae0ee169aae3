//! devcluster: a local Kubernetes API server with simulated nodes.
//!
//! It serves the Kubernetes REST and watch protocol from memory so that kubectl, kube-rs and the
//! Python `kubernetes` client work against it unmodified. It is the ground for every end-to-end
//! test and benchmark of agent-sandbox, and the newcomer's one-command cluster.

// Pure API machinery (no I/O).
pub mod patch;
pub mod schema;
pub mod selector;

// Edges: simulated nodes, transport, request observation.
pub mod kubeconfig;
pub mod nodes;
pub mod observe;
pub mod tls;
