//! The controller's work-queue metrics (`workqueue_*`, controller-runtime's names with
//! `name="sandbox"`) follow its reconciles: keys waiting, failures retried, an idle queue empty.

use crate::{cluster, harness};

use cluster::Cluster;
use harness::*;
use serde_json::json;

const LABELS: &str = "{name=\"sandbox\",controller=\"sandbox\"}";

/// The value of one series in a scrape, if present.
fn sample(scrape: &str, family: &str) -> Option<f64> {
    let series = format!("{family}{LABELS} ");
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn work_queue_metrics_count_adds_retries_and_drain_to_zero() {
    let api = Cluster::start().await;
    api.reject(
        "create",
        "pods",
        422,
        "spec.containers[0].image: Required value",
    );
    let ctl = start_controller(&api);
    api.apply("sandboxes", sandbox("bad", json!({}))).await;
    api.apply(
        "sandboxes",
        sandbox("quiet", json!({"operatingMode": "Suspended"})),
    )
    .await;
    wait_for("a failed pass counted as a retry", || {
        let scrape = ctl.scrape();
        (sample(&scrape, "workqueue_retries_total")? >= 1.0).then_some(())
    })
    .await;
    api.clear_faults();
    wait_for("the retried Sandbox gets its Pod", || {
        api.get("pods", NS, "bad")
    })
    .await;

    let scrape = wait_for("an idle, empty queue", || {
        let scrape = ctl.scrape();
        (sample(&scrape, "workqueue_depth")? == 0.0
            && sample(&scrape, "workqueue_unfinished_work_seconds")? == 0.0)
            .then_some(scrape)
    })
    .await;
    let adds = sample(&scrape, "workqueue_adds_total").expect("adds");
    let finished = sample(&scrape, "workqueue_work_duration_seconds_count").expect("work");
    let waited = sample(&scrape, "workqueue_queue_duration_seconds_count").expect("waits");
    assert!(
        adds >= 3.0,
        "two Sandboxes and a retry are at least 3 adds:\n{scrape}"
    );
    assert_eq!(finished, adds, "every add ran once it was idle:\n{scrape}");
    assert!(
        waited >= 2.0 && waited <= adds,
        "each triggered key's wait is observed:\n{scrape}"
    );
    assert_eq!(
        sample(&scrape, "workqueue_longest_running_processor_seconds"),
        Some(0.0)
    );
    ctl.stop().await;
}
