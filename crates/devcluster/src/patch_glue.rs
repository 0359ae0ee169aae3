//! Glue between the REST handlers and the patch machinery (`patch.rs`): which patch type a
//! request carries, applying it with the right list shapes (built-in merge keys, or the CRD
//! schema's list types), and recording field managers.

use serde_json::{Value, json};

use crate::api_error::{ApiError, Cause};
use crate::patch::{self, ApplyError, ApplyOptions, FieldShape, ListType, PatchError, TypeMeta};
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
            "application/apply-patch+yaml" => Ok(PatchKind::Apply),
            _ if info.is_custom() => Err(ApiError::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ])),
            _ => Err(ApiError::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ])),
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

fn patch_error(e: PatchError) -> ApiError {
    ApiError::new(e.code(), e.reason(), e.to_string())
}

fn apply_error(e: ApplyError, info: &ResourceInfo, name: &str) -> ApiError {
    match e {
        ApplyError::Conflict { message, conflicts } => {
            let mut err = ApiError::new(409, "Conflict", message);
            let mut details = crate::api_error::details(&info.group, &info.plural, name);
            details["causes"] = conflicts
                .iter()
                .map(|c| {
                    json!({
                        "reason": "FieldManagerConflict",
                        "message": format!("conflict with {}", c.manager),
                        "field": c.field,
                    })
                })
                .collect();
            err.details = Some(details);
            err
        }
        ApplyError::BadRequest(m) => ApiError::bad_request(m),
        ApplyError::Untyped(m) => ApiError::internal(m),
    }
}

pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    patch::merge_patch(target, patch)
}

pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, ApiError> {
    patch::json_patch(target, ops).map_err(patch_error)
}

/// List shapes of a custom resource: metadata rules of every object, the rest from the schema.
struct CustomShape<'a> {
    metadata: std::sync::Arc<patch::BuiltinShape>,
    schema: Option<&'a crate::schema::StructuralSchema>,
}

impl FieldShape for CustomShape<'_> {
    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        if path.first() == Some(&"metadata") {
            return self.metadata.list_type(path);
        }
        self.schema?.list_type(path).map(|t| match t {
            crate::schema::ListType::Atomic => ListType::Atomic,
            crate::schema::ListType::Set => ListType::Set,
            crate::schema::ListType::Map(keys) => ListType::Map(keys),
        })
    }
}

/// The field shape used for apply and managedFields of objects of `info`.
fn with_shape<T>(info: &ResourceInfo, f: impl FnOnce(&dyn FieldShape) -> T) -> T {
    let type_meta = TypeMeta::new(info.api_version(info.storage_version()), info.kind.clone());
    if info.is_custom() {
        let shape = CustomShape {
            metadata: patch::shared_builtin_shape(&type_meta),
            schema: info.schema_for(info.storage_version()),
        };
        f(&shape)
    } else {
        f(&*patch::shared_builtin_shape(&type_meta))
    }
}

fn apply_options(
    info: &ResourceInfo,
    manager: &str,
    force: bool,
    sub: Option<&str>,
    now: &str,
) -> ApplyOptions {
    ApplyOptions {
        manager: manager.to_string(),
        force,
        subresource: sub.map(String::from),
        now: now.to_string(),
        status_subresource: info.has_status,
    }
}

/// Apply a patch of `kind` to the object as served (`live`).
#[allow(clippy::too_many_arguments)]
pub fn apply_patch(
    kind: PatchKind,
    live: &Value,
    body: &Value,
    info: &ResourceInfo,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    now: &str,
) -> Result<Value, ApiError> {
    match kind {
        PatchKind::Merge => patch::merge_patch_request(live, body).map_err(patch_error),
        PatchKind::Json => json_patch(live, body),
        PatchKind::Strategic => {
            let type_meta =
                TypeMeta::new(info.api_version(info.storage_version()), info.kind.clone());
            patch::strategic_merge_patch(live, body, &type_meta).map_err(patch_error)
        }
        PatchKind::Apply => {
            let name = crate::meta::meta_str(live, "name")
                .unwrap_or("")
                .to_string();
            check_applied_type(info, body)?;
            let opts = apply_options(info, manager, force, subresource, now);
            with_shape(info, |shape| patch::apply(Some(live), body, &opts, shape))
                .map_err(|e| apply_error(e, info, &name))
        }
    }
}

/// The applied configuration must name the kind it is sent to.
fn check_applied_type(info: &ResourceInfo, body: &Value) -> Result<(), ApiError> {
    let kind = body.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = body.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if kind.is_empty() || api_version.is_empty() {
        return Err(ApiError::bad_request(
            "invalid object type: apiVersion and kind are required for apply",
        ));
    }
    if kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    Ok(())
}

/// Server-side apply of an object that does not exist yet.
pub fn apply_create(
    req: &ResourceRequest,
    applied: &Value,
    manager: &str,
    now: &str,
) -> Result<Value, ApiError> {
    let info = &req.info;
    let name = req.name.clone().unwrap_or_default();
    check_applied_type(info, applied)?;
    let opts = apply_options(info, manager, req.query.flag("force"), None, now);
    let mut out = with_shape(info, |shape| patch::apply(None, applied, &opts, shape))
        .map_err(|e| apply_error(e, info, &name))?;
    if let Some(m) = crate::meta::metadata_mut(&mut out) {
        m.remove("resourceVersion");
    }
    Ok(out)
}

/// managedFields bookkeeping for non-apply writes.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    now: &str,
    info: &ResourceInfo,
) {
    // Status is a reset field of main-resource writes when the kind has a status subresource.
    let ignored: &[&str] = if subresource.is_none() && info.has_status {
        &["status"]
    } else {
        &[]
    };
    with_shape(info, |shape| {
        patch::record_update_ignoring(
            old,
            new,
            manager,
            "Update",
            subresource,
            now,
            shape,
            ignored,
        )
    });
}

/// Causes of a 422 from schema field errors.
pub fn causes_of(errors: &[crate::schema::FieldError]) -> Vec<Cause> {
    errors
        .iter()
        .map(|e| Cause {
            reason: e.reason().to_string(),
            message: e.body(),
            field: e.path.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
