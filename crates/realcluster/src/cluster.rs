//! Starting, using and stopping one real cluster.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::api::{Api, PostParams};

use crate::config::{self, Delay, Layout, Ports};
use crate::error::Error;
use crate::finisher::{self, Finisher};
use crate::pki::{self, Pki};
use crate::process::{ComponentInfo, Exit, Supervisor};
use crate::provisioner::Provisioner;
use crate::upstream::{self, Binaries, Component};
use crate::{Progress, sweep};

/// How to start a cluster.
#[derive(Clone)]
pub struct Options {
    /// Number of kwok nodes (`kwok-node-1` ... `kwok-node-N`), all Ready before `start` returns.
    pub nodes: u32,
    /// Time from scheduling to Running and Ready of every Pod.
    pub pod_startup_delay: Delay,
    /// Where the API server writes the audit log (default: `audit.log` in the data directory,
    /// removed at stop; a path outside it is kept).
    pub audit_log: Option<PathBuf>,
    /// Each component in a process group of its own (the foreground command: Ctrl-C reaches
    /// only it, and it stops them in order). Off for tests, so a Ctrl-C of the test run ends
    /// the components with it.
    pub own_process_groups: bool,
    /// Deadline of each start step once the binaries are built.
    pub step_timeout: Duration,
    /// Where progress lines go (every wait longer than a second says what it waits for).
    pub progress: Progress,
    /// A short watch history, for tests of `410 Gone`: etcd compacted every second, ConfigMaps
    /// watched from etcd ([`config::short_history_args`]). Off: the production defaults.
    pub short_history: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            pod_startup_delay: Delay::default(),
            audit_log: None,
            own_process_groups: false,
            step_timeout: Duration::from_secs(120),
            progress: crate::stderr_progress(),
            short_history: false,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("nodes", &self.nodes)
            .field("pod_startup_delay", &self.pod_startup_delay)
            .field("audit_log", &self.audit_log)
            .field("own_process_groups", &self.own_process_groups)
            .field("step_timeout", &self.step_timeout)
            .field("short_history", &self.short_history)
            .finish_non_exhaustive()
    }
}

/// A running real control plane: etcd, kube-apiserver, kube-controller-manager,
/// kube-scheduler and kwok on loopback, with its data in a temporary directory.
///
/// Dropping it (or [`RealCluster::stop`]) stops every component by PID, newest first, and
/// removes the directory.
pub struct RealCluster {
    layout: Layout,
    ports: Ports,
    binaries: Binaries,
    pki: Pki,
    audit_log: PathBuf,
    nodes: u32,
    short_history: bool,
    supervisor: Option<Supervisor>,
    /// Binds every PersistentVolumeClaim of the default StorageClass (see
    /// [`crate::provisioner`]); stopped before the components.
    provisioner: Option<Provisioner>,
    /// Finishes Pods on the kwok nodes as their commands say (see [`crate::finisher`]);
    /// stopped before the components.
    finisher: Option<Finisher>,
    started: Duration,
}

impl std::fmt::Debug for RealCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealCluster")
            .field("dir", &self.layout.root)
            .field("server", &self.server_url())
            .field("versions", self.binaries.versions())
            .finish_non_exhaustive()
    }
}

impl RealCluster {
    /// Builds the binaries if needed (minutes, once), starts every component and returns once
    /// the API server is ready, kube-controller-manager and kube-scheduler lead, the `default`
    /// ServiceAccount exists and every node is Ready.
    pub async fn start(options: Options) -> Result<RealCluster, Error> {
        let begun = Instant::now();
        let progress = options.progress.clone();
        let binaries = blocking(move || {
            sweep::remove_stale_clusters(&progress);
            upstream::ensure_built(&progress)
        })
        .await?;
        let layout = Layout::new(sweep::create_data_dir()?);
        let audit_log = options
            .audit_log
            .clone()
            .unwrap_or_else(|| layout.audit_log());
        let mut cluster = RealCluster {
            ports: pick_ports()?,
            pki: pki::generate(config::KUBERNETES_SERVICE_IP)?,
            layout,
            binaries,
            audit_log,
            nodes: options.nodes,
            short_history: options.short_history,
            supervisor: Some(Supervisor::new(options.own_process_groups)),
            provisioner: None,
            finisher: None,
            started: Duration::ZERO,
        };
        // From here on, an error drops `cluster`, which stops what started and removes the
        // directory.
        cluster.write_files(&options)?;
        cluster.start_components(&options).await?;
        cluster.started = begun.elapsed();
        Ok(cluster)
    }

    fn write_files(&self, options: &Options) -> Result<(), Error> {
        let layout = &self.layout;
        for dir in layout.dirs() {
            std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
                action: "create directory",
                path: dir,
                source,
            })?;
        }
        let mut files = config::pki_files(layout, &self.pki);
        for (user, pki_name) in [
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
            ("kwok", "kwok"),
        ] {
            files.push((
                layout.kubeconfig(user),
                config::kubeconfig(layout, &self.ports, user, pki_name, None),
            ));
        }
        files.push((
            layout.admin_kubeconfig(),
            config::kubeconfig(
                layout,
                &self.ports,
                "admin",
                "admin",
                Some((&self.pki, &self.pki.admin)),
            ),
        ));
        files.push((layout.audit_policy(), config::audit_policy()));
        files.push((
            layout.kwok_config(),
            config::kwok_config(options.pod_startup_delay),
        ));
        for (path, text) in files {
            write_file(&path, &text, config::is_private(&path))?;
        }
        Ok(())
    }

    async fn start_components(&mut self, options: &Options) -> Result<(), Error> {
        let progress = &options.progress;
        let timeout = options.step_timeout;
        let versions = self.binaries.versions().clone();
        progress(&format!(
            "starting a real cluster ({versions}) in {}",
            self.layout.root.display()
        ));

        self.spawn(Component::Etcd)?;
        let etcd = SocketAddr::from((Ipv4Addr::LOCALHOST, self.ports.etcd_client));
        self.wait(
            &format!("etcd to accept connections on {etcd}"),
            timeout,
            progress,
            || async move {
                TcpStream::connect_timeout(&etcd, Duration::from_millis(200))
                    .ok()
                    .map(|_| ())
            },
        )
        .await?;

        self.spawn(Component::KubeApiserver)?;
        let client = self.client().await?;
        let ready_client = client.clone();
        self.wait(
            &format!("kube-apiserver to be ready ({}/readyz)", self.server_url()),
            timeout,
            progress,
            || {
                let client = ready_client.clone();
                async move {
                    let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
                    client.request_text(request).await.ok().map(|_| ())
                }
            },
        )
        .await?;

        for component in [
            Component::KubeControllerManager,
            Component::KubeScheduler,
            Component::Kwok,
        ] {
            self.spawn(component)?;
        }

        let nodes: Api<Node> = Api::all(client.clone());
        for index in 1..=self.nodes {
            let node: Node = serde_json::from_value(config::node(index)).map_err(|e| {
                Error::Invalid(format!("the kwok Node manifest does not parse: {e}"))
            })?;
            nodes
                .create(&PostParams::default(), &node)
                .await
                .map_err(|source| Error::Kube {
                    action: format!("create Node {}", config::node_name(index)),
                    source,
                })?;
        }

        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        for lease in ["kube-controller-manager", "kube-scheduler"] {
            let leases = leases.clone();
            self.wait(
                &format!("{lease} to take its leader Lease (kube-system/{lease})"),
                timeout,
                progress,
                || {
                    let leases = leases.clone();
                    async move {
                        let lease = leases.get_opt(lease).await.ok()??;
                        lease
                            .spec?
                            .holder_identity
                            .filter(|holder| !holder.is_empty())
                            .map(|_| ())
                    }
                },
            )
            .await?;
        }

        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        self.wait(
            "kube-controller-manager to create the default ServiceAccount",
            timeout,
            progress,
            || {
                let accounts = accounts.clone();
                async move { accounts.get_opt("default").await.ok()?.map(|_| ()) }
            },
        )
        .await?;

        let expected = self.nodes as usize;
        self.wait(
            &format!("kwok to make the {expected} node(s) Ready"),
            timeout,
            progress,
            || {
                let nodes = nodes.clone();
                async move {
                    let list = nodes.list(&Default::default()).await.ok()?;
                    let ready = list.items.iter().filter(|n| is_ready(n)).count();
                    (ready >= expected).then_some(())
                }
            },
        )
        .await?;
        self.provisioner = Some(Provisioner::start(&client, self.kubeconfig_path()).await?);
        self.finisher = Some(Finisher::start(
            self.kubeconfig_path(),
            (1..=self.nodes).map(config::node_name).collect(),
            self.logs_dir().join(format!("{}.log", finisher::NAME)),
            self.supervisor().exit_reporter(),
        )?);
        Ok(())
    }

    fn spawn(&self, component: Component) -> Result<u32, Error> {
        let mut args = config::args(component, &self.layout, &self.ports);
        if component == Component::KubeApiserver {
            let flag = "--audit-log-path=";
            args.retain(|a| !a.starts_with(flag));
            args.push(format!("{flag}{}", self.audit_log.display()));
            if self.short_history {
                args.extend(config::short_history_args());
            }
        }
        self.supervisor().spawn(
            component.name(),
            &self.binaries.path(component),
            &args,
            &self.layout.log(component),
        )
    }

    fn supervisor(&self) -> &Supervisor {
        // Only `stop` takes it, and `stop` consumes `self`.
        self.supervisor
            .as_ref()
            .expect("the supervisor lives until stop")
    }

    /// Polls `probe` until it yields, failing when a component exits or `timeout` passes.
    /// Says what it waits for once the wait passes a second.
    async fn wait<T, F, Fut>(
        &self,
        what: &str,
        timeout: Duration,
        progress: &Progress,
        mut probe: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let start = Instant::now();
        let mut announced = false;
        loop {
            if let Some(exit) = self.exited() {
                return Err(Error::ComponentExited(Box::new(exit)));
            }
            if let Some(value) = probe().await {
                return Ok(value);
            }
            let waited = start.elapsed();
            if !announced && waited >= Duration::from_secs(1) {
                progress(&format!("waiting for {what}"));
                announced = true;
            }
            if waited >= timeout {
                return Err(Error::Timeout {
                    what: what.to_owned(),
                    seconds: timeout.as_secs(),
                    hint: format!("; the logs are in {}", self.logs_dir().display()),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> String {
        config::server_url(&self.ports)
    }

    /// The admin kubeconfig (client certificate in group `system:masters`, certificates
    /// embedded, so a copy works anywhere on this machine while the cluster runs).
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.layout.admin_kubeconfig()
    }

    /// Writes a copy of the admin kubeconfig to `path` (atomically: readers never see half).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let text = std::fs::read_to_string(self.kubeconfig_path()).map_err(|source| Error::Io {
            action: "read",
            path: self.kubeconfig_path(),
            source,
        })?;
        let partial = path.with_extension("partial");
        write_file(&partial, &text, true)?;
        std::fs::rename(&partial, path).map_err(|source| Error::Io {
            action: "rename into place",
            path: path.to_path_buf(),
            source,
        })
    }

    /// The API server's audit log (JSON lines, one `audit.k8s.io/v1` Event per request of a
    /// ServiceAccount of `agent-sandbox-system`, written before the response is sent).
    pub fn audit_log_path(&self) -> &Path {
        &self.audit_log
    }

    /// The data directory (certificates, kubeconfigs, etcd data, logs), removed at stop.
    pub fn data_dir(&self) -> &Path {
        &self.layout.root
    }

    /// The components' logs.
    pub fn logs_dir(&self) -> PathBuf {
        self.layout.root.join("logs")
    }

    /// The releases running.
    pub fn versions(&self) -> &upstream::Versions {
        self.binaries.versions()
    }

    /// How long `start` took.
    pub fn start_time(&self) -> Duration {
        self.started
    }

    /// The components, their PIDs and logs, in start order.
    pub fn components(&self) -> Vec<ComponentInfo> {
        self.supervisor().components()
    }

    /// The first component that exited unexpectedly, if one has.
    pub fn exited(&self) -> Option<Exit> {
        self.supervisor().exited()
    }

    /// Resolves when a component exits unexpectedly (on any runtime).
    pub async fn wait_for_exit(&self) -> Exit {
        let mut watch = self.supervisor().exit_watch();
        loop {
            if let Some(exit) = watch.borrow_and_update().clone() {
                return exit;
            }
            if watch.changed().await.is_err() {
                // The sender lives in the supervisor, as long as `self`: not reached.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A new admin client (a client is bound to the runtime that made it, so each test
    /// sharing the cluster asks for its own).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        client_from_kubeconfig(&self.kubeconfig_path()).await
    }

    /// A token of the ServiceAccount `namespace/name`, as `kubectl create token` gets it
    /// (TokenRequest; valid for `expiration`, at least 10 minutes).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        expiration: Duration,
    ) -> Result<String, Error> {
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client().await?, namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: Some(vec![config::SERVICE_ACCOUNT_ISSUER.to_owned()]),
                expiration_seconds: Some(expiration.as_secs().max(600) as i64),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let response = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .map_err(|source| Error::Kube {
                action: format!("create a token for ServiceAccount {namespace}/{name}"),
                source,
            })?;
        Ok(response.status.and_then(|s| s.token).unwrap_or_default())
    }

    /// A kubeconfig (YAML) that authenticates as the ServiceAccount `namespace/name` with a
    /// fresh token, e.g. to run a controller as itself.
    pub async fn service_account_kubeconfig(
        &self,
        namespace: &str,
        name: &str,
        expiration: Duration,
    ) -> Result<String, Error> {
        let token = self
            .service_account_token(namespace, name, expiration)
            .await?;
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let mut config: serde_json::Value = serde_yaml::from_str(
            &std::fs::read_to_string(self.kubeconfig_path()).map_err(|source| Error::Io {
                action: "read",
                path: self.kubeconfig_path(),
                source,
            })?,
        )
        .map_err(|e| Error::Invalid(format!("the admin kubeconfig does not parse: {e}")))?;
        config["users"] = serde_json::json!([{"name": user, "user": {"token": token}}]);
        config["contexts"] = serde_json::json!([
            {"name": user, "context": {"cluster": "realcluster", "user": user}}
        ]);
        config["current-context"] = serde_json::Value::String(user);
        serde_yaml::to_string(&config)
            .map_err(|e| Error::Invalid(format!("serializing a kubeconfig: {e}")))
    }

    /// A client authenticated as the ServiceAccount `namespace/name`.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<kube::Client, Error> {
        let text = self
            .service_account_kubeconfig(namespace, name, Duration::from_secs(3600))
            .await?;
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).map_err(|e| Error::Client {
            path: PathBuf::from(format!("<kubeconfig of {namespace}/{name}>")),
            message: e.to_string(),
        })?;
        client_from(kubeconfig, Path::new("<service account kubeconfig>")).await
    }

    /// Stops every component (newest first; SIGTERM, then SIGKILL after `grace`) and removes
    /// the data directory.
    pub fn stop(mut self) {
        self.shutdown(Duration::from_secs(10));
    }

    fn shutdown(&mut self, grace: Duration) {
        drop(self.provisioner.take());
        drop(self.finisher.take());
        if let Some(supervisor) = self.supervisor.take() {
            supervisor.stop(grace);
            drop(supervisor);
            let _ = std::fs::remove_dir_all(&self.layout.root);
        }
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(5));
    }
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// A client from a kubeconfig file.
pub async fn client_from_kubeconfig(path: &Path) -> Result<kube::Client, Error> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| Error::Client {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    client_from(kubeconfig, path).await
}

async fn client_from(
    kubeconfig: kube::config::Kubeconfig,
    origin: &Path,
) -> Result<kube::Client, Error> {
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| Error::Client {
        path: origin.to_path_buf(),
        message: e.to_string(),
    })?;
    kube::Client::try_from(config).map_err(|e| Error::Client {
        path: origin.to_path_buf(),
        message: e.to_string(),
    })
}

/// Free loopback ports, distinct from each other. Another process may take one before the
/// component binds it; the component then fails with "address already in use" in its log.
fn pick_ports() -> Result<Ports, Error> {
    let mut listeners = Vec::new();
    for _ in 0..4 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|source| Error::Io {
            action: "bind",
            path: PathBuf::from("127.0.0.1:0"),
            source,
        })?;
        listeners.push(listener);
    }
    let port = |i: usize| -> Result<u16, Error> {
        listeners[i]
            .local_addr()
            .map(|a| a.port())
            .map_err(|source| Error::Io {
                action: "read the address of",
                path: PathBuf::from("127.0.0.1:0"),
                source,
            })
    };
    // All four are held until here, so they differ.
    Ok(Ports {
        etcd_client: port(0)?,
        etcd_peer: port(1)?,
        apiserver: port(2)?,
        kwok: port(3)?,
    })
}

fn write_file(path: &Path, text: &str, private: bool) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    if private {
        options.mode(0o600);
    }
    options
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|source| Error::Io {
            action: "write",
            path: path.to_path_buf(),
            source,
        })
}

/// Runs blocking work (the Go build, file system sweeps) off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Error> + Send + 'static,
) -> Result<T, Error> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(join) => Err(Error::Invalid(format!("a blocking task failed: {join}"))),
    }
}
