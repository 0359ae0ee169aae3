//! Generic per-controller metrics with controller-runtime's family names, so dashboards built
//! for the reference keep working. Knows nothing about what a controller reconciles.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `controller_runtime_reconcile_total` | counter | `controller`, `result` (`success`, `error`, `requeue`, `requeue_after`) |
//! | `controller_runtime_reconcile_errors_total` | counter | `controller` |
//! | `controller_runtime_reconcile_time_seconds` | histogram (trace-id exemplars) | `controller` |
//! | `controller_runtime_max_concurrent_reconciles` | gauge | `controller` |
//! | `controller_runtime_active_workers` | gauge | `controller` |
//! | `workqueue_*` | see [`crate::work_queue`] | `name`, `controller` |
//!
//! Exemplars are only visible in the OpenMetrics exposition (see [`crate::admin`]).

use std::time::Duration;

use opentelemetry::trace::TraceContextExt;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::work_queue::{WorkQueue, WorkQueueMetrics};

/// Bucket boundaries (seconds) of `controller_runtime_reconcile_time_seconds`, as
/// controller-runtime uses since v0.15.
pub const RECONCILE_TIME_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

/// How one reconcile ended (the `result` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; wait for the next change.
    Success,
    /// Failed; will be retried with backoff (also counts in the errors family).
    Error,
    /// Asked to be requeued immediately.
    Requeue,
    /// Asked to be requeued after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

/// Exemplar labels: the trace the observation belongs to.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TraceExemplar {
    /// 32 hex digits.
    pub trace_id: String,
}

type TimeHistogram = HistogramWithExemplars<TraceExemplar>;

/// A histogram whose samples may carry the trace id as an OpenMetrics exemplar (for the
/// binaries' own latency families, e.g. the claim startup latencies).
pub type ExemplarHistogram = HistogramWithExemplars<TraceExemplar>;

fn new_time_histogram() -> TimeHistogram {
    HistogramWithExemplars::new(RECONCILE_TIME_BUCKETS.iter().copied())
}

/// The families above, registered once per process. Cheap to clone; clones share values.
#[derive(Clone)]
pub struct ControllerMetrics {
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_time: Family<ControllerLabel, TimeHistogram, fn() -> TimeHistogram>,
    max_concurrent: Family<ControllerLabel, Gauge>,
    active_workers: Family<ControllerLabel, Gauge>,
    work_queues: WorkQueueMetrics,
}

impl ControllerMetrics {
    /// Registers the families on `registry` (use the root registry: the names carry no prefix).
    pub fn register(registry: &mut Registry) -> ControllerMetrics {
        let metrics = ControllerMetrics {
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(new_time_histogram),
            max_concurrent: Family::default(),
            active_workers: Family::default(),
            work_queues: WorkQueueMetrics::register(registry),
        };
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            metrics.reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            metrics.reconcile_errors.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            metrics.reconcile_time.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            metrics.max_concurrent.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            metrics.active_workers.clone(),
        );
        metrics
    }

    /// Records one finished reconcile. When called inside a span with a valid trace context,
    /// the duration sample carries the trace id as an exemplar.
    pub fn observe_reconcile(&self, controller: &str, result: ReconcileResult, duration: Duration) {
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.to_owned(),
                result: result.as_str().to_owned(),
            })
            .inc();
        let label = ControllerLabel {
            controller: controller.to_owned(),
        };
        if result == ReconcileResult::Error {
            self.reconcile_errors.get_or_create(&label).inc();
        }
        self.reconcile_time.get_or_create(&label).observe(
            duration.as_secs_f64(),
            current_trace_exemplar(),
            None,
        );
    }

    /// Sets `controller_runtime_max_concurrent_reconciles`.
    pub fn set_max_concurrent_reconciles(&self, controller: &str, workers: u32) {
        self.max_concurrent
            .get_or_create(&ControllerLabel {
                controller: controller.to_owned(),
            })
            .set(i64::from(workers));
    }

    /// Counts one active worker until the returned guard is dropped.
    pub fn active_worker(&self, controller: &str) -> ActiveWorker {
        let gauge = self.active_workers.get_or_create_owned(&ControllerLabel {
            controller: controller.to_owned(),
        });
        gauge.inc();
        ActiveWorker { gauge }
    }

    /// The work queue of `controller` (see [`crate::work_queue`]).
    pub fn work_queue(&self, controller: &str) -> WorkQueue {
        self.work_queues.queue(controller)
    }

    /// What the work queues are failing to do at `now` ([`WorkQueueMetrics::stalls`]); empty
    /// while every controller does its work.
    pub fn stalls(&self, now: tokio::time::Instant, threshold: Duration) -> Vec<String> {
        self.work_queues.stalls(now, threshold)
    }
}

/// Decrements `controller_runtime_active_workers` when dropped.
pub struct ActiveWorker {
    gauge: Gauge,
}

impl Drop for ActiveWorker {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The current span's trace id as an exemplar, when there is a valid one.
pub fn current_trace_exemplar() -> Option<TraceExemplar> {
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid().then(|| TraceExemplar {
        trace_id: sc.trace_id().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use prometheus_client::encoding::{prometheus_text, text};
    use tracing_subscriber::layer::SubscriberExt;

    fn openmetrics(registry: &Registry) -> String {
        let mut out = String::new();
        text::encode(&mut out, registry).unwrap();
        out
    }

    #[test]
    fn reconcile_outcomes_are_counted_with_controller_runtime_names() {
        let mut registry = Registry::default();
        let m = ControllerMetrics::register(&mut registry);
        m.observe_reconcile(
            "sandbox",
            ReconcileResult::Success,
            Duration::from_millis(30),
        );
        m.observe_reconcile(
            "sandbox",
            ReconcileResult::Success,
            Duration::from_millis(70),
        );
        m.observe_reconcile("sandbox", ReconcileResult::Error, Duration::from_millis(2));
        m.observe_reconcile(
            "sandboxclaim",
            ReconcileResult::RequeueAfter,
            Duration::from_secs(2),
        );
        m.set_max_concurrent_reconciles("sandbox", 100);
        let queue = m.work_queue("sandbox");
        queue.add(Some("ns"), "a");
        queue.add(Some("ns"), "b");
        let worker = m.active_worker("sandbox");

        let mut out = String::new();
        prometheus_text::encode(&mut out, &registry).unwrap();
        for line in [
            "controller_runtime_reconcile_total{controller=\"sandbox\",result=\"success\"} 2",
            "controller_runtime_reconcile_total{controller=\"sandbox\",result=\"error\"} 1",
            "controller_runtime_reconcile_total{controller=\"sandboxclaim\",result=\"requeue_after\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"sandbox\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"sandbox\"} 3",
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"sandbox\",le=\"0.005\"} 1",
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"sandbox\",le=\"0.05\"} 2",
            "controller_runtime_reconcile_time_seconds_bucket{controller=\"sandbox\",le=\"0.1\"} 3",
            "controller_runtime_max_concurrent_reconciles{controller=\"sandbox\"} 100",
            "controller_runtime_active_workers{controller=\"sandbox\"} 1",
            "workqueue_depth{name=\"sandbox\",controller=\"sandbox\"} 2",
            "workqueue_adds_total{name=\"sandbox\",controller=\"sandbox\"} 2",
        ] {
            assert!(out.contains(line), "missing {line}:\n{out}");
        }
        drop(worker);
        assert!(
            openmetrics(&registry)
                .contains("controller_runtime_active_workers{controller=\"sandbox\"} 0")
        );
    }

    #[test]
    fn durations_observed_in_a_trace_carry_its_id_as_exemplar() {
        let mut registry = Registry::default();
        let m = ControllerMetrics::register(&mut registry);
        m.observe_reconcile(
            "sandbox",
            ReconcileResult::Success,
            Duration::from_millis(1),
        );
        assert!(
            !openmetrics(&registry).contains("trace_id"),
            "no span, no exemplar"
        );

        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        let trace_id = tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("ReconcileSandbox");
            let _entered = span.enter();
            m.observe_reconcile(
                "sandbox",
                ReconcileResult::Success,
                Duration::from_millis(1),
            );
            current_trace_exemplar().unwrap().trace_id
        });
        assert_eq!(trace_id.len(), 32);
        let out = openmetrics(&registry);
        assert!(
            out.contains(&format!("# {{trace_id=\"{trace_id}\"}} 0.001")),
            "{out}"
        );
    }
}
