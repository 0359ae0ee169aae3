//! `extensions-controller`: the agent-sandbox extensions controller binary.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = extensions_controller::args::Args::parse();
    extensions_controller::run(args).await?;
    Ok(())
}
