//! Watch delivery under bursts: events that are ready together go out in one chunk per watcher.
//! A client must still see every change exactly once, in resourceVersion order, as whole JSON
//! lines, with bookmarks that never run ahead of the events sent before them, with or without
//! selectors, and when resuming from history or replaying more objects than one chunk holds.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

const WRITERS: usize = 8;
const OBJECTS_PER_WRITER: usize = 40;

async fn start() -> devcluster::Running {
    devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts")
}

fn cm(name: &str, tier: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"tier": tier}}}))
        .expect("config map")
}

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .expect("numeric resourceVersion")
}

/// What a watcher saw: (type, name, resourceVersion) of each event in arrival order; checks
/// bookmarks on the way.
async fn collect(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
    expected: usize,
) -> Vec<(String, String, u64)> {
    let mut seen = Vec::new();
    let mut last_bookmark = 0u64;
    while seen.len() < expected {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .unwrap_or_else(|_| panic!("no event within 10 s after {} events", seen.len()))
            .expect("stream open")
            .expect("event decodes");
        let (kind, obj) = match item {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse().expect("bookmark rv");
                assert!(rv >= last_bookmark, "bookmarks go backwards");
                last_bookmark = rv;
                continue;
            }
            WatchEvent::Error(s) => panic!("watch error {s:?}"),
        };
        let rv = rv_of(&obj);
        assert!(
            rv > last_bookmark,
            "event at {rv} arrives after a bookmark at {last_bookmark}"
        );
        seen.push((
            kind.to_string(),
            obj.metadata.name.clone().unwrap_or_default(),
            rv,
        ));
    }
    seen
}

fn assert_in_order(seen: &[(String, String, u64)]) {
    for pair in seen.windows(2) {
        assert!(pair[0].2 < pair[1].2, "out of order: {pair:?}");
    }
}

/// Writes from several tasks at once: each creates its objects in tier `a`, and moves every
/// second one to tier `b`. Returns the resourceVersion of every write.
async fn burst(api: &Api<ConfigMap>) -> Vec<(String, u64)> {
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let mut writes = Vec::new();
            for i in 0..OBJECTS_PER_WRITER {
                let name = format!("w{w}-{i}");
                let created = api
                    .create(&PostParams::default(), &cm(&name, "a"))
                    .await
                    .expect("create");
                writes.push((name.clone(), rv_of(&created)));
                if i % 2 == 1 {
                    let moved = api
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"metadata": {"labels": {"tier": "b"}}})),
                        )
                        .await
                        .expect("patch");
                    writes.push((name, rv_of(&moved)));
                }
            }
            writes
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("writer task"));
    }
    all.sort_by_key(|(_, rv)| *rv);
    all
}

#[tokio::test]
async fn concurrent_writes_reach_every_watcher_once_and_in_order() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let from = dc.resource_version().to_string();
    let params = WatchParams::default(); // with bookmarks
    let mut all = api.watch(&params, &from).await.expect("watch").boxed();
    let mut tier_a = api
        .watch(&params.clone().labels("tier=a"), &from)
        .await
        .expect("watch tier=a")
        .boxed();

    let writes = burst(&api).await;
    let creates = WRITERS * OBJECTS_PER_WRITER;
    let moves = writes.len() - creates;

    let seen = collect(&mut all, writes.len()).await;
    assert_in_order(&seen);
    let expected: Vec<(String, u64)> = writes.clone();
    let got: Vec<(String, u64)> = seen.iter().map(|(_, n, rv)| (n.clone(), *rv)).collect();
    assert_eq!(got, expected, "every write once, in resourceVersion order");

    // The selecting watcher sees each object added, and deleted when it moves out of tier a.
    let seen_a = collect(&mut tier_a, creates + moves).await;
    assert_in_order(&seen_a);
    let mut per_object: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (kind, name, _) in &seen_a {
        per_object
            .entry(name.clone())
            .or_default()
            .push(kind.clone());
    }
    assert_eq!(per_object.len(), creates);
    for (name, kinds) in per_object {
        let i: usize = name
            .rsplit('-')
            .next()
            .and_then(|i| i.parse().ok())
            .expect("index");
        let want: Vec<&str> = if i % 2 == 1 {
            vec!["ADDED", "DELETED"]
        } else {
            vec!["ADDED"]
        };
        assert_eq!(kinds, want, "{name}");
    }
    dc.shutdown().await;
}

#[tokio::test]
async fn resuming_from_history_and_replaying_send_every_object_once_in_order() {
    let dc = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(dc.client());
    let from = dc.resource_version().to_string();
    let writes = burst(&api).await;

    // Resume: the whole burst comes from the history, several chunks long.
    let mut resumed = api
        .watch(&WatchParams::default(), &from)
        .await
        .expect("watch from history")
        .boxed();
    let seen = collect(&mut resumed, writes.len()).await;
    let got: Vec<(String, u64)> = seen.iter().map(|(_, n, rv)| (n.clone(), *rv)).collect();
    assert_eq!(got, writes);

    // Replay: every current object once, as ADDED, then live changes after it.
    let mut replay = api
        .watch(&WatchParams::default(), "0")
        .await
        .expect("replaying watch")
        .boxed();
    let mut listed: Vec<String> = api
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    listed.sort_unstable();
    assert!(listed.len() >= WRITERS * OBJECTS_PER_WRITER);
    let seen = collect(&mut replay, listed.len()).await;
    assert!(seen.iter().all(|(kind, _, _)| kind == "ADDED"));
    let mut names: Vec<String> = seen.into_iter().map(|(_, n, _)| n).collect();
    names.sort_unstable();
    assert_eq!(names, listed, "each object once");
    let after = api
        .create(&PostParams::default(), &cm("after-replay", "a"))
        .await
        .expect("create");
    let next = collect(&mut replay, 1).await;
    assert_eq!(
        next,
        [(
            "ADDED".to_string(),
            "after-replay".to_string(),
            rv_of(&after)
        )]
    );
    dc.shutdown().await;
}
