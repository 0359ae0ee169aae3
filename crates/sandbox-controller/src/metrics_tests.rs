//! `agent_sandboxes` grouping (TestSandboxCollector) and exposition of the reference families.

use super::*;
use api_types::{SandboxSpec, SandboxStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

fn sandbox(ns: &str) -> Sandbox {
    let mut sb = Sandbox::new("sb", SandboxSpec::default());
    sb.metadata.namespace = Some(ns.into());
    sb
}

fn with_ready(mut sb: Sandbox, status: &str, reason: &str) -> Sandbox {
    sb.status = Some(SandboxStatus {
        conditions: vec![Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: reason.into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        }],
        ..Default::default()
    });
    sb
}

fn label(sb: &mut Sandbox, k: &str, v: &str) {
    sb.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
}

fn owner(sb: &mut Sandbox, api_version: &str, kind: &str) {
    sb.metadata.owner_references = Some(vec![OwnerReference {
        api_version: api_version.into(),
        kind: kind.into(),
        name: "o".into(),
        uid: "u".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
}

fn expected(ns: &str, ready: bool) -> SandboxLabels {
    SandboxLabels {
        namespace: ns.into(),
        ready_condition: ready.to_string(),
        expired: "false".into(),
        launch_type: "cold".into(),
        sandbox_template: "unknown".into(),
        owned_by: "None".into(),
        created_by: "unknown".into(),
    }
}

#[test]
fn ready_and_unready_sandboxes_without_labels() {
    assert_eq!(
        sandbox_labels(&with_ready(sandbox("default"), "True", "DependenciesReady")),
        expected("default", true)
    );
    assert_eq!(
        sandbox_labels(&sandbox("default")),
        expected("default", false)
    );
}

#[test]
fn launch_type_template_and_expiry() {
    let mut sb = with_ready(sandbox("test-ns"), "False", "SandboxExpired");
    label(&mut sb, LAUNCH_TYPE_LABEL, "warm");
    sb.metadata.annotations = Some(
        [(
            TEMPLATE_REF_ANNOTATION.to_string(),
            "my-template".to_string(),
        )]
        .into(),
    );
    let l = sandbox_labels(&sb);
    assert_eq!(
        (
            l.launch_type.as_str(),
            l.expired.as_str(),
            l.sandbox_template.as_str()
        ),
        ("warm", "true", "my-template")
    );
    let mut cold = sandbox("default");
    label(&mut cold, LAUNCH_TYPE_LABEL, "cold");
    assert_eq!(sandbox_labels(&cold).launch_type, "cold");
}

#[test]
fn mixed_sandboxes_are_counted_per_series() {
    let mut warm = with_ready(sandbox("test-ns"), "False", "SandboxExpired");
    label(&mut warm, LAUNCH_TYPE_LABEL, "warm");
    let all = [
        with_ready(sandbox("default"), "True", "DependenciesReady"),
        warm,
        sandbox("default"),
        with_ready(sandbox("default"), "False", "DependenciesNotReady"),
    ];
    let counts = count_sandboxes(all.iter());
    assert_eq!(counts.len(), 3);
    assert_eq!(counts[&expected("default", true)], 1);
    assert_eq!(counts[&expected("default", false)], 2);
}

#[test]
fn owner_kind_in_the_extensions_group_any_version() {
    for (api_version, kind, want) in [
        (
            "extensions.agents.x-k8s.io/v1beta1",
            "SandboxClaim",
            "SandboxClaim",
        ),
        (
            "extensions.agents.x-k8s.io/v1beta1",
            "SandboxWarmPool",
            "SandboxWarmPool",
        ),
        (
            "extensions.agents.x-k8s.io/v1alpha1",
            "SandboxWarmPool",
            "SandboxWarmPool",
        ),
        ("apps/v1", "Deployment", "None"),
    ] {
        let mut sb = sandbox("default");
        owner(&mut sb, api_version, kind);
        assert_eq!(sandbox_labels(&sb).owned_by, want);
    }
}

#[test]
fn created_by_is_normalized() {
    for (value, want) in [
        ("go-client", "go-client"),
        ("python-client", "python-client"),
        ("hacker-client", "unknown"),
        ("", "unknown"),
    ] {
        let mut sb = sandbox("default");
        label(&mut sb, CREATED_BY_LABEL, value);
        assert_eq!(sandbox_labels(&sb).created_by, want);
    }
}

#[test]
fn exposition_has_reference_names_and_buckets() {
    let mut registry = Registry::default();
    let counts = SandboxCounts::default();
    counts.observe(&kube::runtime::watcher::Event::Apply(
        CachedSandbox::from_sandbox(&with_ready(sandbox("default"), "True", "DependenciesReady")),
    ));
    let metrics = Metrics::register(&mut registry, Some(counts));
    metrics.observe_creation_latency(
        CreationLatencyLabels {
            namespace: "default".into(),
            launch_type: "cold".into(),
            sandbox_template: "unknown".into(),
        },
        Duration::from_millis(1234),
    );
    metrics.observe_reconcile("success", None, Duration::from_millis(3));
    metrics.observe_reconcile("error", Some("conflict"), Duration::from_millis(3));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(text.contains(r#"agent_sandboxes{namespace="default",ready_condition="true",expired="false",launch_type="cold",sandbox_template="unknown",owned_by="None",created_by="unknown"} 1"#), "{text}");
    assert!(text.contains("# TYPE agent_sandbox_build_info gauge"));
    assert!(text.contains("agent_sandbox_build_info{build_date="));
    assert!(text.contains(r#"agent_sandbox_creation_latency_ms_bucket{le="2500.0",namespace="default",launch_type="cold",sandbox_template="unknown"} 1"#), "{text}");
    assert!(text.contains(r#"agent_sandbox_creation_latency_ms_bucket{le="1000.0",namespace="default",launch_type="cold",sandbox_template="unknown"} 0"#));
    assert!(text.contains(
        r#"controller_runtime_reconcile_total{controller="sandbox",result="success"} 1"#
    ));
    assert!(text.contains(r#"controller_runtime_reconcile_errors_total{controller="sandbox"} 1"#));
    assert!(text.contains(r#"agent_sandbox_controller_reconcile_failures_total{controller="sandbox",error="conflict"} 1"#));
}

#[test]
fn creation_latency_samples_carry_the_trace_id_as_an_exemplar() {
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry, None);
    let labels = || CreationLatencyLabels {
        namespace: "default".into(),
        launch_type: "warm".into(),
        sandbox_template: "python".into(),
    };
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
    let trace_id = tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("ReconcileSandbox");
        let _entered = span.enter();
        metrics.observe_creation_latency(labels(), Duration::from_millis(420));
        controller_common::metrics::current_trace_exemplar()
            .expect("a sampled span has a trace id")
            .trace_id
    });
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains(&format!(
            r#"agent_sandbox_creation_latency_ms_bucket{{le="500.0",namespace="default",launch_type="warm",sandbox_template="python"}} 1 # {{trace_id="{trace_id}"}} 420.0"#
        )),
        "{text}"
    );
}
