//! The controllers' Event recorder (`controller_common::events::EventRecorder`) against the API
//! server: what `kubectl get events` shows after repeated and distinct Events.

use e2e_tests::{Env, EnvOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::Resource;
use kube::api::{Api, ListParams, PostParams};

use controller_common::events::{Event, EventRecorder, EventType, Reporter};

const NS: &str = "default";

fn event(reason: &str, note: &str) -> Event {
    Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note.into()),
        action: "Reconciling".into(),
        secondary: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_event_with_a_series_and_a_new_reason_is_another_event() {
    let env = Env::start(EnvOptions::default()).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("regarding".into());
    let cm = configmaps
        .create(&PostParams::default(), &cm)
        .await
        .expect("create the regarded object");
    let regarding = cm.object_ref(&());
    let recorder = EventRecorder::new(
        env.client.clone(),
        Reporter {
            controller: "event-series-test".into(),
            instance: Some("instance-1".into()),
        },
    );

    for _ in 0..3 {
        recorder
            .publish(&event("Stuck", "still stuck"), &regarding)
            .await
            .expect("publish");
    }
    recorder
        .publish(&event("Unstuck", "moving again"), &regarding)
        .await
        .expect("publish");

    let events: Api<K8sEvent> = Api::namespaced(env.client.clone(), NS);
    let ours: Vec<K8sEvent> = events
        .list(&ListParams::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("event-series-test"))
        .collect();
    let by_reason = |reason: &str| -> Vec<&K8sEvent> {
        ours.iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .collect()
    };
    let stuck = by_reason("Stuck");
    assert_eq!(stuck.len(), 1, "repeats continue one Event: {ours:#?}");
    assert_eq!(stuck[0].series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(stuck[0].note.as_deref(), Some("still stuck"));
    assert_eq!(stuck[0].type_.as_deref(), Some("Warning"));
    assert_eq!(stuck[0].reporting_instance.as_deref(), Some("instance-1"));
    assert_eq!(
        stuck[0].regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("regarding")
    );
    let unstuck = by_reason("Unstuck");
    assert_eq!(unstuck.len(), 1);
    assert_eq!(unstuck[0].series, None, "a first occurrence has no series");
    env.stop().await;
}
