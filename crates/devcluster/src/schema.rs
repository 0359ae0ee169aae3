//! Structural schemas of custom resources, as the apiextensions API server applies them.
//!
//! [`StructuralSchema::from_openapi`] checks and compiles one CRD version's `openAPIV3Schema`
//! (a schema that is not structural, or a CEL rule that does not compile, is an error the server
//! turns into a 422 on the CRD write). On every custom-resource write the server then calls, in
//! this order, [`StructuralSchema::prune`], [`StructuralSchema::apply_defaults`] and
//! [`StructuralSchema::validate`] (create) or [`StructuralSchema::validate_update`] (update, which
//! also runs CEL transition rules against the old object).
//!
//! Everything here is pure: values in, values or errors out.

use std::fmt;

use serde_json::Value;

mod cel_rules;
mod defaults;
pub mod jsonpath;
mod node;
mod prune;
pub mod table;
mod timefmt;
mod validate;

#[cfg(test)]
mod tests;

use node::{JsonType, Node};

/// How a list field merges: the patch module's type, so a schema is directly a
/// [`crate::patch::FieldShape`] for server-side apply on custom resources.
pub use crate::patch::ListType;

/// A compiled structural schema for one version of a custom resource.
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    root: Node,
}

/// Why a schema cannot be used: the field errors the real server would list for the CRD write.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SchemaError {
    #[error("{}", join_errors(.0))]
    Invalid(Vec<FieldError>),
}

impl SchemaError {
    /// The individual field errors (for `Status.details.causes`).
    pub fn field_errors(&self) -> &[FieldError] {
        match self {
            SchemaError::Invalid(errors) => errors,
        }
    }
}

/// Joins field errors the way apimachinery's aggregate error does (the text after `is invalid: `
/// in a 422 message): duplicates dropped, one alone printed as is, several as `[a, b]`.
pub fn join_errors(errors: &[FieldError]) -> String {
    let mut texts: Vec<String> = Vec::new();
    for e in errors {
        let t = e.to_string();
        if !texts.contains(&t) {
            texts.push(t);
        }
    }
    match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

/// The kind of a field error, mirroring apimachinery's `field.ErrorType`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldErrorKind {
    /// `Invalid value`.
    Invalid,
    /// `Invalid value` for a value of the wrong JSON type.
    TypeInvalid,
    /// `Unsupported value`, with the supported values.
    NotSupported,
    /// `Required value`.
    Required,
    /// `Forbidden`.
    Forbidden,
    /// `Duplicate value`.
    Duplicate,
    /// `Too long`.
    TooLong,
    /// `Too many`.
    TooMany,
}

/// One error about one field, printed exactly as apimachinery's `field.Error` prints itself.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field path, e.g. `spec.replicas` or `spec.items[0].name`.
    pub path: String,
    pub kind: FieldErrorKind,
    /// The offending value, when the message shows one.
    pub value: Option<Value>,
    /// The detail after the value (may be empty).
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(
        path: &str,
        kind: FieldErrorKind,
        value: Option<Value>,
        message: impl Into<String>,
    ) -> Self {
        FieldError {
            path: path.to_string(),
            kind,
            value,
            message: message.into(),
        }
    }

    pub(crate) fn not_supported(path: &str, value: Value, supported: &[&str]) -> Self {
        let list = supported
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        FieldError::new(
            path,
            FieldErrorKind::NotSupported,
            Some(value),
            format!("supported values: {list}"),
        )
    }

    /// The `reason` of this error in `Status.details.causes[]`.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
        }
    }

    /// The `Status.details.causes[]` entry of this error: `reason`, `message` (the body without
    /// the path) and `field`.
    pub fn cause(&self) -> Value {
        serde_json::json!({"reason": self.reason(), "message": self.body(), "field": self.path})
    }

    /// The message without the field path, as `Status.details.causes[].message` carries it.
    pub fn body(&self) -> String {
        let label = match self.kind {
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
        };
        let mut s = label.to_string();
        if let Some(v) = &self.value {
            s.push_str(": ");
            s.push_str(&render_value(v));
        }
        if !self.message.is_empty() {
            s.push_str(": ");
            s.push_str(&self.message);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.body())
    }
}

/// Renders a value the way Go's field errors print it: strings quoted, numbers (Go's `%v` for
/// floats) and booleans bare, null as `"null"`, maps and lists in Go's `%#v` shape for
/// `map[string]interface {}` and `[]interface {}`.
pub(crate) fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        other => render_go_syntax(other),
    }
}

fn render_go_syntax(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => validate::go_float(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => format!(
            "[]interface {{}}{{{}}}",
            items
                .iter()
                .map(render_go_syntax)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Object(map) => format!(
            "map[string]interface {{}}{{{}}}",
            map.iter()
                .map(|(k, v)| format!("{k:?}:{}", render_go_syntax(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl StructuralSchema {
    /// Checks and compiles an `openAPIV3Schema`. Error paths start at `openAPIV3Schema`; use
    /// [`StructuralSchema::from_openapi_at`] to root them where the CRD carries the schema.
    pub fn from_openapi(schema: &Value) -> Result<Self, SchemaError> {
        Self::from_openapi_at(schema, "openAPIV3Schema")
    }

    /// Like [`StructuralSchema::from_openapi`], with error paths rooted at `path`
    /// (e.g. `spec.versions[0].schema.openAPIV3Schema`).
    pub fn from_openapi_at(schema: &Value, path: &str) -> Result<Self, SchemaError> {
        let mut parser = node::Parser::new();
        let root = parser.parse_root(schema, path);
        if parser.errors.is_empty() {
            let mut default_errors = Vec::new();
            defaults::check_defaults_root(&root, path, &mut default_errors);
            if !default_errors.is_empty() {
                return Err(SchemaError::Invalid(default_errors));
            }
            Ok(StructuralSchema { root })
        } else {
            Err(SchemaError::Invalid(parser.errors))
        }
    }

    /// Compiles the schema of every version of an `apiextensions.k8s.io/v1` CRD object, in the
    /// order of `spec.versions`, with error paths as the real server reports them
    /// (`spec.versions[1].schema.openAPIV3Schema...`). A version without a schema is an error
    /// (`schemas are required`), as in `apiextensions.k8s.io/v1`.
    pub fn from_crd(crd: &Value) -> Result<Vec<(String, StructuralSchema)>, SchemaError> {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        let versions = crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for (i, version) in versions.iter().enumerate() {
            let name = version
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
            match version.pointer("/schema/openAPIV3Schema") {
                None | Some(Value::Null) => errors.push(FieldError::new(
                    &path,
                    FieldErrorKind::Required,
                    None,
                    "schemas are required",
                )),
                Some(schema) => match Self::from_openapi_at(schema, &path) {
                    Ok(s) => out.push((name, s)),
                    Err(SchemaError::Invalid(e)) => errors.extend(e),
                },
            }
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(SchemaError::Invalid(errors))
        }
    }

    /// Drops fields the schema does not specify (keeping everything under
    /// `x-kubernetes-preserve-unknown-fields`, `apiVersion`/`kind`/`metadata` of embedded resources,
    /// and `apiVersion`, `kind` and `metadata` at the top level, which the schema does not prune;
    /// `metadata` keeps the fields ObjectMeta has, as decoding it on a real server does).
    pub fn prune(&self, obj: &mut Value) {
        prune::prune_root(&self.root, obj);
    }

    /// [`StructuralSchema::prune`], returning the paths of the fields it dropped (`.spec.foo`,
    /// `.list[2].bar`) in document order, as `fieldValidation` reports them.
    pub fn prune_reporting(&self, obj: &mut Value) -> Vec<String> {
        prune::prune_root(&self.root, obj)
    }

    /// Structural defaulting: sets `default`s of absent fields whose parent exists (and of
    /// non-nullable fields sent as null), then drops non-nullable nulls that have no default.
    pub fn apply_defaults(&self, obj: &mut Value) {
        defaults::apply_root(&self.root, obj);
    }

    /// What the server does with a custom resource on every write, in order: prune, default, then
    /// validate (create, `old` = None) or validate against the old object (update). `obj` is left
    /// pruned and defaulted; the errors are the causes of a 422 `Invalid` when non-empty.
    pub fn admit(&self, obj: &mut Value, old: Option<&Value>) -> Vec<FieldError> {
        self.prune(obj);
        self.apply_defaults(obj);
        match old {
            None => self.validate(obj),
            Some(old) => self.validate_update(obj, old),
        }
    }

    /// Validates an object being created.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate::validate_root(&self.root, obj, None)
    }

    /// Validates an object being updated: the same checks as on create, plus CEL transition rules
    /// (those that use `oldSelf`) wherever the old object has a value at the same place.
    pub fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate::validate_root(&self.root, new, Some(old))
    }

    /// The list type of the list field at `path` (field names from the root, no indices; array
    /// items are stepped through implicitly). `None` when the path does not name a list.
    pub fn list_type(&self, path: &[&str]) -> Option<ListType> {
        let mut node = &self.root;
        for name in path {
            while node.ty == Some(JsonType::Array) {
                node = node.items.as_deref()?;
            }
            node = node.child(name)?;
        }
        if node.ty != Some(JsonType::Array) {
            return None;
        }
        Some(match node.list_type.as_deref() {
            Some("set") => ListType::Set,
            Some("map") => ListType::Map(node.list_map_keys.clone()),
            _ => ListType::Atomic,
        })
    }

    /// Whether the map (object) field at `path` is atomic (`x-kubernetes-map-type: atomic`).
    pub fn is_atomic_map(&self, path: &[&str]) -> bool {
        let mut node = &self.root;
        for name in path {
            while node.ty == Some(JsonType::Array) {
                match node.items.as_deref() {
                    Some(items) => node = items,
                    None => return false,
                }
            }
            match node.child(name) {
                Some(child) => node = child,
                None => return false,
            }
        }
        node.map_type.as_deref() == Some("atomic")
    }
}

/// A custom resource's schema tells server-side apply how its lists and maps merge.
impl crate::patch::FieldShape for StructuralSchema {
    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        StructuralSchema::list_type(self, path)
    }
}
