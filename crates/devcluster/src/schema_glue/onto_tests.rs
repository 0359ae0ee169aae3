//! Pruning and defaulting only the members a write changed ([`super::admit_onto`] onto a
//! version admitted under the same schema) against admitting the whole object, for generated
//! writes onto generated stored objects: unknown fields at every level, members with and
//! without defaults removed or nulled, wrong types, changed values. Same dropped paths, same
//! causes, same object.

use serde_json::{Value, json};

use super::{admit, admit_onto};
use crate::patch::test_gen::Gen;
use crate::schema::StructuralSchema;

fn schema() -> StructuralSchema {
    StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "default": {"replicas": 1},
                "properties": {
                    "replicas": {"type": "integer", "default": 1, "minimum": 0},
                    "mode": {"type": "string", "enum": ["a", "b"], "default": "a"},
                    "note": {"type": "string", "nullable": true},
                    "template": {"type": "object", "properties": {
                        "image": {"type": "string"},
                        "ports": {"type": "array", "items": {"type": "object", "properties": {
                            "port": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"}}}}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }
            },
            "status": {
                "type": "object",
                "properties": {
                    "phase": {"type": "string", "default": "Pending"},
                    "count": {"type": "integer"}
                }
            }
        }
    }))
    .expect("the test schema compiles")
}

fn leaf(g: &mut Gen) -> Value {
    match g.below(6) {
        0 => json!("a"),
        1 => json!(g.below(4)),
        2 => Value::Null,
        3 => json!({"unknown": 1}),
        4 => json!([{"port": 80}]),
        _ => json!(-1),
    }
}

fn object(g: &mut Gen) -> Value {
    let mut obj = json!({"apiVersion": "x.io/v1", "kind": "Thing",
        "metadata": {"name": "t", "uid": "u", "resourceVersion": "3"}});
    if g.chance(4) {
        return obj;
    }
    let mut spec = json!({"replicas": g.below(3), "template": {"image": "i",
        "ports": [{"port": 80}, {"port": 81, "protocol": "UDP"}]}});
    if g.chance(2) {
        spec["free"] = json!({"anything": {"goes": [1]}});
    }
    if g.chance(3) {
        spec["note"] = Value::Null;
    }
    obj["spec"] = spec;
    if g.chance(2) {
        obj["status"] = json!({"count": g.below(5)});
    }
    obj
}

fn change(g: &mut Gen, obj: &mut Value) {
    let paths = [
        "",
        "/spec",
        "/spec/template",
        "/spec/template/ports/0",
        "/spec/free",
        "/status",
        "/metadata",
    ];
    let at = paths[g.below(paths.len() as u64) as usize];
    let Some(target) = obj.pointer_mut(at) else {
        if let Some(m) = obj.as_object_mut() {
            m.insert(g.pick(&["spec", "status", "extra"]).into(), leaf(g));
        }
        return;
    };
    match target {
        Value::Object(m) => {
            let key = g.pick(&[
                "replicas", "mode", "note", "image", "protocol", "phase", "count", "bogus", "spec",
                "status",
            ]);
            if g.chance(3) {
                m.remove(key);
            } else {
                m.insert(key.into(), leaf(g));
            }
        }
        other => *other = leaf(g),
    }
}

#[test]
fn pruning_and_defaulting_changed_members_equals_admitting_the_whole_object() {
    let schema = schema();
    let mut g = Gen(0xc0ff_ee11);
    let mut with_causes = 0;
    let mut with_dropped = 0;
    for case in 0..4000 {
        let mut stored = object(&mut g);
        let (_, causes) = admit(&schema, None, &mut stored);
        if !causes.is_empty() {
            continue;
        }
        let mut written = stored.clone();
        for _ in 0..=g.below(3) {
            change(&mut g, &mut written);
        }
        let mut whole = written.clone();
        let expected = admit(&schema, Some(&stored), &mut whole);
        let mut onto = written.clone();
        let got = admit_onto(&schema, Some(&stored), true, &mut onto);
        assert_eq!(got.0, expected.0, "case {case}: {written}");
        assert_eq!(got.1, expected.1, "case {case}: {written}");
        assert_eq!(onto, whole, "case {case}: {written}");
        with_causes += usize::from(!expected.1.is_empty());
        with_dropped += usize::from(!expected.0.is_empty());
    }
    assert!(
        with_causes > 200 && with_dropped > 200,
        "{with_causes} {with_dropped}"
    );
}
