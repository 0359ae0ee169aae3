//! `sandbox-controller`: the core agent-sandbox controller binary.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = sandbox_controller::args::Args::parse();
    sandbox_controller::run(args).await?;
    Ok(())
}
