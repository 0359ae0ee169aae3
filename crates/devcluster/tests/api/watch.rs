//! Watch semantics: replay, resume from a resourceVersion, in-stream 410, bookmarks, timeouts,
//! streaming lists, selector transitions.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

use super::{start_with, start_without_nodes};

fn cm(name: &str, tier: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}})).unwrap()
}

fn describe(e: &WatchEvent<ConfigMap>) -> String {
    match e {
        WatchEvent::Added(o) => format!("ADDED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Modified(o) => format!("MODIFIED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Deleted(o) => format!("DELETED {}", o.metadata.name.as_deref().unwrap_or("")),
        WatchEvent::Bookmark(_) => "BOOKMARK".into(),
        WatchEvent::Error(s) => format!("ERROR {}", s.code),
    }
}

async fn next_events(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
    n: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    while out.len() < n {
        let item = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("a watch event within 5 s")
            .expect("stream open")
            .expect("event decodes");
        let d = describe(&item);
        // kube-controller-manager publishes `kube-root-ca.crt` into every namespace of a real
        // cluster; the tests watch only what they write.
        if d != "BOOKMARK" && !d.ends_with(" kube-root-ca.crt") {
            out.push(d);
        }
    }
    out
}

#[tokio::test]
async fn replay_then_changes_in_order() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    assert_eq!(next_events(&mut stream, 1).await, ["ADDED a"]);
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    api.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(&json!({"data": {"k": "v"}})),
    )
    .await
    .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        next_events(&mut stream, 3).await,
        ["ADDED b", "MODIFIED a", "DELETED b"]
    );
}

#[tokio::test]
async fn resume_from_resource_version_and_expire_after_compaction() {
    let dc = start_with(devcluster::Config {
        node_agent: false,
        history_limit: 10,
        ..devcluster::Config::ephemeral()
    })
    .await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let a = api
        .create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let rv = a.metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &cm("b", "x"))
        .await
        .unwrap();
    api.delete("a", &DeleteParams::default()).await.unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(next_events(&mut stream, 2).await, ["ADDED b", "DELETED a"]);

    dc.compact_history_past(&rv).await;
    let mut old = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        next_events(&mut old, 1).await,
        ["ERROR 410"],
        "410 comes in-stream"
    );
}

/// A client still watching from a version of a devcluster that was stopped and started again
/// (at the same address, as `cargo xtask dev` does) is told to relist, with an in-stream 410,
/// instead of waiting silently until the new run has written as many objects as the old one.
#[tokio::test]
async fn a_version_from_a_previous_run_expires_instead_of_waiting() {
    if !super::devcluster_only(
        "a_version_from_a_previous_run_expires_instead_of_waiting",
        "a version from before a restart: devcluster answers 410 on purpose, kube-apiserver waits for it",
    ) {
        return;
    }
    let first = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(first.client());
    for name in ["a", "b", "c"] {
        api.create(&PostParams::default(), &cm(name, "x"))
            .await
            .unwrap();
    }
    let old_rv = api
        .get("c")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    first.shutdown().await;

    let second = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(second.client());
    let mut stream = api
        .watch(&WatchParams::default(), &old_rv)
        .await
        .unwrap()
        .boxed();
    assert_eq!(next_events(&mut stream, 1).await, ["ERROR 410"]);
    let fresh = api
        .create(&PostParams::default(), &cm("d", "x"))
        .await
        .unwrap();
    assert_ne!(
        fresh.metadata.resource_version.as_deref(),
        Some(old_rv.as_str())
    );
}

#[tokio::test]
async fn bookmarks_timeout_and_streaming_lists() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();

    let wp = WatchParams::default().timeout(2);
    let started = std::time::Instant::now();
    let events: Vec<_> = api
        .watch(&wp, "0")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "honours timeoutSeconds"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        events.iter().any(|e| matches!(e, WatchEvent::Bookmark(_))),
        "periodic bookmark"
    );

    let wp = WatchParams::default().initial_events().timeout(1);
    let mut events: Vec<_> = api
        .watch(&wp, "")
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    // Only what the test wrote (a real cluster has its `kube-root-ca.crt` here).
    events.retain(|e| !matches!(e, WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("kube-root-ca.crt")));
    assert!(matches!(&events[0], WatchEvent::Added(o) if o.metadata.name.as_deref() == Some("a")));
    let WatchEvent::Bookmark(b) = &events[1] else {
        panic!("expected the initial-events-end bookmark")
    };
    assert_eq!(
        b.metadata
            .annotations
            .get("k8s.io/initial-events-end")
            .map(String::as_str),
        Some("true")
    );
}

#[tokio::test]
async fn selector_transitions_become_added_and_deleted() {
    let dc = start_without_nodes().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    api.create(&PostParams::default(), &cm("a", "x"))
        .await
        .unwrap();
    let wp = WatchParams::default().labels("tier=y");
    let rv = api
        .get("a")
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api.watch(&wp, &rv).await.unwrap().boxed();
    let relabel = |t: &str| json!({"metadata": {"labels": {"tier": t}}});
    api.patch("a", &PatchParams::default(), &Patch::Merge(&relabel("y")))
        .await
        .unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(&relabel("z")))
        .await
        .unwrap();
    assert_eq!(next_events(&mut stream, 2).await, ["ADDED a", "DELETED a"]);
}
