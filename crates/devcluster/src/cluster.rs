//! Starting and stopping a devcluster: listener, HTTP server, in-process controllers,
//! kubeconfig and a ready `kube::Client`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::observe::Observer;
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
    #[error(transparent)]
    TokenFile(#[from] crate::kubeconfig::TokenFileError),
    #[error("cannot write kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot build a client for {url}: {message}")]
    Client { url: String, message: String },
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Observer(#[from] crate::observe::ObserveError),
    #[error("invalid node configuration: {0}")]
    Nodes(#[from] crate::nodes::NodeConfigError),
}

/// Entry point.
pub struct DevCluster;

impl DevCluster {
    /// Start serving in this process; returns once the listener is bound, the initial namespaces
    /// exist and the kubeconfig is written.
    pub async fn start(config: Config) -> Result<Running, StartError> {
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
        let tls = if config.tls {
            Some(crate::tls::generate_tls(&[addr.ip().to_string()])?)
        } else {
            None
        };
        let core = InProcess::start(&config)?;
        let url = match &tls {
            Some(_) => format!("https://{addr}"),
            None => format!("http://{addr}"),
        };
        // Without a path of the caller's, the kubeconfig goes in a directory of our own under
        // the temp dir, removed again when the cluster stops or is dropped.
        let (kubeconfig_path, temp_kubeconfig_dir) = match &config.kubeconfig_path {
            Some(path) => (path.clone(), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "devcluster-{}-{}",
                    std::process::id(),
                    addr.port()
                ));
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        crate::kubeconfig::write_kubeconfig(
            &kubeconfig_path,
            &url,
            tls.as_ref().map(|t| t.ca_pem.as_str()),
            &config.token,
        )
        .map_err(|source| StartError::Kubeconfig {
            path: kubeconfig_path.clone(),
            source,
        })?;
        let app = core.app.clone();
        let stop = core.shutdown.clone();
        let server = match tls {
            Some(material) => tokio::spawn(async move {
                if let Err(e) = crate::tls::serve_tls(listener, app, &material, stop).await {
                    tracing::error!(error = %e, "TLS server stopped");
                }
            }),
            None => tokio::spawn(async move {
                let service = app.into_make_service_with_connect_info::<SocketAddr>();
                if let Err(e) = axum::serve(listener, service)
                    .with_graceful_shutdown(stop.cancelled_owned())
                    .await
                {
                    tracing::error!(error = %e, "server stopped");
                }
            }),
        };
        let client = build_client(&kubeconfig_path, &url).await?;
        Ok(Running {
            addr,
            url,
            kubeconfig_path,
            temp_kubeconfig_dir,
            client,
            core,
            server: Some(server),
        })
    }
}

/// A devcluster without a listener or kubeconfig, driven in process: the same store, handlers,
/// request observation (counters, fault injection), garbage collector and, when
/// `config.node_agent` is set, simulated nodes as [`DevCluster::start`]. Without the node agent
/// there are no nodes, pods go at once when deleted, and a test plays the scheduler and kubelet
/// itself (the `binding` and `status` subresources). [`DevCluster::start`] serves one of these.
pub struct InProcess {
    state: SharedState,
    observer: Arc<Observer>,
    /// The observed router the listener serves.
    app: axum::Router,
    token: String,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl InProcess {
    /// Seeds a fresh store and starts the in-process controllers (call inside a Tokio runtime).
    /// `listen`, `tls` and `kubeconfig_path` of `config` are not used.
    pub fn start(config: &Config) -> Result<InProcess, StartError> {
        let tokens = match &config.token_file {
            Some(path) => Some(crate::kubeconfig::TokenFile::load(path)?),
            None => None,
        };
        if config.node_agent {
            config.nodes.validate()?;
        }
        let observer = Arc::new(Observer::new(config.observer.clone())?);
        let shutdown = CancellationToken::new();
        let state: SharedState = Arc::new(AppState {
            store: Store::starting_at(
                crate::store::clock_resource_version(),
                config.history_limit,
                config.watch_buffer,
            ),
            registry: Registry::with_builtins(),
            options: ServerOptions {
                bookmark_interval: config.bookmark_interval,
                // Graceful pod deletion needs a kubelet to finish it; without the node agent pods
                // go at once.
                node_agent: config.node_agent,
                tokens,
            },
            service_ips: Default::default(),
            notes: Default::default(),
            shutdown: shutdown.clone(),
        });
        seed(&state, config);
        let mut tasks = vec![crate::gc::spawn(state.clone(), shutdown.clone())];
        let metrics_observer = observer.clone();
        let app = crate::server::router(state.clone()).route(
            "/metrics",
            axum::routing::get(move || {
                let o = metrics_observer.clone();
                async move {
                    (
                        [(
                            http::header::CONTENT_TYPE,
                            crate::observe::PROMETHEUS_CONTENT_TYPE,
                        )],
                        o.render_prometheus(),
                    )
                }
            }),
        );
        let app = observer.layer(app);
        if config.node_agent {
            // The simulated nodes call the same service in process (see `in_process_client`).
            tasks.push(crate::nodes::spawn_node_agent(
                in_process_client(app.clone(), &config.token),
                config.nodes.clone(),
                shutdown.clone(),
            ));
        }
        Ok(InProcess {
            state,
            observer,
            app,
            token: config.token.clone(),
            shutdown,
            tasks,
        })
    }

    /// The server as a service: each request goes straight to the handlers (authorization,
    /// observation, fault injection, routing), carrying the configured bearer token and peer
    /// `127.0.0.1` as a loopback request would. Wrap it in layers of your own and hand it to
    /// `kube::Client::new(service, "default")`.
    pub fn service(&self) -> axum::Router {
        stamp_in_process(self.app.clone(), &self.token)
    }

    /// A `kube::Client` on [`InProcess::service`] (default namespace `default`, no
    /// `User-Agent`).
    pub fn client(&self) -> kube::Client {
        in_process_client(self.app.clone(), &self.token)
    }

    /// The stored object, read without a request (not counted, audited or faulted).
    /// `resource` is the plural, qualified by its group unless it is a core one: `pods`,
    /// `sandboxes.agents.x-k8s.io`.
    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<serde_json::Value> {
        self.state
            .store
            .get(resource, namespace, name)
            .map(|o| (*o).clone())
    }

    /// The stored objects of `resource` ([`InProcess::get`]) in every namespace, read without a
    /// request.
    pub fn list(&self, resource: &str) -> Vec<serde_json::Value> {
        let (items, _) = self.state.store.list(resource, None);
        items.iter().map(|o| (**o).clone()).collect()
    }

    /// Request counters, audit log and fault injection.
    pub fn observer(&self) -> &Arc<Observer> {
        &self.observer
    }

    /// Fault injection: drop the watch history, so every watch resuming from an older
    /// resourceVersion gets ERROR 410 `Expired`.
    pub fn compact_history(&self) {
        self.state.store.compact();
    }

    /// Stops the in-process controllers and ends open watches.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        self.shutdown.cancel();
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

/// The API server's handlers on a fresh store, without a listener, node agent or garbage
/// collector: for tests that drive it in process (`kube::Client::new(router, "default")`).
/// Graceful pod deletion is left for a node agent to finish, as with `node_agent: true`.
#[cfg(test)]
pub(crate) fn in_process_router() -> axum::Router {
    let config = Config {
        node_agent: false,
        ..Config::ephemeral()
    };
    let state: SharedState = Arc::new(AppState {
        store: Store::new(config.history_limit, config.watch_buffer),
        registry: Registry::with_builtins(),
        options: ServerOptions {
            bookmark_interval: config.bookmark_interval,
            node_agent: true,
            tokens: None,
        },
        service_ips: Default::default(),
        notes: Default::default(),
        shutdown: CancellationToken::new(),
    });
    seed(&state, &config);
    crate::server::router(state)
}

/// A `kube::Client` that sends its requests straight to the server's service (authorization,
/// request observation, fault injection, routing and handlers all included), without a socket
/// or HTTP encoding. The simulated nodes use it: the server sees their requests as it would over
/// loopback (the same bearer token, no `User-Agent` as kube-rs sends none, peer `127.0.0.1`), so
/// they are counted, audited and faulted as before.
fn in_process_client(app: axum::Router, token: &str) -> kube::Client {
    kube::Client::new(stamp_in_process(app, token), "default")
}

/// `app` with what a loopback request would carry: the bearer token and the peer address.
fn stamp_in_process(app: axum::Router, token: &str) -> axum::Router {
    let stamp = Arc::new(InProcessStamp {
        authorization: http::HeaderValue::from_str(&format!("Bearer {token}")).ok(),
        peer: axum::extract::ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 0))),
    });
    app.layer(axum::middleware::map_request_with_state(
        stamp,
        stamp_in_process_request,
    ))
}

/// What an in-process request carries that a socket would have given it.
struct InProcessStamp {
    authorization: Option<http::HeaderValue>,
    peer: axum::extract::ConnectInfo<SocketAddr>,
}

async fn stamp_in_process_request(
    axum::extract::State(stamp): axum::extract::State<Arc<InProcessStamp>>,
    mut request: axum::extract::Request,
) -> axum::extract::Request {
    if let Some(value) = &stamp.authorization {
        request
            .headers_mut()
            .insert(http::header::AUTHORIZATION, value.clone());
    }
    request.extensions_mut().insert(stamp.peer);
    request
}

async fn build_client(kubeconfig: &Path, url: &str) -> Result<kube::Client, StartError> {
    let err = |message: String| StartError::Client {
        url: url.to_string(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| err(e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    kube::Client::try_from(cfg).map_err(|e| err(e.to_string()))
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
    if config.node_agent {
        for i in 0..config.nodes.nodes {
            let name = crate::nodes::NodeConfig::node_name(i);
            let ip = crate::nodes::NodeConfig::node_ip(i).to_string();
            let node = json!({
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "uid": crate::meta::new_uid(),
                    "creationTimestamp": now,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "kubernetes.io/arch": std::env::consts::ARCH,
                        "node.kubernetes.io/instance-type": "devcluster",
                    },
                },
                "spec": {},
                "status": {
                    "addresses": [
                        {"type": "InternalIP", "address": ip},
                        {"type": "Hostname", "address": name},
                    ],
                    "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "simulated by devcluster",
                        "lastHeartbeatTime": now, "lastTransitionTime": now,
                    }],
                    "nodeInfo": {
                        "kubeletVersion": format!("v{}.{}.0-devcluster", crate::discovery::KUBE_MAJOR, crate::discovery::KUBE_MINOR),
                        "operatingSystem": "linux",
                        "architecture": std::env::consts::ARCH,
                        "containerRuntimeVersion": "devcluster://simulated",
                    },
                },
            });
            let _ = state
                .store
                .write::<()>("nodes", "", &name, |_, _| Ok(WriteOp::Put(node)));
        }
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
    /// The directory holding the kubeconfig when the caller gave no path: removed on stop.
    temp_kubeconfig_dir: Option<PathBuf>,
    client: kube::Client,
    core: InProcess,
    server: Option<JoinHandle<()>>,
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
        self.core.state.store.current_rv()
    }

    /// Fault injection: drop the watch history, so every watch resuming from an older
    /// resourceVersion gets ERROR 410 `Expired`.
    pub fn compact_history(&self) {
        self.core.compact_history();
    }

    /// Request counters, audit log and fault injection of this cluster.
    pub fn observer(&self) -> &Arc<Observer> {
        self.core.observer()
    }

    /// A token cancelled when the cluster stops.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.core.shutdown.clone()
    }

    /// Stop serving: open watches end, in-process controllers stop; the kubeconfig written to
    /// the temp directory (when no path was given) is removed.
    pub async fn shutdown(mut self) {
        self.core.stop().await;
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(dir) = self.temp_kubeconfig_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
