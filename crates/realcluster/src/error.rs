//! Everything that can stop a real cluster from starting or end it.

use std::path::PathBuf;

/// Errors of building, starting and running the real control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `go` command is not there.
    #[error(
        "Go is not installed or not on PATH ({source}): the real cluster builds etcd, \
         kube-apiserver, kube-controller-manager, kube-scheduler and kwok with `go build` \
         (Go 1.26 or newer, with the Go module proxy reachable)"
    )]
    GoMissing {
        #[source]
        source: std::io::Error,
    },
    /// `GOPROXY=off`: nothing can be downloaded.
    #[error(
        "the Go module proxy is turned off (GOPROXY=off): the real cluster builds its \
         components from the proxy; set GOPROXY (e.g. the default https://proxy.golang.org)"
    )]
    ProxyOff,
    /// A `go` command failed.
    #[error("`{action}` failed ({status}): {output}")]
    GoFailed {
        action: String,
        status: String,
        output: String,
    },
    /// upstream/go.mod lacks a pinned module.
    #[error("upstream/go.mod: {message}")]
    GoMod { message: String },
    /// Neither the cache override, XDG_CACHE_HOME nor HOME is set.
    #[error(
        "no cache directory for the upstream binaries: set AGENT_SANDBOX_UPSTREAM_CACHE, \
         XDG_CACHE_HOME or HOME"
    )]
    NoCacheDir,
    /// A file or directory could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A program could not be started.
    #[error("could not start {program}: {source}")]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Certificates or keys could not be generated.
    #[error("generating the cluster's certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    /// A component exited while the cluster should be running.
    #[error("{0}")]
    ComponentExited(Box<crate::process::Exit>),
    /// Something did not happen in time.
    #[error("timed out after {seconds}s waiting for {what}{hint}")]
    Timeout {
        what: String,
        seconds: u64,
        hint: String,
    },
    /// An API request failed.
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// The kubeconfig could not be turned into a client.
    #[error("building a client from {path}: {message}")]
    Client { path: PathBuf, message: String },
    /// A bad option.
    #[error("{0}")]
    Invalid(String),
}
