//! Subresources other than status: `scale` (get, update, patch) and `pods/binding`.

use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use crate::api_error::{ApiError, Cause};
use crate::meta;
use crate::registry::ResourceInfo;
use crate::server::{ResourceRequest, SharedState, json_response};
use crate::store::WriteOp;

use super::write::{parse_body, spec_changed};

fn path_get<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for p in dotted.trim_start_matches('.').split('.') {
        cur = cur.get(p)?;
    }
    Some(cur)
}

fn path_set(obj: &mut Value, dotted: &str, value: Value) {
    let parts: Vec<&str> = dotted.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, p) in parts.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == parts.len() {
            map.insert((*p).to_string(), value);
            return;
        }
        cur = map.entry(p.to_string()).or_insert_with(|| json!({}));
    }
}

/// The `Scale` of `obj` (as served at the requested version). An object without the field the
/// spec replicas path names has no scale: kube-apiserver answers that with a 500 naming the
/// path, and so does this.
fn scale_of(info: &ResourceInfo, obj: &Value) -> Result<Value, ApiError> {
    let spec = info.scale.as_ref();
    if let Some(path) = spec.map(|s| &s.spec_replicas_path)
        && path_get(obj, path).is_none()
    {
        return Err(ApiError::internal(format!(
            "the spec replicas field \"{path}\" does not exist"
        )));
    }
    let replicas = |p: Option<&String>| {
        p.and_then(|p| path_get(obj, p))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let m = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut status = json!({"replicas": replicas(spec.map(|s| &s.status_replicas_path))});
    if let Some(sel) = spec
        .and_then(|s| s.label_selector_path.as_ref())
        .and_then(|p| path_get(obj, p))
        .and_then(Value::as_str)
    {
        status["selector"] = json!(sel);
    }
    Ok(json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": m.get("name"), "namespace": m.get("namespace"), "uid": m.get("uid"),
            "resourceVersion": m.get("resourceVersion"), "creationTimestamp": m.get("creationTimestamp"),
        },
        "spec": {"replicas": replicas(spec.map(|s| &s.spec_replicas_path))},
        "status": status,
    }))
}

pub fn get_scale(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    if req.info.scale.is_none() {
        return Err(crate::rest::missing_subresource(req));
    }
    let name = req.name.as_deref().unwrap_or("");
    let obj = state
        .store
        .get(&req.info.storage_key(), req.namespace_or_empty(), name)
        .ok_or_else(|| ApiError::not_found(&req.info.group, &req.info.plural, name))?;
    let obj = crate::rest::present(&obj, req);
    Ok(json_response(StatusCode::OK, &scale_of(&req.info, &obj)?))
}

fn write_scale(
    state: &SharedState,
    req: &ResourceRequest,
    compute: impl FnOnce(&Value) -> Result<Value, ApiError>,
) -> Result<Response, ApiError> {
    let info = req.info.clone();
    let name = req.name.clone().unwrap_or_default();
    let Some(spec_path) = info.scale.as_ref().map(|s| s.spec_replicas_path.clone()) else {
        return Err(crate::rest::missing_subresource(req));
    };
    let manager = crate::patch_glue::field_manager(req);
    let now = meta::now_rfc3339();
    let outcome = state.store.write(
        &info.storage_key(),
        req.namespace_or_empty(),
        &name,
        |current, _| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, &name));
            };
            let scale = compute(&scale_of(&info, &crate::rest::present(current, req))?)?;
            if let Some(rv) = scale
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                && Some(rv) != meta::meta_str(current, "resourceVersion")
            {
                return Err(ApiError::stale(&info.group, &info.plural, &name));
            }
            let Some(replicas) = scale.pointer("/spec/replicas").and_then(Value::as_i64) else {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    &name,
                    vec![Cause {
                        reason: "FieldValueRequired".into(),
                        message: "Required value".into(),
                        field: "spec.replicas".into(),
                    }],
                ));
            };
            if replicas < 0 {
                return Err(ApiError::invalid(
                    "autoscaling",
                    "Scale",
                    &name,
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!(
                            "Invalid value: {replicas}: must be greater than or equal to 0"
                        ),
                        field: "spec.replicas".into(),
                    }],
                ));
            }
            let mut new = (**current).clone();
            path_set(&mut new, &spec_path, json!(replicas));
            crate::patch_glue::record_update(
                Some(current),
                &mut new,
                &manager,
                Some("scale"),
                &now,
                &info,
            );
            if info.tracks_generation && spec_changed(current, &new) {
                let g = current
                    .pointer("/metadata/generation")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                if let Some(m) = meta::metadata_mut(&mut new) {
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            Ok(WriteOp::Put(new))
        },
    )?;
    let obj = outcome
        .object()
        .ok_or_else(|| ApiError::internal("scale write produced no object"))?;
    Ok(json_response(
        StatusCode::OK,
        &scale_of(&info, &crate::rest::present(obj, req))?,
    ))
}

pub fn update_scale(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    write_scale(state, req, |_| Ok(body))
}

pub fn patch_scale(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let ct = req
        .content_type()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let body = parse_body(req)?;
    write_scale(state, req, |scale| match ct.as_str() {
        "application/json-patch+json" => crate::patch_glue::json_patch(scale, &body),
        _ => Ok(crate::patch_glue::merge_patch(scale, &body)),
    })
}

pub fn bind(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let body = parse_body(req)?;
    let name = req.name.clone().unwrap_or_default();
    let Some(node) = body
        .pointer("/target/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Err(ApiError::invalid(
            "",
            "Binding",
            &name,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "target.name".into(),
            }],
        ));
    };
    let now = meta::now_rfc3339();
    let mut bound_from = None;
    let outcome = state
        .store
        .write("pods", req.namespace_or_empty(), &name, |current, _| {
            let Some(current) = current else {
                return Err(ApiError::not_found("", "pods", &name));
            };
            if current.pointer("/metadata/deletionTimestamp").is_some() {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    &name,
                    "pod is being deleted, cannot be assigned to a host",
                ));
            }
            if let Some(existing) = current
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
            {
                return Err(ApiError::conflict(
                    "",
                    "pods",
                    &name,
                    &format!("pod {name} is already assigned to node \"{existing}\""),
                ));
            }
            bound_from = Some(current.clone());
            let mut new = (**current).clone();
            path_set(&mut new, ".spec.nodeName", json!(node));
            crate::kinds::set_condition(&mut new, "PodScheduled", "True", None, None, &now);
            Ok(WriteOp::Put(new))
        })?;
    // The binding adds only a node name and a condition to the stored Pod.
    if let (crate::store::WriteOutcome::Updated(obj), Some(before)) = (&outcome, &bound_from) {
        crate::builtin_types::note_written(&state.notes, &req.info, true, Some(&**before), obj);
    }
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}
