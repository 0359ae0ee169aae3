//! `cargo xtask cluster`: a real Kubernetes control plane on loopback, in the foreground.
//!
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built from the
//! releases pinned in `upstream/go.mod` (the first start compiles them; later starts reuse the
//! cached binaries) and run by the `realcluster` crate with production-like settings. The admin
//! kubeconfig is written to `--kubeconfig` once the API server is ready and every node is
//! Ready. SIGINT, SIGTERM or SIGHUP stop every component by PID and remove its data (and the
//! kubeconfig); a component that exits on its own ends the command with status 1, naming it
//! and showing the last lines of its log. See `docs/cluster.md`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use realcluster::{Delay, Options, RealCluster};
use tokio::signal::unix::{SignalKind, signal};

/// The line printed once the cluster is up (tests wait for it).
pub const READY_LINE: &str = "real cluster is ready";
/// The line naming the audit log (tests read the path after it).
pub const AUDIT_LOG_LABEL: &str = "audit log:";

/// Arguments of `cargo xtask cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    /// Where to write the admin kubeconfig, once the cluster is ready (removed at stop).
    #[arg(long, value_name = "PATH", required_unless_present = "build_only")]
    pub kubeconfig: Option<PathBuf>,

    /// Number of kwok nodes (kwok-node-1 ... kwok-node-N).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub nodes: u32,

    /// Time from scheduling to Running/Ready of each Pod: `0`, `200ms`, or a uniform range
    /// `100ms..2s`.
    #[arg(long, value_name = "D", default_value = "0", value_parser = parse_delay)]
    pub pod_startup_delay: Delay,

    /// Write the audit log here instead of the data directory (then it is kept after stop).
    #[arg(long, value_name = "PATH")]
    pub audit_log: Option<PathBuf>,

    /// Only build the upstream binaries (or find them cached), print where they are, and exit.
    #[arg(long, conflicts_with_all = ["kubeconfig", "audit_log"])]
    pub build_only: bool,
}

fn parse_delay(text: &str) -> Result<Delay, String> {
    Delay::parse(text)
}

/// Entry point for `main.rs`: 0 after a signal, 1 with a one-line error (or a component's exit
/// report) otherwise.
pub fn main(args: &ClusterArgs) -> ExitCode {
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
    let result = if args.build_only {
        build_only()
    } else {
        runtime.block_on(run(args))
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `--build-only`: builds what is missing and prints the binaries' directory.
fn build_only() -> Result<(), realcluster::Error> {
    let started = std::time::Instant::now();
    let binaries = realcluster::upstream::ensure_built(&realcluster::stderr_progress())?;
    println!(
        "upstream binaries ({}) in {} ({:.0}s)",
        binaries.versions(),
        binaries.dir().display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs the cluster until a signal (Ok) or a component's exit (Err).
pub async fn run(args: &ClusterArgs) -> Result<(), realcluster::Error> {
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_error)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_error)?;
    let mut hangup = signal(SignalKind::hangup()).map_err(signal_error)?;
    let Some(kubeconfig) = args.kubeconfig.as_deref().map(absolute) else {
        return Err(realcluster::Error::Invalid(
            "--kubeconfig PATH is required".to_owned(),
        ));
    };
    remove_file(&kubeconfig)?;
    let options = Options {
        nodes: args.nodes,
        pod_startup_delay: args.pod_startup_delay,
        audit_log: args.audit_log.as_deref().map(absolute),
        own_process_groups: true,
        ..Options::default()
    };

    // A signal during the start drops the start future, and with it the partly started
    // cluster, which stops what it started and removes its directory.
    let started = tokio::select! {
        cluster = RealCluster::start(options) => Some(cluster?),
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        _ = hangup.recv() => None,
    };
    let Some(cluster) = started else {
        eprintln!("==> interrupted while starting; stopped what had started");
        return Ok(());
    };
    cluster.write_kubeconfig(&kubeconfig)?;
    println!("{}", banner(&cluster, &kubeconfig));

    let failure = tokio::select! {
        _ = interrupt.recv() => None,
        _ = terminate.recv() => None,
        _ = hangup.recv() => None,
        exit = cluster.wait_for_exit() => Some(exit),
    };
    eprintln!("==> stopping (kwok, kube-scheduler, kube-controller-manager, kube-apiserver, etcd)");
    let data = cluster.data_dir().to_path_buf();
    cluster.stop();
    remove_file(&kubeconfig)?;
    match failure {
        None => {
            eprintln!("==> stopped; removed {}", data.display());
            Ok(())
        }
        Some(exit) => Err(realcluster::Error::ComponentExited(Box::new(exit))),
    }
}

fn signal_error(source: std::io::Error) -> realcluster::Error {
    realcluster::Error::Io {
        action: "install a handler for",
        path: PathBuf::from("SIGINT/SIGTERM/SIGHUP"),
        source,
    }
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

fn remove_file(path: &Path) -> Result<(), realcluster::Error> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(realcluster::Error::Io {
            action: "remove",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// What the command prints once the cluster is up: the ready line, where everything is, the
/// components' PIDs and a command to try.
pub fn banner(cluster: &RealCluster, kubeconfig: &Path) -> String {
    let mut out = format!(
        "\n{READY_LINE} ({}) in {:.1}s\n\n",
        cluster.versions(),
        cluster.start_time().as_secs_f64()
    );
    out.push_str(&format!("server:     {}\n", cluster.server_url()));
    out.push_str(&format!("kubeconfig: {}\n", kubeconfig.display()));
    out.push_str(&format!(
        "{AUDIT_LOG_LABEL}  {}  (requests of agent-sandbox-system's ServiceAccounts)\n",
        cluster.audit_log_path().display()
    ));
    out.push_str(&format!("logs:       {}\n", cluster.logs_dir().display()));
    out.push_str("components:\n");
    for component in cluster.components() {
        out.push_str(&format!("  {:<24} pid {}\n", component.name, component.pid));
    }
    out.push_str(&format!(
        "  {:<24} in this process (ends Pods whose commands end)\n",
        realcluster::finisher::NAME
    ));
    out.push_str(&format!(
        "\nTry: KUBECONFIG={} kubectl get nodes\n\
         Ctrl-C stops every component and removes {}\n",
        kubeconfig.display(),
        cluster.data_dir().display()
    ));
    out
}
