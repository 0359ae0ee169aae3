//! Pruning reports what it drops in the same pass: for varied schemas and objects, the paths it
//! returns must be exactly what comparing a copy of the object before pruning with the pruned
//! object finds (the way the paths were found before, kept here as the yardstick).

use serde_json::{Map, Value, json};

use super::schema;
use crate::patch::test_gen::Gen;

const NAMES: &[&str] = &["a", "b", "spec", "metadata", "kind", "apiVersion", "x.y"];

/// A random structural schema of at most `depth` levels.
fn gen_schema(g: &mut Gen, depth: u32) -> Value {
    if depth == 0 || g.chance(4) {
        return json!({"type": g.pick(&["string", "integer", "boolean"])});
    }
    if g.chance(4) {
        return json!({"type": "array", "items": gen_schema(g, depth - 1)});
    }
    let mut node = Map::new();
    node.insert("type".into(), json!("object"));
    match g.below(6) {
        0 => {
            node.insert("additionalProperties".into(), gen_schema(g, depth - 1));
        }
        1 => {
            node.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
        }
        2 => {
            node.insert("x-kubernetes-embedded-resource".into(), json!(true));
            node.insert(
                "x-kubernetes-preserve-unknown-fields".into(),
                json!(g.chance(2)),
            );
        }
        _ => {}
    }
    if !node.contains_key("additionalProperties") {
        let mut props = Map::new();
        for _ in 0..g.below(4) {
            let name = g.pick(NAMES);
            props.insert(name.into(), gen_schema(g, depth - 1));
        }
        node.insert("properties".into(), Value::Object(props));
    }
    Value::Object(node)
}

/// A random JSON value of at most `depth` levels, with member names the schemas use.
fn gen_value(g: &mut Gen, depth: u32) -> Value {
    if depth == 0 || g.chance(3) {
        return match g.below(4) {
            0 => json!("s"),
            1 => json!(g.below(10)),
            2 => json!(true),
            _ => Value::Null,
        };
    }
    if g.chance(4) {
        return Value::Array((0..g.below(3)).map(|_| gen_value(g, depth - 1)).collect());
    }
    let mut map = Map::new();
    for _ in 0..g.below(5) {
        let name = if g.chance(3) {
            g.pick(&["name", "labels", "bogus", "uid"])
        } else {
            g.pick(NAMES)
        };
        map.insert(name.into(), gen_value(g, depth - 1));
    }
    Value::Object(map)
}

#[test]
fn pruning_reports_exactly_the_fields_a_before_and_after_comparison_finds() {
    let mut g = Gen(0x005e_ed0f_9e0e);
    let mut dropped_any = 0;
    for case in 0..4000 {
        let raw = gen_schema(&mut g, 4);
        let Ok(s) = crate::schema::StructuralSchema::from_openapi(&raw) else {
            continue;
        };
        let mut obj = gen_value(&mut g, 5);
        if !obj.is_object() {
            obj = json!({"spec": obj});
        }
        let before = obj.clone();
        let reported = s.prune_reporting(&mut obj);
        let mut expected = Vec::new();
        crate::schema_glue::dropped_fields(&before, &obj, "", &mut expected);
        assert_eq!(
            reported, expected,
            "case {case}: schema {raw}, object {before}"
        );
        if !reported.is_empty() {
            dropped_any += 1;
        }
    }
    assert!(
        dropped_any > 500,
        "too few cases dropped anything: {dropped_any}"
    );
}

#[test]
fn dropped_paths_name_list_items_and_object_meta_members() {
    let s = schema(json!({
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}}
        }
    }));
    let mut obj = json!({
        "metadata": {"name": "a", "bogus": 1},
        "list": [{"n": "a"}, {"n": "b", "z": 2}],
        "extra": true
    });
    assert_eq!(
        s.prune_reporting(&mut obj),
        [".extra", ".list[1].z", ".metadata.bogus"]
    );
}
