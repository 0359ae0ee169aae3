//! The processes under test: building them, starting devcluster and the two controllers as
//! separate processes, waiting for readiness, killing and restarting a controller, and the
//! benchmark's own Kubernetes client.

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
/// [`crate::dev::build::is_package_env`]).
pub fn cargo_build(profile: BuildProfile, packages: &[&str]) -> Result<(), BenchError> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = std::process::Command::new(&cargo);
    command.current_dir(workspace_root()).arg("build");
    if profile == BuildProfile::Release {
        command.arg("--release");
    }
    for package in packages {
        command.args(["-p", package]);
    }
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(crate::dev::build::is_package_env) {
            command.env_remove(name);
        }
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
    if build {
        cargo_build(
            profile,
            &["devcluster", "sandbox-controller", "extensions-controller"],
        )?;
    }
    let target = profile_dir(profile);
    let binaries = Binaries {
        devcluster: target.join("devcluster"),
        sandbox_controller: target.join("sandbox-controller"),
        extensions_controller: target.join("extensions-controller"),
    };
    for path in [
        &binaries.devcluster,
        &binaries.sandbox_controller,
        &binaries.extensions_controller,
    ] {
        if !path.is_file() {
            return Err(BenchError::Unavailable(format!(
                "{} does not exist; run without --no-build",
                path.display()
            )));
        }
    }
    Ok(binaries)
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

/// devcluster plus (optionally) both controllers, all separate processes, with the
/// benchmark's client. Dropping it kills every process.
pub struct Stack {
    pub dir: PathBuf,
    binaries: Binaries,
    devcluster: Child,
    pub devcluster_pid: u32,
    pub devcluster_log: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    pub controllers: Vec<Controller>,
    controller_options: ControllerOptions,
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
            devcluster: child,
            devcluster_pid: pid,
            devcluster_log,
            kubeconfig,
            client,
            controllers: Vec::new(),
            controller_options: controller_options.clone(),
        })
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

    /// Fails when devcluster or a controller has exited.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        if let Ok(Some(status)) = self.devcluster.try_wait() {
            return Err(BenchError::Exited {
                what: "devcluster".into(),
                status: status.to_string(),
                log: self.devcluster_log.clone(),
            });
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

    /// Stops every process (SIGKILL: nothing of theirs is kept).
    pub async fn shutdown(mut self) {
        for controller in &mut self.controllers {
            let _ = controller.child.start_kill();
            let _ = controller.child.wait().await;
        }
        let _ = self.devcluster.start_kill();
        let _ = self.devcluster.wait().await;
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
                kubeconfig: &self.kubeconfig,
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
        // devcluster calls no conversion webhook.
        .arg("--enable-webhook=false")
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
