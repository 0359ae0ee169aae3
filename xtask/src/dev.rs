//! `cargo xtask dev`: agent-sandbox on a laptop in one command.
//!
//! Builds `devcluster` and both controllers, starts devcluster (a local Kubernetes API server
//! with simulated nodes), applies the CRDs from `deploy/crds/` and the quickstart template and
//! warm pool from `examples/quickstart/`, starts `sandbox-controller` and
//! `extensions-controller` against it, waits until the pool's sandboxes are Ready and prints
//! the kubeconfig, what to try next and where the logs are. Ctrl-C stops every process it
//! started and exits 0.
//!
//! Every child runs in its own process group with kill-on-drop handles
//! ([`process::ChildGroup`]), so even an error or a panic leaves nothing running.

pub mod banner;
pub mod build;
pub mod cluster;
pub mod process;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use crate::dev::banner::Banner;
use crate::dev::build::{build, target_dir};
use crate::dev::process::{ChildGroup, log_tail};
use crate::workspace::workspace_root;

/// The quickstart pool `cargo xtask dev` applies and waits for.
pub const QUICKSTART_POOL: &str = "python-quickstart";
/// Namespace of the quickstart objects.
pub const QUICKSTART_NAMESPACE: &str = "default";
/// The line printed once everything is up (tests wait for it).
pub const READY_LINE: &str = "agent-sandbox is ready";

/// Arguments of `cargo xtask dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
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
}

/// Entry point for `main.rs`: runs `cargo xtask dev` and maps the outcome to an exit code
/// (0 after Ctrl-C, 1 with a one-line error otherwise).
pub fn main(args: &DevArgs) -> ExitCode {
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
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The processes of a running dev environment, in start order.
#[derive(Debug, Default)]
struct Running {
    children: Vec<ChildGroup>,
}

impl Running {
    /// Stops the children in reverse start order (controllers before the API server).
    async fn stop_all(&mut self) {
        while let Some(mut child) = self.children.pop() {
            child.stop(Duration::from_secs(10)).await;
        }
    }

    /// The first child that has exited, as an error.
    fn exited_child(&mut self) -> Option<DevError> {
        self.children.iter_mut().find_map(|child| {
            let status = child.try_exit_status()?;
            Some(child_exited(child, &status.to_string()))
        })
    }
}

fn child_exited(child: &ChildGroup, status: &str) -> DevError {
    DevError::ChildExited {
        name: child.name().to_owned(),
        status: status.to_owned(),
        log: child.log().display().to_string(),
        tail: log_tail(child.log(), 15),
    }
}

/// Runs the dev environment until Ctrl-C (or SIGTERM/SIGHUP), then stops everything it started.
pub async fn run(args: &DevArgs) -> Result<(), DevError> {
    let result = run_until_stopped(args).await;
    release_dir(&dev_dir(args));
    result
}

async fn run_until_stopped(args: &DevArgs) -> Result<(), DevError> {
    let mut interrupt = signal(SignalKind::interrupt()).map_err(DevError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(DevError::Signals)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(DevError::Signals)?;
    let mut running = Running::default();

    let started = Instant::now();
    let outcome = tokio::select! {
        result = start(args, &mut running, started) => Some(result),
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
        error = watch_children(&mut running) => Some(error),
    };
    eprintln!("==> stopping (controllers first, then devcluster)");
    running.stop_all().await;
    match failure {
        None => {
            eprintln!("==> stopped; the logs stay in {}", dev_dir(args).display());
            Ok(())
        }
        Some(error) => Err(error),
    }
}

/// Resolves when a child exits, with the error describing it.
async fn watch_children(running: &mut Running) -> DevError {
    loop {
        if let Some(error) = running.exited_child() {
            return error;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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

/// Builds, starts and waits for readiness, then prints the banner.
async fn start(args: &DevArgs, running: &mut Running, started: Instant) -> Result<(), DevError> {
    let root = workspace_root();
    let dir = dev_dir(args);
    std::fs::create_dir_all(&dir).map_err(|source| DevError::Io {
        action: "create directory",
        path: dir.clone(),
        source,
    })?;
    claim_dir(&dir)?;
    let profile = if args.release { "release" } else { "debug" };
    let mut packages = vec!["devcluster"];
    if !args.no_controllers {
        packages.extend(["sandbox-controller", "extensions-controller"]);
    }
    step(&format!("building {} ({profile})", packages.join(", ")));
    build(&root, &packages, args.release).await?;
    let bin_dir = target_dir().join(profile);

    step("starting devcluster");
    let kubeconfig = dir.join("kubeconfig");
    match std::fs::remove_file(&kubeconfig) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(DevError::Io {
                action: "remove stale kubeconfig",
                path: kubeconfig,
                source,
            });
        }
    }
    let devcluster = ChildGroup::spawn(
        "devcluster",
        &bin_dir.join("devcluster"),
        &[
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--kubeconfig".to_owned(),
            kubeconfig.display().to_string(),
        ],
        &dir.join("devcluster.log"),
    )?;
    eprintln!("    devcluster pid {}", devcluster.pid());
    running.children.push(devcluster);
    let client = wait_for_api_server(running, &kubeconfig).await?;

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

    let mut ports = Vec::new();
    if !args.no_controllers {
        step("starting sandbox-controller and extensions-controller");
        for name in ["sandbox-controller", "extensions-controller"] {
            let metrics = free_port(&dir)?;
            let probes = free_port(&dir)?;
            let child = ChildGroup::spawn(
                name,
                &bin_dir.join(name),
                &controller_args(&kubeconfig, metrics, probes),
                &dir.join(format!("{name}.log")),
            )?;
            eprintln!(
                "    {name} pid {} (metrics http://127.0.0.1:{metrics}/metrics)",
                child.pid()
            );
            running.children.push(child);
            ports.push((name, metrics));
        }
        step(&format!(
            "waiting for warm pool {QUICKSTART_POOL} to have all its sandboxes Ready"
        ));
        wait_for_pool(running, &client).await?;
    }

    let claims = if args.claims > 0 {
        step(&format!("creating {} claim(s)", args.claims));
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
    let banner = Banner {
        elapsed: started.elapsed(),
        kubeconfig: &kubeconfig,
        dir: &dir,
        root: &root,
        cwd: &cwd,
        controllers: !args.no_controllers,
        claims: &claims,
        bin_dir: &bin_dir,
    };
    println!("{}", banner.render());
    Ok(())
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
        if let Some(error) = running.exited_child() {
            return Err(error);
        }
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
        if let Some(error) = running.exited_child() {
            return Err(error);
        }
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
