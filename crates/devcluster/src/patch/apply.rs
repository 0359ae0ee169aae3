//! Server-side apply and field ownership (`metadata.managedFields`).
//!
//! Each write records which manager set which fields. An apply merges the applied configuration
//! into the live object (maps recursively, lists by their [`ListType`]), fails with a conflict when
//! it would change a field another manager owns (unless forced, which moves ownership), and
//! removes the fields the manager applied last time and no longer applies when nobody else owns
//! them. Ordinary writes ([`record_update`]) take ownership of what they changed, silently.

use serde_json::{Map, Value, json};

use super::fieldset::{FieldPath, FieldSet, PathElement, remove_at, value_at};
use super::shape::FieldShape;
use merge::merge_applied;

/// The manager name the API server gives the fields of an object that had no `managedFields`
/// when it was first applied to.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Parameters of one apply request.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// The `fieldManager` query parameter (required for apply).
    pub manager: String,
    /// The `force` query parameter: take ownership of conflicting fields.
    pub force: bool,
    /// `Some("status")` for `.../status`, `Some("scale")`..., `None` for the main resource.
    pub subresource: Option<String>,
    /// The time to record, RFC 3339 with seconds (`2026-01-02T03:04:05Z`).
    pub now: String,
    /// The kind has a status subresource: a main-resource apply ignores `.status`.
    pub status_subresource: bool,
}

/// A field another manager owns that an apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager as the API server prints it: `"kubectl"` for an Apply entry,
    /// `"kubectl-create" using apps/v1` for an Update entry, with
    /// ` with subresource "status"` after the name for subresource entries.
    pub manager: String,
    /// The field path, e.g. `.spec.replicas`.
    pub field: String,
}

/// Why an apply failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// 409 `Conflict`; each conflict becomes a `FieldManagerConflict` cause
    /// (`message: "conflict with <manager>"`, `field: <path>`).
    #[error("{message}")]
    Conflict {
        message: String,
        conflicts: Vec<Conflict>,
    },
    /// The request is malformed (400 `BadRequest`): not an object, no field manager...
    #[error("{0}")]
    BadRequest(String),
    /// The applied configuration cannot be typed: a map-list element without its key, duplicate
    /// keys. A real server answers 500 with an empty reason and this message.
    #[error("{0}")]
    Untyped(String),
}

impl ApplyError {
    /// The HTTP status code a real API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflict { .. } => 409,
            ApplyError::BadRequest(_) => 400,
            ApplyError::Untyped(_) => 500,
        }
    }

    /// The `reason` of the `Status` (`""` when the real server leaves it empty).
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflict { .. } => "Conflict",
            ApplyError::BadRequest(_) => "BadRequest",
            ApplyError::Untyped(_) => "",
        }
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
struct ManagedEntry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: String,
    fields: FieldSet,
    /// the stored JSON of this entry while it is unchanged (saves re-encoding)
    raw: Option<Value>,
}

impl ManagedEntry {
    /// Whether this entry belongs to the manager identity: name, operation, subresource and,
    /// for Update entries only, the apiVersion (an applier keeps one entry across versions).
    fn is(&self, manager: &str, operation: &str, subresource: &str, api_version: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == "Apply" || self.api_version == api_version)
    }

    /// How conflict messages name this manager: `"name"`, plus ` with subresource "status"`,
    /// plus ` using apps/v1` for Update entries.
    fn display_name(&self) -> String {
        let mut name = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            name = format!("{name} with subresource {:?}", self.subresource);
        }
        if self.operation == "Update" {
            name = format!("{name} using {}", self.api_version);
        }
        name
    }

    fn to_json(&self) -> Value {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        self.to_json_with(self.fields.to_fields_v1())
    }

    /// The entry encoded afresh with `fields_v1` as its `fieldsV1` (the encoding of its fields).
    fn to_json_with(&self, fields_v1: Value) -> Value {
        let mut entry = Map::new();
        entry.insert("manager".into(), json!(self.manager));
        entry.insert("operation".into(), json!(self.operation));
        entry.insert("apiVersion".into(), json!(self.api_version));
        if let Some(time) = &self.time {
            entry.insert("time".into(), json!(time));
        }
        entry.insert("fieldsType".into(), json!("FieldsV1"));
        entry.insert("fieldsV1".into(), fields_v1);
        if !self.subresource.is_empty() {
            entry.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(entry)
    }
}

fn parse_managed(list: Option<&Value>) -> Vec<ManagedEntry> {
    let Some(Value::Array(entries)) = list else {
        return Vec::new();
    };
    entries
        .iter()
        .filter_map(|entry| {
            let mut parsed = parse_entry(entry, true)?;
            parsed.raw = Some(entry.clone());
            Some(parsed)
        })
        .collect()
}

/// One stored entry (`None` for a `fieldsType` other than `FieldsV1`), its `fieldsV1` decoded
/// when `decode_fields`, else left empty; `raw` is left unset.
fn parse_entry(entry: &Value, decode_fields: bool) -> Option<ManagedEntry> {
    let text = |name: &str| entry.get(name).and_then(Value::as_str).map(str::to_string);
    if entry
        .get("fieldsType")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "FieldsV1")
    {
        return None;
    }
    let fields = match entry.get("fieldsV1") {
        Some(fields) if decode_fields => FieldSet::from_fields_v1(fields),
        _ => FieldSet::default(),
    };
    Some(ManagedEntry {
        manager: text("manager").unwrap_or_default(),
        operation: text("operation").unwrap_or_else(|| "Update".into()),
        api_version: text("apiVersion").unwrap_or_default(),
        time: text("time"),
        subresource: text("subresource").unwrap_or_default(),
        fields,
        raw: None,
    })
}

fn managed_fields_of(object: &Value) -> Option<&Value> {
    object.get("metadata")?.get("managedFields")
}

/// The order the API server stores entries in: by operation, time, manager, apiVersion,
/// subresource.
fn encode_managed(mut entries: Vec<ManagedEntry>) -> Value {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(entry_order);
    Value::Array(entries.iter().map(ManagedEntry::to_json).collect())
}

fn entry_order(a: &ManagedEntry, b: &ManagedEntry) -> std::cmp::Ordering {
    a.operation
        .cmp(&b.operation)
        .then_with(|| a.time.cmp(&b.time))
        .then_with(|| a.manager.cmp(&b.manager))
        .then_with(|| a.api_version.cmp(&b.api_version))
        .then_with(|| a.subresource.cmp(&b.subresource))
}

/// Metadata the API server sets itself; never owned by a manager.
const SERVER_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// The part of an object whose fields are tracked: without `apiVersion`, `kind`, `metadata.name`,
/// `metadata.namespace` and server-set metadata.
fn tracked_part(object: &Value) -> Value {
    let mut out = object.clone();
    if let Value::Object(map) = &mut out {
        map.remove("apiVersion");
        map.remove("kind");
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            for key in SERVER_METADATA.iter().chain(&["name", "namespace"]) {
                meta.remove(*key);
            }
            if meta.is_empty() {
                map.remove("metadata");
            }
        }
    }
    out
}

/// An object without `metadata.managedFields`, for no-op comparisons.
fn without_managed_fields(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(Value::Object(meta)) = out.get_mut("metadata") {
        meta.remove("managedFields");
    }
    out
}

fn set_managed_fields(object: &mut Value, managed: Value) {
    if !object.is_object() {
        return;
    }
    if object.get("metadata").is_none_or(|m| !m.is_object()) {
        object["metadata"] = json!({});
    }
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        if managed.as_array().is_some_and(|a| a.is_empty()) {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), managed);
        }
    }
}

/// Whether the path ends at a list element (`k:`, `v:`, `i:`).
fn is_list_element(path: &FieldPath) -> bool {
    matches!(
        path.0.last(),
        Some(PathElement::Key(_) | PathElement::Value(_) | PathElement::Index(_))
    )
}

/// Whether the value at a path differs between two objects. For list elements (`k:`, `v:`,
/// `i:`) only their presence counts: their fields are separate paths.
fn differs(before: &Value, after: &Value, path: &FieldPath) -> bool {
    let a = value_at(before, path);
    let b = value_at(after, path);
    match path.0.last() {
        Some(PathElement::Key(_) | PathElement::Value(_) | PathElement::Index(_)) => {
            a.is_some() != b.is_some()
        }
        _ => a != b,
    }
}

/// Keep only the part of an applied configuration the request may change.
fn scope_config(applied: &Map<String, Value>, opts: &ApplyOptions) -> Map<String, Value> {
    let mut config = applied.clone();
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        for key in SERVER_METADATA {
            meta.remove(*key);
        }
    }
    match opts.subresource.as_deref() {
        Some("status") => {
            config.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "status"));
            if let Some(Value::Object(meta)) = applied.get("metadata") {
                let ids: Map<String, Value> = meta
                    .iter()
                    .filter(|(k, _)| matches!(k.as_str(), "name" | "namespace"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                config.insert("metadata".into(), Value::Object(ids));
            }
        }
        None if opts.status_subresource => {
            config.remove("status");
        }
        _ => {}
    }
    config
}

/// Whether the path is a key field of a map-list element (never removed on its own: the element
/// would lose its identity).
fn is_key_field(path: &FieldPath) -> bool {
    let [.., PathElement::Key(keys), PathElement::Field(name)] = path.0.as_slice() else {
        return false;
    };
    serde_json::from_str::<Map<String, Value>>(keys).is_ok_and(|k| k.contains_key(name))
}

/// Remove a path the manager stopped applying, then the objects that became empty because of
/// it (unless someone owns them).
fn prune(object: &mut Value, path: &FieldPath, owned_by_anyone: &FieldSet) {
    if !remove_at(object, path) {
        return;
    }
    let mut parent = path.clone();
    while parent.0.len() > 1 {
        parent.0.pop();
        if !matches!(parent.0.last(), Some(PathElement::Field(_))) {
            break;
        }
        let empty = match value_at(object, &parent) {
            Some(Value::Object(m)) => m.is_empty(),
            _ => false,
        };
        if !empty || owned_by_anyone.has_at_or_below(&parent) {
            break;
        }
        remove_at(object, &parent);
    }
}

fn untyped(object: &Value, message: &str) -> ApplyError {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let gv = if api_version.contains('/') {
        api_version.to_string()
    } else {
        format!("/{api_version}")
    };
    ApplyError::Untyped(format!(
        "failed to create typed patch object ({gv}, Kind={kind}): {message}"
    ))
}

/// Server-side apply. `live` is the stored object (`None`: the apply creates it). Returns the new
/// object with `metadata.managedFields` updated; the caller still sets server fields
/// (resourceVersion, uid, generation...) and validates the result.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    opts: &ApplyOptions,
    shape: &dyn FieldShape,
) -> Result<Value, ApplyError> {
    let Value::Object(applied_map) = applied else {
        return Err(ApplyError::BadRequest(
            "error decoding YAML: the apply configuration must be an object".to_string(),
        ));
    };
    if opts.manager.is_empty() {
        return Err(ApplyError::BadRequest(
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
                .to_string(),
        ));
    }
    if applied
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApplyError::BadRequest(
            "metadata.managedFields must be nil".to_string(),
        ));
    }
    let config = Value::Object(scope_config(applied_map, opts));
    let applied_set = FieldSet::from_value(&tracked_part(&config), shape)
        .map_err(|message| untyped(applied, &message))?;
    let subresource = opts.subresource.clone().unwrap_or_default();
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .or_else(|| {
            live.and_then(|l| l.get("apiVersion"))
                .and_then(Value::as_str)
        })
        .unwrap_or_default()
        .to_string();

    let mut managers = live
        .map(|l| parse_managed(managed_fields_of(l)))
        .unwrap_or_default();
    if let Some(live) = live
        && managers.is_empty()
    {
        managers.push(ManagedEntry {
            manager: BEFORE_FIRST_APPLY.to_string(),
            operation: "Update".to_string(),
            api_version: live
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            time: None,
            subresource: String::new(),
            fields: FieldSet::from_value_lenient(&tracked_part(live), shape),
            raw: None,
        });
    }

    let live_plain = live.map(without_managed_fields);
    let mut merged = merge_applied(live_plain.as_ref(), &config, shape, &mut Vec::new());
    let before = live_plain.clone().unwrap_or_else(|| json!({}));

    let me = managers
        .iter()
        .position(|e| e.is(&opts.manager, "Apply", &subresource, &api_version));
    let previous = me.map(|i| managers[i].fields.clone()).unwrap_or_default();

    // Conflicts: fields another manager owns that this apply changes.
    let mut conflicts = Vec::new();
    let mut taken: Vec<(usize, FieldPath)> = Vec::new();
    for (index, entry) in managers.iter().enumerate() {
        if Some(index) == me {
            continue;
        }
        for path in applied_set.intersection(&entry.fields).0 {
            if differs(&before, &merged, &path) {
                conflicts.push(Conflict {
                    manager: entry.display_name(),
                    field: path.to_string(),
                });
                taken.push((index, path));
            }
        }
    }
    if !conflicts.is_empty() && !opts.force {
        return Err(ApplyError::Conflict {
            message: conflict_message(&conflicts),
            conflicts,
        });
    }
    for (index, path) in taken {
        managers[index].fields.0.remove(&path);
        managers[index].raw = None;
    }

    // Fields applied last time and not now are removed when nobody else owns them.
    let others: FieldSet = managers
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != me)
        .fold(FieldSet::default(), |acc, (_, e)| acc.union(&e.fields));
    let owned_after = others.union(&applied_set);
    let mut dropped: Vec<FieldPath> = previous.difference(&applied_set).0.into_iter().collect();
    // shallowest first: a removed list element takes its fields with it
    dropped.sort_by_key(|p| p.0.len());
    let mut removed: Vec<FieldPath> = Vec::new();
    for path in dropped {
        if others.has_at_or_below(&path)
            || applied_set.has_at_or_below(&path)
            || removed.iter().any(|r| r.is_ancestor_of(&path))
            || is_key_field(&path)
        {
            continue;
        }
        prune(&mut merged, &path, &owned_after);
        removed.push(path);
    }

    let entry = ManagedEntry {
        manager: opts.manager.clone(),
        operation: "Apply".to_string(),
        api_version,
        time: Some(opts.now.clone()),
        subresource,
        fields: applied_set,
        raw: None,
    };
    match me {
        Some(i) => managers[i] = entry,
        None => managers.push(entry),
    }
    managers.retain(|e| e.manager != BEFORE_FIRST_APPLY || !e.fields.is_empty());
    finish(live, &mut merged, managers);
    Ok(merged)
}

/// Write the managed fields, keeping the stored ones untouched when the write changed nothing
/// but timestamps (a no-op stays a no-op).
fn finish(old: Option<&Value>, new: &mut Value, mut managers: Vec<ManagedEntry>) {
    if let Some(old) = old
        && super::equal_ignoring_metadata(old, new, &["managedFields"])
    {
        let stored = parse_managed(managed_fields_of(old));
        let same_but_time = stored.len()
            == managers.iter().filter(|e| !e.fields.is_empty()).count()
            && managers.iter().filter(|e| !e.fields.is_empty()).all(|e| {
                stored.iter().any(|s| {
                    s.is(&e.manager, &e.operation, &e.subresource, &e.api_version)
                        && s.fields == e.fields
                        && s.api_version == e.api_version
                })
            });
        if same_but_time && let Some(stored) = managed_fields_of(old).cloned() {
            set_managed_fields(new, stored);
            return;
        }
    }
    managers.retain(|e| !e.fields.is_empty());
    set_managed_fields(new, encode_managed(managers));
}

fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            only.manager, only.field
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort_unstable();
    managers.dedup();
    let mut lines = Vec::new();
    for manager in managers {
        lines.push(format!("conflicts with {manager}:"));
        for c in conflicts.iter().filter(|c| c.manager == manager) {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

mod record;
pub use record::{record_update, record_update_ignoring};

mod merge;
#[cfg(test)]
mod tests;
