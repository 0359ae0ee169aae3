//! devcluster: a local Kubernetes API server with simulated nodes.
//!
//! It serves the Kubernetes REST and watch protocol from memory so that kubectl, kube-rs and the
//! Python `kubernetes` client work against it unmodified. It is the ground for every end-to-end
//! test and benchmark of agent-sandbox, and the newcomer's one-command cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), devcluster::StartError> {
//! let running = devcluster::DevCluster::start(devcluster::Config::ephemeral()).await?;
//! let client = running.client();          // a kube::Client talking to it
//! println!("kubeconfig at {}", running.kubeconfig_path().display());
//! running.shutdown().await;
//! # Ok(()) }
//! ```

// Pure API machinery (no I/O).
pub mod patch;
pub mod schema;
pub mod selector;

// Edges: simulated nodes, transport, request observation.
pub mod kubeconfig;
pub mod nodes;
pub mod observe;
pub mod tls;

// The API server.
mod api_error;
mod builtin_types;
mod cluster;
mod config;
mod crd;
mod discovery;
mod event_versions;
mod gc;
mod kinds;
mod list_filter;
mod meta;
mod openapi;
mod patch_glue;
mod protobuf;
mod registry;
mod rest;
mod schema_glue;
mod server;
mod store;
mod table_glue;
mod watch;

pub use api_error::{ApiError, Cause};
pub use cluster::{DevCluster, InProcess, Running, StartError};
pub use config::Config;
