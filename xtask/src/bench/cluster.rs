//! The processes under test: building them, starting the control plane (devcluster, or the
//! real one of the `realcluster` crate) and the two controllers as separate processes, waiting
//! for readiness, killing and restarting a controller, and the benchmark's own Kubernetes client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::{Child, Command};

use super::error::BenchError;
use crate::workspace::workspace_root;

/// User agent of the benchmark's own client, so its requests can be told apart from the
/// controllers' in devcluster's counters.
pub const BENCH_USER_AGENT: &str = "agent-sandbox-bench";

/// How long a process may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The Cargo profile the benchmarked binaries are built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildProfile {
    /// Optimized (`--release`): the only profile whose figures mean anything.
    Release,
    /// The debug profile: fast to build, for checking that the harness works.
    Dev,
}

impl BuildProfile {
    fn target_subdir(self) -> &'static str {
        match self {
            BuildProfile::Release => "release",
            BuildProfile::Dev => "debug",
        }
    }
}

/// Paths of the three binaries.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub devcluster: PathBuf,
    pub sandbox_controller: PathBuf,
    pub extensions_controller: PathBuf,
}

/// `cargo build [--release] -p ...` for the benchmark, blocking, with Cargo's progress on the
/// terminal. The running package's description is kept from the nested build (see
/// [`crate::workspace::nested_cargo`]).
pub fn cargo_build(profile: BuildProfile, packages: &[&str]) -> Result<(), BenchError> {
    let mut command = crate::workspace::nested_cargo(&workspace_root());
    let cargo = command.get_program().to_string_lossy().into_owned();
    command.arg("build");
    if profile == BuildProfile::Release {
        command.arg("--release");
    }
    for package in packages {
        command.args(["-p", package]);
    }
    let shown = format!("{command:?}").replace('"', "");
    let status = command.status().map_err(|source| BenchError::Process {
        what: format!("running {cargo}"),
        source,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Build {
            command: shown,
            status: status.to_string(),
        })
    }
}

/// Where Cargo puts the binaries of `profile`.
pub fn profile_dir(profile: BuildProfile) -> PathBuf {
    crate::dev::build::target_dir().join(profile.target_subdir())
}

/// Builds (or, with `build == false`, only locates) the binaries for `profile`.
pub fn build(profile: BuildProfile, build: bool) -> Result<Binaries, BenchError> {
    build_for(profile, build, ClusterKind::Devcluster)
}

/// [`build`], with devcluster's binary only when the run uses it (`cluster`).
pub fn build_for(
    profile: BuildProfile,
    build: bool,
    cluster: ClusterKind,
) -> Result<Binaries, BenchError> {
    let mut packages = vec!["sandbox-controller", "extensions-controller"];
    if cluster == ClusterKind::Devcluster {
        packages.insert(0, "devcluster");
    }
    if build {
        cargo_build(profile, &packages)?;
    }
    let target = profile_dir(profile);
    let binaries = Binaries {
        devcluster: target.join("devcluster"),
        sandbox_controller: target.join("sandbox-controller"),
        extensions_controller: target.join("extensions-controller"),
    };
    for package in packages {
        let path = target.join(package);
        if !path.is_file() {
            return Err(BenchError::Unavailable(format!(
                "{} does not exist; run without --no-build",
                path.display()
            )));
        }
    }
    Ok(binaries)
}

/// The control plane the scenarios run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClusterKind {
    /// devcluster, our in-memory API server with simulated nodes (one process).
    #[default]
    Devcluster,
    /// The real control plane of `cargo xtask cluster`: etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler and kwok (needs Go; see docs/cluster.md).
    Real,
}

impl ClusterKind {
    pub fn key(self) -> &'static str {
        match self {
            ClusterKind::Devcluster => "devcluster",
            ClusterKind::Real => "real",
        }
    }
}

/// Which controller binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerKind {
    Sandbox,
    Extensions,
}

impl ControllerKind {
    pub const ALL: [ControllerKind; 2] = [ControllerKind::Sandbox, ControllerKind::Extensions];

    /// The binary's name, also the key used in reports.
    pub fn name(self) -> &'static str {
        match self {
            ControllerKind::Sandbox => "sandbox-controller",
            ControllerKind::Extensions => "extensions-controller",
        }
    }
}

/// One running controller process.
pub struct Controller {
    pub kind: ControllerKind,
    child: Child,
    pub pid: u32,
    pub metrics_addr: SocketAddr,
    pub probe_addr: SocketAddr,
    pub log: PathBuf,
}

/// devcluster settings the scenarios choose.
#[derive(Debug, Clone)]
pub struct DevclusterOptions {
    pub nodes: u32,
    pub pod_startup_delay: String,
    /// More flags (fault injection, the audit log: `cargo xtask chaos`).
    pub extra_args: Vec<String>,
}

/// The API server side of a [`Stack`].
enum Server {
    /// devcluster, one process.
    Dev {
        child: Child,
        pid: u32,
        log: PathBuf,
    },
    /// The real control plane; each controller runs with a kubeconfig holding a token of its
    /// own ServiceAccount from the release (`deploy/`), never the admin credentials.
    Real {
        cluster: Box<realcluster::RealCluster>,
        controller_kubeconfigs: Vec<(ControllerKind, PathBuf)>,
        /// The loopback port each controller serves its conversion webhook on (the CRDs name
        /// it; the webhook Service is an `ExternalName` to 127.0.0.1).
        webhook_ports: Vec<(ControllerKind, u16)>,
        /// The controllers' requests, read from the API server's audit log as it grows.
        audit: std::sync::Mutex<super::counters::AuditTally>,
    },
}

/// The control plane (devcluster or the real one) plus (optionally) both controllers, all
/// separate processes, with the benchmark's client. Dropping it kills every process (the real
/// control plane's components by PID, and its data directory is removed).
pub struct Stack {
    pub dir: PathBuf,
    binaries: Binaries,
    server: Server,
    /// The admin kubeconfig (the benchmark client's).
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub controllers: Vec<Controller>,
    controller_options: ControllerOptions,
    /// `--profile-apiserver`: kube-apiserver's CPU profile over the measured phases.
    pub apiserver_profiler: Option<super::apiserver_profile::ApiserverProfiler>,
}

/// Real control plane settings the scenarios choose.
#[derive(Debug, Clone)]
pub struct RealOptions {
    /// kwok nodes.
    pub nodes: u32,
    /// kwok's time from scheduling to Running and Ready, as devcluster's flag.
    pub pod_startup_delay: realcluster::Delay,
    /// Record kube-apiserver's CPU profile over each scenario's measured phases.
    pub profile_apiserver: bool,
}

/// How the controllers are started, beyond what every run sets.
#[derive(Debug, Clone, Default)]
pub struct ControllerOptions {
    /// `--log-level` of both.
    pub log_level: String,
    /// Extra arguments of the sandbox-controller.
    pub sandbox_args: Vec<String>,
    /// Extra arguments of the extensions-controller.
    pub extensions_args: Vec<String>,
    /// `--leader-elect` of both (the benchmark runs one replica of each without it).
    pub leader_elect: bool,
}

impl Stack {
    /// Starts devcluster in `dir` (created if missing) and connects the benchmark client.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        options: &DevclusterOptions,
        controller_options: &ControllerOptions,
    ) -> Result<Stack, BenchError> {
        std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
        let kubeconfig = dir.join("kubeconfig");
        let devcluster_log = dir.join("devcluster.log");
        let log_file = std::fs::File::create(&devcluster_log)
            .map_err(|e| BenchError::io("creating", &devcluster_log, e))?;
        let mut child = Command::new(&binaries.devcluster)
            .args(["--listen", "127.0.0.1:0", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(["--nodes", &options.nodes.to_string()])
            .args(["--pod-startup-delay", &options.pod_startup_delay])
            .args(&options.extra_args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| BenchError::Process {
                what: format!("starting {}", binaries.devcluster.display()),
                source,
            })?;
        let pid = child.id().unwrap_or(0);
        let stdout = child.stdout.take().ok_or_else(|| BenchError::Exited {
            what: "devcluster".into(),
            status: "no stdout".into(),
            log: devcluster_log.clone(),
        })?;
        // devcluster prints where it serves on stdout (its log may come first).
        let mut lines = BufReader::new(stdout).lines();
        let serving = tokio::time::timeout(READY_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("devcluster serving at") {
                    return true;
                }
            }
            false
        })
        .await;
        if serving != Ok(true) {
            let status = match child.try_wait() {
                Ok(Some(status)) => status.to_string(),
                _ => "it did not print where it serves".to_string(),
            };
            return Err(BenchError::Exited {
                what: "devcluster".into(),
                status,
                log: devcluster_log,
            });
        }
        let stdout_log = dir.join("devcluster.stdout.log");
        tokio::spawn(async move {
            let mut file = tokio::fs::File::create(&stdout_log).await.ok();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(file) = file.as_mut() {
                    let _ = file.write_all(format!("{line}\n").as_bytes()).await;
                }
            }
        });
        let client = bench_client(&kubeconfig).await?;
        Ok(Stack {
            dir: dir.to_path_buf(),
            binaries: binaries.clone(),
            server: Server::Dev {
                child,
                pid,
                log: devcluster_log,
            },
            kubeconfig,
            client,
            controllers: Vec::new(),
            controller_options: controller_options.clone(),
            apiserver_profiler: None,
        })
    }

    /// Starts the real control plane (`nodes` kwok nodes) with its data in a temporary
    /// directory of its own, copies the admin kubeconfig to `dir`, installs the release's
    /// Namespace, ServiceAccounts and RBAC and writes a kubeconfig per controller with a token of
    /// its own ServiceAccount.
    pub async fn start_real(
        binaries: &Binaries,
        dir: &Path,
        options: &RealOptions,
        controller_options: &ControllerOptions,
    ) -> Result<Stack, BenchError> {
        use realcluster::release_rbac;
        let RealStart {
            cluster,
            kubeconfig,
            admin,
            client,
            controller_kubeconfigs,
        } = start_real_control_plane(
            dir,
            realcluster::Options {
                nodes: options.nodes,
                pod_startup_delay: options.pod_startup_delay,
                ..realcluster::Options::default()
            },
        )
        .await?;
        // The conversion webhooks, as the release runs them: kube-apiserver calls them for any
        // client that reads a non-storage version. An ExternalName Service to 127.0.0.1 routes
        // the CRDs' `service` reference to loopback (no kube-proxy; Endpoints may not name a
        // loopback address); the CRDs get the port (see `Stack::install_crds`).
        let services: kube::Api<k8s_openapi::api::core::v1::Service> =
            kube::Api::namespaced(admin, release_rbac::SYSTEM_NAMESPACE);
        let mut webhook_ports = Vec::new();
        for kind in ControllerKind::ALL {
            let service = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("{}-webhook", kind.name())},
                "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
            }))?;
            services
                .create(&kube::api::PostParams::default(), &service)
                .await
                .map_err(|e| BenchError::kube("creating the webhook Service", e))?;
            webhook_ports.push((kind, free_local_addr()?.port()));
        }
        let audit = std::sync::Mutex::new(super::counters::AuditTally::new(
            cluster.audit_log_path().to_path_buf(),
        ));
        let apiserver_profiler = options
            .profile_apiserver
            .then(|| super::apiserver_profile::ApiserverProfiler::new(client.clone()));
        Ok(Stack {
            dir: dir.to_path_buf(),
            binaries: binaries.clone(),
            server: Server::Real {
                cluster,
                controller_kubeconfigs,
                webhook_ports,
                audit,
            },
            kubeconfig,
            client,
            controllers: Vec::new(),
            controller_options: controller_options.clone(),
            apiserver_profiler,
        })
    }

    /// Which control plane this is.
    pub fn cluster_kind(&self) -> ClusterKind {
        match self.server {
            Server::Dev { .. } => ClusterKind::Devcluster,
            Server::Real { .. } => ClusterKind::Real,
        }
    }

    /// The control plane's processes by name (`devcluster`; or etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kwok) and PID.
    pub fn server_processes(&self) -> Vec<(String, u32)> {
        match &self.server {
            Server::Dev { pid, .. } => vec![("devcluster".to_owned(), *pid)],
            Server::Real { cluster, .. } => cluster
                .components()
                .into_iter()
                .map(|c| (c.name, c.pid))
                .collect(),
        }
    }

    /// The releases of the real control plane's components (`None` on devcluster).
    pub fn upstream_versions(&self) -> Option<realcluster::Versions> {
        match &self.server {
            Server::Dev { .. } => None,
            Server::Real { cluster, .. } => Some(cluster.versions().clone()),
        }
    }

    /// The controllers' requests so far, from the real API server's audit log (`None` on
    /// devcluster, whose own counters carry the sender).
    pub fn audit_counts(&self) -> Result<Option<Vec<super::prom::Sample>>, BenchError> {
        match &self.server {
            Server::Dev { .. } => Ok(None),
            Server::Real { audit, .. } => {
                let mut tally = audit.lock().unwrap_or_else(|e| e.into_inner());
                tally.read_new()?;
                Ok(Some(tally.samples()))
            }
        }
    }

    /// The conversion webhook flags of controller `kind`: off on devcluster (it calls no
    /// webhook); on the real control plane as the release runs them (managed certificates, the
    /// Secret in the release's namespace), on a loopback port the CRDs name.
    fn webhook_args(&self, kind: ControllerKind) -> Vec<String> {
        let Server::Real { webhook_ports, .. } = &self.server else {
            return vec!["--enable-webhook=false".to_owned()];
        };
        let port = webhook_ports
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, port)| *port)
            .unwrap_or(0);
        let namespace = realcluster::release_rbac::SYSTEM_NAMESPACE;
        vec![
            "--enable-webhook=true".to_owned(),
            "--manage-webhook-certs=true".to_owned(),
            "--webhook-host=127.0.0.1".to_owned(),
            format!("--webhook-port={port}"),
            format!("--webhook-service-name={}-webhook", kind.name()),
            format!("--webhook-namespace={namespace}"),
        ]
    }

    /// The kubeconfig controller `kind` runs with: devcluster's (admin), or one with a token of
    /// its own ServiceAccount on the real control plane.
    fn controller_kubeconfig(&self, kind: ControllerKind) -> &Path {
        match &self.server {
            Server::Dev { .. } => &self.kubeconfig,
            Server::Real {
                controller_kubeconfigs,
                ..
            } => controller_kubeconfigs
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, path)| path.as_path())
                .unwrap_or(&self.kubeconfig),
        }
    }

    /// Installs the agent-sandbox CRDs; on the real control plane with each conversion
    /// webhook's port, so kube-apiserver reaches the controller serving it.
    pub async fn install_crds(&self) -> Result<(), BenchError> {
        let Server::Real { webhook_ports, .. } = &self.server else {
            return super::workload::install_crds(&self.client).await;
        };
        let port = |kind: ControllerKind| {
            webhook_ports
                .iter()
                .find(|(k, _)| *k == kind)
                .map(|(_, port)| i32::from(*port))
        };
        let crds = api_types::core_crds()
            .into_iter()
            .map(|crd| (crd, port(ControllerKind::Sandbox)))
            .chain(
                api_types::extension_crds()
                    .into_iter()
                    .map(|crd| (crd, port(ControllerKind::Extensions))),
            )
            .map(|(mut crd, port)| {
                if let Some(service) = api_types::conversion_service_mut(&mut crd) {
                    service.port = port;
                }
                crd
            })
            .collect();
        super::workload::install_crd_list(&self.client, crds).await
    }

    /// Starts both controllers and waits until each answers `/readyz` with 200.
    pub async fn start_controllers(&mut self) -> Result<(), BenchError> {
        for kind in ControllerKind::ALL {
            let controller = self.spawn_controller(kind, None, None).await?;
            self.controllers.push(controller);
        }
        for index in 0..self.controllers.len() {
            wait_ready(&mut self.controllers[index]).await?;
        }
        Ok(())
    }

    /// The running controller of `kind`, if started.
    pub fn controller(&self, kind: ControllerKind) -> Option<&Controller> {
        self.controllers.iter().find(|c| c.kind == kind)
    }

    /// Kills `kind` with SIGKILL, starts it again on the same ports and returns the time from
    /// the new process' start to its first 200 on `/readyz` (caches synced).
    pub async fn kill_and_restart(&mut self, kind: ControllerKind) -> Result<Duration, BenchError> {
        let index = self
            .controllers
            .iter()
            .position(|c| c.kind == kind)
            .ok_or_else(|| BenchError::Unavailable(format!("{} is not running", kind.name())))?;
        let old = self.controllers.remove(index);
        let ports = (old.metrics_addr, old.probe_addr);
        let mut child = old.child;
        let _ = child.start_kill();
        let _ = child.wait().await;
        let started = Instant::now();
        let mut controller = self.spawn_controller(kind, Some(ports), None).await?;
        wait_ready(&mut controller).await?;
        let elapsed = started.elapsed();
        self.controllers.push(controller);
        Ok(elapsed)
    }

    /// Fails when the control plane (devcluster or a component of the real one) or a
    /// controller has exited.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        match &mut self.server {
            Server::Dev { child, log, .. } => {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(BenchError::Exited {
                        what: "devcluster".into(),
                        status: status.to_string(),
                        log: log.clone(),
                    });
                }
            }
            Server::Real { cluster, .. } => {
                if let Some(exit) = cluster.exited() {
                    return Err(BenchError::Exited {
                        what: exit.component.clone(),
                        status: format!("{}; last lines:\n{}", exit.status, exit.tail),
                        log: exit.log.clone(),
                    });
                }
            }
        }
        for controller in &mut self.controllers {
            if let Ok(Some(status)) = controller.child.try_wait() {
                return Err(BenchError::Exited {
                    what: controller.kind.name().into(),
                    status: status.to_string(),
                    log: controller.log.clone(),
                });
            }
        }
        Ok(())
    }

    /// Stops every process (SIGKILL: nothing of theirs is kept; the real control plane's
    /// components are stopped by PID after their logs are copied to `dir/cluster-logs`, and its
    /// data directory is removed).
    pub async fn shutdown(mut self) {
        for controller in &mut self.controllers {
            let _ = controller.child.start_kill();
            let _ = controller.child.wait().await;
        }
        match self.server {
            Server::Dev { mut child, .. } => {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
            Server::Real { cluster, .. } => {
                copy_logs(&cluster.logs_dir(), &self.dir.join("cluster-logs"));
                let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
            }
        }
    }

    /// Starts one controller process (not waiting for it), on `ports` (metrics, probes) or
    /// free ones, logging to `<kind>[-<instance>].log`; `instance` becomes its `POD_NAME` (the
    /// prefix of its leader-election identity).
    pub async fn spawn_controller(
        &self,
        kind: ControllerKind,
        ports: Option<(SocketAddr, SocketAddr)>,
        instance: Option<&str>,
    ) -> Result<Controller, BenchError> {
        spawn_controller(
            &ControllerSpawn {
                binaries: &self.binaries,
                dir: &self.dir,
                kubeconfig: self.controller_kubeconfig(kind),
                webhook_args: &self.webhook_args(kind),
                options: &self.controller_options,
            },
            kind,
            ports,
            instance,
        )
    }
}

/// What every controller process of a run shares: the binaries, the directory of the logs,
/// the kubeconfig and the options.
pub struct ControllerSpawn<'a> {
    pub binaries: &'a Binaries,
    pub dir: &'a Path,
    pub kubeconfig: &'a Path,
    /// How the controller serves its conversion webhook (`--enable-webhook=false` where no
    /// API server calls it).
    pub webhook_args: &'a [String],
    pub options: &'a ControllerOptions,
}

/// Starts one controller process (see [`Stack::spawn_controller`]) with `spawn`'s kubeconfig:
/// devcluster's admin one, or on the real control plane the controller's ServiceAccount's.
pub fn spawn_controller(
    spawn: &ControllerSpawn<'_>,
    kind: ControllerKind,
    ports: Option<(SocketAddr, SocketAddr)>,
    instance: Option<&str>,
) -> Result<Controller, BenchError> {
    let (metrics_addr, probe_addr) = match ports {
        Some(ports) => ports,
        None => (free_local_addr()?, free_local_addr()?),
    };
    let binary = match kind {
        ControllerKind::Sandbox => &spawn.binaries.sandbox_controller,
        ControllerKind::Extensions => &spawn.binaries.extensions_controller,
    };
    let log = spawn.dir.join(match instance {
        Some(instance) => format!("{}-{instance}.log", kind.name()),
        None => format!("{}.log", kind.name()),
    });
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(|e| BenchError::io("opening", &log, e))?;
    let err_file = log_file
        .try_clone()
        .map_err(|e| BenchError::io("opening", &log, e))?;
    let mut command = Command::new(binary);
    // As the release Deployments run them (deploy/*/deployment.yaml), unless the caller
    // chose otherwise.
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        command.env("MALLOC_ARENA_MAX", "2");
    }
    if let Some(instance) = instance {
        command.env("POD_NAME", instance);
    }
    let child = command
        .arg(format!("--kubeconfig={}", spawn.kubeconfig.display()))
        .arg(format!("--leader-elect={}", spawn.options.leader_elect))
        .args(spawn.webhook_args)
        .arg(format!("--metrics-bind-address={metrics_addr}"))
        .arg(format!("--health-probe-bind-address={probe_addr}"))
        .arg(format!("--log-level={}", spawn.options.log_level))
        .args(match kind {
            ControllerKind::Sandbox => &spawn.options.sandbox_args,
            ControllerKind::Extensions => &spawn.options.extensions_args,
        })
        .stdout(Stdio::from(log_file))
        .stderr(Stdio::from(err_file))
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| BenchError::Process {
            what: format!("starting {}", binary.display()),
            source,
        })?;
    Ok(Controller {
        kind,
        pid: child.id().unwrap_or(0),
        child,
        metrics_addr,
        probe_addr,
        log,
    })
}

impl Controller {
    /// Sends `signal` (e.g. SIGSTOP, SIGCONT) to the process.
    pub fn signal(&self, signal: rustix::process::Signal) -> Result<(), BenchError> {
        let pid = rustix::process::Pid::from_raw(i32::try_from(self.pid).unwrap_or(0))
            .ok_or_else(|| BenchError::Unavailable(format!("{} has no pid", self.kind.name())))?;
        rustix::process::kill_process(pid, signal).map_err(|e| BenchError::Process {
            what: format!("signalling {} ({})", self.kind.name(), self.pid),
            source: e.into(),
        })
    }

    /// The exit status, once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILLs the process and waits for it.
    pub async fn kill(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

/// Waits until `controller` answers `/readyz` with 200 or exits.
pub async fn wait_ready(controller: &mut Controller) -> Result<(), BenchError> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(Some(status)) = controller.child.try_wait() {
            return Err(BenchError::Exited {
                what: controller.kind.name().into(),
                status: status.to_string(),
                log: controller.log.clone(),
            });
        }
        if let Ok((200, _)) = http_get(controller.probe_addr, "/readyz").await {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::NotReady {
                what: controller.kind.name().into(),
                seconds: READY_TIMEOUT.as_secs(),
                log: controller.log.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes `text` to `path`, readable by this user only (a kubeconfig with a token).
fn write_private(path: &Path, text: &str) -> Result<(), BenchError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .map_err(|e| BenchError::io("writing", path, e))
}

/// Copies the real control plane's component logs into the scenario's directory before the
/// cluster removes its own (best effort: a log that cannot be copied is skipped).
fn copy_logs(from: &Path, to: &Path) {
    let Ok(entries) = std::fs::read_dir(from) else {
        return;
    };
    if std::fs::create_dir_all(to).is_err() {
        return;
    }
    for entry in entries.flatten() {
        let _ = std::fs::copy(entry.path(), to.join(entry.file_name()));
    }
}

/// A loopback address with a port that was free a moment ago.
fn free_local_addr() -> Result<SocketAddr, BenchError> {
    let listener =
        std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| BenchError::Process {
            what: "finding a free port".into(),
            source,
        })?;
    listener.local_addr().map_err(|source| BenchError::Process {
        what: "finding a free port".into(),
        source,
    })
}

/// A minimal HTTP/1.0 GET (the admin endpoints are plain HTTP): status code and body.
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String), BenchError> {
    let url = format!("http://{addr}{path}");
    let fail = |message: String| BenchError::Http {
        url: url.clone(),
        message,
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| fail("response has no header end".into()))?;
        let code = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| fail(format!("bad status line in {head:?}")))?;
        Ok((code, body.to_string()))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| fail("no answer within 10 s".into()))?
}

/// The benchmark's client: the kubeconfig devcluster wrote, with [`BENCH_USER_AGENT`].
/// The real control plane as the benchmark and `cargo xtask chaos` run it ([`start_real_control_plane`]).
pub struct RealStart {
    pub cluster: Box<realcluster::RealCluster>,
    /// The admin kubeconfig, in the run's directory.
    pub kubeconfig: PathBuf,
    /// An admin client without the benchmark's user agent (set-up requests are not the
    /// benchmark's).
    pub admin: kube::Client,
    /// The benchmark client ([`bench_client`] on the admin kubeconfig).
    pub client: kube::Client,
    /// Per controller, a kubeconfig with a token of its own ServiceAccount (never the admin's).
    pub controller_kubeconfigs: Vec<(ControllerKind, PathBuf)>,
}

/// Starts the real control plane with `options`, writes its admin kubeconfig to
/// `dir/kubeconfig`, installs the release's Namespace, ServiceAccounts and RBAC, and writes a
/// kubeconfig per controller (`dir/<controller>.kubeconfig`, a 6-hour token of its
/// ServiceAccount), so each controller runs as the release runs it.
pub async fn start_real_control_plane(
    dir: &Path,
    options: realcluster::Options,
) -> Result<RealStart, BenchError> {
    use realcluster::release_rbac::{self, SYSTEM_NAMESPACE};
    std::fs::create_dir_all(dir).map_err(|e| BenchError::io("creating", dir, e))?;
    let real = |what: &str, e: realcluster::Error| {
        BenchError::Unavailable(format!("the real control plane: {what}: {e}"))
    };
    let cluster = realcluster::RealCluster::start(options)
        .await
        .map_err(|e| real("starting it (docs/cluster.md)", e))?;
    let cluster = Box::new(cluster);
    let kubeconfig = dir.join("kubeconfig");
    cluster
        .write_kubeconfig(&kubeconfig)
        .map_err(|e| real("writing the admin kubeconfig", e))?;
    let admin = cluster
        .client()
        .await
        .map_err(|e| real("an admin client", e))?;
    release_rbac::install(&admin)
        .await
        .map_err(|e| real("installing the release's RBAC", e))?;
    let mut controller_kubeconfigs = Vec::new();
    for (kind, account) in [
        (ControllerKind::Sandbox, release_rbac::SANDBOX_CONTROLLER),
        (
            ControllerKind::Extensions,
            release_rbac::EXTENSIONS_CONTROLLER,
        ),
    ] {
        let text = cluster
            .service_account_kubeconfig(
                SYSTEM_NAMESPACE,
                account.account,
                Duration::from_secs(6 * 3600),
            )
            .await
            .map_err(|e| real("a token of the controller's ServiceAccount", e))?;
        let path = dir.join(format!("{}.kubeconfig", kind.name()));
        write_private(&path, &text)?;
        controller_kubeconfigs.push((kind, path));
    }
    let client = bench_client(&kubeconfig).await?;
    Ok(RealStart {
        cluster,
        kubeconfig,
        admin,
        client,
        controller_kubeconfigs,
    })
}

pub async fn bench_client(kubeconfig: &Path) -> Result<kube::Client, BenchError> {
    let fail = |message: String| BenchError::Kubeconfig {
        path: kubeconfig.to_path_buf(),
        message,
    };
    let parsed = Kubeconfig::read_from(kubeconfig).map_err(|e| fail(e.to_string()))?;
    let mut config = kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| fail(e.to_string()))?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(BENCH_USER_AGENT),
    ));
    config.read_timeout = Some(Duration::from_secs(300));
    kube::Client::try_from(config).map_err(|e| fail(e.to_string()))
}
