//! The status subresource's write ([`super::status_write`]) against the plain formulation it
//! replaced (copy the stored object, then put the written status and managedFields in), for
//! varied stored and written objects.

use serde_json::{Map, Value, json};

use crate::patch::test_gen::Gen;

/// The plain formulation: the yardstick.
fn status_write_reference(old: &Value, new: Value) -> Value {
    let mut out = old.clone();
    if let Some(o) = out.as_object_mut() {
        match new.get("status") {
            Some(s) => o.insert("status".into(), s.clone()),
            None => o.remove("status"),
        };
    }
    if let Some(mf) = new.pointer("/metadata/managedFields").cloned()
        && let Some(m) = crate::meta::metadata_mut(&mut out)
    {
        m.insert("managedFields".into(), mf);
    }
    out
}

fn leaf(g: &mut Gen) -> Value {
    match g.below(5) {
        0 => json!("x"),
        1 => json!(g.below(100)),
        2 => Value::Null,
        3 => json!([g.below(3)]),
        _ => json!({"k": g.below(3)}),
    }
}

/// An object with some of: apiVersion, spec, status, metadata (an object with or without
/// managedFields, or not an object at all); once in a while not an object.
fn object(g: &mut Gen) -> Value {
    if g.chance(15) {
        return leaf(g);
    }
    let mut o = Map::new();
    for key in ["apiVersion", "spec", "status", "extra"] {
        if g.chance(2) {
            o.insert(key.into(), leaf(g));
        }
    }
    match g.below(5) {
        0 => {}
        1 => {
            o.insert("metadata".into(), leaf(g));
        }
        _ => {
            let mut m = Map::new();
            m.insert("name".into(), json!("n"));
            if g.chance(2) {
                m.insert("labels".into(), json!({"a": g.below(3)}));
            }
            if g.chance(2) {
                m.insert(
                    "managedFields".into(),
                    if g.chance(4) {
                        leaf(g)
                    } else {
                        json!([{"manager": g.below(3)}])
                    },
                );
            }
            o.insert("metadata".into(), Value::Object(m));
        }
    }
    Value::Object(o)
}

#[test]
fn a_status_write_stores_what_the_plain_formulation_stores() {
    let mut g = Gen(0x57a7_0500);
    for case in 0..5000 {
        let old = object(&mut g);
        // Usually the written object is a patched copy of the stored one.
        let new = match g.below(3) {
            0 => object(&mut g),
            _ => {
                let mut copy = old.clone();
                if let Some(o) = copy.as_object_mut() {
                    for key in ["status", "spec", "metadata", "extra"] {
                        match g.below(4) {
                            0 => {
                                o.insert(key.into(), leaf(&mut g));
                            }
                            1 => {
                                o.remove(key);
                            }
                            _ => {}
                        }
                    }
                }
                copy
            }
        };
        assert_eq!(
            super::status_write(&old, new.clone()),
            status_write_reference(&old, new.clone()),
            "case {case}: old {old}, new {new}"
        );
    }
}

#[test]
fn a_status_write_keeps_everything_but_status_and_managed_fields() {
    let old = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "old"}]},
        "spec": {"x": 1}, "status": {"phase": "Pending"}
    });
    let new = json!({
        "metadata": {"name": "p", "labels": {"a": "changed"}, "managedFields": [{"manager": "new"}]},
        "spec": {"x": 2}, "status": {"phase": "Running"}
    });
    assert_eq!(
        super::status_write(&old, new),
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "new"}]},
            "spec": {"x": 1}, "status": {"phase": "Running"}
        })
    );
}
