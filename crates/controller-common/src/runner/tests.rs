use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::channel::mpsc;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use prometheus_client::registry::Registry;

use super::*;
use crate::work_queue::{WorkQueue, WorkQueueMetrics};

const DEADLINE: Duration = Duration::from_secs(20);

fn config_map(name: &str, value: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some("ns".into());
    cm.data = Some(BTreeMap::from([("v".to_owned(), value.to_owned())]));
    cm
}

fn put(writer: &mut Writer<ConfigMap>, cm: ConfigMap) {
    writer.apply_watcher_event(&watcher::Event::Apply(cm));
}

fn key(name: &str) -> ObjectRef<ConfigMap> {
    ObjectRef::new(name).within("ns")
}

fn value_of(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("v"))
        .cloned()
        .unwrap_or_default()
}

/// What the passes saw, in order, and how many ran at once.
#[derive(Default)]
struct Log {
    passes: Mutex<Vec<(String, String)>>,
    running: Mutex<(usize, usize)>,
    /// Names running right now (a key must never run twice at once).
    active: Mutex<HashSet<String>>,
    overlaps: Mutex<usize>,
}

impl Log {
    fn passes(&self) -> Vec<(String, String)> {
        self.passes.lock().unwrap().clone()
    }

    fn count(&self, name: &str) -> usize {
        self.passes().iter().filter(|(n, _)| n == name).count()
    }

    fn most_at_once(&self) -> usize {
        self.running.lock().unwrap().1
    }
}

/// What one pass of a key does beyond logging itself.
#[derive(Clone, Copy, Default)]
struct Behaviour {
    /// Trigger the key again while the pass runs (a key that is always due).
    retrigger: bool,
    /// Fail (the error policy then asks for a retry after 30 ms), this many times.
    fail_first: usize,
    /// Ask for another pass after this long.
    requeue: Option<Duration>,
}

struct Harness {
    registry: Registry,
    queue: WorkQueue,
    writer: Writer<ConfigMap>,
    triggers: mpsc::UnboundedSender<ObjectRef<ConfigMap>>,
    log: Arc<Log>,
    behaviour: Arc<Mutex<HashMap<String, Behaviour>>>,
    shutdown: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

impl Harness {
    fn trigger(&self, name: &str) {
        self.triggers.unbounded_send(key(name)).unwrap();
    }

    fn behave(&self, name: &str, behaviour: Behaviour) {
        self.behaviour
            .lock()
            .unwrap()
            .insert(name.to_owned(), behaviour);
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(DEADLINE, self.done)
            .await
            .expect("the runner stops")
            .unwrap();
    }
}

/// Marks the store listed (the runner starts nothing before).
fn listed(writer: &mut Writer<ConfigMap>) {
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

/// A runner over a hand-fed store with `workers` workers; every pass takes `pass_time`.
fn start(workers: u16, pass_time: Duration, list: bool) -> Harness {
    let (store, mut writer) = reflector::store::<ConfigMap>();
    if list {
        listed(&mut writer);
    }
    let (triggers, trigger_rx) = mpsc::unbounded::<ObjectRef<ConfigMap>>();
    let log = Arc::new(Log::default());
    let behaviour: Arc<Mutex<HashMap<String, Behaviour>>> = Arc::default();
    let shutdown = CancellationToken::new();
    let mut registry = Registry::default();
    let queue = WorkQueueMetrics::register(&mut registry).queue("test");
    let metrics_queue = queue.clone();
    let retrigger = triggers.clone();
    let (reconcile_log, reconcile_behaviour) = (log.clone(), behaviour.clone());
    let failures: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let runner = Runner::<ConfigMap>::new(workers, queue).run(
        store,
        trigger_rx,
        move |current: Arc<ConfigMap>, _: Arc<()>| {
            let log = reconcile_log.clone();
            let retrigger = retrigger.clone();
            let name = current.metadata.name.clone().unwrap_or_default();
            let behaviour = reconcile_behaviour
                .lock()
                .unwrap()
                .get(&name)
                .copied()
                .unwrap_or_default();
            let failures = failures.clone();
            async move {
                {
                    let mut running = log.running.lock().unwrap();
                    running.0 += 1;
                    running.1 = running.1.max(running.0);
                }
                if !log.active.lock().unwrap().insert(name.clone()) {
                    *log.overlaps.lock().unwrap() += 1;
                }
                log.passes
                    .lock()
                    .unwrap()
                    .push((name.clone(), value_of(&current)));
                if behaviour.retrigger {
                    let _ = retrigger.unbounded_send(key(&name));
                }
                tokio::time::sleep(pass_time).await;
                log.active.lock().unwrap().remove(&name);
                log.running.lock().unwrap().0 -= 1;
                let failed = {
                    let mut failures = failures.lock().unwrap();
                    let n = failures.entry(name.clone()).or_default();
                    *n += 1;
                    *n <= behaviour.fail_first
                };
                if failed {
                    return Err(format!("pass of {name} failed"));
                }
                Ok(behaviour
                    .requeue
                    .map_or_else(Action::await_change, Action::requeue))
            }
        },
        |_, _: &String, _| Action::requeue(Duration::from_millis(30)),
        Arc::new(()),
        shutdown.clone(),
    );
    Harness {
        registry,
        queue: metrics_queue,
        writer,
        triggers,
        log,
        behaviour,
        shutdown,
        done: tokio::spawn(runner),
    }
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_key_that_is_always_due_does_not_starve_the_others() {
    let mut h = start(1, Duration::from_millis(2), true);
    put(&mut h.writer, config_map("hot", "1"));
    h.behave(
        "hot",
        Behaviour {
            retrigger: true,
            ..Behaviour::default()
        },
    );
    let others: Vec<String> = (0..12).map(|i| format!("other-{i}")).collect();
    for name in &others {
        put(&mut h.writer, config_map(name, "1"));
    }
    h.trigger("hot");
    let log = h.log.clone();
    wait_for("the hot key to run", || log.count("hot") >= 2).await;
    for name in &others {
        h.trigger(name);
    }
    wait_for("every other key to run once", || {
        others.iter().all(|name| log.count(name) == 1)
    })
    .await;
    // First come, first served: the hot key, due again after each of its passes, joins the
    // back of the line, so it runs at most twice more while the others take their turns.
    let passes = log.passes();
    let last_other = passes.iter().rposition(|(name, _)| name != "hot").unwrap();
    let first_other = passes.iter().position(|(name, _)| name != "hot").unwrap();
    let hot_between = passes[first_other..last_other]
        .iter()
        .filter(|(name, _)| name == "hot")
        .count();
    assert!(
        hot_between <= 2,
        "the hot key ran {hot_between} times while the others waited: {passes:?}"
    );
    assert_eq!(log.most_at_once(), 1);
    assert_eq!(*log.overlaps.lock().unwrap(), 0);
    h.stop().await;
}

#[tokio::test]
async fn at_most_n_run_at_once_and_all_run_in_order() {
    let mut h = start(3, Duration::from_millis(20), true);
    let names: Vec<String> = (0..10).map(|i| format!("cm-{i}")).collect();
    for name in &names {
        put(&mut h.writer, config_map(name, "1"));
        h.trigger(name);
    }
    let log = h.log.clone();
    wait_for("all ten to run", || names.iter().all(|n| log.count(n) == 1)).await;
    assert_eq!(log.most_at_once(), 3);
    let order: Vec<String> = log.passes().into_iter().map(|(n, _)| n).collect();
    assert_eq!(order, names, "passes start in arrival order");
    h.stop().await;
}

#[tokio::test]
async fn a_pass_gets_the_copy_stored_when_it_starts() {
    let mut h = start(1, Duration::from_millis(300), true);
    for name in ["busy", "deleted", "after"] {
        put(&mut h.writer, config_map(name, "1"));
    }
    put(&mut h.writer, config_map("waiting", "old"));
    h.trigger("busy");
    let log = h.log.clone();
    wait_for("the busy key to start", || log.count("busy") == 1).await;
    // Handed over while the only worker is busy, `waiting` twice...
    for name in ["waiting", "deleted", "waiting", "after"] {
        h.trigger(name);
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(log.count("waiting"), 0, "no worker was free");
    // ...and changed before it frees up.
    put(&mut h.writer, config_map("waiting", "new"));
    h.writer
        .apply_watcher_event(&watcher::Event::Delete(config_map("deleted", "1")));
    wait_for("the key handed over last to run", || {
        log.count("after") == 1
    })
    .await;
    let passes = log.passes();
    assert_eq!(
        passes.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["busy", "waiting", "after"],
        "one pass for the key queued twice, none for the deleted one: {passes:?}"
    );
    assert_eq!(passes[1].1, "new", "the pass sees the current copy");
    h.stop().await;
}

#[tokio::test]
async fn a_key_triggered_while_it_runs_runs_once_more_afterwards() {
    let mut h = start(4, Duration::from_millis(100), true);
    put(&mut h.writer, config_map("k", "1"));
    h.trigger("k");
    let log = h.log.clone();
    wait_for("the first pass", || log.count("k") == 1).await;
    for _ in 0..5 {
        h.trigger("k");
    }
    wait_for("the second pass", || log.count("k") == 2).await;
    wait_for("the second pass to end", || {
        log.running.lock().unwrap().0 == 0
    })
    .await;
    // Another trigger after all that runs again: nothing is stuck as "processing".
    h.trigger("k");
    wait_for("the third pass", || log.count("k") == 3).await;
    assert_eq!(*log.overlaps.lock().unwrap(), 0, "never twice at once");
    h.stop().await;
}

#[tokio::test]
async fn requeues_and_error_retries_run_the_key_again() {
    let mut h = start(2, Duration::from_millis(1), true);
    put(&mut h.writer, config_map("periodic", "1"));
    put(&mut h.writer, config_map("flaky", "1"));
    h.behave(
        "periodic",
        Behaviour {
            requeue: Some(Duration::from_millis(40)),
            ..Behaviour::default()
        },
    );
    h.behave(
        "flaky",
        Behaviour {
            fail_first: 2,
            ..Behaviour::default()
        },
    );
    h.trigger("periodic");
    h.trigger("flaky");
    let log = h.log.clone();
    wait_for("three periodic passes", || log.count("periodic") >= 3).await;
    wait_for("two retries after failures", || log.count("flaky") == 3).await;
    // The third pass of `flaky` succeeded and asked for nothing: no fourth.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(log.count("flaky"), 3);
    h.stop().await;
}

#[tokio::test]
async fn nothing_starts_before_the_store_is_listed() {
    let mut h = start(2, Duration::from_millis(1), false);
    put(&mut h.writer, config_map("early", "1"));
    h.trigger("early");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(h.log.count("early"), 0);
    listed(&mut h.writer);
    put(&mut h.writer, config_map("early", "2"));
    let log = h.log.clone();
    wait_for("the early key to run", || log.count("early") == 1).await;
    h.stop().await;
}

#[tokio::test]
async fn on_shutdown_queued_keys_do_not_run_and_running_ones_finish() {
    let mut h = start(1, Duration::from_millis(300), true);
    for name in ["first", "second", "third"] {
        put(&mut h.writer, config_map(name, "1"));
        h.trigger(name);
    }
    let log = h.log.clone();
    wait_for("a first pass to start", || log.passes().len() == 1).await;
    h.stop().await;
    assert_eq!(
        log.passes().len(),
        1,
        "only the running pass ran: {:?}",
        log.passes()
    );
    assert_eq!(
        log.running.lock().unwrap().0,
        0,
        "the running pass finished before the runner returned"
    );
}

#[test]
fn owners_match_by_group_and_kind_whatever_the_version() {
    let reference = |api_version: &str, name: &str| OwnerReference {
        api_version: api_version.into(),
        kind: "Deployment".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        ..OwnerReference::default()
    };
    let meta = ObjectMeta {
        namespace: Some("ns".into()),
        owner_references: Some(vec![
            reference("apps/v1", "current"),
            // Written by an older install, before the version it names stopped being stored.
            reference("apps/v1beta1", "older"),
            reference("extensions/v1beta1", "other-group"),
        ]),
        ..ObjectMeta::default()
    };
    let deployment = |name: &str| ObjectRef::new(name).within("ns");
    assert_eq!(
        owners::<k8s_openapi::api::apps::v1::Deployment>(&meta),
        vec![deployment("current"), deployment("older")]
    );
}

#[test]
fn owners_are_the_references_of_the_owner_kind() {
    let owner = |kind: &str, api_version: &str, name: &str| OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        ..OwnerReference::default()
    };
    let meta = ObjectMeta {
        namespace: Some("ns".into()),
        owner_references: Some(vec![
            owner("ConfigMap", "v1", "a"),
            owner("ConfigMap", "apps/v1", "wrong-api"),
            owner("Secret", "v1", "b"),
            owner("ConfigMap", "v1", "c"),
        ]),
        ..ObjectMeta::default()
    };
    assert_eq!(owners::<ConfigMap>(&meta), vec![key("a"), key("c")]);
    assert!(owners::<ConfigMap>(&ObjectMeta::default()).is_empty());
}

fn scraped(registry: &Registry, family: &str) -> f64 {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("encodes");
    out.lines()
        .find(|line| line.starts_with(family) && !line.starts_with('#'))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

#[tokio::test]
async fn the_work_queue_metrics_count_waiting_keys_starts_and_retries() {
    let mut h = start(1, Duration::from_millis(200), true);
    for name in ["busy", "a", "b", "flaky"] {
        put(&mut h.writer, config_map(name, "1"));
    }
    h.behave(
        "flaky",
        Behaviour {
            fail_first: 1,
            ..Behaviour::default()
        },
    );
    h.trigger("busy");
    let log = h.log.clone();
    wait_for("the busy key to start", || log.count("busy") == 1).await;
    for name in ["a", "b", "a", "flaky"] {
        h.trigger(name);
    }
    let queue = h.queue.clone();
    wait_for("three keys waiting (one counted once)", || {
        queue.gauges(std::time::Instant::now()).depth == 3
    })
    .await;
    wait_for("the failed key's retry", || log.count("flaky") == 2).await;
    wait_for("an empty queue", || {
        queue.gauges(std::time::Instant::now()).depth == 0 && log.running.lock().unwrap().0 == 0
    })
    .await;
    assert_eq!(scraped(&h.registry, "workqueue_retries_total"), 1.0);
    assert_eq!(
        scraped(&h.registry, "workqueue_adds_total"),
        5.0,
        "busy, a, b, flaky, and flaky's retry"
    );
    assert_eq!(
        scraped(&h.registry, "workqueue_work_duration_seconds_count"),
        5.0
    );
    h.stop().await;
}
