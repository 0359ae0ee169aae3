//! Checking only the members a write changed ([`super::drop_unknown_fields_onto`]) against
//! checking the whole object, for generated Pods: clean stored versions and writes onto them
//! that change members, add unknown fields (at the top, in metadata, spec and status, inside
//! list elements), give values of the wrong type, null or drop members, or change the type
//! meta. Same dropped paths in the same order, same decoding verdict, same object.

use serde_json::{Value, json};

use super::*;
use crate::patch::test_gen::Gen;
use crate::registry::Registry;

fn stored_pod(g: &mut Gen) -> Value {
    let mut containers = Vec::new();
    for i in 0..=g.below(3) {
        let mut c = json!({"name": format!("c{i}"), "image": g.pick(&["busybox", "nginx:1"])});
        if g.chance(2) {
            c["ports"] = json!([{"containerPort": 80 + g.below(3), "protocol": "TCP"}]);
        }
        if g.chance(3) {
            c["resources"] = json!({"limits": {"cpu": "500m"}});
        }
        containers.push(c);
    }
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "resourceVersion": "7",
            "labels": {"app": g.pick(&["a", "b"])},
            "managedFields": [{"manager": "m", "operation": "Update", "apiVersion": "v1",
                "time": "2024-01-02T03:04:05Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"containers": containers, "restartPolicy": "Always"},
    });
    if g.chance(2) {
        pod["spec"]["nodeName"] = json!("node-1");
    }
    if g.chance(2) {
        pod["status"] = json!({"phase": g.pick(&["Pending", "Running"]),
            "conditions": [{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                "lastTransitionTime": "2024-01-02T03:04:05Z"}]});
    }
    if g.chance(4) {
        pod["metadata"]["annotations"] = json!({"x": ""});
    }
    pod
}

/// A path to an object inside `member` of a Pod, where an unknown field can go.
fn add_unknown(g: &mut Gen, obj: &mut Value) {
    let target = match g.below(6) {
        0 => Some(obj),
        1 => obj.get_mut("metadata"),
        2 => obj.get_mut("spec"),
        3 => obj.pointer_mut("/spec/containers/0"),
        4 => obj.get_mut("status"),
        _ => obj.pointer_mut("/status/conditions/0"),
    };
    if let Some(Value::Object(m)) = target {
        let value = match g.below(4) {
            0 => json!(1),
            1 => Value::Null,
            2 => json!({}),
            _ => json!({"deep": [1]}),
        };
        m.insert(g.pick(&["bogus", "zz", "aUnknown"]).into(), value);
    }
}

fn change(g: &mut Gen, obj: &mut Value) {
    match g.below(10) {
        0 | 1 => add_unknown(g, obj),
        2 => set(
            obj,
            "/metadata",
            "labels",
            json!({"app": "changed", "n": g.below(5).to_string()}),
        ),
        3 => set(
            obj,
            "",
            "status",
            json!({"phase": "Running", "podIP": "10.0.0.1"}),
        ),
        4 => set(obj, "/spec/containers/0", "image", json!("other")),
        // Wrong types: the object does not decode.
        5 => set(obj, "/spec", "restartPolicy", json!(3)),
        6 => set(obj, "", "status", json!({"phase": ["not", "a", "string"]})),
        7 => {
            let key = g.pick(&["spec", "status", "metadata"]);
            if g.chance(2) {
                set(obj, "", key, Value::Null);
            } else if let Some(m) = obj.as_object_mut() {
                m.remove(key);
            }
        }
        8 => set(obj, "", "apiVersion", json!(g.pick(&["v1", "v2"]))),
        _ => set(obj, "", "kind", json!(g.pick(&["Pod", "Node"]))),
    }
}

/// Sets `key` in the object at `parent` (nothing when there is no object there).
fn set(obj: &mut Value, parent: &str, key: &str, value: Value) {
    if let Some(Value::Object(m)) = obj.pointer_mut(parent) {
        m.insert(key.into(), value);
    }
}

#[test]
fn checking_changed_members_equals_checking_the_whole_pod() {
    let reg = Registry::with_builtins();
    let pods = reg.lookup("", "v1", "pods").expect("pods are served");
    let mut g = Gen(0x5eed_0fc1_ea00);
    let mut decoded = 0;
    let mut dropped = 0;
    for case in 0..4000 {
        let mut stored = stored_pod(&mut g);
        let found = drop_unknown_fields_found(&pods, &mut stored);
        assert!(found.decoded && found.dropped.is_empty(), "{stored}");
        let mut written = stored.clone();
        for _ in 0..=g.below(3) {
            change(&mut g, &mut written);
        }
        let mut whole = written.clone();
        let expected = drop_unknown_fields_found(&pods, &mut whole);
        let mut onto = written.clone();
        let got = drop_unknown_fields_onto(&pods, &mut onto, Some(&stored));
        assert_eq!(got.dropped, expected.dropped, "case {case}: {written}");
        assert_eq!(got.decoded, expected.decoded, "case {case}: {written}");
        assert_eq!(onto, whole, "case {case}: {written}");
        decoded += usize::from(expected.decoded);
        dropped += usize::from(!expected.dropped.is_empty());
    }
    // The generator reaches every outcome often.
    assert!(decoded > 1000 && decoded < 3800, "{decoded}");
    assert!(dropped > 200, "{dropped}");
}

/// A stored version is noted clean only by the write that stored it, and only then is the
/// shortcut taken: an unknown field in an unchanged member of a version not noted is found.
#[test]
fn versions_not_noted_are_checked_whole() {
    let reg = Registry::with_builtins();
    let pods = reg.lookup("", "v1", "pods").expect("pods are served");
    let stored = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "uid": "u-not-noted", "resourceVersion": "3", "bogus": 1},
        "spec": {"containers": []}});
    let mut written = stored.clone();
    written["status"] = json!({"phase": "Running"});
    let query = crate::server::Query::default();
    let notes = WriteNotes::default();
    let clean = admit_onto(&notes, &query, &pods, &mut written, Some(&stored)).expect("admitted");
    assert!(clean);
    assert!(written["metadata"].get("bogus").is_none(), "{written}");

    let mut noted = stored.clone();
    if let Some(m) = noted["metadata"].as_object_mut() {
        m.remove("bogus");
    }
    noted["metadata"]["uid"] = json!("u-noted");
    note_written(&notes, &pods, true, None, &noted);
    assert!(is_clean(&notes, &pods, &noted));
    assert!(
        !is_clean(&WriteNotes::default(), &pods, &noted),
        "notes are per cluster"
    );
    let mut other_rv = noted.clone();
    other_rv["metadata"]["resourceVersion"] = json!("4");
    assert!(!is_clean(&notes, &pods, &other_rv));
    // A write admitted clean onto a version not noted is not noted either.
    let mut after = other_rv.clone();
    after["metadata"]["resourceVersion"] = json!("5");
    note_written(&notes, &pods, true, Some(&other_rv), &after);
    assert!(!is_clean(&notes, &pods, &after));
}
