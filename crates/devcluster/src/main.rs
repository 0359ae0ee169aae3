//! `devcluster`: run the local Kubernetes API server standalone.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;

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
    /// Do not run the simulated node agent.
    #[arg(long)]
    no_nodes: bool,
    /// Events kept in the watch history (older resourceVersions get 410 Expired).
    #[arg(long, default_value_t = 100_000)]
    history_limit: usize,
    /// Fault injection: probability per second that an open watch is closed.
    #[arg(long, default_value_t = 0.0)]
    watch_close_probability: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let config = devcluster::Config {
        listen: args.listen,
        kubeconfig_path: args.kubeconfig,
        token: args.token,
        token_file: args.token_file,
        node_agent: !args.no_nodes,
        history_limit: args.history_limit,
        watch_close_probability: args.watch_close_probability,
        ..devcluster::Config::default()
    };
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
