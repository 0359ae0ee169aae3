//! Merging an applied configuration into the live object.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::patch::fieldset::list_item_id;
use crate::patch::shape::{FieldShape, ListType};

/// Merge an applied configuration into the live object: maps recursively (`null` removes),
/// map-lists and sets element by element, everything else replaced.
pub(super) fn merge_applied(
    live: Option<&Value>,
    config: &Value,
    shape: &dyn FieldShape,
    path: &mut Vec<String>,
) -> Value {
    let names: Vec<&str> = path.iter().map(String::as_str).collect();
    if config.is_object() && shape.is_atomic_map(&names) {
        return config.clone();
    }
    match (live, config) {
        (live, Value::Object(c)) => {
            let mut out = match live {
                Some(Value::Object(l)) => l.clone(),
                _ => Map::new(),
            };
            for (key, value) in c {
                if value.is_null() {
                    out.remove(key);
                    continue;
                }
                path.push(key.clone());
                let merged = merge_applied(out.get(key), value, shape, path);
                path.pop();
                out.insert(key.clone(), merged);
            }
            Value::Object(out)
        }
        (live, Value::Array(c)) => {
            let names: Vec<&str> = path.iter().map(String::as_str).collect();
            let list_type = shape.list_type(&names).unwrap_or(ListType::Atomic);
            let live_items = match live {
                Some(Value::Array(l)) if list_type != ListType::Atomic => l.as_slice(),
                _ => &[],
            };
            let mut merge_item = |l: Option<&Value>, r: &Value| merge_applied(l, r, shape, path);
            Value::Array(merge_lists(live_items, c, &list_type, &mut merge_item))
        }
        (_, other) => other.clone(),
    }
}

/// Merge two associative lists. Elements of both are merged; the result keeps live-only
/// elements where they were, and orders the applied elements as the configuration does
/// (new ones go where the configuration puts them relative to the shared ones).
fn merge_lists(
    live: &[Value],
    applied: &[Value],
    list_type: &ListType,
    merge_item: &mut dyn FnMut(Option<&Value>, &Value) -> Value,
) -> Vec<Value> {
    if *list_type == ListType::Atomic {
        return applied.iter().map(|item| merge_item(None, item)).collect();
    }
    let id = |item: &Value| list_item_id(item, list_type);
    let live_ids: Vec<Option<String>> = live.iter().map(id).collect();
    let applied_ids: Vec<Option<String>> = applied.iter().map(id).collect();
    let in_applied: HashSet<&String> = applied_ids.iter().flatten().collect();
    let in_live: HashSet<&String> = live_ids.iter().flatten().collect();
    let find_live = |wanted: &String| {
        live_ids
            .iter()
            .position(|i| i.as_ref() == Some(wanted))
            .map(|p| &live[p])
    };
    // shared elements, in the configuration's order
    let mut shared = applied_ids
        .iter()
        .flatten()
        .filter(|i| in_live.contains(i))
        .peekable();

    let mut out = Vec::with_capacity(live.len().max(applied.len()));
    let (mut l, mut r) = (0, 0);
    while l < live.len() || r < applied.len() {
        if l < live.len() {
            match &live_ids[l] {
                // live-only (or unkeyable) elements stay in place
                Some(lid) if !in_applied.contains(lid) => {
                    out.push(live[l].clone());
                    l += 1;
                    continue;
                }
                None => {
                    out.push(live[l].clone());
                    l += 1;
                    continue;
                }
                // a shared element that comes later in the configuration: emitted with it
                Some(lid) if shared.peek().is_some_and(|next| *next != lid) => {
                    l += 1;
                    continue;
                }
                // a shared element already emitted in the configuration's order
                Some(_) if r >= applied.len() => {
                    l += 1;
                    continue;
                }
                Some(_) => {}
            }
        }
        if r < applied.len() {
            let item = &applied[r];
            let rid = applied_ids[r].as_ref();
            let live_item = rid.and_then(find_live);
            out.push(merge_item(live_item, item));
            if let Some(rid) = rid
                && shared.peek().is_some_and(|next| *next == rid)
            {
                shared.next();
                // the live cursor may sit on the element just merged
                if l < live.len() && live_ids[l].as_ref() == Some(rid) {
                    l += 1;
                }
            }
            r += 1;
        }
    }
    dedup_by_id(out, list_type)
}

/// Repeated ids in a configuration were rejected earlier; a live list may still carry them.
/// Keep the first of each.
fn dedup_by_id(items: Vec<Value>, list_type: &ListType) -> Vec<Value> {
    let mut seen = HashSet::new();
    items
        .into_iter()
        .filter(|item| match list_item_id(item, list_type) {
            Some(id) => seen.insert(id),
            None => true,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[Value]) -> Vec<&str> {
        list.iter()
            .map(|v| v["name"].as_str().unwrap_or("?"))
            .collect()
    }

    fn merged(live: Value, applied: Value) -> Vec<Value> {
        let lt = ListType::Map(vec!["name".into()]);
        let live = live.as_array().cloned().unwrap_or_default();
        let applied = applied.as_array().cloned().unwrap_or_default();
        let mut merge = |l: Option<&Value>, r: &Value| match (l, r) {
            (Some(Value::Object(l)), Value::Object(r)) => {
                let mut m = l.clone();
                m.extend(r.clone());
                Value::Object(m)
            }
            (_, r) => r.clone(),
        };
        merge_lists(&live, &applied, &lt, &mut merge)
    }

    #[test]
    fn new_elements_are_appended_and_live_only_ones_stay() {
        let out = merged(
            json!([{"name": "a"}, {"name": "b"}]),
            json!([{"name": "a", "x": 1}, {"name": "c"}]),
        );
        assert_eq!(names(&out), vec!["a", "b", "c"]);
        assert_eq!(out[0]["x"], 1);
    }

    #[test]
    fn shared_elements_follow_the_configuration_order() {
        let out = merged(
            json!([{"name": "a"}, {"name": "x"}, {"name": "b"}]),
            json!([{"name": "b"}, {"name": "a"}]),
        );
        assert_eq!(names(&out), vec!["x", "b", "a"]);
    }

    #[test]
    fn new_elements_go_where_the_configuration_puts_them() {
        let out = merged(
            json!([{"name": "a"}, {"name": "b"}]),
            json!([{"name": "a"}, {"name": "new"}, {"name": "b"}]),
        );
        assert_eq!(names(&out), vec!["a", "new", "b"]);
    }

    #[test]
    fn sets_merge_by_value() {
        let live = [json!("a"), json!("b")];
        let applied = [json!("c"), json!("a")];
        let mut merge = |_: Option<&Value>, r: &Value| r.clone();
        assert_eq!(
            merge_lists(&live, &applied, &ListType::Set, &mut merge),
            vec![json!("c"), json!("a"), json!("b")]
        );
    }
}
