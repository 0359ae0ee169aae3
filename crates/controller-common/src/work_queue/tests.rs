use std::time::Duration;

use prometheus_client::encoding::text::encode;

use super::*;

fn queue() -> (Registry, WorkQueueMetrics, WorkQueue) {
    let mut registry = Registry::default();
    let metrics = WorkQueueMetrics::register(&mut registry);
    let queue = metrics.queue("sandbox");
    (registry, metrics, queue)
}

fn scrape(registry: &Registry) -> String {
    let mut out = String::new();
    encode(&mut out, registry).expect("encodes");
    out
}

fn sample(out: &str, series: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {series} in:\n{out}"))
        .parse()
        .expect("a number")
}

const LABELS: &str = "{name=\"sandbox\",controller=\"sandbox\"}";

/// The value of `family`'s series of the `sandbox` queue.
fn value(out: &str, family: &str) -> f64 {
    sample(out, &format!("{family}{LABELS}"))
}

#[test]
fn a_key_added_while_waiting_counts_once_and_leaves_the_depth_when_it_starts() {
    let (registry, _, q) = queue();
    q.add(Some("ns"), "a");
    q.add(Some("ns"), "a");
    q.add(Some("ns"), "b");
    q.add(Some("other"), "a");
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_depth"), 3.0);
    assert_eq!(value(&out, "workqueue_adds_total"), 3.0);

    let running = q.start(Some("ns"), "a");
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_depth"), 2.0);
    assert_eq!(value(&out, "workqueue_queue_duration_seconds_count"), 1.0);
    assert_eq!(value(&out, "workqueue_work_duration_seconds_count"), 0.0);
    drop(running);
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_work_duration_seconds_count"), 1.0);
    assert_eq!(value(&out, "workqueue_retries_total"), 0.0);
}

#[test]
fn a_key_added_while_running_waits_for_its_next_start() {
    let (registry, _, q) = queue();
    q.add(None, "a");
    let running = q.start(None, "a");
    q.add(None, "a");
    assert_eq!(q.gauges(Instant::now()).depth, 1);
    drop(running);
    assert_eq!(
        q.gauges(Instant::now()).depth,
        1,
        "still waiting after the first run"
    );
    let again = q.start(None, "a");
    assert_eq!(q.gauges(Instant::now()).depth, 0);
    drop(again);
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_adds_total"), 2.0);
}

#[test]
fn a_requeue_kube_runtime_scheduled_counts_as_an_add_when_it_starts() {
    let (registry, _, q) = queue();
    let mut first = q.start(None, "a");
    first.will_retry();
    drop(first);
    drop(q.start(None, "a"));
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_adds_total"), 2.0);
    assert_eq!(value(&out, "workqueue_retries_total"), 1.0);
    assert_eq!(
        value(&out, "workqueue_queue_duration_seconds_count"),
        0.0,
        "no wait is known for a requeue"
    );
    assert_eq!(value(&out, "workqueue_depth"), 0.0);
}

#[test]
fn a_forgotten_key_leaves_the_depth() {
    let (_, _, q) = queue();
    q.add(Some("ns"), "gone");
    q.add(Some("ns"), "kept");
    q.forget(Some("ns"), "gone");
    assert_eq!(q.gauges(Instant::now()).depth, 1);
}

#[test]
fn running_reconciles_show_in_the_unfinished_and_longest_gauges() {
    let (_, _, q) = queue();
    let t0 = Instant::now();
    let _a = q.start_key("a".into(), t0);
    let _b = q.start_key("b".into(), t0 + Duration::from_secs(2));
    let g = q.gauges(t0 + Duration::from_secs(5));
    assert_eq!(g.longest_running_processor_seconds, 5.0);
    assert_eq!(g.unfinished_work_seconds, 8.0);
    drop(_a);
    let g = q.gauges(t0 + Duration::from_secs(5));
    assert_eq!(g.longest_running_processor_seconds, 3.0);
}

#[test]
fn the_queue_duration_is_the_time_from_the_first_add_to_the_start() {
    let (registry, _, q) = queue();
    let t0 = Instant::now();
    q.add_key("a".into(), t0);
    q.add_key("a".into(), t0 + Duration::from_millis(900));
    let _running = q.start_key("a".into(), t0 + Duration::from_millis(20));
    let out = scrape(&registry);
    // 20 ms falls in the 0.1 s bucket and not the 0.01 s one.
    assert_eq!(
        sample(
            &out,
            "workqueue_queue_duration_seconds_bucket{le=\"0.01\",name=\"sandbox\",controller=\"sandbox\"}"
        ),
        0.0
    );
    assert_eq!(
        sample(
            &out,
            "workqueue_queue_duration_seconds_bucket{le=\"0.1\",name=\"sandbox\",controller=\"sandbox\"}"
        ),
        1.0
    );
}

#[test]
fn each_controller_has_its_own_series_and_asking_again_gives_the_same_queue() {
    let (registry, metrics, q) = queue();
    let claims = metrics.queue("sandboxclaim");
    claims.add(Some("ns"), "c");
    q.add(Some("ns"), "s");
    metrics.queue("sandboxclaim").add(Some("ns"), "c2");
    let out = scrape(&registry);
    assert_eq!(value(&out, "workqueue_depth"), 1.0);
    assert_eq!(
        sample(
            &out,
            "workqueue_depth{name=\"sandboxclaim\",controller=\"sandboxclaim\"}"
        ),
        2.0
    );
}

/// A trigger stream holding an event its loop has not taken (the loop stopped polling it, as
/// kube's shared reflector made it) is a stall once the event has waited the threshold.
#[tokio::test(start_paused = true)]
async fn an_event_its_controller_does_not_take_is_a_stall_after_the_threshold() {
    use futures::channel::mpsc;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher;

    let (_, _, q) = queue();
    let threshold = Duration::from_secs(60);
    let (tx, rx) = mpsc::unbounded::<Result<watcher::Event<ConfigMap>, watcher::Error>>();
    let (_store, driver, mut subs) = crate::runner::shared_watch::shared_watch(rx, 1);
    tokio::spawn(driver);
    let triggers = subs.remove(0);
    q.watch_triggers(triggers.backlog());
    tx.unbounded_send(Ok(watcher::Event::Init)).unwrap();
    tx.unbounded_send(Ok(watcher::Event::InitDone)).unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(
        q.stall(tokio::time::Instant::now(), threshold),
        None,
        "an idle watch is healthy"
    );
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("a".into());
    tx.unbounded_send(Ok(watcher::Event::Apply(cm))).unwrap();
    tokio::time::sleep(Duration::from_secs(59)).await;
    assert_eq!(q.stall(tokio::time::Instant::now(), threshold), None);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stall = q
        .stall(tokio::time::Instant::now(), threshold)
        .expect("a stall");
    assert_eq!(
        stall,
        "sandbox: a watch event has waited 61s for the controller to take it"
    );
    assert_eq!(
        q.stall(tokio::time::Instant::now(), Duration::ZERO),
        None,
        "0 disables"
    );
    drop(triggers);
}
