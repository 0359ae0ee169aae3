//! The claim metrics of the reference (core-controller.md §3.1): names, label names and order,
//! bucket boundaries. All values are whole milliseconds.

use controller_common::metrics::ExemplarHistogram as Histogram;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Buckets of the three claim startup histograms (ms).
pub const STARTUP_LATENCY_BUCKETS_MS: [f64; 15] = [
    100.0, 250.0, 500.0, 750.0, 1000.0, 1250.0, 1500.0, 2000.0, 2500.0, 5000.0, 10000.0, 30000.0,
    60000.0, 120000.0, 240000.0,
];
/// Buckets of `agent_sandbox_creation_latency_ms` (ms).
pub const CREATION_LATENCY_BUCKETS_MS: [f64; 14] = [
    50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 30000.0, 60000.0, 120000.0,
    240000.0, 300000.0, 600000.0,
];

/// `sandbox_template` value when the Sandbox does not say which template it came from.
pub const UNKNOWN_TEMPLATE: &str = "__unknown__";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartupLabels {
    pub launch_type: String,
    pub sandbox_template: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CreationLatencyLabels {
    pub namespace: String,
    pub launch_type: String,
    pub sandbox_template: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimCreationLabels {
    pub namespace: String,
    pub sandbox_template: String,
    pub launch_type: String,
    pub warmpool_name: String,
    pub pod_condition: String,
    pub created_by: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

// Samples carry the claim's trace id as an exemplar (OpenMetrics exposition only).
fn startup_histogram() -> Histogram {
    Histogram::new(STARTUP_LATENCY_BUCKETS_MS.into_iter())
}

fn creation_histogram() -> Histogram {
    Histogram::new(CREATION_LATENCY_BUCKETS_MS.into_iter())
}

/// The claim controller's metric families, registered on the process registry.
#[derive(Clone)]
pub struct ClaimMetrics {
    pub claim_startup_latency: HistogramFamily<StartupLabels>,
    pub controller_startup_latency: HistogramFamily<StartupLabels>,
    pub client_startup_latency: HistogramFamily<StartupLabels>,
    pub creation_latency: HistogramFamily<CreationLatencyLabels>,
    pub claim_creation: Family<ClaimCreationLabels, Counter>,
}

impl ClaimMetrics {
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = ClaimMetrics {
            claim_startup_latency: Family::new_with_constructor(startup_histogram),
            controller_startup_latency: Family::new_with_constructor(startup_histogram),
            client_startup_latency: Family::new_with_constructor(startup_histogram),
            creation_latency: Family::new_with_constructor(creation_histogram),
            claim_creation: Family::default(),
        };
        registry.register(
            "agent_sandbox_claim_startup_latency_ms",
            "End-to-end latency from SandboxClaim creation to Sandbox Ready state in milliseconds.",
            metrics.claim_startup_latency.clone(),
        );
        registry.register(
            "agent_sandbox_claim_controller_startup_latency_ms",
            "Latency from controller first observed SandboxClaim to Sandbox Ready state in milliseconds.",
            metrics.controller_startup_latency.clone(),
        );
        registry.register(
            "agent_sandbox_client_claim_startup_latency_ms",
            "End-to-end latency from client request to SandboxClaim Ready state in milliseconds. Note: This metric may be affected by clock skew between the client and controller.",
            metrics.client_startup_latency.clone(),
        );
        registry.register(
            "agent_sandbox_creation_latency_ms",
            "Latency from Sandbox creation to Pod Ready state in milliseconds. For warm launches, this measures controller synchronization overhead since the Pod is pre-provisioned.",
            metrics.creation_latency.clone(),
        );
        // The text encoder appends `_total` to counters.
        registry.register(
            "agent_sandbox_claim_creation",
            "Total number of SandboxClaims that got a Sandbox, by launch type.",
            metrics.claim_creation.clone(),
        );
        metrics
    }
}

/// Normalizes a `created-by` label value the way the reference does for metrics and Pods.
pub fn normalize_created_by(value: Option<&str>) -> &'static str {
    match value {
        Some("go-client") => "go-client",
        Some("python-client") => "python-client",
        Some("controller") => "controller",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    #[test]
    fn exposes_the_reference_names_labels_and_buckets() {
        let mut registry = Registry::default();
        let metrics = ClaimMetrics::register(&mut registry);
        metrics
            .claim_creation
            .get_or_create(&ClaimCreationLabels {
                namespace: "default".into(),
                sandbox_template: "t".into(),
                launch_type: "warm".into(),
                warmpool_name: "p".into(),
                pod_condition: "ready".into(),
                created_by: "unknown".into(),
            })
            .inc();
        metrics
            .controller_startup_latency
            .get_or_create(&StartupLabels {
                launch_type: "warm".into(),
                sandbox_template: "t".into(),
            })
            .observe(120.0, None, None);
        metrics
            .creation_latency
            .get_or_create(&CreationLatencyLabels {
                namespace: "default".into(),
                launch_type: "cold".into(),
                sandbox_template: "t".into(),
            })
            .observe(700.0, None, None);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        assert!(text.contains(
            "agent_sandbox_claim_creation_total{namespace=\"default\",sandbox_template=\"t\",launch_type=\"warm\",warmpool_name=\"p\",pod_condition=\"ready\",created_by=\"unknown\"} 1"
        ), "{text}");
        assert!(text.contains(
            "agent_sandbox_claim_controller_startup_latency_ms_bucket{le=\"240000.0\",launch_type=\"warm\",sandbox_template=\"t\"} 1"
        ), "{text}");
        assert!(text.contains(
            "agent_sandbox_creation_latency_ms_bucket{le=\"600000.0\",namespace=\"default\",launch_type=\"cold\",sandbox_template=\"t\"} 1"
        ), "{text}");
        assert!(
            text.contains("# TYPE agent_sandbox_claim_controller_startup_latency_ms histogram")
        );
        assert!(
            text.contains("# TYPE agent_sandbox_claim_creation counter"),
            "{text}"
        );
    }

    #[test]
    fn created_by_is_normalized() {
        assert_eq!(normalize_created_by(Some("python-client")), "python-client");
        assert_eq!(normalize_created_by(Some("kubectl")), "unknown");
        assert_eq!(normalize_created_by(None), "unknown");
    }
}
