//! Editing a `fieldsV1` object in place, path by path, instead of decoding it into a
//! [`super::FieldSet`], changing the set and encoding it again.
//!
//! This holds only for an encoding in the form [`super::FieldSet::to_fields_v1`] writes
//! ([`is_canonical`]): every key readable and written as the encoder writes it, every member an
//! object, `"."` only beside other members and never at the top. For such an object, [`insert`]
//! and [`remove`] keep that form and give what encoding the changed set would give.

use serde_json::{Map, Value};

use super::{FieldPath, PathElement, canonical_json};

/// Whether `fields` is what [`super::FieldSet::to_fields_v1`] gives for the set
/// [`super::FieldSet::from_fields_v1`] reads from it.
pub fn is_canonical(fields: &Value) -> bool {
    match fields {
        Value::Object(map) => canonical_members(map, true),
        _ => false,
    }
}

fn canonical_members(map: &Map<String, Value>, top_level: bool) -> bool {
    map.iter().all(|(key, child)| {
        if key == "." {
            return !top_level && child.as_object().is_some_and(Map::is_empty);
        }
        if !canonical_key(key) {
            return false;
        }
        match child {
            Value::Object(members) if members.is_empty() => true,
            // A member marked "." with nothing below it is written `{}`.
            Value::Object(members) if members.len() == 1 && members.contains_key(".") => false,
            Value::Object(members) => canonical_members(members, false),
            _ => false,
        }
    })
}

/// Whether a key reads as a path element that is written back as the same key.
fn canonical_key(key: &str) -> bool {
    let Some((prefix, rest)) = key.split_at_checked(2) else {
        return false;
    };
    match prefix {
        "f:" => true,
        "i:" => rest
            .parse::<usize>()
            .is_ok_and(|index| index.to_string() == rest),
        "k:" => matches!(
            serde_json::from_str::<Value>(rest),
            Ok(parsed @ Value::Object(_)) if canonical_json(&parsed) == rest
        ),
        "v:" => {
            serde_json::from_str::<Value>(rest).is_ok_and(|parsed| canonical_json(&parsed) == rest)
        }
        _ => false,
    }
}

/// Adds `path` to the canonical `fieldsV1` object `fields` (nothing when it is there already).
pub fn insert(fields: &mut Map<String, Value>, path: &FieldPath) {
    let Some((last, above)) = path.0.split_last() else {
        return;
    };
    let mut node = fields;
    for element in above {
        let key = element.encode();
        let created = !node.contains_key(&key);
        if created {
            node.insert(key.clone(), Value::Object(Map::new()));
        }
        let Some(Value::Object(members)) = node.get_mut(&key) else {
            // Not canonical: callers check first.
            return;
        };
        if !created && members.is_empty() {
            // A member with nothing below it so far keeps its mark once it has members.
            members.insert(".".into(), Value::Object(Map::new()));
        }
        node = members;
    }
    let key = last.encode();
    match node.get_mut(&key) {
        None => {
            node.insert(key, Value::Object(Map::new()));
        }
        Some(Value::Object(members)) if !members.is_empty() && !members.contains_key(".") => {
            members.insert(".".into(), Value::Object(Map::new()));
        }
        Some(_) => {}
    }
}

/// Removes `path` from the canonical `fieldsV1` object `fields` (nothing when it is not there),
/// with the objects above it that then lead to nothing.
pub fn remove(fields: &mut Map<String, Value>, path: &FieldPath) {
    remove_below(fields, &path.0);
}

fn remove_below(node: &mut Map<String, Value>, elements: &[PathElement]) {
    let Some((first, rest)) = elements.split_first() else {
        return;
    };
    let key = first.encode();
    let Some(Value::Object(child)) = node.get_mut(&key) else {
        return;
    };
    if rest.is_empty() {
        if !child.is_empty() {
            // A member with members below: they stay, unmarked (no mark: not in the set).
            child.remove(".");
            return;
        }
    } else {
        if child.is_empty() {
            // A member with nothing below: the path is not in the set.
            return;
        }
        remove_below(child, rest);
        if child.len() == 1 && child.contains_key(".") {
            // A member left with nothing below is written `{}`.
            child.clear();
            return;
        }
        if !child.is_empty() {
            return;
        }
        // An object that only led to the removed path.
    }
    node.remove(&key);
}

#[cfg(test)]
mod tests;
