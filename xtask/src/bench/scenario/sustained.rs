//! `sustained`: the reference's `claims-warm-sustained` stress phase. Claims arrive as a Poisson
//! process at a fixed mean rate against one warm pool sized for ten seconds of arrivals; each
//! claim is deleted a few seconds after it is Ready, so Sandboxes and Pods are torn down by the
//! garbage collector while the pool refills. It measures whether the rate is sustained (bound
//! claims per second, latency per 10-second window) and that churn leaks nothing: after the
//! last claim is deleted, only the pool's own members may remain.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};
use rand::{Rng, SeedableRng};

use super::{
    Ctx, bar, claim_figures, claim_samples, counters, load_meters, record_cpu, warm_pools,
};
use crate::bench::cluster::Stack;
use crate::bench::error::BenchError;
use crate::bench::report::ScenarioReport;
use crate::bench::stats::{self, round};
use crate::bench::workload::{self, Kind, NAMESPACE, ReadyWatch, now_s};

/// Claim name prefix.
const PREFIX: &str = "sus-claim-";

/// Width of the latency windows reported in `details.windows` (the reference's harness reports
/// per-10 s windows to show degradation over the run).
const WINDOW_S: f64 = 10.0;

/// The arrival times (seconds from the start) of a Poisson process of mean `rate` per second
/// over `seconds`, from a fixed seed so every run offers the same load.
pub fn poisson_arrivals(rate: f64, seconds: f64, seed: u64) -> Vec<f64> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut arrivals = Vec::new();
    if rate <= 0.0 || seconds <= 0.0 {
        return arrivals;
    }
    let mut t = 0.0;
    loop {
        // Exponential inter-arrival time by inversion; `1 - u` is in (0, 1].
        let u: f64 = rng.random();
        t += -(1.0 - u).ln() / rate;
        if t >= seconds {
            return arrivals;
        }
        arrivals.push(t);
    }
}

/// The pool size the reference's harness uses: ten seconds of arrivals, rounded up.
pub fn pool_size(rate: f64, pool_seconds: f64) -> u32 {
    (rate * pool_seconds).ceil().max(1.0) as u32
}

/// Deletes each claim `delay` after the watch first saw it Ready, until as many deletes were
/// sent as `created` says claims were created (set once creating is over); returns how many
/// deletes were sent and failed.
async fn delete_after_ready(
    watch: Arc<ReadyWatch>,
    client: kube::Client,
    delay: Duration,
    created: Arc<OnceLock<usize>>,
) -> (usize, usize, Option<String>) {
    let api = Kind::Claim.api(&client);
    let mut cursor = 0usize;
    let mut due: VecDeque<(String, f64)> = VecDeque::new();
    let mut deletes = Vec::new();
    loop {
        for (name, ready_at) in watch.ready_since(cursor) {
            cursor += 1;
            if name.starts_with(PREFIX) {
                due.push_back((name, ready_at + delay.as_secs_f64()));
            }
        }
        let now = now_s();
        while due.front().is_some_and(|(_, at)| *at <= now) {
            let Some((name, _)) = due.pop_front() else {
                break;
            };
            let api = api.clone();
            deletes.push(tokio::spawn(async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => Ok(()),
                    // Already gone is what deleting wanted.
                    Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                    Err(e) => Err(format!("deleting claim {name}: {e}")),
                }
            }));
        }
        let all_handed_over = created.get().is_some_and(|n| deletes.len() >= *n);
        if all_handed_over && due.is_empty() {
            break;
        }
        let sleep = due
            .front()
            .map(|(_, at)| (at - now).clamp(0.001, 0.02))
            .unwrap_or(0.01);
        tokio::time::sleep(Duration::from_secs_f64(sleep)).await;
    }
    let (mut sent, mut failed, mut first_error) = (0, 0, None);
    for task in deletes {
        sent += 1;
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                failed += 1;
                first_error.get_or_insert(e);
            }
            Err(e) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    (sent, failed, first_error)
}

/// Aborts the task when dropped, so a failed run leaves no deleter behind.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How many Sandboxes and Pods exist in the benchmark's namespace.
async fn object_counts(client: &kube::Client) -> Result<(usize, usize), BenchError> {
    let sandboxes = Kind::Sandbox
        .api(client)
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| BenchError::kube("listing Sandboxes", e))?
        .items
        .len();
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| BenchError::kube("listing Pods", e))?
        .items
        .len();
    Ok((sandboxes, pods))
}

/// `sustained`: Poisson arrivals at `sustained_rate` for `sustained_seconds` against one pool
/// of `rate × sustained_pool_seconds`, each claim deleted `sustained_delete_after_s` after
/// Ready; then every claim gone and the pool back to exactly its members.
pub async fn sustained(
    stack: &mut Stack,
    ctx: &Ctx<'_>,
    report: &mut ScenarioReport,
) -> Result<(), BenchError> {
    let sizes = ctx.sizes;
    let rate = sizes.sustained_rate;
    let replicas = pool_size(rate, sizes.sustained_pool_seconds);
    let pool = warm_pools(stack, ctx, "sustained", "sustained", 1, replicas)
        .await?
        .remove(0);
    let arrivals = poisson_arrivals(rate, sizes.sustained_seconds, 0x5eed);
    let n = arrivals.len();
    let watch = Arc::new(ReadyWatch::start(&stack.client, Kind::Claim).await?);
    let before = counters::snapshot(stack).await?;
    let meters = load_meters(stack, ctx);
    let load_start = now_s();
    let start = Instant::now();
    let progress = bar("sustained", "claims Ready", n as u64);

    let created_count = Arc::new(OnceLock::new());
    let mut deleter = AbortOnDrop(tokio::spawn(delete_after_ready(
        watch.clone(),
        stack.client.clone(),
        Duration::from_secs_f64(sizes.sustained_delete_after_s),
        created_count.clone(),
    )));
    let mut creates = Vec::with_capacity(n);
    for (i, at) in arrivals.iter().enumerate() {
        tokio::time::sleep_until((start + Duration::from_secs_f64(*at)).into()).await;
        progress.set_position(watch.ever_ready() as u64);
        let name = format!("{PREFIX}{i}");
        watch.mark_created(&name, now_s());
        let (client, pool) = (stack.client.clone(), pool.clone());
        creates.push(tokio::spawn(async move {
            workload::create_claim(&client, &name, &pool).await
        }));
    }
    let load_end = now_s();
    let outcome = workload::collect(creates, start).await;
    record_cpu(&meters, report);
    super::claims::check_creates(&outcome, "claim")?;
    let created = outcome.created;
    let _ = created_count.set(created);
    let ready = watch
        .wait_until(
            &format!("the {created} sustained claims to be Ready"),
            ctx.timeout(120.0),
            &progress,
            |w| w.ever_ready() >= created,
        )
        .await;
    progress.finish_and_clear();
    if let Err(error) = ready {
        return Err(BenchError::Unavailable(format!(
            "{error}: {} of {created} were Ready ({} of them within the {:.0} s load window); the system did not keep up with {rate}/s",
            watch.ever_ready(),
            claim_samples(&watch, PREFIX, load_start)
                .ready_at
                .iter()
                .filter(|t| **t <= load_end - load_start)
                .count(),
            load_end - load_start,
        )));
    }
    let (deletes_sent, deletes_failed, delete_error) = (&mut deleter.0)
        .await
        .map_err(|e| BenchError::Unavailable(format!("the claim deleter stopped: {e}")))?;
    if deletes_failed > 0 {
        return Err(BenchError::Unavailable(format!(
            "{deletes_failed} of {deletes_sent} claim deletes failed; first error: {}",
            delete_error.unwrap_or_default()
        )));
    }

    // Churn must leak nothing: once every claim is gone, exactly the pool's members remain.
    // The deletions are asynchronous garbage collection (kube-controller-manager's, on the real
    // control plane, at its default 20 requests/s: a few Sandboxes and Pods a second), so a
    // drain that still makes progress is waited for; one that stalls for the deadline fails.
    let drain_start = Instant::now();
    let drain_timeout = ctx.timeout(120.0);
    let mut progress_at = Instant::now();
    let mut last_counts = None;
    let drained = bar("sustained", "claims deleted, waiting for the pool alone", 0);
    let (sandboxes, pods) = loop {
        let claims_left = Kind::Claim
            .api(&stack.client)
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| BenchError::kube("listing SandboxClaims", e))?
            .items
            .len();
        let (sandboxes, pods) = object_counts(&stack.client).await?;
        let ready_members = workload::pool_ready_replicas(&stack.client, &pool).await?;
        drained.set_message(format!(
            "{claims_left} claims, {sandboxes} Sandboxes, {pods} Pods, {ready_members}/{replicas} members Ready"
        ));
        if claims_left == 0
            && sandboxes == replicas as usize
            && pods == replicas as usize
            && ready_members == i64::from(replicas)
        {
            break (sandboxes, pods);
        }
        let counts = (claims_left, sandboxes, pods, ready_members);
        if last_counts != Some(counts) {
            last_counts = Some(counts);
            progress_at = Instant::now();
        }
        if progress_at.elapsed() > drain_timeout {
            drained.abandon();
            return Err(BenchError::Unavailable(format!(
                "after all {created} claims were deleted, {claims_left} claims, {sandboxes} Sandboxes and {pods} Pods remain and {ready_members} of {replicas} pool members are Ready (expected 0 claims and exactly {replicas} Sandboxes, Pods and Ready members); nothing changed for {} s ({:.0} s after the last delete)",
                drain_timeout.as_secs(),
                drain_start.elapsed().as_secs_f64()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    drained.finish_and_clear();
    let after = counters::snapshot(stack).await?;
    let delta = counters::delta(&before, &after);
    super::claims::record_writes(report, &delta, created);

    let samples = claim_samples(&watch, PREFIX, load_start);
    let window_s = load_end - load_start;
    let bound_in_window = samples.ready_at.iter().filter(|t| **t <= window_s).count();
    report.claims = Some(created);
    report.claims_per_second = Some(round(bound_in_window as f64 / window_s.max(1e-9), 1));
    report.detail("offered_rate_per_second", rate);
    report.detail("arrivals", n);
    report.detail("window_s", round(window_s, 2));
    report.detail("claims_bound_in_window", bound_in_window);
    report.detail("pool_replicas", replicas);
    report.detail("delete_after_ready_s", sizes.sustained_delete_after_s);
    report.detail("claims_deleted", deletes_sent);
    report.detail(
        "drained_to_pool_s",
        round(drain_start.elapsed().as_secs_f64(), 2),
    );
    report.detail(
        "after_drain",
        serde_json::json!({"sandboxes": sandboxes, "pods": pods, "pool_replicas": replicas}),
    );
    report.detail(
        "cpu_ms_per_bound_claim",
        super::claims::cpu_ms_per_claim(report),
    );
    let windows: Vec<serde_json::Value> = stats::windowed(&samples.client, WINDOW_S)
        .into_iter()
        .map(|w| {
            let p = w.percentiles;
            serde_json::json!({"start_s": w.start_s, "claims": p.count,
                "p50_ms": round(p.p50_ms, 2), "p90_ms": round(p.p90_ms, 2),
                "p99_ms": round(p.p99_ms, 2)})
        })
        .collect();
    report.detail("client_latency_windows", windows);
    claim_figures(report, ctx.out, "sustained", &samples)?;
    super::requests_chart(report, ctx.out, "sustained", &delta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_have_the_mean_rate_and_are_reproducible() {
        let arrivals = poisson_arrivals(300.0, 60.0, 7);
        // 18,000 expected; a Poisson count has a standard deviation of about 134.
        assert!(
            (17_400..=18_600).contains(&arrivals.len()),
            "{}",
            arrivals.len()
        );
        assert!(arrivals.windows(2).all(|w| w[0] < w[1]), "increasing");
        assert!(arrivals.iter().all(|t| (0.0..60.0).contains(t)));
        assert_eq!(
            arrivals,
            poisson_arrivals(300.0, 60.0, 7),
            "same seed, same load"
        );
        assert_ne!(arrivals, poisson_arrivals(300.0, 60.0, 8));
        // Exponential gaps: about 63 % of them shorter than the mean gap (1 - 1/e).
        let mean_gap = 1.0 / 300.0;
        let short = arrivals
            .windows(2)
            .filter(|w| w[1] - w[0] < mean_gap)
            .count() as f64
            / (arrivals.len() - 1) as f64;
        assert!((0.60..0.66).contains(&short), "{short}");
    }

    #[test]
    fn no_rate_no_arrivals() {
        assert!(poisson_arrivals(0.0, 60.0, 1).is_empty());
        assert!(poisson_arrivals(10.0, 0.0, 1).is_empty());
    }

    #[test]
    fn the_pool_holds_ten_seconds_of_arrivals() {
        assert_eq!(pool_size(300.0, 10.0), 3000);
        assert_eq!(pool_size(2.5, 10.0), 25);
        assert_eq!(pool_size(0.01, 10.0), 1);
    }
}
