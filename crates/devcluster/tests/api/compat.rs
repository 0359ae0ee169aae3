//! Where devcluster must answer like a real API server because clients look: events seen
//! through both Event APIs, error Status details, namespace termination, resourceVersions in
//! the future, legacy watch paths, ReplicaSets, OpenAPI schemas and node tables.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, ObjectReference};
use k8s_openapi::api::events::v1::Event as EventV1;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::{Value, json};

use super::{eventually, start_without_nodes};

/// A raw request: status code and body text.
pub async fn raw_text(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, String) {
    let bytes = body
        .map(|b| serde_json::to_vec(&b).unwrap())
        .unwrap_or_default();
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(kube::client::Body::from(bytes))
        .unwrap();
    let resp = client.send(req).await.expect("request sent");
    let code = resp.status().as_u16();
    let body = resp.into_body().collect_bytes().await.expect("body read");
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// A raw request: status code and JSON body (`Value::Null` when the body is not JSON).
pub async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let (code, text) = raw_text(client, method, path, body).await;
    (code, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// (type, name) of each frame of a finished watch stream.
fn watch_frames(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            (
                v["type"].as_str().unwrap_or_default().to_string(),
                v["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn events_written_through_either_api_are_read_through_both() {
    let dc = start_without_nodes().await;
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let cm = cms
        .create(&PostParams::default(), &configmap("observed"))
        .await
        .unwrap();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: cm.metadata.name.clone(),
        namespace: cm.metadata.namespace.clone(),
        uid: cm.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let v1: Api<EventV1> = Api::default_namespaced(client.clone());
    // A watch through the core API, started before any event exists.
    let mut core_watch = core
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();

    // What a controller's kube-runtime Recorder writes (events.k8s.io/v1).
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "example-controller".into(),
            instance: Some("example-0".into()),
        },
    );
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "Observed".into(),
                note: Some("saw the configmap".into()),
                action: "Observe".into(),
                secondary: None,
            },
            &reference,
        )
        .await
        .unwrap();

    // kubectl describe's query: core events by involvedObject fields.
    let selector = format!(
        "involvedObject.name=observed,involvedObject.namespace=default,involvedObject.kind=ConfigMap,involvedObject.uid={}",
        cm.metadata.uid.as_deref().unwrap()
    );
    let listed = core
        .list(&ListParams::default().fields(&selector))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1, "{listed:?}");
    let e = &listed.items[0];
    assert_eq!(e.message.as_deref(), Some("saw the configmap"));
    assert_eq!(e.reason.as_deref(), Some("Observed"));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.action.as_deref(), Some("Observe"));
    assert_eq!(e.reporting_component.as_deref(), Some("example-controller"));
    assert_eq!(e.reporting_instance.as_deref(), Some("example-0"));
    assert_eq!(e.involved_object.uid, cm.metadata.uid);
    assert!(e.event_time.is_some());
    let name = e.metadata.name.clone().unwrap();
    // The same object by name through both APIs, with one resourceVersion.
    let got_core = core.get(&name).await.unwrap();
    let got_v1 = v1.get(&name).await.unwrap();
    assert_eq!(
        got_core.metadata.resource_version,
        got_v1.metadata.resource_version
    );
    assert_eq!(got_v1.note.as_deref(), Some("saw the configmap"));
    assert_eq!(
        got_v1.regarding.as_ref().and_then(|r| r.name.as_deref()),
        Some("observed")
    );
    // The core watch saw the events.k8s.io write.
    let seen = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(ev) = core_watch.try_next().await.unwrap() {
            // A real cluster's components write events of their own (nodes registered).
            if let WatchEvent::Added(e) = ev
                && e.involved_object.name.as_deref() == Some("observed")
            {
                return e;
            }
        }
        panic!("watch ended")
    })
    .await
    .expect("the core watch sees the event");
    assert_eq!(seen.message.as_deref(), Some("saw the configmap"));

    // The other way: a core event (as kubectl or an old client writes it) through events.k8s.io.
    let old_style: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "observed.legacy"},
        "involvedObject": {"kind": "ConfigMap", "name": "observed", "namespace": "default"},
        "reason": "Legacy", "message": "old recorder", "type": "Warning",
        "source": {"component": "old-controller", "host": "node-1"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
        "count": 4,
    }))
    .unwrap();
    core.create(&PostParams::default(), &old_style)
        .await
        .unwrap();
    let converted = v1.get("observed.legacy").await.unwrap();
    assert_eq!(converted.note.as_deref(), Some("old recorder"));
    assert_eq!(converted.deprecated_count, Some(4));
    assert_eq!(
        converted
            .deprecated_source
            .and_then(|s| s.component)
            .as_deref(),
        Some("old-controller")
    );
    assert!(converted.deprecated_first_timestamp.is_some());
    // events.k8s.io field labels select on the same fields.
    let by_regarding = v1
        .list(&ListParams::default().fields("regarding.name=observed,reason=Legacy"))
        .await
        .unwrap();
    assert_eq!(by_regarding.items.len(), 1);
    let by_source = core
        .list(&ListParams::default().fields("source=old-controller"))
        .await
        .unwrap();
    assert_eq!(
        by_source.items.len(),
        1,
        "core `source` is source.component"
    );
    // A new-style event must be complete, as a real server checks it: the fields of the causes
    // of the 422 a create of `event` gets.
    let refused_fields = |event: serde_json::Value| {
        let client = client.clone();
        async move {
            let (code, status) = raw(
                &client,
                "POST",
                "/apis/events.k8s.io/v1/namespaces/default/events",
                Some(event),
            )
            .await;
            assert_eq!(code, 422, "{status}");
            let fields: Vec<String> = status["details"]["causes"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|c| c["field"].as_str().map(String::from))
                .collect();
            fields
        }
    };
    let mut incomplete = json!({
        "metadata": {"name": "incomplete"},
        "regarding": {"kind": "ConfigMap", "name": "observed", "namespace": "default"},
        "reportingController": "example-controller", "reportingInstance": "example-0",
        "reason": "Observed", "type": "Normal", "note": "no eventTime, no action",
    });
    // As kube-apiserver: without an eventTime, who reported it and what it did are not
    // checked (tests/parity.rs compares the two servers).
    assert_eq!(refused_fields(incomplete.clone()).await, ["eventTime"]);
    incomplete["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
    assert_eq!(refused_fields(incomplete).await, ["action"]);
    // Deleting through one API removes it from both.
    v1.delete("observed.legacy", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the event gone from the core API", || async {
        core.get_opt("observed.legacy")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn error_details_omit_the_empty_group_of_core_kinds() {
    let dc = start_without_nodes().await;
    let client = dc.client();
    let (code, status) = raw(&client, "GET", "/api/v1/namespaces/default/pods/x", None).await;
    assert_eq!(code, 404);
    assert_eq!(status["details"], json!({"name": "x", "kind": "pods"}));
    let (code, status) = raw(
        &client,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/x",
        None,
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(
        status["details"],
        json!({"name": "x", "group": "coordination.k8s.io", "kind": "leases"})
    );
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &configmap("twice"))
        .await
        .unwrap();
    let (code, status) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some(json!({"metadata": {"name": "twice"}})),
    )
    .await;
    assert_eq!(code, 409);
    assert_eq!(
        status["details"],
        json!({"name": "twice", "kind": "configmaps"})
    );
    let (code, status) = raw(
        &client,
        "DELETE",
        "/api/v1/namespaces/default/configmaps/twice",
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert!(status["details"].get("group").is_none(), "{status}");
}

#[tokio::test]
async fn creating_in_a_terminating_namespace_is_forbidden_with_a_cause() {
    let dc = start_without_nodes().await;
    let client = dc.client();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "closing"}})).unwrap(),
        )
        .await
        .unwrap();
    let inside: Api<ConfigMap> = Api::namespaced(client.clone(), "closing");
    let mut held = configmap("held");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    inside.create(&PostParams::default(), &held).await.unwrap();
    namespaces
        .delete("closing", &DeleteParams::default())
        .await
        .unwrap();
    let (code, status) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/closing/configmaps",
        Some(json!({"metadata": {"name": "late"}})),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "configmaps \"late\" is forbidden: unable to create new content in namespace closing because it is being terminated"
    );
    assert_eq!(
        status["details"],
        json!({"name": "late", "kind": "configmaps", "causes": [{
            "reason": "NamespaceTerminating",
            "message": "namespace closing is being terminated",
            "field": "metadata.namespace",
        }]})
    );
    // generateName: the name is not generated yet; the refusal names the prefix.
    let (code, status) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/closing/configmaps",
        Some(json!({"metadata": {"generateName": "late-"}})),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        status["message"],
        "configmaps \"late-\" is forbidden: unable to create new content in namespace closing because it is being terminated"
    );
}

#[tokio::test]
async fn a_read_at_a_future_resource_version_waits_then_times_out() {
    let dc = start_without_nodes().await;
    // kube-rs retries 504s by default; this test looks at the answer itself.
    let kubeconfig = kube::config::Kubeconfig::read_from(dc.kubeconfig_path()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let path = "/api/v1/namespaces/default/configmaps";
    let (_, list) = raw(&client, "GET", path, None).await;
    let current: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("list resourceVersion");
    let future = current + 1000;
    for query in [
        format!("resourceVersion={future}&resourceVersionMatch=NotOlderThan"),
        format!("resourceVersion={future}"),
    ] {
        let started = std::time::Instant::now();
        let (code, status) = raw(&client, "GET", &format!("{path}?{query}"), None).await;
        let waited = started.elapsed();
        assert_eq!(code, 504, "{query}: {status}");
        assert_eq!(status["reason"], "Timeout");
        // `current` is the server's at the answer: later than our list's on a real cluster,
        // where other components write meanwhile.
        let message = status["message"].as_str().unwrap_or_default();
        let answered_current: u64 = message
            .strip_prefix(&format!(
                "Timeout: Too large resource version: {future}, current: "
            ))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{message}"));
        assert!((current..future).contains(&answered_current), "{message}");
        assert_eq!(
            status["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(status["details"]["retryAfterSeconds"], 1);
        assert!(
            waited >= std::time::Duration::from_secs(2)
                && waited < std::time::Duration::from_secs(10),
            "a bounded wait of about 3 s, took {waited:?}"
        );
    }
    // The retry hint is a header too (clients that retry wait for it).
    let req = http::Request::get(format!("{path}?resourceVersion={future}"))
        .body(kube::client::Body::empty())
        .unwrap();
    let resp = client.send(req).await.unwrap();
    assert_eq!(resp.status().as_u16(), 504);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    // A version the server reaches while the list waits is served.
    let waiting = tokio::spawn({
        let client = client.clone();
        let url = format!("{path}?resourceVersion={}", current + 1);
        async move { raw(&client, "GET", &url, None).await }
    });
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &configmap("arrives"))
        .await
        .unwrap();
    let (code, list) = waiting.await.unwrap();
    assert_eq!(code, 200, "{list}");
    // On a real cluster another component's write may reach current+1 first, and the list
    // is served without ours: only an otherwise idle server says which write it waited for.
    if !super::on_real() {
        assert!(
            list["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|i| i["metadata"]["name"] == "arrives"),
            "{list}"
        );
    }
}

#[tokio::test]
async fn a_watch_from_a_future_resource_version_sends_only_later_changes() {
    let dc = start_without_nodes().await;
    let client = dc.client();
    let path = "/api/v1/namespaces/default/configmaps";
    let (_, list) = raw(&client, "GET", path, None).await;
    let current: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .expect("list resourceVersion");
    let url = format!(
        "{path}?watch=true&resourceVersion={}&timeoutSeconds=2",
        current + 2
    );
    let watching = tokio::spawn({
        let client = client.clone();
        async move { raw_text(&client, "GET", &url, None).await }
    });
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    // On an otherwise idle server each create takes the next resourceVersion (current+1, +2,
    // +3); on a real cluster other components write too, so what counts is each one's own.
    let mut later = Vec::new();
    for name in ["before-1", "before-2", "after"] {
        let made = cms
            .create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
        let rv: u64 = made.metadata.resource_version.unwrap().parse().unwrap();
        if rv > current + 2 {
            later.push(("ADDED".to_string(), name.to_string()));
        }
    }
    if !super::on_real() {
        assert_eq!(later, [("ADDED".to_string(), "after".to_string())]);
    }
    let (code, text) = watching.await.unwrap();
    assert_eq!(code, 200, "{text}");
    assert_eq!(watch_frames(&text), later);
}

#[tokio::test]
async fn legacy_watch_paths_are_served() {
    let dc = start_without_nodes().await;
    let client = dc.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for name in ["a", "b"] {
        cms.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    let (code, text) = raw_text(
        &client,
        "GET",
        "/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1",
        None,
    )
    .await;
    assert_eq!(code, 200, "{text}");
    let frames = watch_frames(&text);
    assert!(frames.contains(&("ADDED".into(), "a".into())), "{frames:?}");
    assert!(frames.contains(&("ADDED".into(), "b".into())), "{frames:?}");
    // One object by name.
    let (code, text) = raw_text(
        &client,
        "GET",
        "/api/v1/watch/namespaces/default/configmaps/a?timeoutSeconds=1",
        None,
    )
    .await;
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        watch_frames(&text),
        [("ADDED".to_string(), "a".to_string())]
    );
    // All namespaces, and a group's resources.
    let (code, text) = raw_text(
        &client,
        "GET",
        "/api/v1/watch/configmaps?timeoutSeconds=1",
        None,
    )
    .await;
    assert_eq!(code, 200);
    assert!(watch_frames(&text).len() >= 2, "{text}");
    let (code, text) = raw_text(
        &client,
        "GET",
        "/apis/coordination.k8s.io/v1/watch/namespaces/default/leases?timeoutSeconds=1",
        None,
    )
    .await;
    assert_eq!((code, text.trim()), (200, ""));
    // A selector naming another object than the path.
    let (code, status) = raw(
        &client,
        "GET",
        "/api/v1/watch/namespaces/default/configmaps/a?fieldSelector=metadata.name%3Db",
        None,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(
        status["message"],
        "fieldSelector metadata.name doesn't match requested name"
    );
}
