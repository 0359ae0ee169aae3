//! Conversion between `v1alpha1` (deprecated) and `v1beta1` (the hub and storage version) for
//! all four kinds, as pure functions, following `v1alpha1-conversion.md`.
//!
//! - [`convert`]: one object (as the API server sends it in a `ConversionReview`) to a desired
//!   `apiVersion`; what the conversion webhooks call.
//! - [`sandbox`], [`template`], [`warm_pool`], [`claim`]: `up` (v1alpha1 → v1beta1) and `down`
//!   (v1beta1 → v1alpha1) for each kind, with the rules of the spec.
//!
//! The functions work on the JSON objects, not on the typed structs: they move, rename or
//! derive only the fields the rules name and leave every other byte as the client wrote it. A
//! typed round trip would rewrite what it has no reason to touch: a `shutdownTime` of
//! `2026-01-01T10:00:00.250+02:00` would come back as `2026-01-01T08:00:00.25Z` (k8s-openapi
//! re-renders a `Time` in UTC), and empty maps such as `labels: {}` would disappear
//! (`wire_format_is_kept_outside_the_converted_fields` in `tests/conversion_checklist.rs` shows it).
//!
//! ## State annotations
//!
//! Up-conversion records what only v1alpha1 can express in an annotation on the v1beta1 object
//! (`api.agents.x-k8s.io/v1alpha1-<kind>-state`); down-conversion removes it and, for Sandbox
//! and SandboxClaim, uses it to restore the original values. The reference stores the whole
//! input object there (managed fields and `kubectl.kubernetes.io/last-applied-configuration`
//! included, so a Sandbox's snapshot is about as large as the Sandbox and counts twice against
//! the 256 KiB annotation limit). Ours holds only `apiVersion`, `kind`, the object's name and
//! namespace, and the v1alpha1-only fields the down-conversion reads back (Sandbox:
//! `spec.replicas`, `status.replicas`; SandboxClaim: `spec.sandboxTemplateRef`,
//! `spec.warmpool`); it is still a v1alpha1 object of that kind, so the reference's webhook
//! reads it back the same way after a rollback, and snapshots the reference wrote are read
//! here (unknown fields are ignored).

pub mod claim;
pub mod sandbox;
pub mod template;
pub mod warm_pool;

use serde_json::{Map, Value, json};

/// Path of the conversion webhook on both controllers' webhook Services.
pub const CONVERSION_PATH: &str = "/convert";
/// `ConversionReview` versions the CRDs offer the API server (it uses the first it speaks).
pub const CONVERSION_REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
/// Namespace of the webhook Services in the release manifests.
pub const WEBHOOK_NAMESPACE: &str = "agent-sandbox-system";
/// The core controller's webhook Service (converts Sandboxes).
pub const CORE_WEBHOOK_SERVICE: &str = "sandbox-controller-webhook";
/// The extensions controller's webhook Service (converts templates, pools and claims).
pub const EXTENSIONS_WEBHOOK_SERVICE: &str = "extensions-controller-webhook";

/// The hub: served, stored, listed first.
pub const HUB_VERSION: &str = "v1beta1";
/// The deprecated spoke.
pub const SPOKE_VERSION: &str = crate::v1alpha1::VERSION;
/// Both served versions, hub first.
pub const SERVED_VERSIONS: [&str; 2] = [HUB_VERSION, SPOKE_VERSION];

/// Prefix of the pool name a cold-start v1alpha1 claim converts to (its "shadow pool").
pub const SHADOW_POOL_PREFIX: &str = "shadow-pool-";

/// One convertible kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
}

impl Kind {
    /// The CRD's name, `<plural>.<group>`.
    pub fn crd_name(&self) -> String {
        format!("{}.{}", self.plural, self.group)
    }

    /// `<group>/<version>`.
    pub fn api_version(&self, version: &str) -> String {
        format!("{}/{version}", self.group)
    }
}

pub const SANDBOX: Kind = Kind {
    group: crate::sandbox::SANDBOX_GROUP,
    kind: "Sandbox",
    plural: "sandboxes",
};
pub const SANDBOX_TEMPLATE: Kind = Kind {
    group: crate::template::EXTENSIONS_GROUP,
    kind: "SandboxTemplate",
    plural: "sandboxtemplates",
};
pub const SANDBOX_WARM_POOL: Kind = Kind {
    group: crate::template::EXTENSIONS_GROUP,
    kind: "SandboxWarmPool",
    plural: "sandboxwarmpools",
};
pub const SANDBOX_CLAIM: Kind = Kind {
    group: crate::template::EXTENSIONS_GROUP,
    kind: "SandboxClaim",
    plural: "sandboxclaims",
};
/// The kinds the core controller converts.
pub const CORE_KINDS: [Kind; 1] = [SANDBOX];
/// The kinds the extensions controller converts.
pub const EXTENSION_KINDS: [Kind; 3] = [SANDBOX_TEMPLATE, SANDBOX_WARM_POOL, SANDBOX_CLAIM];

/// Why an object could not be converted. The text is what the API server passes on to the
/// client whose request needed the conversion.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("the object to convert is not a JSON object")]
    NotAnObject,
    #[error("the object to convert has no {0}")]
    MissingTypeField(&'static str),
    #[error("{kind} of apiVersion {api_version} is not a kind this API converts")]
    UnknownKind { api_version: String, kind: String },
    #[error(
        "cannot convert {kind} from {from} to {to}: the group differs (a conversion keeps the group)"
    )]
    GroupMismatch {
        kind: String,
        from: String,
        to: String,
    },
    #[error("unsupported version {version:?} for {kind} (served: v1beta1, v1alpha1)")]
    UnsupportedVersion { kind: String, version: String },
    #[error("{path} must be {expected}, got {found}")]
    FieldType {
        path: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("invalid VolumeClaimTemplatesPolicy annotation value: {0:?}")]
    InvalidPolicyAnnotation(String),
    #[error("failed to unmarshal v1alpha1 {kind} state: {message}")]
    State { kind: &'static str, message: String },
}

/// Converts `object` (any served version of one of the four kinds) to `desired_api_version`
/// (`<group>/<version>`). An object already in the desired version is returned unchanged.
pub fn convert(object: &Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let map = object.as_object().ok_or(ConversionError::NotAnObject)?;
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingTypeField("apiVersion"))?;
    let kind_name = map
        .get("kind")
        .and_then(Value::as_str)
        .ok_or(ConversionError::MissingTypeField("kind"))?;
    let (group, from) = split_api_version(api_version);
    let (to_group, to) = split_api_version(desired_api_version);
    let kind = [SANDBOX, SANDBOX_TEMPLATE, SANDBOX_WARM_POOL, SANDBOX_CLAIM]
        .into_iter()
        .find(|k| k.group == group && k.kind == kind_name)
        .ok_or_else(|| ConversionError::UnknownKind {
            api_version: api_version.to_owned(),
            kind: kind_name.to_owned(),
        })?;
    if to_group != group {
        return Err(ConversionError::GroupMismatch {
            kind: kind_name.to_owned(),
            from: api_version.to_owned(),
            to: desired_api_version.to_owned(),
        });
    }
    for version in [from, to] {
        if !SERVED_VERSIONS.contains(&version) {
            return Err(ConversionError::UnsupportedVersion {
                kind: kind_name.to_owned(),
                version: version.to_owned(),
            });
        }
    }
    if from == to {
        return Ok(object.clone());
    }
    let up = to == HUB_VERSION;
    match (kind.kind, up) {
        ("Sandbox", true) => sandbox::up(object),
        ("Sandbox", false) => sandbox::down(object),
        ("SandboxTemplate", true) => template::up(object),
        ("SandboxTemplate", false) => template::down(object),
        ("SandboxWarmPool", true) => warm_pool::up(object),
        ("SandboxWarmPool", false) => warm_pool::down(object),
        ("SandboxClaim", true) => claim::up(object),
        _ => claim::down(object),
    }
}

/// `(group, version)` of an `apiVersion`; the core group is empty.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

// --- JSON plumbing shared by the four kinds --------------------------------------------------

fn type_name(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn field_type(path: &'static str, expected: &'static str, found: &Value) -> ConversionError {
    ConversionError::FieldType {
        path,
        expected,
        found: type_name(found),
    }
}

/// A copy of `input` as an object with its `apiVersion` set to `<group>/<version>`.
fn copy_as(
    input: &Value,
    kind: Kind,
    version: &str,
) -> Result<Map<String, Value>, ConversionError> {
    let mut map = input
        .as_object()
        .cloned()
        .ok_or(ConversionError::NotAnObject)?;
    map.insert(
        "apiVersion".into(),
        Value::String(kind.api_version(version)),
    );
    Ok(map)
}

/// The object under `key` (`None` when absent or null).
fn child<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<Option<&'a mut Map<String, Value>>, ConversionError> {
    match parent.get_mut(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(field_type(path, "an object", other)),
    }
}

/// The object under `key`, created when absent or null.
fn child_or_insert<'a>(
    parent: &'a mut Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<&'a mut Map<String, Value>, ConversionError> {
    if matches!(parent.get(key), None | Some(Value::Null)) {
        parent.insert(key.to_owned(), Value::Object(Map::new()));
    }
    match parent.get_mut(key) {
        Some(Value::Object(map)) => Ok(map),
        Some(other) => Err(field_type(path, "an object", other)),
        None => unreachable!("inserted above"),
    }
}

/// The object under `key`, read only (`None` when absent or null).
fn child_ref<'a>(
    parent: &'a Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<Option<&'a Map<String, Value>>, ConversionError> {
    match parent.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(other) => Err(field_type(path, "an object", other)),
    }
}

/// Removes `key` and returns it (`None` when absent or null).
fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    map.remove(key).filter(|v| !v.is_null())
}

/// The string under `key` (`None` when absent or null).
fn string_at<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    path: &'static str,
) -> Result<Option<&'a str>, ConversionError> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(field_type(path, "a string", other)),
    }
}

/// Checks that `value` is an integer and returns it.
fn integer(value: &Value, path: &'static str) -> Result<i64, ConversionError> {
    value
        .as_i64()
        .ok_or_else(|| field_type(path, "an integer", value))
}

/// `metadata.<field>` as a string, empty when absent.
fn metadata_str<'a>(
    object: &'a Map<String, Value>,
    field: &str,
) -> Result<&'a str, ConversionError> {
    let Some(metadata) = child_ref(object, "metadata", "metadata")? else {
        return Ok("");
    };
    Ok(match metadata.get(field) {
        Some(Value::String(s)) => s,
        _ => "",
    })
}

/// Removes annotation `key` and returns its value; drops the annotations map when it is left
/// empty (an absent map and an empty one mean the same, and the round trip must not grow one).
fn remove_annotation(
    object: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<String>, ConversionError> {
    let Some(metadata) = child(object, "metadata", "metadata")? else {
        return Ok(None);
    };
    let Some(annotations) = child(metadata, "annotations", "metadata.annotations")? else {
        return Ok(None);
    };
    let removed = match annotations.remove(key) {
        None => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            return Err(field_type(
                "metadata.annotations",
                "a map of strings",
                &other,
            ));
        }
    };
    if removed.is_some() && annotations.is_empty() {
        metadata.remove("annotations");
    }
    Ok(removed)
}

/// Sets annotation `key` to `value`, creating `metadata` and its annotations as needed.
fn set_annotation(
    object: &mut Map<String, Value>,
    key: &str,
    value: String,
) -> Result<(), ConversionError> {
    let metadata = child_or_insert(object, "metadata", "metadata")?;
    let annotations = child_or_insert(metadata, "annotations", "metadata.annotations")?;
    annotations.insert(key.to_owned(), Value::String(value));
    Ok(())
}

/// Writes the state annotation `key` of `kind` on `out`: a v1alpha1 object holding the input's
/// `apiVersion`, `kind`, name and namespace and the given `spec`/`status` members (omitted when
/// empty).
fn write_state(
    out: &mut Map<String, Value>,
    input: &Map<String, Value>,
    key: &str,
    spec: Map<String, Value>,
    status: Map<String, Value>,
) -> Result<(), ConversionError> {
    let mut identity = Map::new();
    for field in ["name", "namespace"] {
        let value = metadata_str(input, field)?;
        if !value.is_empty() {
            identity.insert(field.into(), Value::String(value.to_owned()));
        }
    }
    let mut state = Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(value) = input.get(field) {
            state.insert(field.into(), value.clone());
        }
    }
    state.insert("metadata".into(), Value::Object(identity));
    if !spec.is_empty() {
        state.insert("spec".into(), Value::Object(spec));
    }
    if !status.is_empty() {
        state.insert("status".into(), Value::Object(status));
    }
    set_annotation(out, key, Value::Object(state).to_string())
}

/// Parses a state annotation's JSON (ours or the reference's: unknown fields are ignored).
fn parse_state(kind: &'static str, text: &str) -> Result<Map<String, Value>, ConversionError> {
    let state_error = |message: String| ConversionError::State { kind, message };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(state_error(format!(
            "expected a JSON object, got {}",
            type_name(&other)
        ))),
        Err(e) => Err(state_error(e.to_string())),
    }
}

/// `state.<section>.<field>` of a parsed state, `None` when absent or null; a section that is
/// not an object is a state error.
fn state_field<'a>(
    kind: &'static str,
    state: &'a Map<String, Value>,
    section: &str,
    field: &str,
) -> Result<Option<&'a Value>, ConversionError> {
    match state.get(section) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(map.get(field).filter(|v| !v.is_null())),
        Some(other) => Err(ConversionError::State {
            kind,
            message: format!("{section} must be an object, got {}", type_name(other)),
        }),
    }
}

/// `{"name": name}`, or `{}` for an empty name (the reference's `omitempty`).
fn name_ref(name: &str) -> Value {
    if name.is_empty() {
        json!({})
    } else {
        json!({ "name": name })
    }
}
