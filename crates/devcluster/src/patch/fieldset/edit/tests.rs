//! Editing a `fieldsV1` object in place gives what encoding the edited set gives.

use serde_json::{Value, json};

use super::*;
use crate::patch::fieldset::FieldSet;
use crate::patch::test_gen::Gen;

/// A path of one to four elements from a small vocabulary, so that generated sets share
/// prefixes, hold members with members below them, and hold list elements of each kind.
fn random_path(g: &mut Gen) -> FieldPath {
    let len = 1 + g.below(4) as usize;
    let mut elements = Vec::with_capacity(len);
    for _ in 0..len {
        elements.push(match g.below(6) {
            0 => PathElement::Key(g.pick(&[r#"{"name":"app"}"#, r#"{"name":"side"}"#]).into()),
            1 => PathElement::Value(g.pick(&[r#""a""#, "1"]).into()),
            2 => PathElement::Index(g.below(2) as usize),
            _ => PathElement::Field(g.pick(&["a", "b", "c"]).into()),
        });
    }
    FieldPath(elements)
}

fn random_set(g: &mut Gen) -> FieldSet {
    let mut set = FieldSet::default();
    for _ in 0..g.below(12) {
        set.0.insert(random_path(g));
    }
    set
}

fn encoded(set: &FieldSet) -> Map<String, Value> {
    match set.to_fields_v1() {
        Value::Object(map) => map,
        other => panic!("fieldsV1 is an object, not {other}"),
    }
}

#[test]
fn inserting_and_removing_paths_gives_the_encoding_of_the_edited_set() {
    for seed in 1..=3000u64 {
        let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut set = random_set(&mut g);
        let mut fields = encoded(&set);
        assert!(is_canonical(&Value::Object(fields.clone())), "seed {seed}");
        for step in 0..8 {
            let mut path = random_path(&mut g);
            if g.chance(2) {
                insert(&mut fields, &path);
                set.0.insert(path.clone());
            } else {
                // Mostly paths that are there.
                if let Some(there) = set.0.iter().nth(g.below(set.0.len() as u64 + 1) as usize)
                    && !g.chance(4)
                {
                    path = there.clone();
                }
                remove(&mut fields, &path);
                set.0.remove(&path);
            }
            assert_eq!(
                Value::Object(fields.clone()),
                set.to_fields_v1(),
                "seed {seed} step {step}: after {path}"
            );
        }
    }
}

#[test]
fn only_the_encoders_own_form_is_canonical() {
    for canonical in [
        json!({}),
        json!({"f:a": {}}),
        json!({"f:a": {".": {}, "f:b": {}}}),
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}}),
        json!({"f:metadata": {"f:finalizers": {".": {}, "v:\"f1\"": {}}}}),
        json!({"f:list": {"i:0": {}, "i:12": {}}}),
    ] {
        assert!(is_canonical(&canonical), "{canonical}");
        let decoded = FieldSet::from_fields_v1(&canonical);
        assert_eq!(decoded.to_fields_v1(), canonical);
    }
    for odd in [
        json!([]),
        json!({".": {}}),
        json!({"f:a": {".": {}}}),
        json!({"f:a": true}),
        json!({"f:a": {".": {"x": 1}, "f:b": {}}}),
        json!({"zz": {}}),
        json!({"f:a": {"zz": {}}}),
        json!({"f:a": {"k:notjson": {}}}),
        json!({"f:a": {"k:[1]": {}}}),
        json!({"f:a": {"k:{\"b\":1,\"a\":2}": {}}}),
        json!({"f:a": {"k:{\"a\": 2}": {}}}),
        json!({"f:a": {"v:1.50": {}}}),
        json!({"f:a": {"i:01": {}}}),
        json!({"f:a": {"i:-1": {}}}),
    ] {
        assert!(!is_canonical(&odd), "{odd}");
    }
}

#[test]
fn a_canonical_object_is_what_encoding_its_set_gives() {
    // Generated objects in and out of the encoder's form: whenever one passes as canonical,
    // decoding and encoding it gives it back.
    let keys = [
        ".",
        "f:a",
        "f:b",
        "k:{\"name\":\"app\"}",
        "k:{\"b\":1,\"a\":2}",
        "v:\"a\"",
        "i:0",
        "i:00",
        "zz",
    ];
    fn object(g: &mut Gen, keys: &[&str], depth: u32) -> Value {
        let mut map = Map::new();
        for _ in 0..g.below(4) {
            let child = match g.below(5) {
                0 if depth < 3 => object(g, keys, depth + 1),
                1 => json!(true),
                _ => json!({}),
            };
            map.insert(g.pick(keys).to_string(), child);
        }
        Value::Object(map)
    }
    let mut canonical = 0;
    for seed in 1..=5000u64 {
        let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let fields = object(&mut g, &keys, 0);
        if is_canonical(&fields) {
            canonical += 1;
            assert_eq!(
                FieldSet::from_fields_v1(&fields).to_fields_v1(),
                fields,
                "seed {seed}"
            );
        }
    }
    assert!(
        canonical > 500,
        "only {canonical} generated objects were canonical"
    );
}
