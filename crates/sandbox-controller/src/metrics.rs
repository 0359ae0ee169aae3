//! Prometheus metrics of the core controller (core-controller.md section 3), with the reference's
//! names, labels and buckets, plus controller-runtime-style reconcile families.

use std::collections::BTreeMap;
use std::time::Duration;

use api_types::{Sandbox, SandboxStatus};
use controller_common::metrics::{ExemplarHistogram, current_trace_exemplar};
use kube::{Resource, ResourceExt};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::cached_sandbox::CachedSandbox;
use crate::desired::pod::normalize_created_by;
use crate::keys::{CREATED_BY_LABEL, EXTENSIONS_GROUP, LAUNCH_TYPE_LABEL, TEMPLATE_REF_ANNOTATION};
pub use crate::sandbox_counts::SandboxCounts;
use crate::status::{self, reason};

/// Buckets of `agent_sandbox_creation_latency_ms` (milliseconds).
pub const CREATION_LATENCY_BUCKETS_MS: [f64; 14] = [
    50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 120000.0,
    240000.0, 300000.0, 600000.0,
];

/// Buckets of the reconcile duration histogram (seconds), as controller-runtime's.
pub const RECONCILE_TIME_BUCKETS_S: [f64; 15] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 1.0, 2.5,
];

/// The controller label value (controller-runtime names the core controller `sandbox`).
pub const CONTROLLER: &str = "sandbox";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreationLatencyLabels {
    pub namespace: String,
    pub launch_type: String,
    pub sandbox_template: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct SandboxLabels {
    pub namespace: String,
    pub ready_condition: String,
    pub expired: String,
    pub launch_type: String,
    pub sandbox_template: String,
    pub owned_by: String,
    pub created_by: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

// Samples carry the Sandbox's trace id (the claim's trace, when a claim made it) as an
// OpenMetrics exemplar, so a slow bucket on a dashboard links to its trace.
fn creation_histogram() -> ExemplarHistogram {
    ExemplarHistogram::new(CREATION_LATENCY_BUCKETS_MS.iter().copied())
}

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_TIME_BUCKETS_S)
}

/// The metric handles the reconciler records into.
#[derive(Clone)]
pub struct Metrics {
    pub creation_latency_ms:
        Family<CreationLatencyLabels, ExemplarHistogram, fn() -> ExemplarHistogram>,
    pub reconcile_total: Family<ReconcileLabels, Counter>,
    pub reconcile_errors: Family<ControllerLabels, Counter>,
    pub reconcile_failures: Family<FailureLabels, Counter>,
    pub reconcile_time_seconds: HistogramFamily<ControllerLabels>,
    pub active_workers: Family<ControllerLabels, Gauge>,
    pub max_concurrent_reconciles: Family<ControllerLabels, Gauge>,
}

impl Metrics {
    /// Creates the handles and registers them (and the `agent_sandboxes` collector over
    /// `counts`, and the build-info gauge) in `registry`.
    pub fn register(registry: &mut Registry, counts: Option<SandboxCounts>) -> Self {
        let m = Metrics {
            creation_latency_ms: Family::new_with_constructor(creation_histogram),
            reconcile_total: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_failures: Family::default(),
            reconcile_time_seconds: Family::new_with_constructor(reconcile_histogram),
            active_workers: Family::default(),
            max_concurrent_reconciles: Family::default(),
        };
        registry.register(
            "agent_sandbox_creation_latency_ms",
            "Latency from Sandbox creation to Pod Ready state in milliseconds. For warm launches, this measures controller synchronization overhead since the Pod is pre-provisioned.",
            m.creation_latency_ms.clone(),
        );
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            m.reconcile_total.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_errors",
            "Total number of reconciliation errors per controller",
            m.reconcile_errors.clone(),
        );
        registry.register(
            "agent_sandbox_controller_reconcile_failures",
            "Reconcile failures of the Sandbox controller by error kind",
            m.reconcile_failures.clone(),
        );
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            m.reconcile_time_seconds.clone(),
        );
        registry.register(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            m.active_workers.clone(),
        );
        registry.register(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            m.max_concurrent_reconciles.clone(),
        );
        registry.register_collector(Box::new(BuildInfo));
        if let Some(counts) = counts {
            registry.register_collector(Box::new(SandboxCollector { counts }));
        }
        m
    }

    fn controller() -> ControllerLabels {
        ControllerLabels {
            controller: CONTROLLER.to_string(),
        }
    }

    /// Records one finished reconcile: its result (`success`, `error`, `requeue_after`) and time.
    pub fn observe_reconcile(&self, result: &str, error: Option<&'static str>, took: Duration) {
        self.reconcile_total
            .get_or_create(&ReconcileLabels {
                controller: CONTROLLER.to_string(),
                result: result.to_string(),
            })
            .inc();
        if let Some(kind) = error {
            self.reconcile_errors
                .get_or_create(&Self::controller())
                .inc();
            self.reconcile_failures
                .get_or_create(&FailureLabels {
                    controller: CONTROLLER.to_string(),
                    error: kind.to_string(),
                })
                .inc();
        }
        self.reconcile_time_seconds
            .get_or_create(&Self::controller())
            .observe(took.as_secs_f64());
    }

    pub fn set_max_concurrent(&self, workers: u16) {
        self.max_concurrent_reconciles
            .get_or_create(&Self::controller())
            .set(i64::from(workers));
    }

    /// Tracks in-flight reconciles; the guard decrements on drop.
    pub fn worker_started(&self) -> WorkerGuard {
        let gauge = self
            .active_workers
            .get_or_create(&Self::controller())
            .clone();
        gauge.inc();
        WorkerGuard(gauge)
    }

    pub fn observe_creation_latency(&self, labels: CreationLatencyLabels, latency: Duration) {
        // Whole milliseconds, as the reference.
        self.creation_latency_ms.get_or_create(&labels).observe(
            latency.as_millis() as f64,
            current_trace_exemplar(),
            None,
        );
    }
}

pub struct WorkerGuard(Gauge);

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A Sandbox as the metrics read it: its metadata and status (the full object or the cached one).
pub trait SandboxView: Resource {
    fn sandbox_status(&self) -> Option<&SandboxStatus>;
}

impl SandboxView for Sandbox {
    fn sandbox_status(&self) -> Option<&SandboxStatus> {
        self.status.as_ref()
    }
}

impl SandboxView for CachedSandbox {
    fn sandbox_status(&self) -> Option<&SandboxStatus> {
        self.status.as_ref()
    }
}

/// `warm` when the Sandbox is labelled so, else `cold`.
pub fn launch_type(sandbox: &impl Resource) -> &'static str {
    if sandbox.labels().get(LAUNCH_TYPE_LABEL).map(String::as_str) == Some("warm") {
        "warm"
    } else {
        "cold"
    }
}

/// The template annotation, else `unknown`.
pub fn sandbox_template(sandbox: &impl Resource) -> String {
    sandbox_template_of(sandbox).to_string()
}

fn sandbox_template_of(sandbox: &impl Resource) -> &str {
    sandbox
        .meta()
        .annotations
        .as_ref()
        .and_then(|a| a.get(TEMPLATE_REF_ANNOTATION))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
        .unwrap_or("unknown")
}

/// The series a Sandbox counts toward in `agent_sandboxes`, borrowed from the Sandbox (compared
/// with a series already counted without allocating; [`SeriesView::to_labels`] owns it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SeriesView<'a> {
    pub namespace: &'a str,
    pub ready: bool,
    pub expired: bool,
    pub launch_type: &'static str,
    pub sandbox_template: &'a str,
    pub owned_by: &'a str,
    pub created_by: &'static str,
}

impl<'a> SeriesView<'a> {
    pub fn of(sandbox: &'a impl SandboxView) -> Self {
        let ready = sandbox
            .sandbox_status()
            .and_then(status::ready_condition_of);
        let meta = sandbox.meta();
        let owned_by = meta
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .filter(|r| r.api_version.split_once('/').map(|(g, _)| g) == Some(EXTENSIONS_GROUP))
            .map(|r| r.kind.as_str())
            .filter(|k| *k == "SandboxClaim" || *k == "SandboxWarmPool")
            .unwrap_or("None");
        SeriesView {
            namespace: meta.namespace.as_deref().unwrap_or_default(),
            ready: ready.is_some_and(|c| c.status == "True"),
            expired: ready.is_some_and(|c| c.reason == reason::SANDBOX_EXPIRED),
            launch_type: launch_type(sandbox),
            sandbox_template: sandbox_template_of(sandbox),
            owned_by,
            created_by: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(CREATED_BY_LABEL))
                .map_or("unknown", |v| normalize_created_by(v)),
        }
    }

    pub fn to_labels(&self) -> SandboxLabels {
        SandboxLabels {
            namespace: self.namespace.to_string(),
            ready_condition: self.ready.to_string(),
            expired: self.expired.to_string(),
            launch_type: self.launch_type.to_string(),
            sandbox_template: self.sandbox_template.to_string(),
            owned_by: self.owned_by.to_string(),
            created_by: self.created_by.to_string(),
        }
    }

    /// Whether `labels` is this series.
    pub fn is(&self, labels: &SandboxLabels) -> bool {
        self.namespace == labels.namespace
            && bool_label(self.ready) == labels.ready_condition
            && bool_label(self.expired) == labels.expired
            && self.launch_type == labels.launch_type
            && self.sandbox_template == labels.sandbox_template
            && self.owned_by == labels.owned_by
            && self.created_by == labels.created_by
    }
}

fn bool_label(value: bool) -> &'static str {
    if value { "true" } else { "false" }
}

/// The series a Sandbox counts toward in `agent_sandboxes`.
pub fn sandbox_labels(sandbox: &impl SandboxView) -> SandboxLabels {
    SeriesView::of(sandbox).to_labels()
}

/// Counts Sandboxes per label combination; combinations with none are absent.
pub fn count_sandboxes<'a, S: SandboxView + 'a>(
    sandboxes: impl IntoIterator<Item = &'a S>,
) -> BTreeMap<SandboxLabels, i64> {
    let mut counts = BTreeMap::new();
    for sb in sandboxes {
        *counts.entry(sandbox_labels(sb)).or_insert(0) += 1;
    }
    counts
}

/// `agent_sandboxes`, read from the counts the watch keeps up to date ([`SandboxCounts`]): a
/// scrape costs one line per series, not a pass over every cached Sandbox.
#[derive(Debug)]
struct SandboxCollector {
    counts: SandboxCounts,
}

impl Collector for SandboxCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            "agent_sandboxes",
            "Monitor the point-in-time number of sandboxes in the cluster.",
            None,
            MetricType::Gauge,
        )?;
        self.counts.for_each_series(|labels, count| {
            ConstGauge::new(count).encode(metric.encode_family(labels)?)
        })
    }
}

/// `agent_sandbox_build_info`: build metadata as labels, value 1.
#[derive(Debug)]
struct BuildInfo;

impl Collector for BuildInfo {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let labels: [(&str, String); 6] = [
            (
                "build_date",
                option_env!("AGENT_SANDBOX_BUILD_DATE")
                    .unwrap_or("unknown")
                    .to_string(),
            ),
            ("compiler", "rustc".to_string()),
            (
                "git_commit",
                option_env!("AGENT_SANDBOX_GIT_SHA")
                    .unwrap_or("unknown")
                    .to_string(),
            ),
            ("git_version", env!("CARGO_PKG_VERSION").to_string()),
            ("go_version", "none".to_string()),
            (
                "platform",
                format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            ),
        ];
        let mut metric = encoder.encode_descriptor(
            "agent_sandbox_build_info",
            "Agent sandbox controller build metadata exposed as labels with a constant value of 1.",
            None,
            MetricType::Gauge,
        )?;
        ConstGauge::new(1i64).encode(metric.encode_family(&labels)?)
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
