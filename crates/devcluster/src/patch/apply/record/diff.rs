//! The before/after comparison of an ordinary write, walking both objects side by side.
//!
//! The plain version ([`super::changed_fields`]) lists every node of both sides (a path per
//! node) and compares the lists. Here the two sides are walked together and a subtree that is
//! equal on both sides is skipped: nothing below it can have changed, and every node below it
//! exists after the write. Paths are built only for the nodes the writer takes, and whether a
//! path still exists after the write is answered by looking it up ([`exists`]).
//!
//! Which nodes a value has follows `fieldset::collect` exactly (objects, sets, map-lists by
//! key, unkeyable elements by index, the first of duplicate keys, atomic maps and atomic
//! elements as leaves); the tests hold both to the plain listing on generated objects.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::{Map, Value};

use super::super::super::fieldset::{FieldPath, PathElement, list_item_id};
use super::super::super::shape::{FieldShape, ListType};
use super::{Top, is_tracked_metadata};

/// How a node was reached: by a field name, as a map-list element or as a set element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reached {
    Field,
    MapElement,
    SetElement,
}

/// The fields of an object node, as its children (`None` when it has none).
fn field_child<'a>(node: Top<'a>, key: &str) -> Option<Top<'a>> {
    match node {
        Top::Value(Value::Object(map)) => map.get(key).map(Top::Value),
        Top::Metadata(map) if is_tracked_metadata(key) => map.get(key).map(Top::Value),
        _ => None,
    }
}

/// The kind of children a node has, given how it was reached and the shape at its path.
enum Children<'a> {
    None,
    Fields,
    Set(&'a [Value]),
    Map(&'a [Value], ListType),
}

/// The members of a node walked field by field (only the tracked ones of `metadata`).
fn field_members<'a>(node: Top<'a>) -> Box<dyn Iterator<Item = (&'a String, &'a Value)> + 'a> {
    match node {
        Top::Value(Value::Object(map)) => Box::new(map.iter()),
        Top::Metadata(map) => Box::new(map.iter().filter(|(k, _)| is_tracked_metadata(k))),
        _ => Box::new(std::iter::empty()),
    }
}

/// The set items of the version before, by their identity (none when it held no set there).
fn set_items_by_id<'a>(before: Option<&Children<'a>>) -> HashMap<String, &'a Value> {
    match before {
        Some(Children::Set(old)) => old
            .iter()
            .filter_map(|item| Some((list_item_id(item, &ListType::Set)?, item)))
            .collect(),
        _ => HashMap::new(),
    }
}

/// The map-list elements of the version before, by their key (none when it held no map list
/// there).
fn map_items_by_element<'a>(
    before: Option<&Children<'a>>,
    list: &ListType,
) -> HashMap<PathElement, &'a Value> {
    match before {
        Some(Children::Map(old, _)) => map_elements(old, list).into_iter().collect(),
        _ => HashMap::new(),
    }
}

fn children_of<'a>(
    node: Top<'a>,
    reached: Reached,
    names: &[&str],
    shape: &dyn FieldShape,
) -> Children<'a> {
    match (reached, node) {
        (Reached::SetElement, _) => Children::None,
        (Reached::MapElement, Top::Value(Value::Object(_))) => {
            if shape.is_atomic_map(names) {
                Children::None
            } else {
                Children::Fields
            }
        }
        (Reached::MapElement, _) => Children::None,
        (Reached::Field, Top::Value(Value::Object(map))) => {
            if map.is_empty() || shape.is_atomic_map(names) {
                Children::None
            } else {
                Children::Fields
            }
        }
        (Reached::Field, Top::Metadata(map)) => {
            if !map.keys().any(|k| is_tracked_metadata(k)) || shape.is_atomic_map(names) {
                Children::None
            } else {
                Children::Fields
            }
        }
        (Reached::Field, Top::Value(Value::Array(items))) if !items.is_empty() => {
            match shape.list_type(names) {
                Some(ListType::Set) => Children::Set(items),
                Some(list @ ListType::Map(_)) => Children::Map(items, list),
                Some(ListType::Atomic) | None => Children::None,
            }
        }
        _ => Children::None,
    }
}

/// Whether a node reached by a field is a member (what apply records as owned) rather than an
/// object or associative list with members below it.
fn is_member(node: Top<'_>, names: &[&str], shape: &dyn FieldShape) -> bool {
    matches!(
        children_of(node, Reached::Field, names, shape),
        Children::None
    )
}

/// The map-list elements of `items` by their path element (the first of duplicate keys;
/// unkeyable elements by index).
fn map_elements<'a>(items: &'a [Value], list: &ListType) -> Vec<(PathElement, &'a Value)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        match list_item_id(item, list) {
            Some(json) => {
                if seen.insert(json.clone()) {
                    out.push((PathElement::Key(json), item));
                }
            }
            None => out.push((PathElement::Index(index), item)),
        }
    }
    out
}

/// The side-by-side walk: collects the paths the writer takes.
struct Walk<'s> {
    shape: &'s dyn FieldShape,
    path: FieldPath,
    changed: BTreeSet<FieldPath>,
}

impl<'s> Walk<'s> {
    /// Compare the node at `self.path` (present after the write; `before` when it existed).
    fn node<'a>(
        &mut self,
        before: Option<Top<'a>>,
        after: Top<'a>,
        reached: Reached,
        names: &mut Vec<&'a str>,
    ) {
        let Some(before) = before else {
            self.changed.insert(self.path.clone());
            self.all_below(after, reached, names);
            return;
        };
        if before.same_as(after) {
            return;
        }
        if reached == Reached::Field && is_member(after, names, self.shape) {
            self.changed.insert(self.path.clone());
        }
        self.children(Some(before), after, reached, names);
    }

    /// Every node below a node that is new: all of them are the writer's.
    fn all_below<'a>(&mut self, after: Top<'a>, reached: Reached, names: &mut Vec<&'a str>) {
        self.children(None, after, reached, names);
    }

    /// Walk the children of `after` (and the matching ones of `before`).
    fn children<'a>(
        &mut self,
        before: Option<Top<'a>>,
        after: Top<'a>,
        reached: Reached,
        names: &mut Vec<&'a str>,
    ) {
        let before_children = before.map(|b| children_of(b, reached, names, self.shape));
        match children_of(after, reached, names, self.shape) {
            Children::None => {}
            Children::Fields => {
                let members = field_members(after);
                let before_has_fields = matches!(before_children, Some(Children::Fields));
                for (key, child) in members {
                    let was = before
                        .filter(|_| before_has_fields)
                        .and_then(|b| field_child(b, key));
                    self.path.0.push(PathElement::Field(key.clone()));
                    names.push(key.as_str());
                    self.node(was, Top::Value(child), Reached::Field, names);
                    names.pop();
                    self.path.0.pop();
                }
            }
            Children::Set(items) => {
                let was = set_items_by_id(before_children.as_ref());
                for item in items {
                    let Some(json) = list_item_id(item, &ListType::Set) else {
                        continue;
                    };
                    let old = was.get(&json).map(|v| Top::Value(v));
                    self.path.0.push(PathElement::Value(json));
                    self.node(old, Top::Value(item), Reached::SetElement, names);
                    self.path.0.pop();
                }
            }
            Children::Map(items, list) => {
                let was = map_items_by_element(before_children.as_ref(), &list);
                for (element, item) in map_elements(items, &list) {
                    let old = was.get(&element).map(|v| Top::Value(v));
                    self.path.0.push(element);
                    self.node(old, Top::Value(item), Reached::MapElement, names);
                    self.path.0.pop();
                }
            }
        }
    }
}

/// The paths the writer takes, comparing the touched top-level fields of `before` and `after`:
/// nodes that are new and members whose value changed (list elements by identity only). What
/// [`super::changed_fields`] gives for the same parts.
pub(super) fn changed_paths(
    before: &BTreeMap<&str, Top<'_>>,
    after: &BTreeMap<&str, Top<'_>>,
    touched: &BTreeSet<String>,
    shape: &dyn FieldShape,
) -> BTreeSet<FieldPath> {
    let mut walk = Walk {
        shape,
        path: FieldPath::default(),
        changed: BTreeSet::new(),
    };
    // The root of the compared parts holds only the touched fields; an atomic root has no nodes.
    if shape.is_atomic_map(&[]) {
        return walk.changed;
    }
    let mut names = Vec::new();
    for (top, now) in after {
        if !touched.contains(*top) {
            continue;
        }
        walk.path.0.push(PathElement::Field(top.to_string()));
        names.push(*top);
        walk.node(before.get(top).copied(), *now, Reached::Field, &mut names);
        names.pop();
        walk.path.0.pop();
    }
    walk.changed
}

/// The `fieldsV1` encoding of what [`changed_paths`] gives, built during the walk without
/// listing the paths (a create: every field is the creator's).
pub(super) fn changed_fields_v1(
    before: &BTreeMap<&str, Top<'_>>,
    after: &BTreeMap<&str, Top<'_>>,
    touched: &BTreeSet<String>,
    shape: &dyn FieldShape,
) -> Map<String, Value> {
    let mut out = Map::new();
    if shape.is_atomic_map(&[]) {
        return out;
    }
    let mut names = Vec::new();
    for (top, now) in after {
        if !touched.contains(*top) {
            continue;
        }
        names.push(*top);
        if let Some(encoded) = encode_node(
            before.get(top).copied(),
            *now,
            Reached::Field,
            &mut names,
            shape,
        ) {
            out.insert(format!("f:{top}"), encoded);
        }
        names.pop();
    }
    out
}

/// The encoding of one node and what the writer takes below it (`None`: nothing).
fn encode_node<'a>(
    before: Option<Top<'a>>,
    after: Top<'a>,
    reached: Reached,
    names: &mut Vec<&'a str>,
    shape: &dyn FieldShape,
) -> Option<Value> {
    let taken = match before {
        None => true,
        Some(b) if b.same_as(after) => return None,
        Some(_) => reached == Reached::Field && is_member(after, names, shape),
    };
    let mut below = encode_children(before, after, reached, names, shape);
    if !taken && below.is_empty() {
        return None;
    }
    if taken && !below.is_empty() {
        below.insert(".".to_string(), Value::Object(Map::new()));
    }
    Some(Value::Object(below))
}

fn encode_children<'a>(
    before: Option<Top<'a>>,
    after: Top<'a>,
    reached: Reached,
    names: &mut Vec<&'a str>,
    shape: &dyn FieldShape,
) -> Map<String, Value> {
    let mut out = Map::new();
    let before_children = before.map(|b| children_of(b, reached, names, shape));
    match children_of(after, reached, names, shape) {
        Children::None => {}
        Children::Fields => {
            let members = field_members(after);
            let before_has_fields = matches!(before_children, Some(Children::Fields));
            for (key, child) in members {
                let was = before
                    .filter(|_| before_has_fields)
                    .and_then(|b| field_child(b, key));
                names.push(key.as_str());
                if let Some(encoded) =
                    encode_node(was, Top::Value(child), Reached::Field, names, shape)
                {
                    out.insert(format!("f:{key}"), encoded);
                }
                names.pop();
            }
        }
        Children::Set(items) => {
            let was = set_items_by_id(before_children.as_ref());
            for item in items {
                let Some(json) = list_item_id(item, &ListType::Set) else {
                    continue;
                };
                let old = was.get(&json).map(|v| Top::Value(v));
                if let Some(encoded) =
                    encode_node(old, Top::Value(item), Reached::SetElement, names, shape)
                {
                    out.insert(PathElement::Value(json).encode(), encoded);
                }
            }
        }
        Children::Map(items, list) => {
            let was = map_items_by_element(before_children.as_ref(), &list);
            for (element, item) in map_elements(items, &list) {
                let old = was.get(&element).map(|v| Top::Value(v));
                if let Some(encoded) =
                    encode_node(old, Top::Value(item), Reached::MapElement, names, shape)
                {
                    out.insert(element.encode(), encoded);
                }
            }
        }
    }
    out
}

/// Whether `path` is a node of the touched part of `after` (see [`changed_paths`]).
pub(super) fn exists(
    after: &BTreeMap<&str, Top<'_>>,
    touched: &BTreeSet<String>,
    path: &FieldPath,
    shape: &dyn FieldShape,
) -> bool {
    let Some((PathElement::Field(top), rest)) = path.0.split_first() else {
        return false;
    };
    if !touched.contains(top) || shape.is_atomic_map(&[]) {
        return false;
    }
    let Some(mut node) = after.get(top.as_str()).copied() else {
        return false;
    };
    let mut reached = Reached::Field;
    let mut names: Vec<&str> = vec![top.as_str()];
    for element in rest {
        let children = children_of(node, reached, &names, shape);
        let next = match (element, children) {
            (PathElement::Field(key), Children::Fields) => {
                field_child(node, key).map(|child| (child, Reached::Field, Some(key.as_str())))
            }
            (PathElement::Value(json), Children::Set(items)) => items
                .iter()
                .find(|item| list_item_id(item, &ListType::Set).as_deref() == Some(json))
                .map(|item| (Top::Value(item), Reached::SetElement, None)),
            (PathElement::Key(_) | PathElement::Index(_), Children::Map(items, list)) => {
                map_elements(items, &list)
                    .into_iter()
                    .find(|(e, _)| e == element)
                    .map(|(_, item)| (Top::Value(item), Reached::MapElement, None))
            }
            _ => None,
        };
        let Some((child, how, name)) = next else {
            return false;
        };
        node = child;
        reached = how;
        names.extend(name);
    }
    true
}

#[cfg(test)]
mod tests;
