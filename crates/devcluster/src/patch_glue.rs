//! Glue between the REST handlers and the patch machinery: which patch type a request carries,
//! applying it, and recording field managers.
//!
//! Interim: until `patch.rs` (devcluster-patch) is merged, merge and JSON patch come from the
//! `json-patch` crate (with the real server's null-`test` quirk), strategic merge patch is
//! approximated by a JSON merge patch, server-side apply is approximated by a merge of the
//! applied configuration (no field ownership, no conflicts), and managedFields are not recorded.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::registry::ResourceInfo;
use crate::server::ResourceRequest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(ct: &str, info: &ResourceInfo) -> Result<Self, ApiError> {
        match ct {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/strategic-merge-patch+json" if !info.is_custom() => {
                Ok(PatchKind::Strategic)
            }
            "application/apply-patch+yaml" | "application/apply-patch+cbor" => Ok(PatchKind::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
}

/// The field manager of a write: `fieldManager`, else the user agent up to its first `/`.
pub fn field_manager(req: &ResourceRequest) -> String {
    if let Some(m) = req.query.get("fieldManager") {
        return m.to_string();
    }
    let ua = req.user_agent();
    let prefix = ua.split('/').next().unwrap_or("");
    if prefix.is_empty() {
        "unknown".to_string()
    } else {
        prefix.to_string()
    }
}

pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// RFC 6902 with the real server's quirk: `test` of a missing path against `null` passes.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, ApiError> {
    let Some(list) = ops.as_array() else {
        return Err(ApiError::bad_request(
            "json patch must be a JSON array of operations",
        ));
    };
    let kept: Vec<Value> = list
        .iter()
        .filter(|op| {
            let is_null_test = op.get("op").and_then(Value::as_str) == Some("test")
                && op.get("value").is_some_and(Value::is_null);
            let path_missing = op
                .get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| target.pointer(p).is_none());
            !(is_null_test && path_missing)
        })
        .cloned()
        .collect();
    let parsed: json_patch::Patch = serde_json::from_value(Value::Array(kept))
        .map_err(|e| ApiError::bad_request(format!("invalid json patch: {e}")))?;
    let mut out = target.clone();
    json_patch::patch(&mut out, &parsed)
        .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?;
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
pub fn apply_patch(
    kind: PatchKind,
    live: &Value,
    patch: &Value,
    _info: &ResourceInfo,
    _manager: &str,
    _force: bool,
    _subresource: Option<&str>,
    _now: &str,
) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Merge | PatchKind::Strategic | PatchKind::Apply => {
            if !patch.is_object() {
                return Err(ApiError::bad_request("patch body must be a JSON object"));
            }
            Ok(merge_patch(live, patch))
        }
        PatchKind::Json => json_patch(live, patch),
    }
}

/// Server-side apply of an object that does not exist yet.
pub fn apply_create(
    _req: &ResourceRequest,
    applied: &Value,
    _manager: &str,
    _now: &str,
) -> Result<Value, ApiError> {
    if !applied.is_object() {
        return Err(ApiError::bad_request("apply body must be a JSON object"));
    }
    let mut out = applied.clone();
    if let Some(m) = crate::meta::metadata_mut(&mut out) {
        m.remove("resourceVersion");
    }
    Ok(out)
}

/// managedFields bookkeeping for non-apply writes.
pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _subresource: Option<&str>,
    _now: &str,
    _info: &ResourceInfo,
) {
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn null_test_of_missing_path_passes_like_a_real_server() {
        let obj = json!({"metadata": {"name": "a"}});
        let ops = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["x"]}
        ]);
        let out = json_patch(&obj, &ops).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["x"]));
        let failing = json!([{"op": "test", "path": "/metadata/name", "value": "b"}]);
        assert_eq!(json_patch(&obj, &failing).unwrap_err().code, 422);
    }
}
