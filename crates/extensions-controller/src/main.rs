//! `extensions-controller`: the agent-sandbox extensions controller binary.

use clap::Parser;

/// Every watch event and response is decoded into fresh objects and dropped soon after, and
/// every claim pass is a task of its own: under `cargo xtask bench --scenario saturate` glibc's
/// malloc and free (with `malloc_consolidate` for the large task futures) took about 29 % of
/// this process' CPU. mimalloc spends less on them, at the price of a somewhat larger resident
/// set.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = extensions_controller::args::Args::parse();
    extensions_controller::run(args).await?;
    Ok(())
}
