//! The error type of `cargo xtask bench`. Every message says what failed and, where there is
//! one, what to do about it.

use std::path::PathBuf;

/// Everything that can stop a benchmark run (a failing scenario is recorded in the report
/// instead, see [`crate::bench::report::ScenarioReport::error`]).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A file or directory could not be read, created or written.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// `cargo build` of the benchmarked binaries failed.
    #[error("building the binaries failed ({status}); run `{command}` to see why")]
    Build { command: String, status: String },

    /// A child process could not be started or stopped.
    #[error("{what}: {source}")]
    Process {
        what: String,
        #[source]
        source: std::io::Error,
    },

    /// A process did not become ready in time.
    #[error("{what} was not ready within {seconds} s; its log is {log}")]
    NotReady {
        what: String,
        seconds: u64,
        log: PathBuf,
    },

    /// A process exited while the benchmark needed it.
    #[error("{what} exited unexpectedly ({status}); its log is {log}")]
    Exited {
        what: String,
        status: String,
        log: PathBuf,
    },

    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: Box<kube::Error>,
    },

    /// The kubeconfig devcluster wrote could not be used.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },

    /// A plain HTTP scrape (controller `/metrics`, `/readyz`) failed.
    #[error("GET {url}: {message}")]
    Http { url: String, message: String },

    /// A condition the scenario waits for did not hold before its deadline.
    #[error("timed out after {seconds} s waiting for {what}")]
    Timeout { what: String, seconds: u64 },

    /// A scenario cannot run in this configuration.
    #[error("{0}")]
    Unavailable(String),

    /// A report could not be serialized.
    #[error("serializing the report: {0}")]
    Json(#[from] serde_json::Error),

    /// The run was stopped by a signal; the processes it started were stopped with it.
    #[error("stopped by {0}; the processes this run started were stopped")]
    Interrupted(&'static str),

    /// The async runtime could not be built.
    #[error("starting the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl BenchError {
    /// A [`BenchError::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        BenchError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A [`BenchError::Kube`] for `action`.
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        BenchError::Kube {
            action: action.into(),
            source: Box::new(source),
        }
    }
}
