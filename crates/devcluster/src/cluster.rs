//! Starting and stopping a devcluster: listener, HTTP server, in-process controllers,
//! kubeconfig and a ready `kube::Client`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::registry::Registry;
use crate::server::{AppState, ServerOptions, SharedState};
use crate::store::{Store, WriteOp};

/// Why a devcluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot read token file {path}: {source}")]
    TokenFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot build a client for {url}: {message}")]
    Client { url: String, message: String },
    #[error("TLS is not available in this build yet")]
    TlsUnavailable,
}

/// Entry point.
pub struct DevCluster;

impl DevCluster {
    /// Start serving in this process; returns once the listener is bound and the initial
    /// namespaces exist.
    pub async fn start(config: Config) -> Result<Running, StartError> {
        if config.tls {
            return Err(StartError::TlsUnavailable);
        }
        let tokens = match &config.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| StartError::TokenFile {
                    path: path.clone(),
                    source,
                })?
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect(),
            None => Vec::new(),
        };
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: config.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let state: SharedState = Arc::new(AppState {
            store: Store::new(config.history_limit, config.watch_buffer),
            registry: Registry::with_builtins(),
            options: ServerOptions {
                bookmark_interval: config.bookmark_interval,
                // Graceful pod deletion needs someone to finish it; without a node agent pods go at once.
                node_agent: false,
                tokens,
                watch_close_probability: config.watch_close_probability,
            },
            service_ips: Default::default(),
            shutdown: shutdown.clone(),
        });
        seed(&state, &config);
        let url = format!("http://{addr}");
        let kubeconfig_path = match &config.kubeconfig_path {
            Some(p) => p.clone(),
            None => std::env::temp_dir()
                .join(format!("devcluster-{}-{}", std::process::id(), addr.port()))
                .join("kubeconfig"),
        };
        write_kubeconfig(&kubeconfig_path, &url, &config.token).map_err(|source| {
            StartError::Kubeconfig {
                path: kubeconfig_path.clone(),
                source,
            }
        })?;
        let mut tasks = Vec::new();
        tasks.push(crate::gc::spawn(state.clone(), shutdown.clone()));
        let app = crate::server::router(state.clone());
        let stop = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await;
        }));
        let client = build_client(&url, &config.token)?;
        Ok(Running {
            addr,
            url,
            kubeconfig_path,
            client,
            state,
            shutdown,
            tasks,
        })
    }
}

fn build_client(url: &str, token: &str) -> Result<kube::Client, StartError> {
    let err = |message: String| StartError::Client {
        url: url.to_string(),
        message,
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| err(e.to_string()))?;
    let mut cfg = kube::Config::new(uri);
    cfg.default_namespace = "default".into();
    cfg.auth_info.token = Some(token.to_string().into());
    kube::Client::try_from(cfg).map_err(|e| err(e.to_string()))
}

/// Interim kubeconfig writer (until `kubeconfig.rs` from devcluster-nodes is merged).
fn write_kubeconfig(path: &Path, server: &str, token: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "devcluster", "cluster": {"server": server}}],
        "users": [{"name": "devcluster", "user": {"token": token}}],
        "contexts": [{"name": "devcluster", "context": {"cluster": "devcluster", "user": "devcluster", "namespace": "default"}}],
        "current-context": "devcluster",
        "preferences": {},
    });
    let yaml = serde_yaml::to_string(&doc).map_err(std::io::Error::other)?;
    std::fs::write(path, yaml)
}

/// The objects a fresh cluster has.
fn seed(state: &SharedState, config: &Config) {
    let mut namespaces: Vec<String> = [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "agent-sandbox-system",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    namespaces.extend(config.extra_namespaces.iter().cloned());
    let now = crate::meta::now_rfc3339();
    for ns in namespaces {
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "uid": crate::meta::new_uid(),
                "creationTimestamp": now,
                "labels": {"kubernetes.io/metadata.name": ns},
            },
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        });
        let _ = state
            .store
            .write::<()>("namespaces", "", &ns, |_, _| Ok(WriteOp::Put(obj)));
    }
    state.service_ips.reserve("10.96.0.1");
    let svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "uid": crate::meta::new_uid(),
            "creationTimestamp": now,
            "labels": {"component": "apiserver", "provider": "kubernetes"},
        },
        "spec": {
            "clusterIP": "10.96.0.1",
            "clusterIPs": ["10.96.0.1"],
            "type": "ClusterIP",
            "sessionAffinity": "None",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}],
        },
        "status": {"loadBalancer": {}},
    });
    let _ = state
        .store
        .write::<()>("services", "default", "kubernetes", |_, _| {
            Ok(WriteOp::Put(svc))
        });
}

/// A running devcluster.
pub struct Running {
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    client: kube::Client,
    state: SharedState,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server URL (`http://127.0.0.1:PORT`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The kubeconfig written at start.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// A `kube::Client` for this cluster (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.state.store.current_rv()
    }

    /// Fault injection: drop the watch history, so every watch resuming from an older
    /// resourceVersion gets ERROR 410 `Expired`.
    pub fn compact_history(&self) {
        self.state.store.compact();
    }

    /// A token cancelled when the cluster stops.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Stop serving: open watches end, in-process controllers stop.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
    }
}
