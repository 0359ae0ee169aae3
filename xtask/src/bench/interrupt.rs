//! Ctrl-C (SIGINT) and SIGTERM end a benchmark or chaos run cleanly.
//!
//! Without this, a signal did not stop `cargo xtask chaos`: the run went on (a kill storm even
//! replaced the controllers the signal had stopped), and the processes it had started outlived
//! it. Here the run's future is raced against the signals; when one arrives the future is
//! dropped, which kills the child processes it started (they are spawned with `kill_on_drop`)
//! and stops the real control plane (`RealCluster`'s `Drop`: every component, then its data
//! directory), and the command ends with an error naming the signal.

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

use super::error::BenchError;

/// Runs `run` to its end, or until SIGINT or SIGTERM arrives (then `run` is dropped).
pub async fn until_signalled<T>(
    run: impl Future<Output = Result<T, BenchError>>,
) -> Result<T, BenchError> {
    let listen = |kind: SignalKind, name: &str| {
        signal(kind).map_err(|source| BenchError::Process {
            what: format!("listening for {name}"),
            source,
        })
    };
    let mut interrupt = listen(SignalKind::interrupt(), "SIGINT")?;
    let mut terminate = listen(SignalKind::terminate(), "SIGTERM")?;
    tokio::select! {
        result = run => result,
        _ = interrupt.recv() => Err(BenchError::Interrupted("SIGINT")),
        _ = terminate.recv() => Err(BenchError::Interrupted("SIGTERM")),
    }
}
