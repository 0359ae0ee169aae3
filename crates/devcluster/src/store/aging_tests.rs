//! Tests of versions kept as JSON once [`FRAMES_KEPT`] newer events exist: everything read back
//! from them (gets, lists, watch history, previous objects, frames, writes onto them) equals
//! what their trees gave before.

use super::*;
use serde_json::json;

/// A string with escapes, control characters and characters beyond the BMP.
fn generated_string(rng: &mut fastrand::Rng) -> String {
    const PIECES: &[&str] = &[
        "a", "Z", "\"", "\\", "/", "\n", "\t", "\u{0}", "\u{1f}", "é", "\u{2028}", "😀", " ", "{}",
        "[", "0",
    ];
    (0..rng.usize(0..8))
        .map(|_| PIECES[rng.usize(..PIECES.len())])
        .collect()
}

/// A JSON value with the shapes and scalars a round trip through text could get wrong.
fn generated(rng: &mut fastrand::Rng, depth: u32) -> Value {
    if depth == 0 || rng.u8(0..4) == 0 {
        return match rng.u8(0..10) {
            0 => Value::Null,
            1 => json!(rng.bool()),
            2 => json!(rng.i64(..)),
            3 => json!(rng.u64(..)),
            4 => json!(f64::from_bits(rng.u64(..))),
            5 => json!(rng.f64() * 10f64.powi(rng.i32(-300..300))),
            6 => [
                json!(0.1),
                json!(-0.0),
                json!(1e300),
                json!(5e-324),
                json!(i64::MIN),
            ][rng.usize(0..5)]
            .clone(),
            7 => json!(-rng.f64()),
            _ => json!(generated_string(rng)),
        };
    }
    if rng.bool() {
        Value::Object(
            (0..rng.usize(0..6))
                .map(|_| (generated_string(rng), generated(rng, depth - 1)))
                .collect(),
        )
    } else {
        Value::Array(
            (0..rng.usize(0..5))
                .map(|_| generated(rng, depth - 1))
                .collect(),
        )
    }
}

fn object(name: &str, data: Value) -> Value {
    json!({"metadata": {"name": name, "namespace": "default", "uid": format!("u-{name}")}, "data": data})
}

fn commit(store: &Store, name: &str, obj: Value) -> (Arc<Value>, Arc<Event>) {
    let committed = store
        .write_optimistic::<()>("things", "default", name, |_| Ok(WriteOp::Put(obj.clone())))
        .unwrap();
    let stored = committed.outcome.object().unwrap().clone();
    (stored, committed.event.expect("a change emits an event"))
}

/// Writes `count` objects of another resource, so that earlier events age.
fn age(store: &Store, count: usize) {
    for i in 0..count {
        store
            .write::<()>("fillers", "default", &format!("f{i}"), |_, _| {
                Ok(WriteOp::Put(json!({"metadata": {"name": format!("f{i}")}})))
            })
            .unwrap();
    }
}

/// Generated objects, written twice each and then aged: the stored versions, the events and
/// their frames read back as they did while the trees were kept.
#[test]
fn aged_versions_read_back_equal_to_their_trees() {
    let mut rng = fastrand::Rng::with_seed(7);
    let store = Store::new(10 * FRAMES_KEPT, 100);
    let names: Vec<String> = (0..300).map(|i| format!("o{i}")).collect();
    let first: Vec<_> = names
        .iter()
        .map(|n| commit(&store, n, object(n, generated(&mut rng, 4))))
        .collect();
    let second: Vec<_> = names
        .iter()
        .map(|n| {
            commit(
                &store,
                n,
                object(n, json!({"then": generated(&mut rng, 4)})),
            )
        })
        .collect();
    // Frames as built from the trees, including a copy with another type.
    let frames_before: Vec<_> = first
        .iter()
        .chain(&second)
        .map(|(_, e)| (e.frame(e.event_type), e.frame(EventType::Deleted)))
        .collect();
    let (listed_before, _) = store.list("things", None);
    assert!(
        first
            .iter()
            .chain(&second)
            .all(|(_, e)| !e.object_is_encoded())
    );

    age(&store, FRAMES_KEPT);

    for ((tree, event), frames) in first.iter().chain(&second).zip(&frames_before) {
        assert!(event.object_is_encoded(), "rv {} is old", event.rv);
        assert!(!event.frame_is_kept());
        assert_eq!(event.object(), *tree);
        assert_eq!(event.encoded(), serde_json::to_vec(&**tree).unwrap());
        assert_eq!(
            &(
                event.frame(event.event_type),
                event.frame(EventType::Deleted)
            ),
            frames
        );
    }
    for (((first_tree, _), (second_tree, second_event)), name) in
        first.iter().zip(&second).zip(&names)
    {
        assert_eq!(second_event.previous().as_ref(), Some(first_tree));
        assert_eq!(
            store.get("things", "default", name).as_ref(),
            Some(second_tree)
        );
    }
    let (listed, _) = store.list("things", None);
    assert_eq!(listed, listed_before);
    let (start, _rx) = store.watch("things", None, Some(1));
    let WatchStart::History(events) = start else {
        panic!("the history reaches back to the first write");
    };
    let from_history: Vec<Arc<Value>> = events.iter().map(|e| e.object()).collect();
    let written: Vec<Arc<Value>> = first
        .iter()
        .chain(&second)
        .map(|(t, _)| t.clone())
        .collect();
    assert_eq!(from_history, written);
    let (WatchStart::Replay(replayed, _), _rx) = store.watch("things", None, None) else {
        panic!("no resourceVersion replays");
    };
    assert_eq!(replayed, listed_before);
}

/// Writes onto a version kept as JSON see it, commit once (the optimistic check does not
/// mistake a fresh parse for a newer version) and report it as the previous object.
#[test]
fn writes_onto_aged_versions_commit_once() {
    let store = Store::new(10 * FRAMES_KEPT, 100);
    let (_, created) = commit(&store, "c", object("c", json!({"n": 1})));
    age(&store, FRAMES_KEPT);
    assert!(created.object_is_encoded());

    let mut calls = 0;
    let committed = store
        .write_optimistic::<()>("things", "default", "c", |current| {
            calls += 1;
            let mut next = (**current.expect("stored")).clone();
            next["data"]["n"] = json!(next["data"]["n"].as_u64().unwrap_or(0) + 1);
            Ok(WriteOp::Put(next))
        })
        .unwrap();
    assert_eq!(calls, 1, "no retry when nobody else wrote");
    let updated = committed.outcome.object().unwrap().clone();
    assert_eq!(updated["data"]["n"], 2);
    let event = committed.event.unwrap();
    assert_eq!(event.event_type, EventType::Modified);
    assert_eq!(event.previous().unwrap()["data"]["n"], 1);

    // A no-op onto an aged version emits nothing.
    age(&store, FRAMES_KEPT);
    let same = store
        .write_optimistic::<()>("things", "default", "c", |current| {
            Ok(WriteOp::Put((**current.unwrap()).clone()))
        })
        .unwrap();
    assert!(same.event.is_none());
    assert_eq!(same.outcome.object(), Some(&updated));

    // A delete under the lock reports the aged version, and the owner indexes let it go.
    assert!(store.uid_exists("u-c"));
    let deleted = store
        .write_committed::<()>("things", "default", "c", |current, _| {
            assert_eq!(current.unwrap()["data"]["n"], 2);
            Ok(WriteOp::Delete)
        })
        .unwrap();
    let event = deleted.event.unwrap();
    assert_eq!(event.event_type, EventType::Deleted);
    assert_eq!(event.object()["data"]["n"], 2);
    assert_eq!(event.previous().unwrap()["data"]["n"], 2);
    assert!(!store.uid_exists("u-c"));
    assert_eq!(store.get("things", "default", "c"), None);
}

/// With a history shorter than [`FRAMES_KEPT`], an event's version is kept as JSON when the
/// event leaves the history, and a compaction ages the events it drops.
#[test]
fn short_histories_and_compactions_age_their_events() {
    let store = Store::new(2, 100);
    let (a, first) = commit(&store, "a", object("a", json!(1)));
    let (b, second) = commit(&store, "b", object("b", json!(2)));
    assert!(!first.object_is_encoded());
    commit(&store, "c", object("c", json!(3)));
    assert!(first.object_is_encoded(), "left the history");
    assert!(!second.object_is_encoded());
    assert_eq!(store.get("things", "default", "a"), Some(a));
    store.compact();
    assert!(second.object_is_encoded(), "dropped by the compaction");
    assert_eq!(store.get("things", "default", "b"), Some(b));
}

/// Whether an object is terminating reads the same from its tree and from its JSON, for
/// objects with and without a `deletionTimestamp` (also a null one, and metadata that is not
/// an object), and a missing object is `None`.
#[test]
fn terminating_reads_the_same_from_trees_and_from_json() {
    let store = Store::new(2, 100);
    let cases = [
        ("plain", object("plain", json!(1))),
        (
            "deleting",
            json!({"metadata": {"name": "deleting", "namespace": "default",
                "deletionTimestamp": "2024-01-02T03:04:05Z"}}),
        ),
        (
            "null",
            json!({"metadata": {"name": "null", "namespace": "default", "deletionTimestamp": null}}),
        ),
        ("odd", json!({"metadata": "not an object", "data": 1})),
    ];
    let mut events = Vec::new();
    for (name, obj) in &cases {
        let (tree, event) = commit(&store, name, obj.clone());
        let expected = tree.pointer("/metadata/deletionTimestamp").is_some();
        assert_eq!(expected, *name == "deleting" || *name == "null");
        assert!(!event.object_is_encoded());
        assert_eq!(
            store.terminating("things", "default", name),
            Some(expected),
            "{name}"
        );
        events.push((*name, event, expected));
    }
    store.compact();
    for (name, event, expected) in events {
        assert!(event.object_is_encoded(), "{name}");
        assert_eq!(
            store.terminating("things", "default", name),
            Some(expected),
            "{name}"
        );
    }
    assert_eq!(store.terminating("things", "default", "absent"), None);
}
