//! The four PATCH flavours of the Kubernetes API, and field ownership (`managedFields`).
//!
//! Everything here is pure: functions take the stored object and the request body as
//! `serde_json::Value` and return the new object or an error whose Display is the message a real
//! API server would put in its `Status` (`code()` gives the HTTP status, `reason()` the reason).
//!
//! * [`merge_patch`] / [`merge_patch_request`]: JSON merge patch
//!   (`application/merge-patch+json`), as the API server's library applies it.
//! * [`json_patch()`]: JSON patch (`application/json-patch+json`), with the API server's
//!   leniencies (a `test` of a missing member against `null` passes, and the others listed in
//!   the `json` module). A failing operation is a 422 whose message is the generic one the real
//!   server sends; [`PatchError::detail`] says which operation failed.
//! * [`strategic_merge_patch`]: strategic merge patch (`application/strategic-merge-patch+json`)
//!   for the built-in kinds devcluster serves, with their merge keys and the `$patch`,
//!   `$retainKeys`, `$deleteFromPrimitiveList/` and `$setElementOrder/` directives. (Custom
//!   resources do not support it: the server answers 415.)
//! * [`apply`]: server-side apply (`application/apply-patch+yaml`) with field ownership,
//!   conflicts, `force`, and removal of fields a manager stopped applying.
//! * [`record_update`]: ownership for every other write (create, update, the three other patch
//!   types, on the main resource or a subresource), so that later applies see the right owners.
//!
//! How lists and objects merge comes from a [`FieldShape`]: [`builtin_shape`] for built-in kinds;
//! for custom resources the caller implements it from the CRD schema
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`) — any
//! `Fn(&[&str]) -> Option<ListType>` closure is a shape.
//!
//! Calling order for a write: compute the new object (patch or body), apply the status
//! subresource rules (keep the old `status` on main-resource writes of kinds with a status
//! subresource; keep everything but `status` on `/status` writes), then call [`record_update`]
//! (or use [`apply`]'s result), then set the server fields (resourceVersion, generation...).
//! Server-set metadata (`resourceVersion`, `uid`, `creationTimestamp`, `generation`,
//! `managedFields`...) and `apiVersion`, `kind`, `metadata.name`, `metadata.namespace` are
//! never owned.

mod apply;
mod fieldset;
mod json;
mod shape;
mod strategic;

pub use apply::{
    ApplyError, ApplyOptions, BEFORE_FIRST_APPLY, Conflict, apply, record_update,
    record_update_ignoring,
};
pub use fieldset::{FieldPath, FieldSet, PathElement};
pub use json::{MAX_JSON_PATCH_OPERATIONS, json_patch, merge_patch, merge_patch_request};
pub use shape::{
    AtomicShape, BuiltinShape, FieldShape, ListType, builtin_shape, shared_builtin_shape,
};
pub use strategic::strategic_merge_patch;

use serde_json::Value;

/// Whether two objects are equal apart from the named members of `metadata` (e.g.
/// `resourceVersion`, `managedFields`), compared in place without copying either.
pub fn equal_ignoring_metadata(a: &Value, b: &Value, ignored: &[&str]) -> bool {
    let (Some(a_map), Some(b_map)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    a_map.len() == b_map.len()
        && a_map.iter().all(|(key, a_value)| match b_map.get(key) {
            None => false,
            Some(b_value) if key == "metadata" => {
                let (Some(a_meta), Some(b_meta)) = (a_value.as_object(), b_value.as_object())
                else {
                    return a_value == b_value;
                };
                let kept = |meta: &'_ serde_json::Map<String, Value>| {
                    meta.keys()
                        .filter(|k| !ignored.contains(&k.as_str()))
                        .count()
                };
                kept(a_meta) == kept(b_meta)
                    && a_meta
                        .iter()
                        .filter(|(k, _)| !ignored.contains(&k.as_str()))
                        .all(|(k, v)| b_meta.get(k) == Some(v))
            }
            Some(b_value) => a_value == b_value,
        })
}

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

/// A patch that cannot be applied. Display is the `message` of the `Status` a real API server
/// answers with; [`PatchError::code`] and [`PatchError::reason`] give its `code` and `reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document is malformed: 400 `BadRequest`, message as given.
    #[error("{0}")]
    BadRequest(String),
    /// The patch does not apply to this object: 422 `Invalid`. The real server does not pass the
    /// detail on (its `Status` carries only this generic message and empty `details`); `detail`
    /// says what went wrong, for logs.
    #[error("the server rejected our request due to an error in our request")]
    Invalid { detail: String },
    /// More operations than the server accepts: 413 `RequestEntityTooLarge`.
    #[error("Request entity too large: {0}")]
    TooLarge(String),
    /// An error the real server does not classify (strategic merge patch: a list element without
    /// its merge key, an unknown `$patch`): 500 with an empty reason, message as given.
    #[error("{0}")]
    Internal(String),
}

impl PatchError {
    /// The HTTP status code a real API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid { .. } => 422,
            PatchError::TooLarge(_) => 413,
            PatchError::Internal(_) => 500,
        }
    }

    /// The `reason` of the `Status` (`""` when the real server leaves it empty).
    pub fn reason(&self) -> &'static str {
        match self {
            PatchError::BadRequest(_) => "BadRequest",
            PatchError::Invalid { .. } => "Invalid",
            PatchError::TooLarge(_) => "RequestEntityTooLarge",
            PatchError::Internal(_) => "",
        }
    }

    /// What went wrong, in full (for logs; the 422 message is generic on purpose).
    pub fn detail(&self) -> &str {
        match self {
            PatchError::BadRequest(m) | PatchError::TooLarge(m) | PatchError::Internal(m) => m,
            PatchError::Invalid { detail } => detail,
        }
    }
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
pub(crate) mod test_gen;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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

    #[test]
    fn error_codes_and_reasons() {
        let invalid = PatchError::Invalid {
            detail: "testing value /a failed: test failed".into(),
        };
        assert_eq!((invalid.code(), invalid.reason()), (422, "Invalid"));
        assert_eq!(
            invalid.to_string(),
            "the server rejected our request due to an error in our request"
        );
        assert_eq!(invalid.detail(), "testing value /a failed: test failed");
        assert_eq!(PatchError::BadRequest("x".into()).code(), 400);
        assert_eq!(PatchError::TooLarge("x".into()).code(), 413);
        assert_eq!(PatchError::Internal("x".into()).reason(), "");
    }
}
