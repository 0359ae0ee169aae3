//! Claim latency and throughput: `gate`, `saturate`, `cold`.

use std::sync::Arc;
use std::time::Duration;

use super::{
    Ctx, bar, claim_figures, claim_samples, counters, load_meters, record_cpu,
    reference_gate_metric, requests_chart, warm_pools,
};
use crate::bench::cluster::Stack;
use crate::bench::error::BenchError;
use crate::bench::report::ScenarioReport;
use crate::bench::stats::round;
use crate::bench::workload::{self, Kind, ReadyWatch, now_s};

/// Fails with a clear message when creates failed.
pub(super) fn check_creates(
    outcome: &workload::CreateOutcome,
    what: &str,
) -> Result<(), BenchError> {
    if outcome.failed > 0 {
        return Err(BenchError::Unavailable(format!(
            "{} of {} {what} creates failed; first error: {}",
            outcome.failed,
            outcome.failed + outcome.created,
            outcome.first_error.as_deref().unwrap_or("unknown")
        )));
    }
    Ok(())
}

/// Sets `writes_per_claim` and `requests` from a phase's delta.
pub(super) fn record_writes(
    report: &mut ScenarioReport,
    delta: &counters::RequestDelta,
    claims: usize,
) {
    let per = delta.per(claims);
    let mut writes = per.writes_by_controller.clone();
    writes.insert("total".into(), per.writes_total);
    report.writes_per_claim = Some(writes);
    report.requests = Some(per);
}

/// An open-loop claim run: one pool of `pool_replicas`, `claims` claims created at `rate`
/// per second, until every one is Ready; then the latency, throughput and write figures.
struct OpenLoop<'a> {
    /// Scenario name: pool and template name, chart file prefix, progress label.
    name: &'a str,
    pool_replicas: u32,
    claims: usize,
    rate: f64,
}

async fn open_loop(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
    run: OpenLoop<'_>,
) -> Result<(), BenchError> {
    let OpenLoop {
        name,
        pool_replicas,
        claims: n,
        rate,
    } = run;
    let pools = warm_pools(stack, ctx, name, name, 1, pool_replicas).await?;
    let pool = pools[0].clone();
    let watch = ReadyWatch::start(&stack.client, Kind::Claim).await?;
    let before = counters::snapshot(stack).await?;
    let meters = load_meters(stack, ctx);
    let load_start = now_s();
    let progress = bar(name, "claims Ready", n as u64);
    let client = stack.client.clone();
    let prefix = format!("{name}-claim-");
    let outcome = workload::create_open_loop(&watch, &prefix, n, Some(rate), move |claim| {
        let (client, pool) = (client.clone(), pool.clone());
        async move { workload::create_claim(&client, &claim, &pool).await }
    })
    .await;
    check_creates(&outcome, "claim")?;
    watch
        .wait_until(
            &format!("{n} {name} claims to be Ready"),
            ctx.timeout(60.0 + n as f64 / rate),
            &progress,
            |w| w.ever_ready() >= n,
        )
        .await?;
    progress.finish_and_clear();
    record_cpu(&meters, report);
    let after = counters::snapshot(stack).await?;
    let delta = counters::delta(&before, &after);
    record_writes(report, &delta, n);
    reference_gate_metric(report, &after);
    let samples = claim_samples(&watch, &prefix, load_start);
    let span = samples.ready_at.iter().copied().fold(0.0, f64::max);
    report.claims = Some(n);
    report.claims_per_second = (span > 0.0).then(|| round(n as f64 / span, 1));
    report.detail("offered_rate_per_second", rate);
    claim_figures(report, ctx.out, name, &samples)?;
    requests_chart(report, ctx.out, name, &delta)
}

/// `gate`: the reference's CI gate (pool 1050, 750 claims at 75/s).
pub async fn gate(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    report.detail("pool_replicas", sizes.gate_pool);
    let run = OpenLoop {
        name: "gate",
        pool_replicas: sizes.gate_pool,
        claims: sizes.gate_claims,
        rate: sizes.gate_rate,
    };
    open_loop(stack, ctx, report, run).await
}

/// `saturate`: pre-warmed pools, claims as fast as they are taken.
pub async fn saturate(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    let pools = Arc::new(
        warm_pools(
            stack,
            ctx,
            "saturate",
            "saturate",
            sizes.saturate_pools,
            sizes.saturate_pool_size,
        )
        .await?,
    );
    let watch = Arc::new(ReadyWatch::start(&stack.client, Kind::Claim).await?);
    let before = counters::snapshot(stack).await?;
    let meters = load_meters(stack, ctx);
    let load_start = now_s();
    let window = Duration::from_secs_f64(sizes.saturate_seconds);
    let progress = bar("saturate", "claims Ready (closed loop)", 0);
    let client = stack.client.clone();
    let ticker = {
        let (watch, progress) = (watch.clone(), progress.clone());
        tokio::spawn(async move {
            loop {
                progress.set_message(format!("{} claims Ready", watch.ever_ready()));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let outcome = workload::create_closed_loop(
        watch.clone(),
        "sat-claim-",
        sizes.saturate_writers,
        window,
        sizes.saturate_max_pending,
        move |name| {
            let (client, pools) = (client.clone(), pools.clone());
            async move {
                let index: usize = name
                    .rsplit('-')
                    .next()
                    .and_then(|i| i.parse().ok())
                    .unwrap_or(0);
                let pool = &pools[index % pools.len()];
                workload::create_claim(&client, &name, pool).await
            }
        },
    )
    .await;
    let window_end = now_s();
    record_cpu(&meters, report);
    check_creates(&outcome, "claim")?;
    let created = outcome.created;
    let result = watch
        .wait_until(
            &format!("the {created} saturate claims to be Ready"),
            ctx.timeout(120.0),
            &progress,
            |w| w.ever_ready() >= created,
        )
        .await;
    ticker.abort();
    progress.finish_and_clear();
    result?;
    let after = counters::snapshot(stack).await?;
    let delta = counters::delta(&before, &after);
    record_writes(report, &delta, created);
    reference_gate_metric(report, &after);
    let samples = claim_samples(&watch, "sat-claim-", load_start);
    let window_s = window_end - load_start;
    let bound_in_window = samples.ready_at.iter().filter(|t| **t <= window_s).count();
    report.claims = Some(created);
    report.claims_per_second = Some(round(bound_in_window as f64 / window_s.max(1e-9), 1));
    report.detail("window_s", round(window_s, 2));
    report.detail("claims_bound_in_window", bound_in_window);
    report.detail("cpu_ms_per_bound_claim", cpu_ms_per_claim(report));
    report.detail("pools", sizes.saturate_pools);
    report.detail("pool_replicas_each", sizes.saturate_pool_size);
    report.detail("writers", sizes.saturate_writers);
    report.detail("max_pending", sizes.saturate_max_pending);
    claim_figures(report, ctx.out, "saturate", &samples)?;
    requests_chart(report, ctx.out, "saturate", &delta)
}

/// `cold`: claims against a `replicas: 0` pool.
pub async fn cold(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    report.detail(
        "pod_startup_delay",
        ctx.devcluster.pod_startup_delay.clone(),
    );
    let run = OpenLoop {
        name: "cold",
        pool_replicas: 0,
        claims: sizes.cold_claims,
        rate: sizes.cold_rate,
    };
    open_loop(stack, ctx, report, run).await
}

/// CPU milliseconds each process (and all of them) spent per claim bound in the window: the
/// cores each used over the window divided by the claims bound per second in it.
pub(super) fn cpu_ms_per_claim(report: &ScenarioReport) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Some(rate) = report.claims_per_second.filter(|r| *r > 0.0) else {
        return out;
    };
    let others = report
        .details
        .get("cpu_cores_other")
        .and_then(|v| v.as_object())
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| v.as_f64().map(|v| (k.clone(), v)));
    let all: Vec<(String, f64)> = report
        .cpu_cores
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .chain(others)
        .collect();
    let total: f64 = all.iter().map(|(_, cores)| cores).sum();
    for (name, cores) in all {
        out.insert(name, round(cores * 1000.0 / rate, 2));
    }
    out.insert("total".into(), round(total * 1000.0 / rate, 2));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::proc_stats::Machine;

    #[test]
    fn cpu_per_claim_divides_each_process_cores_by_the_bound_rate() {
        let mut report = ScenarioReport::new("saturate", Machine::detect());
        report.claims_per_second = Some(200.0);
        report.cpu_cores.insert("extensions-controller".into(), 0.3);
        report.detail(
            "cpu_cores_other",
            serde_json::json!({"devcluster": 0.9, "bench-client": 0.1}),
        );
        let per_claim = cpu_ms_per_claim(&report);
        assert_eq!(per_claim["extensions-controller"], 1.5);
        assert_eq!(per_claim["devcluster"], 4.5);
        assert_eq!(per_claim["bench-client"], 0.5);
        assert_eq!(per_claim["total"], 6.5);
    }

    #[test]
    fn no_rate_no_figures() {
        let report = ScenarioReport::new("saturate", Machine::detect());
        assert!(cpu_ms_per_claim(&report).is_empty());
    }
}
