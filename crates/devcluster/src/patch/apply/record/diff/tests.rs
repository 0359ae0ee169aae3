//! The side-by-side walk gives what the plain listing of every node gives, on generated objects
//! whose shapes exercise every kind of node (sets, map-lists with missing and repeated keys,
//! atomic maps and atomic elements, tracked and untracked metadata).

use serde_json::{Map, Value, json};

use super::super::super::super::fieldset::node_values;
use super::super::super::tracked_part;
use super::super::{Top, changed_fields, tracked_tops};
use super::*;
use crate::patch::test_gen::Gen;

/// Lists and maps named by their last field: `set*` are sets, `map*` map-lists keyed by `k`,
/// `pmap*` map-lists keyed by `k` and `p`, `amap*` map-lists of atomic elements, `atom*` atomic
/// maps; `finalizers` is a set as in metadata.
struct NamedShape;

impl FieldShape for NamedShape {
    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        let last = path.last()?;
        if last.starts_with("set") || *last == "finalizers" {
            Some(ListType::Set)
        } else if last.starts_with("map") || last.starts_with("amap") {
            Some(ListType::Map(vec!["k".into()]))
        } else if last.starts_with("pmap") {
            Some(ListType::Map(vec!["k".into(), "p".into()]))
        } else {
            None
        }
    }

    fn is_atomic_map(&self, path: &[&str]) -> bool {
        path.last()
            .is_some_and(|l| l.starts_with("atom") || l.starts_with("amap"))
    }
}

const FIELDS: &[&str] = &["a", "b", "set", "map", "pmap", "amap", "atom", "list"];

fn scalar(g: &mut Gen) -> Value {
    match g.below(5) {
        0 => json!(g.pick(&["x", "y"])),
        1 => json!(g.below(3)),
        2 => json!(g.chance(2)),
        3 => Value::Null,
        _ => json!({}),
    }
}

fn element(g: &mut Gen, depth: u32) -> Value {
    let mut item = Map::new();
    if !g.chance(6) {
        item.insert("k".into(), json!(g.below(3)));
    }
    if g.chance(2) {
        item.insert("p".into(), json!(g.pick(&["TCP", "UDP"])));
    }
    if g.chance(2) {
        item.insert("v".into(), value(g, depth + 1, "v"));
    }
    if g.chance(12) {
        return scalar(g);
    }
    Value::Object(item)
}

fn value(g: &mut Gen, depth: u32, name: &str) -> Value {
    if depth > 3 || g.chance(4) {
        return scalar(g);
    }
    let list = |g: &mut Gen, make: &mut dyn FnMut(&mut Gen) -> Value| {
        Value::Array((0..g.below(4)).map(|_| make(g)).collect())
    };
    if name.starts_with("set") {
        return list(g, &mut |g| json!(g.pick(&["x", "y", "z"])));
    }
    if ["map", "pmap", "amap", "list"]
        .iter()
        .any(|p| name.starts_with(p))
    {
        return list(g, &mut |g| element(g, depth));
    }
    let mut map = Map::new();
    for _ in 0..g.below(4) {
        let field = g.pick(FIELDS);
        map.insert(field.into(), value(g, depth + 1, field));
    }
    Value::Object(map)
}

/// A top-level object with tracked and untracked metadata, `spec` and `status`.
fn object(g: &mut Gen) -> Value {
    let mut meta = Map::new();
    meta.insert("name".into(), json!("o"));
    if g.chance(2) {
        meta.insert("resourceVersion".into(), json!(g.below(9).to_string()));
    }
    if g.chance(2) {
        meta.insert("labels".into(), json!({"app": g.pick(&["a", "b"])}));
    }
    if g.chance(2) {
        meta.insert("finalizers".into(), value(g, 1, "set"));
    }
    let mut out = json!({"apiVersion": "v1", "kind": "K"});
    if !g.chance(6) {
        out["metadata"] = Value::Object(meta);
    }
    for top in ["spec", "status"] {
        if !g.chance(4) {
            out[top] = value(g, 1, top);
        }
    }
    out
}

/// A changed copy: members replaced, removed or added, list elements dropped or duplicated.
fn perturb(g: &mut Gen, v: &mut Value, name: &str, depth: u32) {
    if g.chance(7) {
        *v = value(g, depth, name);
        return;
    }
    match v {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for key in keys {
                match g.below(6) {
                    0 => {
                        map.remove(&key);
                    }
                    1 | 2 => {
                        if let Some(child) = map.get_mut(&key) {
                            perturb(g, child, &key, depth + 1);
                        }
                    }
                    _ => {}
                }
            }
            if g.chance(3) {
                let field = g.pick(FIELDS);
                map.insert(field.into(), value(g, depth + 1, field));
            }
        }
        Value::Array(items) => {
            for item in items.iter_mut() {
                if g.chance(3) {
                    perturb(g, item, "v", depth + 1);
                }
            }
            match g.below(4) {
                0 => {
                    items.pop();
                }
                1 if !items.is_empty() => {
                    let first = items[0].clone();
                    items.push(first);
                }
                2 => items.reverse(),
                _ => {}
            }
        }
        _ => {}
    }
}

/// Every path the listing knows on either side, their parents' siblings, and made-up ones.
fn probe_paths(parts: &[&Value], shape: &dyn FieldShape) -> Vec<FieldPath> {
    let mut paths: Vec<FieldPath> = parts
        .iter()
        .flat_map(|p| node_values(p, shape, true).into_keys())
        .collect();
    let made_up = [
        vec![
            PathElement::Field("spec".into()),
            PathElement::Field("zz".into()),
        ],
        vec![
            PathElement::Field("metadata".into()),
            PathElement::Field("name".into()),
        ],
        vec![
            PathElement::Field("metadata".into()),
            PathElement::Field("resourceVersion".into()),
        ],
        vec![PathElement::Field("spec".into()), PathElement::Index(0)],
        vec![
            PathElement::Field("status".into()),
            PathElement::Key("{\"k\":1}".into()),
        ],
    ];
    paths.extend(made_up.into_iter().map(FieldPath));
    paths
}

#[test]
fn the_side_by_side_walk_finds_what_the_full_listing_finds() {
    let shape = NamedShape;
    let mut with_changes = 0;
    for seed in 1..=3000u64 {
        let mut g = Gen(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1);
        let old = object(&mut g);
        let mut new = old.clone();
        for _ in 0..=g.below(2) {
            let top = g.pick(&["metadata", "spec", "status"]);
            match new.get_mut(top) {
                Some(v) => perturb(&mut g, v, top, 1),
                None => new[top] = value(&mut g, 1, top),
            }
        }
        let mut before = tracked_tops(&old);
        before.entry("metadata").or_insert(Top::EmptyMetadata);
        let after = tracked_tops(&new);
        let touched: BTreeSet<String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| match (before.get(*k), after.get(*k)) {
                (Some(a), Some(b)) => !a.same_as(*b),
                _ => true,
            })
            .map(|k| k.to_string())
            .collect();
        // The plain way: copy the touched parts and list every node of both.
        let part = |object: &Value, with_metadata: bool| {
            let mut tracked = tracked_part(object);
            if with_metadata && let Value::Object(map) = &mut tracked {
                map.entry("metadata").or_insert_with(|| json!({}));
            }
            let map = tracked.as_object().cloned().unwrap_or_default();
            Value::Object(
                map.into_iter()
                    .filter(|(k, _)| touched.contains(k))
                    .collect(),
            )
        };
        let before_part = part(&old, true);
        let after_part = part(&new, false);
        let (expected, new_nodes) = changed_fields(&before_part, &after_part, &shape);
        let got = changed_paths(&before, &after, &touched, &shape);
        assert_eq!(got, expected.0, "seed {seed}: {old} -> {new}");
        assert_eq!(
            Value::Object(changed_fields_v1(&before, &after, &touched, &shape)),
            expected.to_fields_v1(),
            "seed {seed}: {old} -> {new}"
        );
        with_changes += usize::from(!got.is_empty());
        for path in probe_paths(&[&before_part, &after_part], &shape) {
            assert_eq!(
                exists(&after, &touched, &path, &shape),
                new_nodes.contains_key(&path),
                "seed {seed}: {path} in {after_part}"
            );
        }
    }
    assert!(
        with_changes > 1500,
        "only {with_changes} writes changed anything"
    );
}
