//! The one error type of this crate.

use std::path::PathBuf;

/// Everything that can go wrong in the shared plumbing. Binaries turn it into an exit code
/// with [`Error::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A kubeconfig file named by `--kubeconfig`/`KUBECONFIG` could not be read or used.
    #[error("cannot use kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file (or `:`-separated list) that was given.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster configuration nor a kubeconfig was found.
    #[error(
        "no Kubernetes configuration found (not in a pod, no usable kubeconfig; set --kubeconfig): {0}"
    )]
    InferConfig(#[source] kube::config::InferConfigError),
    /// The kube client could not be built or a request failed.
    #[error("kubernetes client: {0}")]
    Kube(#[source] kube::Error),
    /// An admin server could not listen on its address.
    #[error("cannot listen on {address} for the {server} server: {source}")]
    Bind {
        /// `metrics` or `health probe`.
        server: &'static str,
        /// The address from the flag.
        address: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Telemetry (logging or tracing export) could not be set up.
    #[error("telemetry setup: {0}")]
    Telemetry(String),
    /// Leader election failed for a reason other than losing the lease.
    #[error("leader election on Lease {namespace}/{name}: {message}")]
    LeaderElection {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// This replica was leading and could not renew the Lease within the renew deadline (or
    /// another holder took it). The reconcilers were stopped; the process must exit non-zero.
    #[error("lost leadership of Lease {namespace}/{name}; stopping")]
    LeadershipLost {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
    },
    /// The binary's controllers returned an error.
    #[error("controllers failed: {0}")]
    Controllers(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The controllers did not finish within the graceful-shutdown timeout after a signal.
    #[error("controllers did not stop within {0:?} of the shutdown signal")]
    ShutdownTimedOut(std::time::Duration),
    /// The conversion webhook could not be set up (certificates, CRDs, listener).
    #[error("conversion webhook: {0}")]
    Webhook(#[from] crate::webhook::WebhookError),
}

impl Error {
    /// Process exit code for this error: always 1 (2 is reserved for flag errors, which clap
    /// reports itself; 0 is a clean shutdown, which is not an error).
    pub fn exit_code(&self) -> u8 {
        1
    }
}
