//! The four PATCH flavours of the Kubernetes API, and field ownership (`managedFields`).
//!
//! Everything here is pure: functions take the stored object and the request body as
//! `serde_json::Value` and return the new object or an error whose Display is the message a real
//! API server would put in its `Status`.
//!
//! * [`merge_patch`]: JSON merge patch (RFC 7386, `application/merge-patch+json`).
//! * [`json_patch`]: JSON patch (RFC 6902, `application/json-patch+json`), with the API server's
//!   leniency that a `test` of a missing path against `null` passes.
//! * [`strategic_merge_patch`]: strategic merge patch (`application/strategic-merge-patch+json`)
//!   for the built-in kinds devcluster serves, with their merge keys and the `$patch`,
//!   `$retainKeys`, `$deleteFromPrimitiveList/` and `$setElementOrder/` directives.
//! * [`apply`]: server-side apply (`application/apply-patch+yaml`) with field ownership, conflicts,
//!   `force`, and removal of fields a manager stopped applying; [`record_update`] keeps ownership
//!   right for ordinary writes.

mod apply;
mod fieldset;
mod shape;
mod strategic;

pub use apply::{ApplyError, ApplyOptions, Conflict, apply, record_update};
pub use fieldset::{FieldPath, FieldSet, PathElement};
pub use shape::{AtomicShape, BuiltinShape, FieldShape, ListType, builtin_shape};
pub use strategic::strategic_merge_patch;

use serde_json::Value;

/// The group/version and kind of an object, used to pick merge keys and list types.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TypeMeta {
    /// `v1`, `apps/v1`, ...
    pub api_version: String,
    /// `Pod`, `Deployment`, ...
    pub kind: String,
}

impl TypeMeta {
    pub fn new(api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        TypeMeta {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    /// Read `apiVersion` and `kind` from an object (empty strings when absent).
    pub fn of(object: &Value) -> Self {
        let field = |name: &str| {
            object
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        TypeMeta {
            api_version: field("apiVersion"),
            kind: field("kind"),
        }
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(group, _)| group)
            .unwrap_or("")
    }
}

/// A patch that cannot be applied. Display is the message for the `Status`; [`PatchError::code`]
/// is the HTTP status a real API server answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed (400 `BadRequest`).
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well-formed but does not apply to this object (422 `Invalid`).
    #[error("{0}")]
    Unprocessable(String),
}

impl PatchError {
    /// The HTTP status code a real API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Unprocessable(_) => 422,
        }
    }
}

/// JSON merge patch (RFC 7386): objects merge recursively, `null` deletes a member, anything else
/// (arrays included) replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// JSON patch (RFC 6902): `add`, `remove`, `replace`, `move`, `copy` and `test`, applied in order,
/// all or nothing. As on a real API server, a `test` whose path does not exist passes when the
/// expected value is `null`.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, PatchError> {
    if !ops.is_array() {
        return Err(PatchError::BadRequest(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".to_string(),
        ));
    }
    let parsed: json_patch::Patch = serde_json::from_value(ops.clone())
        .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
    let mut doc = target.clone();
    for op in &parsed.0 {
        if let json_patch::PatchOperation::Test(test) = op
            && test.value.is_null()
            && test.path.resolve(&doc).is_err()
        {
            continue;
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op))
            .map_err(|e| PatchError::Unprocessable(describe_json_patch_error(op, &e)))?;
    }
    Ok(doc)
}

fn describe_json_patch_error(
    op: &json_patch::PatchOperation,
    err: &json_patch::PatchError,
) -> String {
    use json_patch::{PatchErrorKind, PatchOperation as Op};
    let path = op.path().to_string();
    match (op, &err.kind) {
        (Op::Test(_), _) => format!("testing value {path} failed: test failed"),
        (Op::Move(m), PatchErrorKind::InvalidFromPointer) => {
            format!(
                "move operation does not apply: doc is missing from path: {}: missing value",
                m.from
            )
        }
        (Op::Copy(c), PatchErrorKind::InvalidFromPointer) => {
            format!(
                "copy operation does not apply: doc is missing from path: {}: missing value",
                c.from
            )
        }
        (Op::Move(_), PatchErrorKind::CannotMoveInsideItself) => {
            format!("move operation does not apply: cannot move {path} into one of its children")
        }
        (Op::Add(_), _) => {
            format!("add operation does not apply: doc is missing path: \"{path}\": missing value")
        }
        (Op::Remove(_), _) => {
            format!(
                "remove operation does not apply: doc is missing path: \"{path}\": missing value"
            )
        }
        (Op::Replace(_), _) => {
            format!("replace operation does not apply: doc is missing key: {path}: missing value")
        }
        (Op::Move(_), _) => {
            format!(
                "move operation does not apply: doc is missing destination path: {path}: missing value"
            )
        }
        (Op::Copy(_), _) => {
            format!(
                "copy operation does not apply: doc is missing destination path: {path}: missing value"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_merges_objects_and_null_deletes() {
        let target =
            json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [1, 2]}});
        let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"list": [9]}});
        assert_eq!(
            merge_patch(&target, &patch),
            json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"list": [9]}})
        );
        // a non-object patch replaces the document
        assert_eq!(merge_patch(&target, &json!([1])), json!([1]));
        // a nested object creates intermediate members, dropping nulls
        assert_eq!(
            merge_patch(&json!({}), &json!({"a": {"b": {"c": 1, "d": null}}})),
            json!({"a": {"b": {"c": 1}}})
        );
    }

    #[test]
    fn json_patch_applies_all_operations() {
        let target = json!({"metadata": {"name": "x", "finalizers": ["a"]}, "spec": {"n": 1}});
        let ops = json!([
            {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
            {"op": "add", "path": "/metadata/finalizers/0", "value": "z"},
            {"op": "replace", "path": "/spec/n", "value": 2},
            {"op": "copy", "from": "/spec/n", "path": "/spec/m"},
            {"op": "move", "from": "/spec/m", "path": "/spec/k"},
            {"op": "remove", "path": "/metadata/name"},
            {"op": "test", "path": "/spec/k", "value": 2},
            {"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "v"}},
            {"op": "test", "path": "/metadata/annotations/a~0b~1c", "value": "v"}
        ]);
        assert_eq!(
            json_patch(&target, &ops).unwrap(),
            json!({"metadata": {"finalizers": ["z", "a", "b"], "annotations": {"a~b/c": "v"}}, "spec": {"n": 2, "k": 2}})
        );
    }

    #[test]
    fn json_patch_test_of_missing_path_against_null_passes() {
        // What kube-runtime's finalizer() sends for an object without finalizers.
        let target = json!({"metadata": {"name": "x"}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
        ]);
        assert_eq!(
            json_patch(&target, &ops).unwrap(),
            json!({"metadata": {"name": "x", "finalizers": ["f"]}})
        );
        // but a missing path tested against a non-null value fails
        let err = json_patch(
            &target,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap_err();
        assert_eq!(err.code(), 422);
        assert_eq!(
            err.to_string(),
            "testing value /metadata/finalizers failed: test failed"
        );
    }

    #[test]
    fn json_patch_errors_name_the_operation_and_path_and_change_nothing() {
        let target = json!({"spec": {"n": 1}});
        let cases = [
            (
                json!([{"op": "remove", "path": "/spec/x"}]),
                "remove",
                "/spec/x",
            ),
            (
                json!([{"op": "replace", "path": "/spec/x", "value": 1}]),
                "replace",
                "/spec/x",
            ),
            (
                json!([{"op": "add", "path": "/nope/x", "value": 1}]),
                "add",
                "/nope/x",
            ),
            (
                json!([{"op": "move", "from": "/a", "path": "/b"}]),
                "move",
                "/a",
            ),
            (
                json!([{"op": "copy", "from": "/a", "path": "/b"}]),
                "copy",
                "/a",
            ),
            (
                json!([{"op": "test", "path": "/spec/n", "value": 2}]),
                "testing",
                "/spec/n",
            ),
        ];
        for (ops, op, path) in cases {
            let err = json_patch(&target, &ops).unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with(op) && msg.contains(path), "{msg}");
            assert_eq!(err.code(), 422);
        }
        // all or nothing: a failing later op leaves the input untouched
        let ops = json!([{"op": "replace", "path": "/spec/n", "value": 5}, {"op": "remove", "path": "/x"}]);
        assert!(json_patch(&target, &ops).is_err());
        assert_eq!(target, json!({"spec": {"n": 1}}));
    }

    #[test]
    fn malformed_json_patch_is_a_bad_request() {
        for ops in [
            json!({"op": "add"}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "path": "/a"}]),
            json!([{"op": "add", "path": "no-slash", "value": 1}]),
            json!([1, 2]),
        ] {
            let err = json_patch(&json!({}), &ops).unwrap_err();
            assert_eq!(err.code(), 400, "{ops}: {err}");
        }
    }

    #[test]
    fn type_meta_reads_group() {
        assert_eq!(TypeMeta::new("apps/v1", "Deployment").group(), "apps");
        assert_eq!(TypeMeta::new("v1", "Pod").group(), "");
        assert_eq!(
            TypeMeta::of(&json!({"apiVersion": "v1", "kind": "Pod"})),
            TypeMeta::new("v1", "Pod")
        );
        assert_eq!(TypeMeta::of(&json!(42)), TypeMeta::default());
    }
}
