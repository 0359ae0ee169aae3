//! `devcluster`: run the local Kubernetes API server standalone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use devcluster::nodes::{Delay, NodeConfig, parse_duration};
use devcluster::observe::{FaultConfig, FaultRule, ObserverConfig, WatchClose};

/// The server allocates and frees a JSON tree or two per request: under
/// `cargo xtask bench --scenario saturate` glibc's malloc and free took about a third of its
/// CPU. mimalloc spends less on it, at the price of a larger resident set (170-235 instead of
/// 110-180 MiB after the bench's `devcluster` scenario).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A local Kubernetes API server with simulated nodes, for trying agent-sandbox and for its tests.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
struct Args {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Where to write the kubeconfig (default: a new file under the temp dir).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Bearer token written into the kubeconfig.
    #[arg(long, default_value = "devcluster")]
    token: String,
    /// Accept only the tokens in this file (one per line); by default any token is accepted.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Serve HTTPS with a generated self-signed CA (written into the kubeconfig).
    #[arg(long)]
    tls: bool,
    /// Do not run the simulated nodes (pods stay Pending).
    #[arg(long)]
    no_nodes: bool,
    /// Number of simulated nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u32,
    /// Time from scheduling to Running/Ready: `0`, `200ms`, or a uniform range `100ms..2s`.
    #[arg(long, default_value = "0")]
    pod_startup_delay: String,
    /// Fraction of pods that stay Pending with PodScheduled=False/Unschedulable.
    #[arg(long, default_value_t = 0.0)]
    unschedulable_fraction: f64,
    /// Fraction of scheduled pods that fail.
    #[arg(long, default_value_t = 0.0)]
    failure_fraction: f64,
    /// Time a container takes to exit after TERM when its pod is deleted (the grace period caps it).
    #[arg(long, default_value = "0")]
    pod_termination_delay: String,
    /// Seed of the simulated nodes' random decisions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Events kept in the watch history (older resourceVersions get 410 Expired).
    #[arg(long, default_value_t = 100_000)]
    history_limit: usize,
    /// Append one JSON line per request to this file.
    #[arg(long)]
    audit_log: Option<PathBuf>,
    /// Fault injection: fraction of requests answered with 500 (all verbs and resources).
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Fault injection: latency added to every request, e.g. `20ms`.
    #[arg(long, default_value = "0")]
    latency: String,
    /// Fault injection: probability that a watch is closed early (see --watch-close-after).
    #[arg(long, default_value_t = 0.0)]
    watch_close_probability: f64,
    /// Fault injection: when a watch chosen by --watch-close-probability is closed, from its
    /// start: `5s`, or a uniform range `1s..30s`.
    #[arg(long, default_value = "1s..30s")]
    watch_close_after: String,
}

fn config_from(args: Args) -> anyhow::Result<devcluster::Config> {
    let latency = parse_duration(&args.latency)?;
    let mut faults = FaultConfig::default();
    if args.error_rate > 0.0 || !latency.is_zero() {
        faults.rules.push(FaultRule {
            error_rate: args.error_rate,
            latency,
            ..FaultRule::default()
        });
    }
    if args.watch_close_probability > 0.0 {
        let (min_after, max_after) = match Delay::parse(&args.watch_close_after)? {
            Delay::Fixed(after) => (after, after),
            Delay::Uniform { min, max } => (min, max),
        };
        faults.watch_close = Some(WatchClose {
            probability: args.watch_close_probability,
            min_after,
            max_after,
        });
    }
    Ok(devcluster::Config {
        listen: args.listen,
        kubeconfig_path: args.kubeconfig,
        token: args.token,
        token_file: args.token_file,
        tls: args.tls,
        node_agent: !args.no_nodes,
        nodes: NodeConfig {
            nodes: args.nodes,
            startup_delay: Delay::parse(&args.pod_startup_delay)?,
            unschedulable_fraction: args.unschedulable_fraction,
            failure_fraction: args.failure_fraction,
            termination_delay: parse_duration(&args.pod_termination_delay)?,
            seed: args.seed,
            ..NodeConfig::default()
        },
        observer: ObserverConfig {
            audit_log: args.audit_log,
            faults,
        },
        history_limit: args.history_limit,
        ..devcluster::Config::default()
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = config_from(Args::parse())?;
    let running = devcluster::DevCluster::start(config).await?;
    println!("devcluster serving at {}", running.url());
    println!("kubeconfig: {}", running.kubeconfig_path().display());
    println!(
        "try: KUBECONFIG={} kubectl get namespaces",
        running.kubeconfig_path().display()
    );
    wait_for_signal().await?;
    tracing::info!("stopping");
    running.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    Ok(())
}
