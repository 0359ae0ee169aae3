//! Parses the common flags and prints what they resolve to.
//!
//! `cargo run -p controller-common --example common_flags -- --help`

use clap::Parser;
use controller_common::CommonArgs;

#[derive(Parser)]
#[command(
    name = "common-flags",
    about = "Shows how the shared controller flags resolve"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn main() {
    let cli = Cli::parse();
    let a = &cli.common;
    println!(
        "leader election:   {} (Lease namespace {})",
        a.leader_elect,
        a.leader_election_namespace()
    );
    println!("metrics address:   {}", a.metrics_bind_address);
    println!("probe address:     {}", a.health_probe_bind_address);
    println!(
        "API rate limit:    {:?}",
        controller_common::rate_limit::RateLimit::from_flags(a.kube_api_qps, a.kube_api_burst)
    );
    println!("cluster domain:    {}", a.cluster_domain);
    println!("kubeconfig:        {:?}", a.kubeconfig);
    println!(
        "logs:              {:?} {}",
        a.effective_log_format(),
        a.effective_log_filter()
    );
}
