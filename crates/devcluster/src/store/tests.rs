//! Tests of the store: resourceVersions, optimistic commits under concurrent writers, watch
//! channels and history, the owner indexes.

use super::*;
use serde_json::json;

fn put(store: &Store, name: &str, data: &str) -> WriteOutcome {
    store
        .write::<()>("configmaps", "default", name, |_, _| {
            Ok(WriteOp::Put(json!({"metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")}, "data": {"k": data}})))
        })
        .unwrap()
}

#[test]
fn writes_bump_one_global_resource_version_and_no_ops_do_not() {
    let store = Store::new(100, 100);
    let a = put(&store, "a", "1");
    assert!(matches!(a, WriteOutcome::Created(_)));
    assert_eq!(a.object().unwrap()["metadata"]["resourceVersion"], "2");
    let again = put(&store, "a", "1");
    assert!(matches!(again, WriteOutcome::Unchanged(_)));
    assert_eq!(store.current_rv(), 2);
    let b = put(&store, "b", "1");
    assert_eq!(b.object().unwrap()["metadata"]["resourceVersion"], "3");
    let (items, rv) = store.list("configmaps", Some("default"));
    assert_eq!(items.len(), 2);
    assert_eq!(rv, 3);
}

/// Increment `data.n` of configmap "counter" through an optimistic write.
fn increment(store: &Store) -> WriteOutcome {
    store
        .write_optimistic::<()>("configmaps", "default", "counter", |current| {
            let mut next = current.map_or_else(
                || json!({"metadata": {"name": "counter", "namespace": "default"}, "data": {"n": 0}}),
                |c| (**c).clone(),
            );
            let n = next["data"]["n"].as_u64().unwrap_or(0);
            next["data"]["n"] = json!(n + 1);
            Ok(WriteOp::Put(next))
        })
        .unwrap()
        .outcome
}

#[test]
fn concurrent_optimistic_writers_lose_no_update() {
    let store = Arc::new(Store::new(10_000, 10_000));
    let (threads, each) = (4, 250);
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let store = store.clone();
            std::thread::spawn(move || {
                for _ in 0..each {
                    increment(&store);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("writer thread");
    }
    let counter = store.get("configmaps", "default", "counter").unwrap();
    assert_eq!(counter["data"]["n"], threads * each);
    // one resourceVersion per write, and the history holds each value once, in order
    assert_eq!(store.current_rv(), 1 + threads * each);
    assert_eq!(
        counter["metadata"]["resourceVersion"],
        (1 + threads * each).to_string()
    );
    let (start, _rx) = store.watch("configmaps", None, Some(1));
    let WatchStart::History(events) = start else {
        panic!("expected history");
    };
    let values: Vec<u64> = events
        .iter()
        .map(|e| e.object()["data"]["n"].as_u64().unwrap())
        .collect();
    assert_eq!(values, (1..=threads * each).collect::<Vec<_>>());
}

#[test]
fn an_optimistic_write_recomputes_on_the_newer_object_and_keeps_its_errors() {
    let store = Store::new(100, 100);
    increment(&store);
    let mut runs = Vec::new();
    let outcome = store
        .write_optimistic::<()>("configmaps", "default", "counter", |current| {
            let seen = current.unwrap()["data"]["n"].as_u64().unwrap();
            runs.push(seen);
            if runs.len() == 1 {
                // another writer commits while this one computes
                increment(&store);
            }
            let mut next = (**current.unwrap()).clone();
            next["data"]["n"] = json!(seen * 10);
            Ok(WriteOp::Put(next))
        })
        .unwrap()
        .outcome;
    assert_eq!(runs, [1, 2], "the second run saw the other writer's update");
    assert_eq!(outcome.object().unwrap()["data"]["n"], 20);
    assert_eq!(store.current_rv(), 4);
    // A conflict decided on the version seen is returned as is, and nothing is written.
    let err = store.write_optimistic("configmaps", "default", "counter", |current| match current
        .and_then(|c| c["metadata"]["resourceVersion"].as_str())
    {
        Some("3") => Ok(WriteOp::Delete),
        other => Err(format!("stale: {other:?}")),
    });
    assert_eq!(err.unwrap_err(), "stale: Some(\"4\")");
    assert_eq!(store.current_rv(), 4);
    // A create finds the object absent, or recomputes.
    let created = store
        .write_optimistic::<()>("configmaps", "default", "fresh", |current| {
            assert!(current.is_none());
            Ok(WriteOp::Put(
                json!({"metadata": {"name": "fresh", "namespace": "default"}}),
            ))
        })
        .unwrap();
    assert!(matches!(created.outcome, WriteOutcome::Created(_)));
}

/// A write's response and its watchers share one serialization of the committed object; the
/// frames are built once per frame type, and each is the object as stored.
#[test]
fn a_committed_event_encodes_the_stored_object_once_for_everyone() {
    let store = Store::new(10 * FRAMES_KEPT, 100);
    let (_, mut rx) = store.watch("configmaps", None, None);
    let committed = store
        .write_optimistic::<()>("configmaps", "default", "c", |_| {
            Ok(WriteOp::Put(
                json!({"metadata": {"name": "c", "namespace": "default"}, "data": {"k": "v"}}),
            ))
        })
        .unwrap();
    let event = committed.event.expect("a create emits an event");
    let stored = committed.outcome.object().unwrap().clone();
    assert!(event.holds(&stored));
    let body = event.encoded();
    let parsed: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        parsed, *stored,
        "the encoding is the stored object, resourceVersion included"
    );
    assert_eq!(parsed["metadata"]["resourceVersion"], "2");
    let watched = rx.try_recv().unwrap();
    assert!(
        Arc::ptr_eq(&watched, &event),
        "the watchers get the same event"
    );
    assert_eq!(watched.encoded().as_ptr(), body.as_ptr(), "serialized once");
    let added = event.frame(EventType::Added);
    assert_eq!(
        added.as_ptr(),
        event.frame(EventType::Added).as_ptr(),
        "built once"
    );
    let frame: serde_json::Value = serde_json::from_slice(&added).unwrap();
    assert_eq!(frame, json!({"type": "ADDED", "object": parsed}));
    assert!(added.ends_with(b"}\n"));
    // The object's JSON is the frame's middle.
    let prefix = br#"{"type":"ADDED","object":"#.len();
    assert_eq!(&added[prefix..added.len() - 2], &body[..]);
    let deleted: serde_json::Value =
        serde_json::from_slice(&event.frame(EventType::Deleted)).unwrap();
    assert_eq!(deleted, json!({"type": "DELETED", "object": parsed}));
    // The newest events keep their frame; older ones serialize again, to the same bytes.
    assert!(event.frame_is_kept());
    for i in 1..FRAMES_KEPT {
        put(&store, &format!("n{i}"), "x");
    }
    assert!(
        event.frame_is_kept(),
        "still among the newest {FRAMES_KEPT}"
    );
    put(&store, "one-more", "x");
    assert!(!event.frame_is_kept(), "released once older");
    assert_eq!(event.frame(EventType::Added), added);
    assert!(!event.frame_is_kept(), "not kept again");
    // A no-op emits nothing.
    let same = store
        .write_optimistic::<()>("configmaps", "default", "c", |current| {
            Ok(WriteOp::Put((**current.unwrap()).clone()))
        })
        .unwrap();
    assert!(same.event.is_none());
    assert!(matches!(same.outcome, WriteOutcome::Unchanged(Some(_))));
}

#[test]
fn watch_channels_carry_only_their_resource() {
    let store = Store::new(100, 100);
    let (_, mut pods) = store.watch("pods", None, None);
    put(&store, "a", "1");
    store
        .write::<()>("pods", "default", "p", |_, _| {
            Ok(WriteOp::Put(
                json!({"metadata": {"name": "p", "namespace": "default"}}),
            ))
        })
        .unwrap();
    let event = pods.try_recv().expect("the pod's event");
    assert_eq!((&*event.group_resource, event.rv), ("pods", 3));
    assert!(
        pods.try_recv().is_err(),
        "the configmap write is not on the pods channel"
    );
}

#[test]
fn watch_from_history_and_expiry() {
    let store = Store::new(2, 100);
    put(&store, "a", "1");
    put(&store, "a", "2");
    put(&store, "a", "3");
    let (start, _rx) = store.watch("configmaps", None, Some(3));
    match start {
        WatchStart::History(evs) => {
            assert_eq!(evs.len(), 1);
            assert_eq!(evs[0].rv, 4);
        }
        _ => panic!("expected history"),
    }
    let (start, _rx) = store.watch("configmaps", None, Some(1));
    assert!(matches!(start, WatchStart::Expired { .. }));
}

#[test]
fn objects_with_a_missing_owner_are_found_until_the_owner_exists() {
    let store = Store::new(100, 100);
    let owned = |name: &str, owners: &[&str]| {
        let refs: Vec<_> = owners.iter().map(|uid| json!({"uid": uid})).collect();
        store
            .write::<()>("configmaps", "default", name, |_, _| {
                Ok(WriteOp::Put(json!({"metadata": {
                    "name": name, "namespace": "default", "uid": format!("u-{name}"),
                    "ownerReferences": refs,
                }})))
            })
            .unwrap();
    };
    owned("orphan", &["u-owner"]);
    owned("half", &["u-owner", "u-orphan"]);
    owned("kept", &["u-orphan"]);
    let names = |keys: Vec<ObjectKey>| keys.into_iter().map(|k| k.name).collect::<Vec<_>>();
    assert_eq!(names(store.with_missing_owner()), ["half", "orphan"]);
    put(&store, "owner", "1");
    assert!(store.with_missing_owner().is_empty());
    // the owner goes: its dependents are found again; a dependent that goes is not
    store
        .write::<()>("configmaps", "default", "owner", |_, _| Ok(WriteOp::Delete))
        .unwrap();
    store
        .write::<()>("configmaps", "default", "orphan", |_, _| {
            Ok(WriteOp::Delete)
        })
        .unwrap();
    assert_eq!(names(store.with_missing_owner()), ["half", "kept"]);
    owned("half", &[]);
    assert_eq!(names(store.with_missing_owner()), ["kept"]);
}

#[test]
fn the_collector_is_handed_only_the_deletions_it_finishes() {
    let store = Store::new(100, 100);
    let terminating = |resource: &str, name: &str, finalizers: &[&str]| {
        store
            .write::<()>(resource, "", name, |_, _| {
                Ok(WriteOp::Put(json!({"metadata": {
                    "name": name, "uid": format!("u-{name}"),
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                    "finalizers": finalizers,
                }})))
            })
            .unwrap();
    };
    // Someone else finishes these: a Pod in its grace period, a controller's finalizer.
    terminating("pods", "graceful", &[]);
    terminating(
        "sandboxes.agents.x-k8s.io",
        "held",
        &["example.com/cleanup"],
    );
    // The collector finishes these.
    terminating("pods", "orphaning", &["orphan"]);
    terminating("configmaps", "foreground", &["foregroundDeletion"]);
    terminating("namespaces", "team", &[]);
    terminating(
        "customresourcedefinitions.apiextensions.k8s.io",
        "widgets.example.com",
        &[crate::crd::CLEANUP_FINALIZER],
    );
    terminating(
        "customresourcedefinitions.apiextensions.k8s.io",
        "gadgets.example.com",
        &["example.com/cleanup"],
    );
    let names = || {
        let mut names: Vec<String> = store
            .terminating_objects()
            .into_iter()
            .map(|(k, _)| k.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(),
        ["foreground", "orphaning", "team", "widgets.example.com"]
    );
    // Dropping the collector's finalizer hands the object back to whoever else holds it.
    terminating("pods", "orphaning", &["example.com/cleanup"]);
    store
        .write::<()>("configmaps", "", "foreground", |_, _| Ok(WriteOp::Delete))
        .unwrap();
    assert_eq!(names(), ["team", "widgets.example.com"]);
}

#[test]
fn a_list_page_starts_after_the_continue_key_and_stays_in_its_namespace() {
    let store = Store::new(100, 100);
    for (ns, name) in [("a", "x"), ("b", "m"), ("b", "p"), ("b", "z"), ("c", "a")] {
        store
            .write::<()>("configmaps", ns, name, |_, _| {
                Ok(WriteOp::Put(
                    json!({"metadata": {"name": name, "namespace": ns}}),
                ))
            })
            .unwrap();
    }
    let names = |ns: Option<&str>, after: Option<(&str, &str)>| -> Vec<String> {
        let after = after.map(|(n, m)| (n.to_string(), m.to_string()));
        let (versions, rv) = store.list_versions_after("configmaps", ns, after.as_ref());
        assert_eq!(rv, store.current_rv());
        versions
            .iter()
            .map(|v| {
                let o = v.tree();
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(names(None, None), ["a/x", "b/m", "b/p", "b/z", "c/a"]);
    assert_eq!(names(None, Some(("b", "m"))), ["b/p", "b/z", "c/a"]);
    assert_eq!(names(Some("b"), None), ["b/m", "b/p", "b/z"]);
    assert_eq!(names(Some("b"), Some(("b", "n"))), ["b/p", "b/z"]);
    // A key before the namespace starts the page at its first object, one after it ends it.
    assert_eq!(names(Some("b"), Some(("a", "x"))), ["b/m", "b/p", "b/z"]);
    assert!(names(Some("b"), Some(("b", "z"))).is_empty());
    assert!(names(Some("b"), Some(("c", ""))).is_empty());
    assert!(names(Some("none"), None).is_empty());
    assert!(
        store
            .list_versions_after("secrets", None, None)
            .0
            .is_empty()
    );
}
