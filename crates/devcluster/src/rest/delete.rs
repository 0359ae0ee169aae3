//! DELETE and deletecollection: DeleteOptions (preconditions, propagation, grace period),
//! finalizers and deletionTimestamp, graceful pod deletion, namespace termination.

use crate::gc::{FOREGROUND_FINALIZER, ORPHAN_FINALIZER};
use axum::response::Response;
use http::StatusCode;
use serde_json::{Value, json};

use crate::api_error::ApiError;
use crate::list_filter::ListFilter;
use crate::meta;
use crate::registry::ResourceInfo;
use crate::server::{ResourceRequest, SharedState, json_response};
use crate::store::{WriteOp, WriteOutcome};

use super::present;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Background,
    Foreground,
    Orphan,
}

/// The parts of `DeleteOptions` the server honours.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    pub fn from_request(req: &ResourceRequest) -> Result<Self, ApiError> {
        let mut opts = DeleteOptions::default();
        let body: Value = if req.body.is_empty() {
            json!({})
        } else if req.content_type().contains("protobuf") {
            crate::protobuf::decode(&req.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        } else {
            serde_json::from_slice(&req.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        };
        let q = &req.query;
        opts.grace_period_seconds = body
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| q.get("gracePeriodSeconds").and_then(|s| s.parse().ok()));
        let policy = body
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(String::from)
            .or_else(|| q.get("propagationPolicy").map(String::from));
        opts.propagation = match policy.as_deref() {
            None => None,
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Orphan") => Some(Propagation::Orphan),
            Some(other) => {
                return Err(ApiError::invalid(
                    "",
                    "DeleteOptions",
                    "",
                    vec![crate::api_error::Cause {
                        reason: "FieldValueNotSupported".into(),
                        message: format!(
                            "Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
                        ),
                        field: "propagationPolicy".into(),
                    }],
                ));
            }
        };
        let orphan = body
            .get("orphanDependents")
            .and_then(Value::as_bool)
            .or_else(|| q.get("orphanDependents").map(|s| s == "true"));
        if opts.propagation.is_none() && orphan == Some(true) {
            opts.propagation = Some(Propagation::Orphan);
        }
        opts.precondition_uid = body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(String::from);
        opts.precondition_rv = body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(String::from);
        let dry_body = body
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|v| v == "All"));
        opts.dry_run = dry_body || q.get("dryRun") == Some("All");
        Ok(opts)
    }
}

/// Decide what deleting `current` does. Pure: the caller writes the result.
pub fn delete_object(
    info: &ResourceInfo,
    current: &Value,
    opts: &DeleteOptions,
    graceful_pods: bool,
) -> WriteOp {
    let mut obj = current.clone();
    let mut finalizers = meta::finalizers(current);
    let before = finalizers.clone();
    match opts.propagation {
        Some(Propagation::Orphan) => {
            finalizers.retain(|f| f != FOREGROUND_FINALIZER);
            if !finalizers.iter().any(|f| f == ORPHAN_FINALIZER) {
                finalizers.push(ORPHAN_FINALIZER.into());
            }
        }
        Some(Propagation::Foreground) => {
            finalizers.retain(|f| f != ORPHAN_FINALIZER);
            if !finalizers.iter().any(|f| f == FOREGROUND_FINALIZER) {
                finalizers.push(FOREGROUND_FINALIZER.into());
            }
        }
        Some(Propagation::Background) => {
            finalizers.retain(|f| f != ORPHAN_FINALIZER && f != FOREGROUND_FINALIZER);
        }
        None => {}
    }
    let already = current.pointer("/metadata/deletionTimestamp").is_some();
    let is_pod = info.group.is_empty() && info.plural == "pods";
    let is_namespace = info.group.is_empty() && info.plural == "namespaces";
    if is_pod {
        let scheduled = current
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let terminal = matches!(
            current.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded") | Some("Failed")
        );
        let grace = opts
            .grace_period_seconds
            .or_else(|| {
                current
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0);
        let grace = if scheduled && !terminal && graceful_pods {
            grace
        } else {
            0
        };
        let current_grace = current
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        if grace == 0 && already && current_grace.is_some_and(|g| g > 0) {
            // A shorter grace period replaces the running one (the kubelet's final delete with
            // grace 0): the pod goes now, or when its last finalizer does.
            if finalizers.is_empty() {
                return WriteOp::Delete;
            }
            meta::set_finalizers(&mut obj, finalizers);
            if let Some(m) = meta::metadata_mut(&mut obj) {
                m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            return WriteOp::Put(obj);
        }
        if grace > 0 {
            if already && current_grace.is_some_and(|g| g <= grace) && before == finalizers {
                return WriteOp::Unchanged;
            }
            meta::set_finalizers(&mut obj, finalizers);
            if let Some(m) = meta::metadata_mut(&mut obj) {
                m.insert("deletionTimestamp".into(), json!(meta::rfc3339_in(grace)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            return WriteOp::Put(obj);
        }
    }
    if is_namespace {
        if already && before == finalizers {
            return WriteOp::Unchanged;
        }
        meta::set_finalizers(&mut obj, finalizers);
        if let Some(m) = meta::metadata_mut(&mut obj)
            && !already
        {
            m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
            m.insert("deletionGracePeriodSeconds".into(), json!(0));
        }
        obj["status"] = json!({"phase": "Terminating"});
        return WriteOp::Put(obj);
    }
    if finalizers.is_empty() {
        return WriteOp::Delete;
    }
    if already && before == finalizers {
        return WriteOp::Unchanged;
    }
    meta::set_finalizers(&mut obj, finalizers);
    if let Some(m) = meta::metadata_mut(&mut obj)
        && !already
    {
        m.insert("deletionTimestamp".into(), json!(meta::now_rfc3339()));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    WriteOp::Put(obj)
}

/// Delete one object by key (shared by the handler, deletecollection and the garbage collector).
pub fn delete_stored(
    state: &SharedState,
    info: &ResourceInfo,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<(WriteOutcome, Option<Value>), ApiError> {
    let mut dry_result = None;
    let outcome = state
        .store
        .write(&info.storage_key(), namespace, name, |current, _| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            let uid = meta::meta_str(current, "uid").unwrap_or("");
            if let Some(p) = &opts.precondition_uid
                && p != uid
            {
                let mut e = ApiError::conflict(&info.group, &info.plural, name, "");
                e.message = format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({p}) does not match the UID in record ({uid}). The object might have been deleted and then recreated",
                    info.kind
                );
                return Err(e);
            }
            let rv = meta::meta_str(current, "resourceVersion").unwrap_or("");
            if let Some(p) = &opts.precondition_rv
                && p != rv
            {
                let mut e = ApiError::conflict(&info.group, &info.plural, name, "");
                e.message = format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({p}) does not match the ResourceVersion in record ({rv}). The object might have been modified",
                    info.kind
                );
                return Err(e);
            }
            let op = delete_object(info, current, opts, state.options.node_agent);
            if opts.dry_run {
                dry_result = Some(match &op {
                    WriteOp::Put(v) => v.clone(),
                    _ => (**current).clone(),
                });
                return Ok(WriteOp::Unchanged);
            }
            Ok(op)
        })?;
    if let WriteOutcome::Deleted(obj) = &outcome {
        crate::kinds::on_deleted(state, &info.group_resource(), obj);
    }
    crate::crd::after_write(state, info, &outcome);
    Ok((outcome, dry_result))
}

pub fn delete(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let opts = DeleteOptions::from_request(req)?;
    let name = req.name.clone().unwrap_or_default();
    let info = req.info.clone();
    if info.group.is_empty()
        && info.plural == "namespaces"
        && matches!(name.as_str(), "default" | "kube-system" | "kube-public")
    {
        return Err(ApiError::forbidden(
            "",
            "namespaces",
            &name,
            "this namespace may not be deleted",
        ));
    }
    let (outcome, dry) = delete_stored(state, &info, req.namespace_or_empty(), &name, &opts)?;
    let deleted =
        matches!(outcome, WriteOutcome::Deleted(_)) || (dry.is_some() && opts_immediate(&dry));
    let obj = match (dry, outcome.object()) {
        (Some(d), _) => d,
        (None, Some(o)) => (**o).clone(),
        (None, None) => return Err(ApiError::not_found(&info.group, &info.plural, &name)),
    };
    if deleted && !info.delete_returns_object {
        let mut success_details = crate::api_error::details(&info.group, &info.plural, &name);
        success_details["uid"] = json!(meta::meta_str(&obj, "uid"));
        return Ok(json_response(
            StatusCode::OK,
            &json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": success_details,
            }),
        ));
    }
    Ok(json_response(StatusCode::OK, &present(&obj, req)))
}

fn opts_immediate(dry: &Option<Value>) -> bool {
    dry.as_ref()
        .is_some_and(|d| d.pointer("/metadata/deletionTimestamp").is_none())
}

pub fn delete_collection(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let opts = DeleteOptions::from_request(req)?;
    let filter = ListFilter::from_query(&req.info, &req.query)?;
    let (objects, rv) = state
        .store
        .list(&req.info.storage_key(), req.namespace.as_deref());
    let mut items = Vec::new();
    for obj in objects.iter().filter(|o| filter.matches(o)) {
        let ns = meta::meta_str(obj, "namespace").unwrap_or("");
        let name = meta::meta_str(obj, "name").unwrap_or("");
        match delete_stored(state, &req.info, ns, name, &opts) {
            Ok((outcome, dry)) => {
                if let Some(o) = dry.or_else(|| outcome.object().map(|o| (**o).clone())) {
                    items.push(present(&o, req));
                }
            }
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": req.info.list_kind,
            "apiVersion": req.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }),
    ))
}
