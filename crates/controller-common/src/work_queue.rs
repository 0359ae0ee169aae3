//! Work-queue metrics with controller-runtime's family names and labels.
//!
//! A [`WorkQueue`] is one controller's queue as its loop ([`crate::runner::Runner`]) reports
//! it: each key a trigger or a requeue timer hands the controller ([`WorkQueue::add`]), each
//! start ([`WorkQueue::start`]), and each key whose object was gone by its turn
//! ([`WorkQueue::forget`]). Like client-go's queue, a key added while it is already waiting
//! counts once, and a key added while it is being reconciled waits (and counts in the depth)
//! until its next start.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `workqueue_depth` | gauge | `name`, `controller` |
//! | `workqueue_adds_total` | counter | `name`, `controller` |
//! | `workqueue_queue_duration_seconds` | histogram (1e-8 … 1e3 s) | `name`, `controller` |
//! | `workqueue_work_duration_seconds` | histogram (1e-8 … 1e3 s) | `name`, `controller` |
//! | `workqueue_retries_total` | counter | `name`, `controller` |
//! | `workqueue_unfinished_work_seconds` | gauge | `name`, `controller` |
//! | `workqueue_longest_running_processor_seconds` | gauge | `name`, `controller` |
//!
//! A queue also knows whether it is doing its work, for the liveness probe
//! ([`WorkQueueMetrics::stalls`]): its loop says when keys are due (waiting for a worker, the
//! store listed), every start and finish counts as progress, and the trigger streams feeding it
//! report their oldest unread event ([`WorkQueue::watch_triggers`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use kube::Resource;

use crate::runner::shared_watch::TriggerBacklog;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Bucket boundaries (seconds) of the two duration histograms: 10 ns times powers of ten, twelve
/// buckets, as controller-runtime's work-queue metrics use.
pub const WORK_QUEUE_BUCKETS: [f64; 12] = [
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

fn duration_histogram() -> Histogram {
    Histogram::new(WORK_QUEUE_BUCKETS)
}

type DurationFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

/// The families, registered once per process; [`WorkQueueMetrics::queue`] makes one queue per
/// controller. Cheap to clone; clones share values.
#[derive(Clone)]
pub struct WorkQueueMetrics {
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: DurationFamily,
    work_duration: DurationFamily,
    queues: Arc<Mutex<Vec<WorkQueue>>>,
}

impl WorkQueueMetrics {
    /// Registers the families on `registry` (the root registry: the names carry no prefix).
    pub fn register(registry: &mut Registry) -> WorkQueueMetrics {
        let metrics = WorkQueueMetrics {
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            queues: Arc::default(),
        };
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "workqueue_adds",
            "Keys added to the work queue (a key added while already waiting counts once)",
            metrics.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Reconciles that failed and were queued again after a backoff",
            metrics.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "Seconds a key waited in the work queue before its reconcile started",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "Seconds one reconcile of a key took",
            metrics.work_duration.clone(),
        );
        registry.register_collector(Box::new(QueueGauges {
            queues: Arc::clone(&metrics.queues),
        }));
        metrics
    }

    /// The queue of controller `controller` (also its `name` label, as controller-runtime names a
    /// controller's queue after it). Asking twice for the same name gives the same queue.
    pub fn queue(&self, controller: &str) -> WorkQueue {
        let mut queues = lock(&self.queues);
        if let Some(queue) = queues.iter().find(|q| q.shared.labels.name == controller) {
            return queue.clone();
        }
        let labels = QueueLabels {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        };
        let queue = WorkQueue {
            shared: Arc::new(QueueShared {
                adds: self.adds.get_or_create(&labels).clone(),
                retries: self.retries.get_or_create(&labels).clone(),
                queue_duration: self.queue_duration.get_or_create(&labels).clone(),
                work_duration: self.work_duration.get_or_create(&labels).clone(),
                labels,
                state: Mutex::default(),
                liveness: Mutex::default(),
            }),
        };
        queues.push(queue.clone());
        queue
    }

    /// What every queue is failing to do, one line each, at `now` (see [`WorkQueue::stall`]).
    pub fn stalls(&self, now: tokio::time::Instant, threshold: Duration) -> Vec<String> {
        lock(&self.queues)
            .iter()
            .filter_map(|q| q.stall(now, threshold))
            .collect()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// One controller's queue, as seen from its triggers and its reconciler. Cheap to clone.
#[derive(Clone)]
pub struct WorkQueue {
    shared: Arc<QueueShared>,
}

struct QueueShared {
    labels: QueueLabels,
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    state: Mutex<QueueState>,
    liveness: Mutex<Liveness>,
}

/// Whether the queue's loop is doing its work (tokio's clock, so tests can pause it).
#[derive(Default)]
struct Liveness {
    /// Since when keys have been due without a break (none while nothing is due).
    due_since: Option<tokio::time::Instant>,
    /// The last start or finish of a reconcile.
    last_progress: Option<tokio::time::Instant>,
    /// The trigger streams feeding the loop.
    triggers: Vec<TriggerBacklog>,
}

#[derive(Default)]
struct QueueState {
    /// Keys waiting for their next start, with the time each was added.
    waiting: HashMap<String, Instant>,
    /// Keys being reconciled, with the time each started.
    running: HashMap<String, Instant>,
}

/// The point-in-time gauges of one queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueGaugeValues {
    /// Keys waiting for a reconcile.
    pub depth: usize,
    /// Seconds the running reconciles have been running, summed.
    pub unfinished_work_seconds: f64,
    /// Seconds the longest-running reconcile has been running.
    pub longest_running_processor_seconds: f64,
}

fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl WorkQueue {
    /// Whether keys are due: waiting for a worker while the loop could start them (its store
    /// listed, not stopping). Called by the loop when this changes.
    pub fn set_due(&self, due: bool) {
        let mut liveness = lock(&self.shared.liveness);
        liveness.due_since = match liveness.due_since {
            Some(since) if due => Some(since),
            _ if due => Some(tokio::time::Instant::now()),
            _ => None,
        };
    }

    /// Watches a trigger stream feeding this queue: an event it has not taken for the
    /// threshold makes the queue stalled.
    pub fn watch_triggers(&self, backlog: TriggerBacklog) {
        lock(&self.shared.liveness).triggers.push(backlog);
    }

    fn progress(&self) {
        lock(&self.shared.liveness).last_progress = Some(tokio::time::Instant::now());
    }

    /// Why this queue is not doing its work at `now`, if it is not: keys have been due for
    /// `threshold` and no reconcile started or finished in that time, or a trigger stream
    /// has held an event for `threshold` without the loop taking it. A queue that is long but
    /// draining, one whose keys wait for their requeue time, and an idle one are healthy.
    /// A zero `threshold` disables the check.
    pub fn stall(&self, now: tokio::time::Instant, threshold: Duration) -> Option<String> {
        if threshold.is_zero() {
            return None;
        }
        let name = &self.shared.labels.name;
        let liveness = lock(&self.shared.liveness);
        if let Some(since) = liveness.due_since {
            let due_for = now.saturating_duration_since(since);
            let idle_for = liveness
                .last_progress
                .map_or(due_for, |at| now.saturating_duration_since(at));
            if due_for >= threshold && idle_for >= threshold {
                let depth = lock(&self.shared.state).waiting.len();
                return Some(format!(
                    "{name}: {depth} keys waiting, due for {}s, and no reconcile started or finished for {}s",
                    due_for.as_secs(),
                    idle_for.as_secs()
                ));
            }
        }
        let oldest = liveness
            .triggers
            .iter()
            .filter_map(TriggerBacklog::oldest)
            .min()?;
        let waited = now.saturating_duration_since(oldest);
        (waited >= threshold).then(|| {
            format!(
                "{name}: a watch event has waited {}s for the controller to take it",
                waited.as_secs()
            )
        })
    }

    /// A key handed to the controller: counts once until its next start.
    pub fn add(&self, namespace: Option<&str>, name: &str) {
        self.add_key(key_of(namespace, name), Instant::now());
    }

    /// An object handed to the controller of its own kind: its key counts as added.
    pub fn add_object<K: Resource>(&self, obj: &K) {
        let meta = obj.meta();
        self.add(
            meta.namespace.as_deref(),
            meta.name.as_deref().unwrap_or_default(),
        );
    }

    fn add_key(&self, key: String, now: Instant) {
        let mut state = lock(&self.shared.state);
        if let std::collections::hash_map::Entry::Vacant(slot) = state.waiting.entry(key) {
            slot.insert(now);
            self.shared.adds.inc();
        }
    }

    /// A reconcile of the key starts; it counts as running until the returned guard is dropped.
    pub fn start(&self, namespace: Option<&str>, name: &str) -> InFlight {
        self.start_key(key_of(namespace, name), Instant::now())
    }

    fn start_key(&self, key: String, now: Instant) -> InFlight {
        let mut state = lock(&self.shared.state);
        match state.waiting.remove(&key) {
            Some(added) => self
                .shared
                .queue_duration
                .observe(now.saturating_duration_since(added).as_secs_f64()),
            // A start without a recorded add (the runner records every add; kept so a caller
            // that does not still counts the key once).
            None => {
                self.shared.adds.inc();
            }
        }
        if state.waiting.is_empty() && state.waiting.capacity() > 1024 {
            // A resync or burst of thousands of keys is over: give the table back.
            state.waiting.shrink_to(64);
        }
        state.running.insert(key.clone(), now);
        drop(state);
        self.progress();
        InFlight {
            queue: self.clone(),
            key,
            started: now,
            retry: false,
        }
    }

    /// The key's object was gone when its turn came, so it will not start.
    pub fn forget(&self, namespace: Option<&str>, name: &str) {
        lock(&self.shared.state)
            .waiting
            .remove(&key_of(namespace, name));
    }

    /// The gauges at `now`.
    pub fn gauges(&self, now: Instant) -> QueueGaugeValues {
        let state = lock(&self.shared.state);
        let mut unfinished = 0.0;
        let mut longest = 0.0f64;
        for started in state.running.values() {
            let secs = now.saturating_duration_since(*started).as_secs_f64();
            unfinished += secs;
            longest = longest.max(secs);
        }
        QueueGaugeValues {
            depth: state.waiting.len(),
            unfinished_work_seconds: unfinished,
            longest_running_processor_seconds: longest,
        }
    }
}

/// A running reconcile. Dropping it records the work duration, and a retry when
/// [`InFlight::will_retry`] was called.
pub struct InFlight {
    queue: WorkQueue,
    key: String,
    started: Instant,
    retry: bool,
}

impl InFlight {
    /// The reconcile failed and the key goes back to the queue after a backoff.
    pub fn will_retry(&mut self) {
        self.retry = true;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let shared = &self.queue.shared;
        lock(&shared.state).running.remove(&self.key);
        self.queue.progress();
        shared
            .work_duration
            .observe(self.started.elapsed().as_secs_f64());
        if self.retry {
            shared.retries.inc();
        }
    }
}

/// Encodes the point-in-time gauges of every queue at scrape time.
struct QueueGauges {
    queues: Arc<Mutex<Vec<WorkQueue>>>,
}

impl std::fmt::Debug for QueueGauges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueGauges").finish_non_exhaustive()
    }
}

impl Collector for QueueGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let values: Vec<(QueueLabels, QueueGaugeValues)> = lock(&self.queues)
            .iter()
            .map(|q| (q.shared.labels.clone(), q.gauges(now)))
            .collect();
        let mut depth = encoder.encode_descriptor(
            "workqueue_depth",
            "Keys waiting in the work queue for a reconcile",
            None,
            MetricType::Gauge,
        )?;
        for (labels, v) in &values {
            let depth_value = i64::try_from(v.depth).unwrap_or(i64::MAX);
            ConstGauge::new(depth_value).encode(depth.encode_family(labels)?)?;
        }
        let mut unfinished = encoder.encode_descriptor(
            "workqueue_unfinished_work_seconds",
            "Seconds the reconciles now running have run so far, summed; a value that keeps growing points at a stuck reconcile",
            None,
            MetricType::Gauge,
        )?;
        for (labels, v) in &values {
            ConstGauge::new(v.unfinished_work_seconds).encode(unfinished.encode_family(labels)?)?;
        }
        let mut longest = encoder.encode_descriptor(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest of the reconciles now running has run so far",
            None,
            MetricType::Gauge,
        )?;
        for (labels, v) in &values {
            ConstGauge::new(v.longest_running_processor_seconds)
                .encode(longest.encode_family(labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "work_queue/tests.rs"]
mod tests;
