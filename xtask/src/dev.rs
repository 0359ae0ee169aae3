//! `cargo xtask dev`: agent-sandbox on a laptop in one command.
//!
//! Builds `devcluster` and both controllers, starts devcluster (a local Kubernetes API server
//! with simulated nodes; with `--cluster real`, the real control plane of `cargo xtask cluster`
//! instead, with the release's ServiceAccounts and RBAC, each controller running with a token of
//! its own ServiceAccount), applies the CRDs from `deploy/crds/` and the quickstart template and
//! warm pool from `examples/quickstart/`, starts `sandbox-controller` and
//! `extensions-controller` against it, waits until the pool's sandboxes are Ready and prints
//! the kubeconfig, what to try next and where the logs are. Ctrl-C stops every process it
//! started and exits 0.
//!
//! Every child runs in its own process group with kill-on-drop handles
//! ([`process::ChildGroup`]), so even an error or a panic leaves nothing running.

pub mod address;
pub mod banner;
pub mod build;
pub mod clock;
pub mod cluster;
pub mod process;
pub mod supervise;
pub mod traces;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use tokio::signal::unix::{SignalKind, signal};

use crate::dev::banner::{Banner, Phase};
use crate::dev::build::{build, target_dir};
use crate::dev::clock::StartClock;
use crate::dev::process::ChildGroup;
use crate::dev::supervise::Running;
use crate::dev::traces::TraceViewer;
use crate::workspace::workspace_root;

/// The quickstart pool `cargo xtask dev` applies and waits for.
pub const QUICKSTART_POOL: &str = "python-quickstart";
/// Namespace of the quickstart objects.
pub const QUICKSTART_NAMESPACE: &str = "default";
/// The line printed once everything is up (tests wait for it).
pub const READY_LINE: &str = "agent-sandbox is ready";

/// The control plane `cargo xtask dev` runs the demo on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum ControlPlane {
    /// devcluster: our API server with simulated nodes (nothing to install beyond Rust).
    #[default]
    Devcluster,
    /// The real control plane of `cargo xtask cluster` (etcd, kube-apiserver,
    /// kube-controller-manager, kube-scheduler, kwok; built with Go on first use).
    Real,
}

/// Arguments of `cargo xtask dev`.
#[derive(Debug, Args)]
// The field docs are `--help` text, where `<workspace>` names a placeholder, not HTML.
#[allow(rustdoc::invalid_html_tags)]
pub struct DevArgs {
    /// Where to run: `devcluster`, or `real` (a real control plane, built with Go on first use;
    /// each controller runs with a token of its own ServiceAccount from the release manifests,
    /// never as admin). See docs/cluster.md.
    #[arg(long, value_enum, value_name = "KIND", default_value_t = ControlPlane::Devcluster)]
    pub cluster: ControlPlane,

    /// Build and run optimized binaries (slower first build).
    #[arg(long)]
    pub release: bool,

    /// Start devcluster only (with the CRDs and the quickstart objects applied), e.g. to run a
    /// controller under a debugger; the printed commands show how to start them.
    #[arg(long, conflicts_with = "claims")]
    pub no_controllers: bool,

    /// Also create N claims on the quickstart pool (dev-claim-1 ... dev-claim-N) and print each
    /// one's time from create to bound.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub claims: u32,

    /// Directory for the kubeconfig and the logs. [default: <target dir>/dev]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Receive the controllers' traces (OTLP/HTTP on 127.0.0.1) and show each claim's as a
    /// waterfall: printed here and written as SVG to <dir>/traces/. To send them to your own
    /// collector instead, leave this out and set OTEL_EXPORTER_OTLP_ENDPOINT.
    #[arg(long, conflicts_with = "no_controllers")]
    pub traces: bool,
}

/// Everything that can stop `cargo xtask dev`.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
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
    /// `cargo build` failed.
    #[error("`cargo build` failed ({status}); its errors are above")]
    Build { status: String },
    /// A child exited while it should be running.
    #[error("{name} exited unexpectedly ({status}); last lines of {log}:\n{tail}")]
    ChildExited {
        name: String,
        status: String,
        log: String,
        tail: String,
    },
    /// An API request failed.
    #[error("{action}: {message}")]
    Kube { action: String, message: String },
    /// A manifest could not be read or is of a kind `dev` does not apply.
    #[error("{origin}: {message}")]
    Manifest { origin: String, message: String },
    /// Something did not happen in time.
    #[error("timed out waiting for {what}; the logs are in the dev directory")]
    Timeout { what: String },
    /// Another `cargo xtask dev` already uses the directory.
    #[error(
        "another `cargo xtask dev` (pid {pid}) is running with {dir}; stop it (Ctrl-C in its \
         terminal) or pass --dir DIR"
    )]
    AlreadyRunning { pid: u32, dir: String },
    /// Signal handlers could not be installed.
    #[error("could not install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
    /// The real control plane could not start, or a step on it failed.
    #[error("real control plane: {0}")]
    Real(#[from] realcluster::Error),
}

/// Entry point for `main.rs`: runs `cargo xtask dev` and maps the outcome to an exit code
/// (0 after Ctrl-C, 1 with a one-line error otherwise). `clock` is read first thing in `main`.
pub fn main(args: &DevArgs, clock: StartClock) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: could not start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args, clock)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the dev environment until Ctrl-C (or SIGTERM/SIGHUP), then stops everything it started.
pub async fn run(args: &DevArgs, clock: StartClock) -> Result<(), DevError> {
    let result = run_until_stopped(args, clock).await;
    release_dir(&dev_dir(args));
    result
}

async fn run_until_stopped(args: &DevArgs, clock: StartClock) -> Result<(), DevError> {
    let mut interrupt = signal(SignalKind::interrupt()).map_err(DevError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(DevError::Signals)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(DevError::Signals)?;
    let mut running = Running::default();

    let mut traces = None;
    let outcome = tokio::select! {
        result = start(args, &mut running, &mut traces, clock) => Some(result),
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        _ = hangup.recv() => None,
    };
    match outcome {
        None => {
            eprintln!("==> interrupted; stopping");
            running.stop_all().await;
            return Ok(());
        }
        Some(Err(error)) => {
            running.stop_all().await;
            return Err(error);
        }
        Some(Ok(())) => {}
    }

    let failure = tokio::select! {
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        _ = hangup.recv() => None,
        error = running.supervise() => Some(error),
    };
    let plane = match args.cluster {
        ControlPlane::Devcluster => "devcluster",
        ControlPlane::Real => "the control plane",
    };
    eprintln!("==> stopping (controllers first, then {plane})");
    running.stop_all().await;
    match failure {
        None => {
            eprintln!("==> stopped; the logs stay in {}", dev_dir(args).display());
            Ok(())
        }
        Some(error) => Err(error),
    }
}

fn step(message: &str) {
    eprintln!("==> {message}");
}

/// Where the kubeconfig and the logs go.
pub fn dev_dir(args: &DevArgs) -> PathBuf {
    match &args.dir {
        Some(dir) if dir.is_absolute() => dir.clone(),
        Some(dir) => std::env::current_dir()
            .map(|cwd| cwd.join(dir))
            .unwrap_or_else(|_| dir.clone()),
        None => target_dir().join("dev"),
    }
}

/// Builds, starts and waits for readiness, then prints the banner. `traces` receives the trace
/// viewer (with `--traces`), which must outlive this function.
async fn start(
    args: &DevArgs,
    running: &mut Running,
    traces: &mut Option<TraceViewer>,
    clock: StartClock,
) -> Result<(), DevError> {
    let root = workspace_root();
    let dir = dev_dir(args);
    std::fs::create_dir_all(&dir).map_err(|source| DevError::Io {
        action: "create directory",
        path: dir.clone(),
        source,
    })?;
    claim_dir(&dir)?;
    let profile = if args.release { "release" } else { "debug" };
    let real = args.cluster == ControlPlane::Real;
    let mut packages = if real { vec![] } else { vec!["devcluster"] };
    if !args.no_controllers {
        packages.extend(["sandbox-controller", "extensions-controller"]);
    }
    let build_started = Instant::now();
    // Nothing to build with `--cluster real --no-controllers` (and `cargo build` without a
    // package would build the whole workspace).
    if !packages.is_empty() {
        step(&format!(
            "building {} ({profile}); cargo reports its progress",
            packages.join(", ")
        ));
        build(&root, &packages, args.release).await?;
    }
    let build_time = build_started.elapsed();
    let bin_dir = target_dir().join(profile);

    let kubeconfig = dir.join("kubeconfig");
    let client = if real {
        start_real_cluster(running, &kubeconfig).await?
    } else {
        start_devcluster(running, &bin_dir, &dir, &kubeconfig).await?
    };

    step("applying deploy/crds/ and the quickstart template and warm pool");
    let crd_files = yaml_files(&root.join("deploy").join("crds"))?;
    let crd_paths: Vec<&Path> = crd_files.iter().map(PathBuf::as_path).collect();
    let crds = cluster::apply_files(&client, &crd_paths).await?;
    let crd_names: Vec<String> = crds
        .iter()
        .filter_map(|applied| applied.strip_prefix("CustomResourceDefinition/"))
        .map(str::to_owned)
        .collect();
    cluster::wait_crds_established(
        &client,
        &crd_names,
        Instant::now() + Duration::from_secs(30),
    )
    .await?;
    let quickstart = root.join("examples").join("quickstart");
    let template = quickstart.join("template.yaml");
    let warm_pool = quickstart.join("warmpool.yaml");
    cluster::apply_files(&client, &[template.as_path(), warm_pool.as_path()]).await?;

    // Each controller's kubeconfig: on the real control plane its own ServiceAccount's (written
    // with --no-controllers too, for the commands the banner prints), else devcluster's.
    let mut controller_kubeconfigs = Vec::new();
    for account in &realcluster::release_rbac::CONTROLLERS {
        controller_kubeconfigs.push(match running.real() {
            Some(cluster) => service_account_kubeconfig(cluster, account, &dir).await?,
            None => kubeconfig.clone(),
        });
    }

    if !args.no_controllers {
        let mut env = Vec::new();
        if args.traces {
            let viewer = TraceViewer::start(&dir.join("traces")).await?;
            eprintln!(
                "    receiving the controllers' traces at {} (OTLP/HTTP)",
                viewer.endpoint()
            );
            env = viewer.controller_env();
            *traces = Some(viewer);
        }
        step("starting sandbox-controller and extensions-controller");
        for (account, own_kubeconfig) in realcluster::release_rbac::CONTROLLERS
            .iter()
            .zip(&controller_kubeconfigs)
        {
            let name = account.binary;
            let metrics = free_port(&dir)?;
            let probes = free_port(&dir)?;
            let child = ChildGroup::spawn(
                name,
                &bin_dir.join(name),
                &controller_args(own_kubeconfig, metrics, probes),
                &env,
                &dir.join(format!("{name}.log")),
            )?;
            eprintln!(
                "    {name} pid {} (metrics http://127.0.0.1:{metrics}/metrics)",
                child.pid()
            );
            running.push(child, true);
        }
        step(&format!(
            "waiting for warm pool {QUICKSTART_POOL} to have all its sandboxes Ready"
        ));
        wait_for_pool(running, &client).await?;
    }

    let claims = if args.claims > 0 {
        step(&format!(
            "creating {} claim(s) and waiting until each is bound",
            args.claims
        ));
        let deadline = Instant::now() + Duration::from_secs(60);
        cluster::create_and_time_claims(
            &client,
            QUICKSTART_NAMESPACE,
            QUICKSTART_POOL,
            args.claims,
            deadline,
        )
        .await?
    } else {
        Vec::new()
    };

    let cwd = std::env::current_dir().unwrap_or_else(|_| root.clone());
    let real_logs = running.real().map(realcluster::RealCluster::logs_dir);
    let banner = Banner {
        elapsed: clock.start().elapsed(),
        phases: phases(&clock, build_time),
        kubeconfig: &kubeconfig,
        dir: &dir,
        root: &root,
        cwd: &cwd,
        controllers: !args.no_controllers,
        real_logs: real_logs.as_deref(),
        controller_kubeconfigs: &controller_kubeconfigs,
        claims: &claims,
        bin_dir: &bin_dir,
        traces: traces.as_ref().map(TraceViewer::dir),
    };
    println!("{}", banner.render());
    Ok(())
}

/// Where the time to ready went: the compile of xtask before it ran (when the process start is
/// known), the build of the binaries, and the rest.
fn phases(clock: &StartClock, build_time: Duration) -> Vec<Phase> {
    let total = clock.start().elapsed();
    let mut phases = Vec::new();
    if clock.command.is_some() {
        phases.push(Phase {
            what: "cargo building xtask",
            time: clock.before_main(),
        });
    }
    phases.push(Phase {
        what: "building the binaries",
        time: build_time,
    });
    let accounted: Duration = phases.iter().map(|p| p.time).sum();
    phases.push(Phase {
        what: "starting and waiting for readiness",
        time: total.saturating_sub(accounted),
    });
    phases
}

/// Removes the kubeconfig a previous run left, so a new one is only read once written.
fn remove_stale_kubeconfig(kubeconfig: &Path) -> Result<(), DevError> {
    match std::fs::remove_file(kubeconfig) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(DevError::Io {
            action: "remove stale kubeconfig",
            path: kubeconfig.to_path_buf(),
            source,
        }),
    }
}

/// Starts devcluster on the address of the last run in `dir` when it is free (see
/// [`address`]), waits until it serves, and says where.
async fn start_devcluster(
    running: &mut Running,
    bin_dir: &Path,
    dir: &Path,
    kubeconfig: &Path,
) -> Result<kube::Client, DevError> {
    let mut choice = address::choose(dir);
    loop {
        step("starting devcluster");
        remove_stale_kubeconfig(kubeconfig)?;
        let devcluster = ChildGroup::spawn(
            "devcluster",
            &bin_dir.join("devcluster"),
            &[
                "--listen".to_owned(),
                format!("127.0.0.1:{}", choice.port()),
                "--kubeconfig".to_owned(),
                kubeconfig.display().to_string(),
            ],
            &[],
            &dir.join("devcluster.log"),
        )?;
        let pid = devcluster.pid();
        running.push(devcluster, false);
        match wait_for_api_server(running, kubeconfig).await {
            Ok(client) => {
                let text = std::fs::read_to_string(kubeconfig).unwrap_or_default();
                let port = address::served_port(&text).unwrap_or_default();
                address::remember(dir, port);
                eprintln!(
                    "    devcluster pid {pid} at http://127.0.0.1:{port} ({})",
                    choice.describe(port)
                );
                return Ok(client);
            }
            // Taken between the check and devcluster's bind: once more on a free port.
            Err(DevError::ChildExited { .. }) if matches!(choice, address::PortChoice::Same(_)) => {
                running.forget_last();
                choice = address::PortChoice::Taken(choice.port());
            }
            Err(error) => return Err(error),
        }
    }
}

/// How long the controllers' ServiceAccount tokens on the real control plane last (a run
/// longer than this needs a restart of `cargo xtask dev`).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Starts the real control plane (what `cargo xtask cluster` runs), writes its admin kubeconfig
/// to `kubeconfig`, installs the release's Namespace, ServiceAccounts and RBAC, and waits until
/// the `default` namespace takes Pods (its `default` ServiceAccount exists). The cluster is
/// handed to `running`, which stops it last.
async fn start_real_cluster(
    running: &mut Running,
    kubeconfig: &Path,
) -> Result<kube::Client, DevError> {
    step("starting the real control plane (the first start builds it with Go: minutes)");
    remove_stale_kubeconfig(kubeconfig)?;
    let cluster = realcluster::RealCluster::start(realcluster::Options {
        own_process_groups: true,
        ..realcluster::Options::default()
    })
    .await?;
    cluster.write_kubeconfig(kubeconfig)?;
    eprintln!(
        "    real control plane ({}) at {}; logs in {}",
        cluster.versions(),
        cluster.server_url(),
        cluster.logs_dir().display()
    );
    for component in cluster.components() {
        eprintln!("    {} pid {}", component.name, component.pid);
    }
    let client = cluster.client().await?;
    running.set_real(cluster);
    step("installing the release's namespace, ServiceAccounts and RBAC (deploy/)");
    realcluster::release_rbac::install(&client).await?;
    // Pods in the quickstart namespace (`default`) need its `default` ServiceAccount (the
    // ServiceAccount admission plugin): `RealCluster::start` returns only once it exists.
    Ok(client)
}

/// Writes `<dir>/<account>.kubeconfig`: the real control plane's address with a token of the
/// controller's own ServiceAccount (as `kubectl create token` gets it), never admin.
async fn service_account_kubeconfig(
    cluster: &realcluster::RealCluster,
    account: &realcluster::release_rbac::ControllerAccount,
    dir: &Path,
) -> Result<PathBuf, DevError> {
    let text = cluster
        .service_account_kubeconfig(
            realcluster::release_rbac::SYSTEM_NAMESPACE,
            account.account,
            TOKEN_LIFETIME,
        )
        .await?;
    let path = dir.join(format!("{}.kubeconfig", account.account));
    std::fs::write(&path, text).map_err(|source| DevError::Io {
        action: "write",
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

/// File holding the pid of the `cargo xtask dev` that uses a directory.
pub const PID_FILE: &str = "xtask-dev.pid";

/// Records this process as the user of `dir`, refusing when another live `xtask dev` has it
/// (a second one would replace the first one's kubeconfig under its feet).
fn claim_dir(dir: &Path) -> Result<(), DevError> {
    let pid_file = dir.join(PID_FILE);
    if let Ok(text) = std::fs::read_to_string(&pid_file)
        && let Ok(pid) = text.trim().parse::<u32>()
        && pid != std::process::id()
        && is_xtask_process(pid)
    {
        return Err(DevError::AlreadyRunning {
            pid,
            dir: dir.display().to_string(),
        });
    }
    std::fs::write(&pid_file, format!("{}\n", std::process::id())).map_err(|source| DevError::Io {
        action: "write",
        path: pid_file,
        source,
    })
}

/// Whether `pid` is a running xtask process (its command line names xtask).
fn is_xtask_process(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|cmdline| String::from_utf8_lossy(&cmdline).contains("xtask"))
        .unwrap_or(false)
}

/// Forgets the pid file once this process is done with the directory.
fn release_dir(dir: &Path) {
    let pid_file = dir.join(PID_FILE);
    let ours = std::fs::read_to_string(&pid_file)
        .ok()
        .and_then(|text| text.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if ours {
        let _ = std::fs::remove_file(pid_file);
    }
}

/// Waits for devcluster's kubeconfig and a first successful request.
async fn wait_for_api_server(
    running: &mut Running,
    kubeconfig: &Path,
) -> Result<kube::Client, DevError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        running.check().await?;
        if kubeconfig.exists()
            && let Ok(client) = cluster::connect(kubeconfig).await
            && cluster::is_serving(&client).await
        {
            return Ok(client);
        }
        if Instant::now() >= deadline {
            return Err(DevError::Timeout {
                what: format!("devcluster to serve (kubeconfig {})", kubeconfig.display()),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the quickstart pool has as many Ready sandboxes as it wants.
async fn wait_for_pool(running: &mut Running, client: &kube::Client) -> Result<(), DevError> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = (-1, -1);
    loop {
        running.check().await?;
        let (ready, desired) =
            cluster::pool_readiness(client, QUICKSTART_NAMESPACE, QUICKSTART_POOL).await?;
        if (ready, desired) != last {
            eprintln!("    {ready}/{desired} ready");
            last = (ready, desired);
        }
        if desired > 0 && ready >= desired {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DevError::Timeout {
                what: format!(
                    "warm pool {QUICKSTART_NAMESPACE}/{QUICKSTART_POOL} to be ready \
                     ({ready}/{desired} ready)"
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The flags `cargo xtask dev` starts each controller with. No conversion webhook: devcluster
/// does not call one (it serves v1alpha1 without converting), and two local controllers would
/// both want port 9443.
pub fn controller_args(kubeconfig: &Path, metrics_port: u16, probe_port: u16) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
        format!("--health-probe-bind-address=127.0.0.1:{probe_port}"),
        "--log-format=text".to_owned(),
        "--enable-webhook=false".to_owned(),
    ]
}

/// A TCP port that was free a moment ago on 127.0.0.1.
fn free_port(dir: &Path) -> Result<u16, DevError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|source| DevError::Io {
            action: "find a free port for",
            path: dir.to_path_buf(),
            source,
        })
}

/// The `*.yaml` files of a directory, sorted.
fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, DevError> {
    let entries = std::fs::read_dir(dir).map_err(|source| DevError::Io {
        action: "read directory",
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controllers_get_the_kubeconfig_and_private_ports() {
        let args = controller_args(Path::new("/d/kubeconfig"), 4000, 4001);
        assert_eq!(
            args,
            [
                "--kubeconfig=/d/kubeconfig",
                "--metrics-bind-address=127.0.0.1:4000",
                "--health-probe-bind-address=127.0.0.1:4001",
                "--log-format=text",
                "--enable-webhook=false",
            ]
        );
    }
}
