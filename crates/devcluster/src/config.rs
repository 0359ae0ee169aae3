//! How a devcluster runs: address, kubeconfig, tokens, history size, watch and fault knobs.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Configuration of one devcluster run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Address to listen on; port 0 picks a free one. Default `127.0.0.1:6443`.
    pub listen: SocketAddr,
    /// Where to write the kubeconfig; `None` writes `kubeconfig` in a fresh directory under the
    /// system temp dir.
    pub kubeconfig_path: Option<PathBuf>,
    /// The bearer token written into the kubeconfig.
    pub token: String,
    /// When set, only the tokens listed in this file (one per line) are accepted; otherwise any
    /// request is.
    pub token_file: Option<PathBuf>,
    /// Serve HTTPS with a generated self-signed CA (embedded in the kubeconfig).
    pub tls: bool,
    /// How many events the watch history retains; watches from older resourceVersions get 410.
    pub history_limit: usize,
    /// How many events a watcher may fall behind before it is dropped with 410.
    pub watch_buffer: usize,
    /// Period of BOOKMARK frames for watches that allow them.
    pub bookmark_interval: Duration,
    /// Run the simulated node agent in-process.
    pub node_agent: bool,
    /// Settings of the simulated nodes (count, startup delay, unschedulable and failing pods...).
    pub nodes: crate::nodes::NodeConfig,
    /// Request counters, audit log and fault injection (error rate, latency, early watch closes).
    pub observer: crate::observe::ObserverConfig,
    /// Namespaces created at start besides `default`, `kube-system`, `kube-public`,
    /// `kube-node-lease` and `agent-sandbox-system`.
    pub extra_namespaces: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 6443)),
            kubeconfig_path: None,
            token: "devcluster".to_string(),
            token_file: None,
            tls: false,
            history_limit: 100_000,
            watch_buffer: 8192,
            bookmark_interval: Duration::from_secs(1),
            node_agent: true,
            nodes: crate::nodes::NodeConfig::default(),
            observer: crate::observe::ObserverConfig::default(),
            extra_namespaces: Vec::new(),
        }
    }
}

impl Config {
    /// A configuration for tests: a free port on 127.0.0.1, kubeconfig in a temp dir.
    pub fn ephemeral() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..Config::default()
        }
    }
}
