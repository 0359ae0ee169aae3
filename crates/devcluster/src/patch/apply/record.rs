//! Field ownership for writes that are not an apply ([`record_update`]).
//!
//! A write usually changes one or two top-level fields of an object that several managers own
//! parts of, and it runs on every create, update and patch, so the work here follows what the
//! write changed rather than the size of `managedFields`:
//!
//! * the old and new objects are compared top-level field by top-level field, by reference;
//!   only the fields that differ are copied and walked;
//! * a manager's `fieldsV1` is decoded only below those fields, to see whether it loses
//!   anything; the writer's entry takes back what it changed, so it loses only the rest;
//! * an entry that loses or gains paths has them removed from or added to its stored
//!   `fieldsV1` in place ([`edit`]) when that is in the encoder's own form (always, for entries
//!   the server wrote), and is decoded and encoded afresh only otherwise;
//! * entries nobody changed are written back as stored.
//!
//! [`record_update_reference`] is the plain version (decode every entry, walk whole objects);
//! it serves the rare writes that send their own `managedFields`, and tests check that both give
//! the same object for varied writes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::super::fieldset::{FieldPath, FieldSet, PathElement, edit, node_values};
use super::super::shape::FieldShape;
use super::{
    ManagedEntry, SERVER_METADATA, finish, is_list_element, managed_fields_of, parse_entry,
    parse_managed, set_managed_fields, tracked_part,
};

/// Record field ownership for a write that is not an apply (create, update, patch): the manager
/// takes the fields it set or changed, other managers lose them, and fields that disappeared are
/// owned by nobody. `operation` is `"Update"` for every non-apply write, as on a real server.
///
/// A write may reset ownership: `managedFields: [{}]` in `new` removes all of it, and a non-empty
/// list different from the stored one replaces it before this write is recorded.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
    shape: &dyn FieldShape,
) {
    record_update_ignoring(old, new, manager, operation, subresource, now, shape, &[]);
}

/// [`record_update`] for a write whose changes to some top-level fields the server discards
/// (its "reset fields"): nobody gains or loses ownership under them. A real server does this for
/// `status` on main-resource writes of kinds with a status subresource — the status a create
/// carries is not owned by the creator, even if the server then fills some in.
#[allow(clippy::too_many_arguments)]
pub fn record_update_ignoring(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
    shape: &dyn FieldShape,
    ignored: &[&str],
) {
    let sent = managed_fields_of(new);
    if is_reset(sent) {
        set_managed_fields(new, json!([]));
        return;
    }
    let stored = old.and_then(managed_fields_of);
    if matches!(sent, Some(Value::Array(entries)) if !entries.is_empty()) && sent != stored {
        // The write replaces the managers: rare enough for the plain version.
        record_update_reference(
            old,
            new,
            manager,
            operation,
            subresource,
            now,
            shape,
            ignored,
        );
        return;
    }
    if old.is_none() {
        // A create: there are no other managers, and every field it sets is the creator's.
        record_create(new, manager, operation, subresource, now, shape, ignored);
        return;
    }
    // The write usually sends back the list it read: those entries are moved into the result
    // instead of copying the stored ones.
    let mut sent_copy = match sent {
        Some(Value::Array(_)) if sent == stored => take_managed_fields(new),
        _ => Vec::new(),
    };
    let change = Change::between(old, new, shape, ignored);
    let stored_entries: &[Value] = match stored {
        Some(Value::Array(entries)) => entries,
        _ => &[],
    };
    let mut managers: Vec<LazyEntry> = stored_entries
        .iter()
        .enumerate()
        .filter_map(|(position, entry)| LazyEntry::of_stored(position, entry))
        .collect();
    let api_version = api_version_of(new);
    let operation = operation_or_update(operation);
    let subresource = subresource.unwrap_or_default();
    let writer = managers
        .iter()
        .position(|e| e.entry.is(manager, operation, subresource, &api_version));
    for (position, entry) in managers.iter_mut().enumerate() {
        // The writer's entry takes back what the write changed: it loses only the rest.
        let regains = writer == Some(position) && !change.changed.is_empty();
        entry.drop_lost(&change, regains, &mut sent_copy);
    }
    let Change { changed, .. } = change;
    match writer.and_then(|position| managers.get_mut(position)) {
        Some(entry) if !changed.is_empty() => {
            entry.gain(changed, &mut sent_copy);
            entry.entry.time = Some(now.to_string());
            entry.entry.api_version = api_version;
            entry.modified = true;
        }
        Some(_) => {}
        None if !changed.is_empty() => managers.push(LazyEntry {
            entry: ManagedEntry {
                manager: manager.to_string(),
                operation: operation.to_string(),
                api_version,
                time: Some(now.to_string()),
                subresource: subresource.to_string(),
                fields: changed,
                raw: None,
            },
            stored: &Value::Null,
            position: usize::MAX,
            fields: Fields::Decoded,
            modified: true,
        }),
        None => {}
    }
    finish_lazy(old, new, managers, sent_copy);
}

/// Ownership of a new object whose write sends no managers of its own: one entry, the
/// creator's, holding what the object sets beyond the kind's empty object, encoded during the
/// walk.
fn record_create(
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
    shape: &dyn FieldShape,
    ignored: &[&str],
) {
    let zero = shape.zero_object();
    let mut before: BTreeMap<&str, Top> = match &zero {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| (k.as_str(), Top::Value(v)))
            .collect(),
        _ => BTreeMap::new(),
    };
    if zero.is_object() {
        before.entry("metadata").or_insert(Top::EmptyMetadata);
    }
    let after = tracked_tops(new);
    let touched = touched_tops(&before, &after, ignored);
    let fields = diff::changed_fields_v1(&before, &after, &touched, shape);
    let entries = if fields.is_empty() {
        Vec::new()
    } else {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(manager));
        entry.insert("operation".into(), json!(operation_or_update(operation)));
        entry.insert("apiVersion".into(), json!(api_version_of(new)));
        entry.insert("time".into(), json!(now));
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), Value::Object(fields));
        if let Some(sub) = subresource.filter(|s| !s.is_empty()) {
            entry.insert("subresource".into(), json!(sub));
        }
        vec![Value::Object(entry)]
    };
    set_managed_fields(new, Value::Array(entries));
}

/// The top-level fields whose tracked content differs (fields the write's changes to are
/// discarded aside).
fn touched_tops(
    before: &BTreeMap<&str, Top<'_>>,
    after: &BTreeMap<&str, Top<'_>>,
    ignored: &[&str],
) -> BTreeSet<String> {
    before
        .keys()
        .chain(after.keys())
        .filter(|k| !ignored.contains(*k))
        .filter(|k| match (before.get(*k), after.get(*k)) {
            (Some(a), Some(b)) => !a.same_as(*b),
            _ => true,
        })
        .map(|k| k.to_string())
        .collect()
}

/// Move `metadata.managedFields` (an array) out of an object.
fn take_managed_fields(object: &mut Value) -> Vec<Value> {
    match object
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|meta| meta.remove("managedFields"))
    {
        Some(Value::Array(entries)) => entries,
        _ => Vec::new(),
    }
}

/// `managedFields: [{}]`: the write clears ownership.
fn is_reset(sent: Option<&Value>) -> bool {
    matches!(sent, Some(Value::Array(entries))
        if entries.len() == 1 && entries[0].as_object().is_some_and(Map::is_empty))
}

fn api_version_of(object: &Value) -> String {
    object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn operation_or_update(operation: &str) -> &str {
    if operation.is_empty() {
        "Update"
    } else {
        operation
    }
}

/// One top-level member of an object's tracked part, borrowed.
#[derive(Debug, Clone, Copy)]
enum Top<'a> {
    /// A member as it is.
    Value(&'a Value),
    /// `metadata` without the members nobody owns (name, namespace, server-set fields).
    Metadata(&'a Map<String, Value>),
    /// `metadata` of an object that has no tracked metadata (always present before a write).
    EmptyMetadata,
}

fn is_tracked_metadata(key: &str) -> bool {
    key != "name" && key != "namespace" && !SERVER_METADATA.contains(&key)
}

impl<'a> Top<'a> {
    /// The members, when this is an object: (map, whether untracked metadata is skipped).
    fn as_map(self) -> Option<(Option<&'a Map<String, Value>>, bool)> {
        match self {
            Top::Value(Value::Object(map)) => Some((Some(map), false)),
            Top::Value(_) => None,
            Top::Metadata(map) => Some((Some(map), true)),
            Top::EmptyMetadata => Some((None, false)),
        }
    }

    fn same_as(self, other: Top<'a>) -> bool {
        if let (Top::Value(a), Top::Value(b)) = (self, other) {
            return a == b;
        }
        let (Some((a, a_filtered)), Some((b, b_filtered))) = (self.as_map(), other.as_map()) else {
            return false;
        };
        let members = |map: Option<&'a Map<String, Value>>, filtered: bool| {
            map.into_iter()
                .flat_map(|m| m.iter())
                .filter(move |(k, _)| !filtered || is_tracked_metadata(k))
        };
        let get = |key: &str| {
            b.filter(|_| !b_filtered || is_tracked_metadata(key))
                .and_then(|m| m.get(key))
        };
        members(a, a_filtered).count() == members(b, b_filtered).count()
            && members(a, a_filtered).all(|(k, v)| get(k) == Some(v))
    }
}

/// The tracked part of a stored object, by top-level field: without `apiVersion`, `kind`,
/// `metadata.name`, `metadata.namespace` and server-set metadata (no `metadata` at all when
/// nothing else is in it).
fn tracked_tops(object: &Value) -> BTreeMap<&str, Top<'_>> {
    let mut out = BTreeMap::new();
    let Value::Object(map) = object else {
        return out;
    };
    for (key, value) in map {
        match (key.as_str(), value) {
            ("apiVersion" | "kind", _) => {}
            ("metadata", Value::Object(meta)) => {
                if meta.keys().any(|k| is_tracked_metadata(k)) {
                    out.insert(key.as_str(), Top::Metadata(meta));
                }
            }
            _ => {
                out.insert(key.as_str(), Top::Value(value));
            }
        }
    }
    out
}

/// What a write changed, as field ownership sees it.
struct Change<'a> {
    /// Top-level fields whose tracked content differs.
    touched: BTreeSet<String>,
    /// Paths the writer takes: nodes it added and leaves it changed.
    changed: FieldSet,
    /// The tracked part of the object after the write, by top-level field.
    after: BTreeMap<&'a str, Top<'a>>,
    shape: &'a dyn FieldShape,
}

impl<'a> Change<'a> {
    fn between(
        old: Option<&Value>,
        new: &'a Value,
        shape: &'a dyn FieldShape,
        ignored: &[&str],
    ) -> Change<'a> {
        // A create compares against the kind's empty object.
        let zero;
        let (before_object, mut before) = match old {
            Some(old) => (old, tracked_tops(old)),
            None => {
                zero = shape.zero_object();
                let tops = match &zero {
                    Value::Object(map) => map
                        .iter()
                        .map(|(k, v)| (k.as_str(), Top::Value(v)))
                        .collect(),
                    _ => BTreeMap::new(),
                };
                (&zero, tops)
            }
        };
        // metadata always exists (it is a struct, never absent on a stored object)
        if before_object.is_object() {
            before.entry("metadata").or_insert(Top::EmptyMetadata);
        }
        let after = tracked_tops(new);
        let touched = touched_tops(&before, &after, ignored);
        let changed = FieldSet(diff::changed_paths(&before, &after, &touched, shape));
        Change {
            touched,
            changed,
            after,
            shape,
        }
    }

    fn is_touched(&self, top: &str) -> bool {
        self.touched.contains(top)
    }

    /// Whether an owner loses `path`: it lies below a touched field and the writer changed it
    /// (unless the owner is the writer, which `regains` what it changed) or it no longer exists.
    fn loses(&self, path: &FieldPath, regains: bool) -> bool {
        let under_touched = match path.0.first() {
            Some(PathElement::Field(top)) => self.is_touched(top),
            _ => false,
        };
        under_touched
            && if self.changed.contains(path) {
                !regains
            } else {
                !diff::exists(&self.after, &self.touched, path, self.shape)
            }
    }
}

/// A stored `managedFields` entry whose `fieldsV1` is read only when needed.
struct LazyEntry<'a> {
    /// Identity and time; `fields` is meaningful only once [`Fields::Decoded`].
    entry: ManagedEntry,
    /// The entry as stored.
    stored: &'a Value,
    /// Where it is in the stored list.
    position: usize,
    fields: Fields,
    /// The fields or time changed: the entry is encoded afresh.
    modified: bool,
}

/// Where a [`LazyEntry`]'s fields are.
enum Fields {
    /// In the stored `fieldsV1`, unread.
    Stored,
    /// In `entry.fields` (a stored `fieldsV1` not in the encoder's own form is decoded to be
    /// changed).
    Decoded,
    /// In this copy of the stored `fieldsV1`, changed in place (it was in the encoder's form).
    Edited(Map<String, Value>),
}

impl<'a> LazyEntry<'a> {
    fn of_stored(position: usize, stored: &'a Value) -> Option<Self> {
        Some(LazyEntry {
            entry: parse_entry(stored, false)?,
            stored,
            position,
            fields: Fields::Stored,
            modified: false,
        })
    }

    fn stored_fields(&self) -> Option<&'a Value> {
        self.stored.get("fieldsV1")
    }

    fn fields_mut(&mut self) -> &mut FieldSet {
        if matches!(self.fields, Fields::Stored) {
            self.entry.fields = self
                .stored_fields()
                .map(FieldSet::from_fields_v1)
                .unwrap_or_default();
            self.fields = Fields::Decoded;
        }
        &mut self.entry.fields
    }

    /// The `fieldsV1` to change in place, when the stored one is in the encoder's form (moved
    /// out of `stored_copy`, an equal copy of the stored list, when there is one); `None` when
    /// the fields must be decoded to be changed.
    fn editable(&mut self, stored_copy: &mut [Value]) -> Option<&mut Map<String, Value>> {
        if matches!(self.fields, Fields::Stored) {
            match self.stored_fields() {
                Some(fields @ Value::Object(map)) if edit::is_canonical(fields) => {
                    let copied = stored_copy
                        .get_mut(self.position)
                        .and_then(|entry| entry.get_mut("fieldsV1"))
                        .map(std::mem::take);
                    self.fields = Fields::Edited(match copied {
                        Some(Value::Object(copy)) => copy,
                        _ => map.clone(),
                    });
                }
                _ => {
                    self.fields_mut();
                }
            }
        }
        match &mut self.fields {
            Fields::Edited(map) => Some(map),
            _ => None,
        }
    }

    /// Add the paths `changed` (the writer's entry).
    fn gain(&mut self, changed: FieldSet, stored_copy: &mut [Value]) {
        match self.editable(stored_copy) {
            Some(map) => {
                for path in &changed.0 {
                    edit::insert(map, path);
                }
            }
            None => self.fields_mut().0.extend(changed.0),
        }
    }

    fn is_empty(&self) -> bool {
        match &self.fields {
            Fields::Stored => self
                .stored_fields()
                .is_none_or(FieldSet::fields_v1_is_empty),
            Fields::Decoded => self.entry.fields.is_empty(),
            Fields::Edited(map) => map.is_empty(),
        }
    }

    /// Drop the paths this entry loses to the write, reading only below the touched fields
    /// (`regains`: it is the writer's entry, which takes back what the write changed).
    fn drop_lost(&mut self, change: &Change, regains: bool, stored_copy: &mut [Value]) {
        let loses = |path: &FieldPath| change.loses(path, regains);
        let lost: Vec<FieldPath> = match &self.fields {
            Fields::Decoded => {
                if self.entry.fields.0.iter().any(loses) {
                    self.entry.fields.0.retain(|p| !loses(p));
                    self.modified = true;
                }
                return;
            }
            Fields::Stored => {
                let Some(stored) = self.stored_fields() else {
                    return;
                };
                change
                    .touched
                    .iter()
                    .flat_map(|top| FieldSet::from_fields_v1_under(stored, top).0)
                    .filter(|p| loses(p))
                    .collect()
            }
            Fields::Edited(map) => change
                .touched
                .iter()
                .flat_map(|top| FieldSet::from_fields_v1_map_under(map, top).0)
                .filter(|p| loses(p))
                .collect(),
        };
        if lost.is_empty() {
            return;
        }
        self.modified = true;
        match self.editable(stored_copy) {
            Some(map) => {
                for path in &lost {
                    edit::remove(map, path);
                }
            }
            None => self.fields_mut().0.retain(|p| !loses(p)),
        }
    }

    /// The entry as [`parse_managed`] gives it (decoded, `raw` kept while unmodified).
    fn into_entry(mut self) -> ManagedEntry {
        match std::mem::replace(&mut self.fields, Fields::Decoded) {
            Fields::Edited(map) => {
                self.entry.fields = FieldSet::from_fields_v1(&Value::Object(map));
            }
            Fields::Stored => {
                self.fields = Fields::Stored;
                self.fields_mut();
            }
            Fields::Decoded => {}
        }
        let mut entry = self.entry;
        entry.raw = (!self.modified).then(|| self.stored.clone());
        entry
    }

    /// The entry to store: encoded afresh when modified, else as stored (moved out of
    /// `stored_copy`, an equal copy of the stored list, when there is one).
    fn into_json(self, stored_copy: &mut [Value]) -> Value {
        if self.modified {
            return match self.fields {
                Fields::Edited(map) => self.entry.to_json_with(Value::Object(map)),
                _ => self.entry.to_json(),
            };
        }
        match stored_copy.get_mut(self.position) {
            Some(copy) => std::mem::take(copy),
            None => self.stored.clone(),
        }
    }
}

/// [`finish`] for lazily decoded entries: keep the stored list when the write changed nothing
/// (a no-op stays a no-op), else encode the entries in the API server's order.
/// `stored_copy` is empty or an equal copy of the stored list, to move entries from.
fn finish_lazy(
    old: Option<&Value>,
    new: &mut Value,
    mut managers: Vec<LazyEntry>,
    mut stored_copy: Vec<Value>,
) {
    if let Some(old) = old
        && super::super::equal_ignoring_metadata(old, new, &["managedFields"])
    {
        if managers.iter().any(|m| m.modified) {
            // Ownership moved although the object did not change (odd stored managedFields):
            // the exact comparison needs every entry decoded.
            let entries = managers.into_iter().map(LazyEntry::into_entry).collect();
            finish(Some(old), new, entries);
            return;
        }
        // Entries come from the stored list unchanged: it stays when none of them is empty.
        if managers.iter().all(|m| !m.is_empty())
            && let Some(stored) = managed_fields_of(old)
        {
            let stored = match stored {
                Value::Array(entries) if entries.len() == stored_copy.len() => {
                    Value::Array(stored_copy)
                }
                other => other.clone(),
            };
            set_managed_fields(new, stored);
            return;
        }
    }
    managers.retain(|e| !e.is_empty());
    managers.sort_by(|a, b| super::entry_order(&a.entry, &b.entry));
    let encoded = managers
        .into_iter()
        .map(|m| m.into_json(&mut stored_copy))
        .collect();
    set_managed_fields(new, Value::Array(encoded));
}

/// The fields `after` sets that `before` did not, or set to another value (leaves and whole
/// members; list elements by identity only), and every node of `after`.
fn changed_fields<'a>(
    before: &Value,
    after: &'a Value,
    shape: &dyn FieldShape,
) -> (
    FieldSet,
    BTreeMap<FieldPath, super::super::fieldset::Node<'a>>,
) {
    let old_nodes = node_values(before, shape, true);
    let new_nodes = node_values(after, shape, true);
    let changed = FieldSet(
        new_nodes
            .iter()
            .filter(|(path, node)| match old_nodes.get(*path) {
                None => true,
                Some(was) => node.member && !is_list_element(path) && was.value != node.value,
            })
            .map(|(path, _)| path.clone())
            .collect(),
    );
    (changed, new_nodes)
}

/// The plain version of [`record_update_ignoring`]: decode every entry and walk the whole
/// objects. Used when a write sends its own `managedFields`, and by tests as the yardstick.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_update_reference(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    operation: &str,
    subresource: Option<&str>,
    now: &str,
    shape: &dyn FieldShape,
    ignored: &[&str],
) {
    let sent = managed_fields_of(new).cloned();
    if is_reset(sent.as_ref()) {
        set_managed_fields(new, json!([]));
        return;
    }
    let stored = old.and_then(managed_fields_of).cloned();
    let mut managers = match &sent {
        Some(Value::Array(entries)) if !entries.is_empty() && sent != stored => {
            parse_managed(sent.as_ref())
        }
        _ => parse_managed(stored.as_ref()),
    };

    // An update owns what it added (objects and lists included: they get "." in fieldsV1) and
    // the leaves it changed. A create compares against the kind's empty object.
    let mut before = match old {
        Some(old) => tracked_part(old),
        None => shape.zero_object(),
    };
    // metadata always exists (it is a struct, never absent on a stored object)
    if let Value::Object(map) = &mut before {
        map.entry("metadata").or_insert_with(|| json!({}));
    }
    let after = tracked_part(new);
    // Only the top-level fields that differ can hold changes: walk just those.
    let empty = Map::new();
    let before_map = before.as_object().unwrap_or(&empty);
    let after_map = after.as_object().unwrap_or(&empty);
    let touched: BTreeSet<&String> = before_map
        .keys()
        .chain(after_map.keys())
        .filter(|k| !ignored.contains(&k.as_str()) && before_map.get(*k) != after_map.get(*k))
        .collect();
    let only_touched = |m: &Map<String, Value>| -> Value {
        Value::Object(
            m.iter()
                .filter(|(k, _)| touched.contains(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        )
    };
    let before_part = only_touched(before_map);
    let after_part = only_touched(after_map);
    let (changed, new_nodes) = changed_fields(&before_part, &after_part, shape);

    // Others lose what this write changed; everyone loses what no longer exists.
    let under_touched = |path: &FieldPath| match path.0.first() {
        Some(PathElement::Field(top)) => touched.contains(top),
        _ => false,
    };
    for entry in &mut managers {
        let owned = entry.fields.0.len();
        entry
            .fields
            .0
            .retain(|p| !under_touched(p) || (!changed.contains(p) && new_nodes.contains_key(p)));
        if entry.fields.0.len() != owned {
            entry.raw = None;
        }
    }

    let subresource = subresource.unwrap_or_default();
    let api_version = api_version_of(new);
    let operation = operation_or_update(operation);
    match managers
        .iter_mut()
        .find(|e| e.is(manager, operation, subresource, &api_version))
    {
        Some(entry) if !changed.is_empty() => {
            entry.fields = entry.fields.union(&changed);
            entry.time = Some(now.to_string());
            entry.api_version = api_version;
            entry.raw = None;
        }
        Some(_) => {}
        None if !changed.is_empty() => managers.push(ManagedEntry {
            manager: manager.to_string(),
            operation: operation.to_string(),
            api_version,
            time: Some(now.to_string()),
            subresource: subresource.to_string(),
            fields: changed,
            raw: None,
        }),
        None => {}
    }
    finish(old, new, managers);
}

mod diff;

#[cfg(test)]
mod tests;
