//! Sets of field paths, as server-side apply records them in `managedFields[].fieldsV1`.
//!
//! A path is a list of elements: `f:<name>` (a field of an object), `k:<json>` (the element of a
//! map-list with these key values), `v:<json>` (the element of a set) and `i:<n>` (a list index).
//! In the `fieldsV1` encoding each path is a nested JSON object; a member path with no member
//! below it is `{}`, and a member path with members below it carries `".": {}`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::{Map, Value};

use super::shape::{FieldShape, ListType};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// `f:name`
    Field(String),
    /// `k:{"name":"app"}`: key fields and their values, sorted by field name, as compact JSON.
    Key(String),
    /// `v:"value"`: the JSON of a set element.
    Value(String),
    /// `i:3`
    Index(usize),
}

impl PathElement {
    pub(crate) fn encode(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(json) => format!("k:{json}"),
            PathElement::Value(json) => format!("v:{json}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    fn decode(s: &str) -> Option<Self> {
        let (prefix, rest) = s.split_at_checked(2)?;
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_string())),
            "k:" => {
                let parsed: Value = serde_json::from_str(rest).ok()?;
                parsed
                    .is_object()
                    .then(|| PathElement::Key(canonical_json(&parsed)))
            }
            "v:" => {
                let parsed: Value = serde_json::from_str(rest).ok()?;
                Some(PathElement::Value(canonical_json(&parsed)))
            }
            "i:" => rest.parse().ok().map(PathElement::Index),
            _ => None,
        }
    }

    /// The key-field object of a `k:` element.
    fn key_object(&self) -> Option<Map<String, Value>> {
        match self {
            PathElement::Key(json) => match serde_json::from_str(json) {
                Ok(Value::Object(m)) => Some(m),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Compact JSON with object keys sorted, as `k:`/`v:` elements carry it (sorted explicitly, so
/// that it holds whatever map type serde_json is built with).
fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

/// A field path, written like the API server does in conflict messages:
/// `.spec.containers[name="app"].image`, `.metadata.finalizers[="f"]`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FieldPath(pub Vec<PathElement>);

/// One path element as the API server prints it: `.name`, `[name="app"]`, `[="x"]`, `[3]`.
fn element_text(element: &PathElement) -> String {
    match element {
        PathElement::Field(name) => format!(".{name}"),
        PathElement::Value(json) => format!("[={json}]"),
        PathElement::Index(i) => format!("[{i}]"),
        PathElement::Key(_) => {
            let keys = element.key_object().unwrap_or_default();
            let parts: Vec<String> = keys.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("[{}]", parts.join(","))
        }
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for element in &self.0 {
            f.write_str(&element_text(element))?;
        }
        Ok(())
    }
}

impl FieldPath {
    /// The field names along the path (list elements skipped), for [`FieldShape`] lookups.
    pub fn field_names(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter_map(|e| match e {
                PathElement::Field(name) => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    fn child(&self, element: PathElement) -> FieldPath {
        let mut elements = self.0.clone();
        elements.push(element);
        FieldPath(elements)
    }

    /// Whether `self` is a strict prefix of `other`.
    pub fn is_ancestor_of(&self, other: &FieldPath) -> bool {
        other.0.len() > self.0.len() && other.0[..self.0.len()] == self.0[..]
    }
}

/// A set of field paths.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSet(pub BTreeSet<FieldPath>);

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, path: &FieldPath) -> bool {
        self.0.contains(path)
    }

    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&other.0).cloned().collect())
    }

    /// Whether any member is `path` or lies below it.
    pub fn has_at_or_below(&self, path: &FieldPath) -> bool {
        self.0
            .range(path.clone()..)
            .next()
            .is_some_and(|first| first == path || path.is_ancestor_of(first))
    }

    /// The `fieldsV1` JSON encoding.
    pub fn to_fields_v1(&self) -> Value {
        let paths: Vec<&[PathElement]> = self.0.iter().map(|p| p.0.as_slice()).collect();
        Value::Object(encode_sorted(&paths))
    }

    /// Decode `fieldsV1`; unreadable entries are skipped.
    pub fn from_fields_v1(value: &Value) -> FieldSet {
        let mut set = BTreeSet::new();
        if let Value::Object(map) = value {
            decode_into(map, &FieldPath::default(), &mut set);
        }
        FieldSet(set)
    }

    /// What [`FieldSet::from_fields_v1`] gives below one top-level field (`f:<field>`) only.
    pub fn from_fields_v1_under(value: &Value, field: &str) -> FieldSet {
        match value.as_object() {
            Some(map) => FieldSet::from_fields_v1_map_under(map, field),
            None => FieldSet::default(),
        }
    }

    /// [`FieldSet::from_fields_v1_under`] for a `fieldsV1` object's members.
    pub fn from_fields_v1_map_under(map: &Map<String, Value>, field: &str) -> FieldSet {
        let mut set = BTreeSet::new();
        let key = PathElement::Field(field.to_string()).encode();
        if let Some(child) = map.get(&key) {
            decode_member(&key, child, &FieldPath::default(), &mut set);
        }
        FieldSet(set)
    }

    /// Whether [`FieldSet::from_fields_v1`] would give the empty set, without decoding.
    pub fn fields_v1_is_empty(value: &Value) -> bool {
        value.as_object().is_none_or(|map| !has_path(map, true))
    }

    /// The paths of every field set in `value`, as server-side apply counts them: scalars,
    /// atomic lists and empty objects are leaves, objects recurse, map-list and set elements are
    /// members themselves, and map-list elements recurse. Fails when a map-list element lacks a
    /// key field or repeats a key.
    pub fn from_value(value: &Value, shape: &dyn FieldShape) -> Result<FieldSet, String> {
        let mode = Mode {
            strict: true,
            containers: false,
        };
        Ok(FieldSet(walk(value, shape, mode)?.into_keys().collect()))
    }

    /// Like [`FieldSet::from_value`] but never fails: an element that cannot be keyed is
    /// recorded by index (what a stored object that skipped validation gets).
    pub fn from_value_lenient(value: &Value, shape: &dyn FieldShape) -> FieldSet {
        FieldSet(node_values(value, shape, false).into_keys().collect())
    }

    /// Every node of `value`: what [`FieldSet::from_value_lenient`] gives plus the objects and
    /// associative lists that have members below them (an update owns the ones it adds).
    pub fn nodes_of(value: &Value, shape: &dyn FieldShape) -> FieldSet {
        FieldSet(node_values(value, shape, true).into_keys().collect())
    }
}

/// One node found by [`node_values`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'a> {
    pub value: &'a Value,
    /// a leaf or a list element (what apply records), not an object or list holding members
    pub member: bool,
}

/// The nodes of a value with the value at each (lenient: unkeyable elements go by index).
pub(crate) fn node_values<'a>(
    value: &'a Value,
    shape: &dyn FieldShape,
    containers: bool,
) -> BTreeMap<FieldPath, Node<'a>> {
    let mode = Mode {
        strict: false,
        containers,
    };
    walk(value, shape, mode).unwrap_or_default()
}

fn walk<'a>(
    value: &'a Value,
    shape: &dyn FieldShape,
    mode: Mode,
) -> Result<BTreeMap<FieldPath, Node<'a>>, String> {
    let mut out = BTreeMap::new();
    let mut path = FieldPath::default();
    collect(value, &mut path, shape, &mut out, mode)?;
    Ok(out)
}

/// The `fieldsV1` object of sorted paths: the paths sharing a first element are contiguous, so
/// each element is encoded once, for the group of paths below it. A member that also has
/// members below it carries `".": {}`; one without is `{}`.
fn encode_sorted(paths: &[&[PathElement]]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut rest = paths;
    while let Some(first) = rest.first() {
        let Some(head) = first.first() else {
            // The empty path marks nothing.
            rest = &rest[1..];
            continue;
        };
        let group_len = rest.iter().take_while(|p| p.first() == Some(head)).count();
        let (group, after) = rest.split_at(group_len);
        let is_member = group.iter().any(|p| p.len() == 1);
        let below: Vec<&[PathElement]> = group
            .iter()
            .filter(|p| p.len() > 1)
            .map(|p| &p[1..])
            .collect();
        let mut child = encode_sorted(&below);
        if is_member && !child.is_empty() {
            child.insert(".".to_string(), Value::Object(Map::new()));
        }
        out.insert(head.encode(), Value::Object(child));
        rest = after;
    }
    out
}

fn decode_into(map: &Map<String, Value>, prefix: &FieldPath, out: &mut BTreeSet<FieldPath>) {
    for (key, child) in map {
        decode_member(key, child, prefix, out);
    }
}

/// Decode one member (`key: child`) of a `fieldsV1` object found at `prefix`.
fn decode_member(key: &str, child: &Value, prefix: &FieldPath, out: &mut BTreeSet<FieldPath>) {
    if key == "." {
        if !prefix.0.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    let Some(element) = PathElement::decode(key) else {
        return;
    };
    let path = prefix.child(element);
    match child {
        Value::Object(m) if !m.is_empty() => decode_into(m, &path, out),
        _ => {
            out.insert(path);
        }
    }
}

/// Whether a `fieldsV1` object holds at least one readable path (below the top level, where
/// `"."` marks nothing).
fn has_path(map: &Map<String, Value>, top_level: bool) -> bool {
    map.iter().any(|(key, child)| {
        if key == "." {
            return !top_level;
        }
        if PathElement::decode(key).is_none() {
            return false;
        }
        match child {
            Value::Object(m) if !m.is_empty() => has_path(m, false),
            _ => true,
        }
    })
}

/// The identity of a list element: its key fields (map-lists) or its value (sets), as the JSON
/// that `k:`/`v:` path elements carry. `None` for atomic lists and unkeyable elements.
pub(crate) fn list_item_id(item: &Value, list_type: &ListType) -> Option<String> {
    match list_type {
        ListType::Set => Some(canonical_json(item)),
        ListType::Map(keys) => key_element(item, keys, false).ok().flatten(),
        ListType::Atomic => None,
    }
}

fn key_element(item: &Value, keys: &[String], strict: bool) -> Result<Option<String>, String> {
    let Value::Object(fields) = item else {
        return if strict {
            Err(format!(
                "associative list with keys has an element that is not a map: {item}"
            ))
        } else {
            Ok(None)
        };
    };
    let mut key_fields = Map::new();
    for key in keys {
        match fields.get(key) {
            Some(v) if !v.is_null() => {
                key_fields.insert(key.clone(), v.clone());
            }
            // `protocol` keys (container and service ports) default to TCP, as in the schema.
            _ if key == "protocol" => {
                key_fields.insert(key.clone(), Value::String("TCP".to_string()));
            }
            _ => return missing_key(key, strict),
        }
    }
    Ok(Some(canonical_json(&Value::Object(key_fields))))
}

fn missing_key(key: &str, strict: bool) -> Result<Option<String>, String> {
    if strict {
        Err(format!(
            "associative list with keys has an element that omits key field \"{key}\" (and doesn't have default value)"
        ))
    } else {
        Ok(None)
    }
}

/// How [`collect`] walks a value.
#[derive(Debug, Clone, Copy)]
struct Mode {
    /// fail on unkeyable or duplicate list elements (instead of recording them by index)
    strict: bool,
    /// also record the objects and associative lists that have members below them
    containers: bool,
}

fn collect<'a>(
    value: &'a Value,
    path: &mut FieldPath,
    shape: &dyn FieldShape,
    out: &mut BTreeMap<FieldPath, Node<'a>>,
    mode: Mode,
) -> Result<(), String> {
    let container = Node {
        value,
        member: false,
    };
    let member = Node {
        value,
        member: true,
    };
    match value {
        Value::Object(map) if !map.is_empty() && !shape.is_atomic_map(&path.field_names()) => {
            if mode.containers && !path.0.is_empty() {
                out.insert(path.clone(), container);
            }
            for (key, child) in map {
                path.0.push(PathElement::Field(key.clone()));
                let result = collect(child, path, shape, out, mode);
                path.0.pop();
                result?;
            }
            Ok(())
        }
        Value::Array(items) if !items.is_empty() => match shape.list_type(&path.field_names()) {
            Some(ListType::Set) => {
                if mode.containers {
                    out.insert(path.clone(), container);
                }
                for item in items {
                    let element = PathElement::Value(canonical_json(item));
                    let text = element_text(&element);
                    if out
                        .insert(
                            path.child(element),
                            Node {
                                value: item,
                                member: true,
                            },
                        )
                        .is_some()
                        && mode.strict
                    {
                        return Err(format!("{path}: duplicate entries for key {text}"));
                    }
                }
                Ok(())
            }
            Some(ListType::Map(keys)) => {
                if mode.containers {
                    out.insert(path.clone(), container);
                }
                // elements that are atomic structs are owned whole, without their fields
                let atomic_elements = shape.is_atomic_map(&path.field_names());
                for (index, item) in items.iter().enumerate() {
                    let element = match key_element(item, &keys, mode.strict)
                        .map_err(|e| format!("{path}: element {index}: {e}"))?
                    {
                        Some(json) => PathElement::Key(json),
                        None => PathElement::Index(index),
                    };
                    let text = element_text(&element);
                    path.0.push(element);
                    if out.contains_key(path) {
                        path.0.pop();
                        if mode.strict {
                            return Err(format!("{path}: duplicate entries for key {text}"));
                        }
                        continue;
                    }
                    out.insert(
                        path.clone(),
                        Node {
                            value: item,
                            member: true,
                        },
                    );
                    let mut result = Ok(());
                    if let Value::Object(fields) = item
                        && !atomic_elements
                    {
                        for (key, child) in fields {
                            path.0.push(PathElement::Field(key.clone()));
                            result = collect(child, path, shape, out, mode);
                            path.0.pop();
                            if result.is_err() {
                                break;
                            }
                        }
                    }
                    path.0.pop();
                    result?;
                }
                Ok(())
            }
            Some(ListType::Atomic) | None => {
                out.insert(path.clone(), member);
                Ok(())
            }
        },
        _ => {
            if !path.0.is_empty() {
                out.insert(path.clone(), member);
            }
            Ok(())
        }
    }
}

/// The value at `path` in `value`, if present.
pub(crate) fn value_at<'a>(value: &'a Value, path: &FieldPath) -> Option<&'a Value> {
    let mut current = value;
    for element in &path.0 {
        current = child_of(current, element)?;
    }
    Some(current)
}

fn child_of<'a>(value: &'a Value, element: &PathElement) -> Option<&'a Value> {
    match element {
        PathElement::Field(name) => value.as_object()?.get(name),
        PathElement::Index(i) => value.as_array()?.get(*i),
        PathElement::Value(json) => value
            .as_array()?
            .iter()
            .find(|item| &canonical_json(item) == json),
        PathElement::Key(_) => {
            let keys = element.key_object()?;
            value
                .as_array()?
                .iter()
                .find(|item| key_matches(item, &keys))
        }
    }
}

/// Whether a list element carries these key values (a missing `protocol` counts as TCP).
fn key_matches(item: &Value, keys: &Map<String, Value>) -> bool {
    keys.iter().all(|(k, v)| match item.get(k) {
        Some(have) => have == v,
        None => k == "protocol" && v.as_str() == Some("TCP"),
    })
}

/// Remove the value at `path` from `value` (a list element or an object member). Returns whether
/// something was removed.
pub(crate) fn remove_at(value: &mut Value, path: &FieldPath) -> bool {
    let Some((last, parents)) = path.0.split_last() else {
        return false;
    };
    let mut current = value;
    for element in parents {
        let next = match element {
            PathElement::Field(name) => current.as_object_mut().and_then(|m| m.get_mut(name)),
            PathElement::Index(i) => current.as_array_mut().and_then(|a| a.get_mut(*i)),
            PathElement::Value(_) | PathElement::Key(_) => {
                let position = current.as_array().and_then(|items| {
                    items
                        .iter()
                        .position(|item| Some(item) == child_of_single(item, element))
                });
                match position {
                    Some(i) => current.as_array_mut().and_then(|a| a.get_mut(i)),
                    None => None,
                }
            }
        };
        match next {
            Some(n) => current = n,
            None => return false,
        }
    }
    match last {
        PathElement::Field(name) => current
            .as_object_mut()
            .is_some_and(|m| m.remove(name).is_some()),
        PathElement::Index(i) => match current.as_array_mut() {
            Some(items) if *i < items.len() => {
                items.remove(*i);
                true
            }
            _ => false,
        },
        PathElement::Value(_) | PathElement::Key(_) => {
            let Some(items) = current.as_array_mut() else {
                return false;
            };
            let before = items.len();
            items.retain(|item| child_of_single(item, last).is_none());
            items.len() != before
        }
    }
}

/// `Some(item)` when `item` is the list element `element` names.
fn child_of_single<'a>(item: &'a Value, element: &PathElement) -> Option<&'a Value> {
    let single = std::slice::from_ref(item);
    let wrapper = Value::Array(single.to_vec());
    child_of(&wrapper, element).map(|_| item)
}

pub(crate) mod edit;

#[cfg(test)]
mod tests {
    use super::super::{TypeMeta, builtin_shape};
    use super::*;
    use serde_json::json;

    /// The plain encoding: mark each member path in a tree, then drop lone `"."` markers.
    fn to_fields_v1_reference(set: &FieldSet) -> Value {
        fn mark_member(node: &mut Map<String, Value>, elements: &[PathElement]) {
            let Some((first, rest)) = elements.split_first() else {
                return;
            };
            let child = node
                .entry(first.encode())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(child) = child {
                if rest.is_empty() {
                    child.insert(".".to_string(), Value::Object(Map::new()));
                } else {
                    mark_member(child, rest);
                }
            }
        }
        fn strip_lone_dots(node: &mut Map<String, Value>) {
            if node.len() == 1 && node.contains_key(".") {
                node.clear();
                return;
            }
            for (key, child) in node.iter_mut() {
                if key != "."
                    && let Value::Object(m) = child
                {
                    strip_lone_dots(m);
                }
            }
        }
        let mut root = Map::new();
        for path in &set.0 {
            mark_member(&mut root, &path.0);
        }
        strip_lone_dots(&mut root);
        Value::Object(root)
    }

    #[test]
    fn encoding_sorted_paths_equals_the_plain_encoding() {
        let mut g = crate::patch::test_gen::Gen(0x00f1_e1d5_0001);
        let elements = |g: &mut crate::patch::test_gen::Gen| match g.below(5) {
            0 | 1 => PathElement::Field(g.pick(&["a", "b", "c"]).to_string()),
            2 => PathElement::Key(format!("{{\"name\":\"{}\"}}", g.pick(&["x", "y"]))),
            3 => PathElement::Value(format!("\"{}\"", g.pick(&["p", "q"]))),
            _ => PathElement::Index(g.below(3) as usize),
        };
        for case in 0..3000 {
            let mut set = FieldSet::default();
            for _ in 0..g.below(12) {
                let len = g.below(5) as usize;
                set.0
                    .insert(FieldPath((0..len).map(|_| elements(&mut g)).collect()));
            }
            assert_eq!(
                set.to_fields_v1(),
                to_fields_v1_reference(&set),
                "case {case}: {set:?}"
            );
            // and it decodes back to the set (the empty path aside)
            let mut without_empty = set.clone();
            without_empty.0.remove(&FieldPath::default());
            assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()), without_empty);
        }
    }

    #[test]
    fn fields_v1_encoding_matches_the_api_server() {
        let shape = builtin_shape(&TypeMeta::new("v1", "Pod"));
        let pod = json!({
            "metadata": {"labels": {"app": "web"}, "finalizers": ["f"]},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                     "tolerations": [{"key": "k"}]}
        });
        let set = FieldSet::from_value(&pod, &shape).unwrap();
        assert_eq!(
            set.to_fields_v1(),
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}, "f:finalizers": {"v:\"f\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {
                        ".": {}, "f:name": {}, "f:image": {},
                        "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:protocol": {}}}
                    }},
                    "f:tolerations": {}
                }
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&set.to_fields_v1()), set);
    }

    #[test]
    fn paths_print_like_conflict_messages() {
        let path = FieldPath(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            PathElement::Key("{\"name\":\"app\"}".into()),
            PathElement::Field("image".into()),
        ]);
        assert_eq!(path.to_string(), ".spec.containers[name=\"app\"].image");
        let set_path = FieldPath(vec![
            PathElement::Field("f".into()),
            PathElement::Value("\"x\"".into()),
        ]);
        assert_eq!(set_path.to_string(), ".f[=\"x\"]");
    }

    #[test]
    fn map_list_elements_need_their_keys() {
        let shape = builtin_shape(&TypeMeta::new("v1", "Pod"));
        let err = FieldSet::from_value(&json!({"spec": {"containers": [{"image": "x"}]}}), &shape)
            .unwrap_err();
        assert!(err.contains("omits key field \"name\""), "{err}");
        let err = FieldSet::from_value(
            &json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}),
            &shape,
        )
        .unwrap_err();
        assert!(err.contains("duplicate entries"), "{err}");
        let lenient = FieldSet::from_value_lenient(
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            &shape,
        );
        assert!(lenient.contains(&FieldPath(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            PathElement::Index(0)
        ])));
    }

    #[test]
    fn value_at_and_remove_at_follow_keys() {
        let mut obj = json!({"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]},
                             "metadata": {"finalizers": ["x", "y"]}});
        let image_b = FieldPath(vec![
            PathElement::Field("spec".into()),
            PathElement::Field("containers".into()),
            PathElement::Key("{\"name\":\"b\"}".into()),
            PathElement::Field("image".into()),
        ]);
        assert_eq!(value_at(&obj, &image_b), Some(&json!("2")));
        assert!(remove_at(&mut obj, &image_b));
        assert_eq!(obj["spec"]["containers"][1], json!({"name": "b"}));
        let fin = FieldPath(vec![
            PathElement::Field("metadata".into()),
            PathElement::Field("finalizers".into()),
            PathElement::Value("\"x\"".into()),
        ]);
        assert!(remove_at(&mut obj, &fin));
        assert_eq!(obj["metadata"]["finalizers"], json!(["y"]));
        assert!(!remove_at(&mut obj, &fin));
    }

    #[test]
    fn garbage_fields_v1_decodes_to_what_is_readable() {
        let set = FieldSet::from_fields_v1(
            &json!({"f:a": {"x:bad": {}, "k:notjson": {}, "f:b": 3, "i:x": {}}, "zz": 1}),
        );
        assert_eq!(set.0.len(), 1);
        assert!(FieldSet::from_fields_v1(&json!("nope")).is_empty());
    }
}
