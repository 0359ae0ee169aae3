//! Pool behaviour and write amplification: `refill`, `writes`.

use std::time::{Duration, Instant};

use super::{
    Ctx, bar, claim_samples, counters, cpu_meters, record_cpu, requests_chart, wait_quiet,
    warm_pools,
};
use crate::bench::cluster::Stack;
use crate::bench::error::BenchError;
use crate::bench::report::ScenarioReport;
use crate::bench::stats::{self, round};
use crate::bench::workload::{self, Kind, ReadyWatch, now_s};

/// Waits until `done()` holds, at most `timeout`; returns the time it took.
async fn time_until(
    what: &str,
    timeout: Duration,
    mut done: impl FnMut() -> bool,
) -> Result<Duration, BenchError> {
    let start = Instant::now();
    loop {
        if done() {
            return Ok(start.elapsed());
        }
        if start.elapsed() > timeout {
            return Err(BenchError::Timeout {
                what: what.into(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `refill`: scale a pool 0 → N, then drain it with a burst while it refills.
pub async fn refill(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    let replicas = sizes.refill_replicas as usize;
    let pools = warm_pools(stack, ctx, "refill", "refill", 1, 0).await?;
    let pool = pools[0].clone();
    let sandboxes = ReadyWatch::start(&stack.client, Kind::Sandbox).await?;
    let meters = cpu_meters(stack, ctx);

    // Phase 1: 0 → N.
    let progress = bar("refill", "pool members Ready", replicas as u64);
    workload::scale_pool(&stack.client, &pool, sizes.refill_replicas).await?;
    let fill = time_until(
        &format!("{replicas} pool members to be Ready"),
        ctx.timeout(60.0 + replicas as f64 / 10.0),
        || {
            progress.set_position(sandboxes.ready_members() as u64);
            sandboxes.ready_members() >= replicas
        },
    )
    .await?;
    progress.finish_and_clear();
    let (_, max_members_fill) = sandboxes.pool_members();
    report.detail("fill_replicas", replicas);
    report.detail("fill_to_all_ready_s", round(fill.as_secs_f64(), 3));
    report.detail("fill_overshoot", max_members_fill.saturating_sub(replicas));

    // Phase 2: a burst drains it while it refills.
    sandboxes.reset_max_pool_members();
    let claims = ReadyWatch::start(&stack.client, Kind::Claim).await?;
    let burst = sizes.refill_burst;
    let load_start = now_s();
    let client = stack.client.clone();
    let progress = bar("refill", "burst claims Ready", burst as u64);
    let outcome = workload::create_open_loop(&claims, "refill-claim-", burst, None, move |name| {
        let (client, pool) = (client.clone(), pool.clone());
        async move { workload::create_claim(&client, &name, &pool).await }
    })
    .await;
    if outcome.failed > 0 {
        return Err(BenchError::Unavailable(format!(
            "{} burst claim creates failed: {}",
            outcome.failed,
            outcome.first_error.unwrap_or_default()
        )));
    }
    claims
        .wait_until(
            &format!("{burst} burst claims to be Ready"),
            ctx.timeout(60.0 + burst as f64 / 10.0),
            &progress,
            |w| w.ever_ready() >= burst,
        )
        .await?;
    progress.finish_and_clear();
    let claims_ready_s = now_s() - load_start;
    let back = time_until(
        &format!("the pool to be back at {replicas} Ready members"),
        ctx.timeout(60.0 + replicas as f64 / 10.0),
        || sandboxes.ready_members() >= replicas,
    )
    .await?;
    // Overshoot shows up as extra members after the refill; give the controller a moment of
    // quiet to settle before reading the maximum.
    wait_quiet(stack, Duration::from_millis(500), ctx.timeout(30.0)).await?;
    record_cpu(&meters, report);
    let (members_now, max_members) = sandboxes.pool_members();
    let samples = claim_samples(&claims, "refill-claim-", load_start);
    let controller: Vec<f64> = samples.controller.iter().map(|s| s.1).collect();
    report.set_latency(super::CONTROLLER_BASIS, stats::percentiles(&controller));
    report.claims = Some(burst);
    report.claims_per_second =
        (claims_ready_s > 0.0).then(|| round(burst as f64 / claims_ready_s, 1));
    report.detail("burst_claims", burst);
    report.detail("burst_claims_warm", samples.warm);
    report.detail("burst_all_claims_ready_s", round(claims_ready_s, 3));
    report.detail(
        "refill_back_to_all_ready_s",
        round(back.as_secs_f64() + claims_ready_s, 3),
    );
    report.detail("burst_overshoot", max_members.saturating_sub(replicas));
    report.detail("pool_members_after", members_now);
    Ok(())
}

/// `writes`: API requests per warm claim, end to end, after the system is quiet again.
pub async fn writes(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    let replicas = sizes.writes_pool as usize;
    let n = sizes.writes_claims;
    let pools = warm_pools(stack, ctx, "writes", "writes", 1, sizes.writes_pool).await?;
    let pool = pools[0].clone();
    let sandboxes = ReadyWatch::start(&stack.client, Kind::Sandbox).await?;
    let claims = ReadyWatch::start(&stack.client, Kind::Claim).await?;
    let before = counters::snapshot(stack).await?;
    let meters = cpu_meters(stack, ctx);
    let load_start = now_s();
    let client = stack.client.clone();
    let progress = bar("writes", "claims Ready", n as u64);
    let outcome =
        workload::create_open_loop(&claims, "writes-claim-", n, Some(10.0), move |name| {
            let (client, pool) = (client.clone(), pool.clone());
            async move { workload::create_claim(&client, &name, &pool).await }
        })
        .await;
    if outcome.failed > 0 {
        return Err(BenchError::Unavailable(format!(
            "{} claim creates failed: {}",
            outcome.failed,
            outcome.first_error.unwrap_or_default()
        )));
    }
    claims
        .wait_until(
            &format!("{n} claims to be Ready"),
            ctx.timeout(60.0 + n as f64),
            &progress,
            |w| w.ever_ready() >= n,
        )
        .await?;
    progress.finish_and_clear();
    time_until(
        &format!("the pool to be back at {replicas} Ready members"),
        ctx.timeout(60.0 + replicas as f64),
        || sandboxes.ready_members() >= replicas,
    )
    .await?;
    wait_quiet(stack, Duration::from_millis(1000), ctx.timeout(60.0)).await?;
    record_cpu(&meters, report);
    let after = counters::snapshot(stack).await?;
    let delta = counters::delta(&before, &after);
    let per = delta.per(n);
    let mut writes = per.writes_by_controller.clone();
    writes.insert("total".into(), per.writes_total);
    report.writes_per_claim = Some(writes);
    report.requests = Some(per);
    let samples = claim_samples(&claims, "writes-claim-", load_start);
    report.claims = Some(n);
    report.detail("claims_warm", samples.warm);
    report.detail("pool_replicas", replicas);
    report.detail(
        "note",
        "writes_per_claim.total counts every write devcluster answered for a controller \
         (claim, Sandbox, Pod, Service, Event, status) until the pool was refilled and quiet; \
         per-controller figures come from each process' rest_client_requests_total",
    );
    requests_chart(report, ctx.out, "writes", &delta)
}
