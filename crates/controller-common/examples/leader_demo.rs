//! A do-nothing controller that shows the shared runtime end to end: flags, client, logs,
//! admin endpoints, leader election and shutdown. Run two copies against a cluster (or
//! devcluster) with different probe/metrics ports and watch the Lease move:
//!
//! ```text
//! cargo run -p controller-common --example leader_demo -- --kubeconfig KUBECONFIG \
//!     --leader-election-namespace default --log-format text \
//!     --metrics-bind-address 127.0.0.1:18080 --health-probe-bind-address 127.0.0.1:18081
//! ```
//!
//! Exit codes: 0 after SIGTERM/SIGINT, 1 on a lost Lease or a setup error, 2 on a bad flag.

use std::process::ExitCode;

use clap::Parser;
use controller_common::{
    CommonArgs, Context, ControllerMetrics, ReconcileResult, RunSpec, Runtime,
};

#[derive(Parser)]
#[command(
    name = "leader-demo",
    about = "Leads, ticks once a second, and stops cleanly"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    /// Name of the Lease to contend for.
    #[arg(
        long,
        env = "DEMO_LEASE_NAME",
        default_value = "leader-demo.agent-sandbox.x-k8s.io"
    )]
    lease_name: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let spec = RunSpec::new("leader-demo", cli.lease_name.clone());
    let mut runtime = match Runtime::init(&cli.common, spec).await {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let metrics = ControllerMetrics::register(runtime.registry_mut());
    let ready = runtime.readiness().gate("demo cache");
    let result = runtime
        .run(move |ctx: Context| async move {
            tracing::info!(identity = %ctx.identity, "leading; ticking until told to stop");
            ready.set_ready();
            let mut ticks = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = ctx.shutdown.cancelled() => break,
                    _ = ticks.tick() => {
                        let started = std::time::Instant::now();
                        tracing::debug!("tick");
                        metrics.observe_reconcile("demo", ReconcileResult::Success, started.elapsed());
                    }
                }
            }
            tracing::info!("stopped ticking");
            Ok::<(), std::io::Error>(())
        })
        .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
