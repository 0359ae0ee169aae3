//! Footprint: `scale` (memory, idle CPU and restart at many Sandboxes) and `devcluster` (the
//! server alone, the yardstick for every other figure).

use std::time::Duration;

use super::{
    Ctx, bar, counters, cpu_meters, devcluster_throughput, record_cpu, requests_chart, wait_quiet,
};
use crate::bench::cluster::{ControllerKind, Stack};
use crate::bench::error::BenchError;
use crate::bench::proc_stats::rss_mib;
use crate::bench::report::ScenarioReport;
use crate::bench::stats::round;
use crate::bench::workload::{self, Kind, ReadyWatch};

/// `devcluster`: create throughput with one writer and with many (no controllers running).
pub async fn devcluster(
    stack: &Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let single = devcluster_throughput(stack, ctx, 1).await?;
    report.detail("creates_per_second_1_writer", round(single, 1));
    report.detail(
        &format!(
            "creates_per_second_{}_writers",
            ctx.sizes.devcluster_writers
        ),
        report.devcluster_writes_per_second,
    );
    for (name, pid) in stack.server_processes() {
        if let Some(mib) = rss_mib(pid) {
            report.detail(&format!("{name}_rss_mib"), round(mib, 1));
        }
    }
    Ok(())
}

/// `scale`: N bare Sandboxes at rest; RSS, idle CPU, kill and restart each controller.
pub async fn scale(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let n = ctx.sizes.scale_sandboxes;
    let sandboxes = ReadyWatch::start(&stack.client, Kind::Sandbox).await?;
    let before = counters::snapshot(stack).await?;
    let progress = bar("scale", "Sandboxes Ready", n as u64);
    let client = stack.client.clone();
    let started = std::time::Instant::now();
    let outcome = workload::create_bounded(n, 16, move |i| {
        let client = client.clone();
        async move { workload::create_sandbox(&client, &format!("scale-{i}")).await }
    })
    .await;
    if outcome.failed > 0 {
        return Err(BenchError::Unavailable(format!(
            "{} of {n} Sandbox creates failed: {}",
            outcome.failed,
            outcome.first_error.unwrap_or_default()
        )));
    }
    report.detail(
        "sandbox_creates_per_second",
        round(n as f64 / outcome.elapsed.as_secs_f64().max(1e-9), 1),
    );
    sandboxes
        .wait_until(
            &format!("{n} Sandboxes to be Ready"),
            ctx.timeout(120.0 + n as f64 / 20.0),
            &progress,
            |w| w.ever_ready() >= n,
        )
        .await?;
    progress.finish_and_clear();
    report.detail("sandboxes", n);
    report.detail(
        "all_ready_after_s",
        round(started.elapsed().as_secs_f64(), 2),
    );
    wait_quiet(stack, Duration::from_millis(1000), ctx.timeout(120.0)).await?;
    let after = counters::snapshot(stack).await?;
    let delta = counters::delta(&before, &after);
    report.detail(
        "webhook_requests_per_sandbox",
        round(delta.webhook_requests / n as f64, 2),
    );
    report.detail("at_rest_after_s", round(started.elapsed().as_secs_f64(), 2));
    requests_chart(report, ctx.out, "scale", &delta)?;

    // At rest: idle CPU over a window, then RSS.
    let meters = cpu_meters(stack, ctx);
    let idle = bar("scale", "measuring idle CPU", 0);
    tokio::time::sleep(Duration::from_secs_f64(ctx.sizes.scale_idle_seconds)).await;
    idle.finish_and_clear();
    record_cpu(&meters, report);
    for controller in &stack.controllers {
        if let Some(mib) = rss_mib(controller.pid) {
            report
                .rss_mib
                .insert(controller.kind.name().into(), round(mib, 1));
        }
    }
    report.detail("idle_window_s", ctx.sizes.scale_idle_seconds);

    // Kill and restart each controller.
    let mut restart = std::collections::BTreeMap::new();
    for kind in ControllerKind::ALL {
        let spinner = bar("scale", &format!("restarting {}", kind.name()), 0);
        let took = stack.kill_and_restart(kind).await?;
        spinner.finish_and_clear();
        restart.insert(kind.name().to_string(), round(took.as_secs_f64(), 3));
    }
    report.restart_ready_s = Some(restart);
    let mut after_restart = std::collections::BTreeMap::new();
    for controller in &stack.controllers {
        if let Some(mib) = rss_mib(controller.pid) {
            after_restart.insert(controller.kind.name().to_string(), round(mib, 1));
        }
    }
    report.detail("rss_mib_after_restart", after_restart);
    Ok(())
}
