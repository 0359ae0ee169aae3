//! create, update (PUT), patch (all four types), the scale subresource and pod binding.

use std::sync::Arc;

use axum::response::Response;
use http::StatusCode;
use serde_json::{Map, Value, json};

use crate::api_error::{ApiError, Cause};
use crate::meta;
use crate::registry::ResourceInfo;
use crate::schema::StructuralSchema;
use crate::server::{ResourceRequest, SharedState, json_response};
use crate::store::notes::WriteNotes;
use crate::store::{Committed, WriteOp, WriteOutcome};

use super::{object_response, present};

/// Media types of create/update bodies devcluster reads (protobuf only for a few kinds).
/// The body media types a real server names in its 415 (for custom resources too, although
/// it decodes only JSON and YAML for them).
const BODY_MEDIA_TYPES: &[&str] = &[
    "application/json",
    "application/yaml",
    "application/vnd.kubernetes.protobuf",
];

/// The request body as JSON (a missing Content-Type is JSON; YAML is accepted for apply).
pub fn parse_body(req: &ResourceRequest) -> Result<Value, ApiError> {
    if req.body.is_empty() {
        return Err(ApiError::bad_request("the body of the request is empty"));
    }
    let ct = req.content_type();
    if ct.contains("protobuf") {
        return crate::protobuf::decode(&req.body).map_err(|e| match e {
            crate::protobuf::ProtobufError::Unsupported(_) => {
                ApiError::unsupported_media_type(BODY_MEDIA_TYPES)
            }
            other => ApiError::bad_request(other.to_string()),
        });
    }
    let known = ct.is_empty() || ct.contains("json") || ct.contains("yaml");
    if ct.contains("cbor") || !known {
        return Err(ApiError::unsupported_media_type(BODY_MEDIA_TYPES));
    }
    let parsed: Result<Value, String> = if ct.contains("yaml") {
        serde_yaml::from_slice::<Value>(&req.body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(&req.body).map_err(|e| e.to_string())
    };
    parsed.map_err(|e| ApiError::bad_request(format!("error decoding request body: {e}")))
}

fn check_type_meta(req: &ResourceRequest, obj: &Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if let Some(kind) = obj.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != req.info.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            req.info.kind
        )));
    }
    if let Some(av) = obj.get("apiVersion").and_then(Value::as_str)
        && !av.is_empty()
        && av != req.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            req.api_version()
        )));
    }
    Ok(())
}

fn dry_run(req: &ResourceRequest) -> bool {
    req.query.get("dryRun") == Some("All")
}

/// An Event created through `events.k8s.io/v1` must be a complete new-style event (422).
/// Refuses a new Event a real server would refuse, with every cause at once: its own checks
/// and `name_causes`, the problems of its name (both kinds of Event are stored as the core
/// kind, whose errors name it `Event`).
fn check_new_event(
    info: &ResourceInfo,
    obj: &Value,
    namespace: &str,
    name: &str,
    name_causes: &[Cause],
) -> Result<(), ApiError> {
    let mut causes = if info.shared_storage == Some(crate::registry::SharedStorage::EventsV1) {
        crate::event_versions::events_v1_create_causes(obj, namespace)
    } else if !info.is_custom() && info.group.is_empty() && info.plural == "events" {
        crate::event_versions::core_event_create_causes(obj, namespace)
    } else {
        return Ok(());
    };
    causes.extend(name_causes.iter().cloned());
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid("", &info.kind, name, causes))
    }
}

/// Namespace lifecycle admission: content goes only into an existing namespace that is not
/// terminating. `name` is the object's name as requested (its `generateName` prefix without one).
fn check_namespace(state: &SharedState, req: &ResourceRequest, name: &str) -> Result<(), ApiError> {
    let Some(ns) = req.namespace.as_deref() else {
        return Ok(());
    };
    match state.store.terminating("namespaces", "", ns) {
        None => Err(ApiError::not_found("", "namespaces", ns)),
        Some(true) => {
            let mut e = ApiError::forbidden(
                &req.info.group,
                &req.info.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{
                    "reason": "NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field": "metadata.namespace",
                }]);
            }
            Err(e)
        }
        Some(false) => Ok(()),
    }
}

fn name_problem(info: &ResourceInfo, name: &str) -> Option<String> {
    let path_segment_problem = |name: &str| {
        (name.contains('/') || name.contains('%') || name == "." || name == "..")
            .then(|| "may not contain '/' or '%'".to_string())
    };
    match info.plural.as_str() {
        "namespaces" | "services" => meta::dns1123_label_problem(name),
        // Core events only need a name that fits in a path (kube-apiserver takes `box.` as a
        // generateName for them, and names like `Box_1`).
        "events" if !info.is_custom() && info.group.is_empty() => path_segment_problem(name),
        _ if info.is_custom() || name.contains('/') || name.contains('%') => {
            path_segment_problem(name).or_else(|| meta::dns1123_subdomain_problem(name))
        }
        _ => meta::dns1123_subdomain_problem(name),
    }
}

/// The name a refused create's error names: a real server generates the name before it
/// validates the object.
fn name_for_errors(obj: &Value) -> String {
    match meta::meta_str(obj, "name").filter(|n| !n.is_empty()) {
        Some(name) => name.to_string(),
        None => match meta::meta_str(obj, "generateName").filter(|p| !p.is_empty()) {
            Some(prefix) => format!("{prefix}{}", meta::generated_suffix()),
            None => String::new(),
        },
    }
}

/// `generateName` is validated as a name prefix (a trailing `-` allowed), as by a real server:
/// `box.` is refused where names are DNS subdomains, although `box.` plus a suffix would be one.
fn generate_name_causes(info: &ResourceInfo, obj: &Value) -> Vec<Cause> {
    let Some(prefix) = meta::meta_str(obj, "generateName").filter(|p| !p.is_empty()) else {
        return Vec::new();
    };
    name_problem(info, &meta::mask_trailing_dash(prefix))
        .map(|problem| Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {prefix:?}: {problem}"),
            field: "metadata.generateName".into(),
        })
        .into_iter()
        .collect()
}

pub fn create(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let mut obj = parse_body(req)?;
    check_type_meta(req, &obj)?;
    let info = req.info.clone();
    let admitted_clean =
        crate::builtin_types::admit_onto(&state.notes, &req.query, &info, &mut obj, None)?;
    let generate_name_causes = generate_name_causes(&info, &obj);
    check_new_event(
        &info,
        &obj,
        req.namespace_or_empty(),
        &name_for_errors(&obj),
        &generate_name_causes,
    )?;
    let mut obj = crate::event_versions::into_storage(&info, obj);
    let ns = req.namespace_or_empty().to_string();
    if let Some(body_ns) = meta::meta_str(&obj, "namespace")
        && !body_ns.is_empty()
        && info.namespaced
        && body_ns != ns
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if meta::meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
        // kube-apiserver's storage refuses it with an internal error: a 500 with no reason.
        return Err(ApiError::new(
            500,
            "",
            "resourceVersion should not be set on objects to be created",
        ));
    }
    // Admission runs before a name is generated: kube-apiserver names the object by its
    // `generateName` prefix in the refusal (`configmaps "late-" is forbidden`).
    let admitted_name = meta::meta_str(&obj, "name")
        .filter(|n| !n.is_empty())
        .or_else(|| meta::meta_str(&obj, "generateName"))
        .unwrap_or_default();
    check_namespace(state, req, admitted_name)?;
    let generate = meta::meta_str(&obj, "generateName").map(String::from);
    let explicit = meta::meta_str(&obj, "name")
        .filter(|n| !n.is_empty())
        .map(String::from);
    let invalid = |field: &str, reason: &str, msg: String, name: &str| {
        ApiError::invalid(
            &info.group,
            &info.kind,
            name,
            vec![Cause {
                reason: reason.into(),
                message: msg,
                field: field.into(),
            }],
        )
    };
    if explicit.is_none() && generate.as_deref().is_none_or(str::is_empty) {
        return Err(invalid(
            "metadata.name",
            "FieldValueRequired",
            "Required value: name or generateName is required".into(),
            "",
        ));
    }
    if !generate_name_causes.is_empty() {
        return Err(ApiError::invalid(
            &info.group,
            &info.kind,
            &name_for_errors(&obj),
            generate_name_causes,
        ));
    }
    let now = meta::now_rfc3339();
    // Build the object once; the name may change on a generateName collision.
    {
        let Some(m) = meta::metadata_mut(&mut obj) else {
            return Err(ApiError::bad_request(
                "the body of the request must be a JSON object",
            ));
        };
        m.insert("uid".into(), json!(meta::new_uid()));
        m.insert("creationTimestamp".into(), json!(now));
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        m.remove("selfLink");
        if info.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        if info.tracks_generation {
            m.insert("generation".into(), json!(1));
        } else {
            m.remove("generation");
        }
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), json!(info.stored_api_version()));
        o.insert("kind".into(), json!(info.kind));
        if info.has_status && info.is_custom() {
            o.remove("status");
        }
    }
    let manager = crate::patch_glue::field_manager(req);
    for attempt in 0..8 {
        let name = match (&explicit, &generate) {
            (Some(n), _) => n.clone(),
            (None, Some(prefix)) => format!("{prefix}{}", meta::generated_suffix()),
            (None, None) => String::new(),
        };
        if let Some(problem) = name_problem(&info, &name) {
            return Err(invalid(
                "metadata.name",
                "FieldValueInvalid",
                format!("Invalid value: {name:?}: {problem}"),
                &name,
            ));
        }
        // Only a generated name is tried again (on a collision): an explicit name uses the
        // object itself.
        let mut candidate = if explicit.is_some() {
            std::mem::take(&mut obj)
        } else {
            obj.clone()
        };
        if let Some(m) = meta::metadata_mut(&mut candidate) {
            m.insert("name".into(), json!(name));
        }
        crate::kinds::prepare_create(state, &info, &mut candidate)
            .map_err(|causes| ApiError::invalid(&info.group, &info.kind, &name, causes))?;
        let meta_causes = meta::object_meta_causes(&candidate);
        if !meta_causes.is_empty() {
            return Err(ApiError::invalid(
                &info.group,
                &info.kind,
                &name,
                meta_causes,
            ));
        }
        let admitted_under = crate::crd::validate_custom(
            &state.notes,
            &req.query,
            &req.version,
            &info,
            None,
            &mut candidate,
        )?;
        crate::patch_glue::record_update(None, &mut candidate, &manager, None, &now, &info);
        let dry = dry_run(req);
        let mut dry_result = None;
        let result =
            state
                .store
                .write_committed(&info.storage_key(), &ns, &name, |current, _rv| {
                    if current.is_some() {
                        return Err(ApiError::already_exists(&info.group, &info.plural, &name));
                    }
                    if dry {
                        dry_result = Some(candidate);
                        return Ok(WriteOp::Unchanged);
                    }
                    Ok(WriteOp::Put(candidate))
                });
        match result {
            Err(e) if e.reason == "AlreadyExists" && explicit.is_none() && attempt < 7 => continue,
            Err(e) => return Err(e),
            Ok(committed) => {
                if let Some(d) = dry_result {
                    return Ok(json_response(StatusCode::CREATED, &present(&d, req)));
                }
                let Some(obj) = committed.outcome.object() else {
                    return Err(ApiError::internal("create stored nothing"));
                };
                note_stored(
                    &state.notes,
                    &info,
                    admitted_clean,
                    admitted_under.as_ref(),
                    None,
                    obj,
                );
                crate::crd::after_write(state, &info, &committed.outcome);
                return Ok(object_response(
                    StatusCode::CREATED,
                    obj,
                    committed.event.as_deref(),
                    req,
                ));
            }
        }
    }
    Err(ApiError::internal("could not generate a unique name"))
}

/// What an update/patch may change, as the real strategies decide: the status subresource
/// changes only status; main-resource writes keep status when the kind has a status
/// subresource; identity and lifecycle metadata always come from the stored object.
pub fn prepare_update(
    state: &SharedState,
    info: &ResourceInfo,
    subresource: Option<&str>,
    old: &Value,
    mut new: Value,
) -> Result<Value, ApiError> {
    let name = meta::meta_str(old, "name").unwrap_or("").to_string();
    if subresource == Some("status") {
        // kube-apiserver's Pod status strategy resets only the spec (and owner references,
        // deletion timestamp): labels and annotations written through `pods/status` stay,
        // which crates/devcluster/tests/api/crud.rs checks on both grounds. Custom resources
        // (and the other kinds here) keep only the status of such a write.
        let labels_and_annotations = info.group.is_empty() && info.plural == "pods";
        let written_meta = labels_and_annotations
            .then(|| new.get("metadata").cloned())
            .flatten();
        let mut out = status_write(old, new);
        if let (Some(Value::Object(written)), Some(m)) =
            (written_meta, meta::metadata_mut(&mut out))
        {
            for key in ["labels", "annotations"] {
                match written.get(key) {
                    Some(v) => m.insert(key.into(), v.clone()),
                    None => m.remove(key),
                };
            }
            let causes = meta::object_meta_causes(&out);
            if !causes.is_empty() {
                return Err(ApiError::invalid(&info.group, &info.kind, &name, causes));
            }
        }
        return Ok(out);
    }
    if subresource == Some("finalize") {
        let mut out = old.clone();
        if let (Some(o), Some(f)) = (out.as_object_mut(), new.pointer("/spec/finalizers")) {
            let spec = o.entry("spec").or_insert_with(|| json!({}));
            spec["finalizers"] = f.clone();
        }
        return Ok(out);
    }
    let Some(obj) = new.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    obj.insert("apiVersion".into(), old["apiVersion"].clone());
    obj.insert("kind".into(), old["kind"].clone());
    if info.has_status {
        // The written status usually is the stored one (a patch copies it): keep it then.
        match old.get("status") {
            Some(s) if obj.get("status") != Some(s) => {
                obj.insert("status".into(), s.clone());
            }
            Some(_) => {}
            None => {
                obj.remove("status");
            }
        };
    }
    let empty_meta = Map::new();
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty_meta);
    let new_finalizers = meta::finalizers(&new);
    let old_finalizers = meta::finalizers(old);
    if old_meta.get("deletionTimestamp").is_some()
        && new_finalizers.iter().any(|f| !old_finalizers.contains(f))
    {
        return Err(ApiError::invalid(
            &info.group,
            &info.kind,
            &name,
            vec![Cause {
                reason: "FieldValueForbidden".into(),
                message: "Forbidden: no new finalizers can be added if the object is being deleted"
                    .into(),
                field: "metadata.finalizers".into(),
            }],
        ));
    }
    if let Some(m) = meta::metadata_mut(&mut new) {
        for key in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            match old_meta.get(key) {
                Some(v) if m.get(key) != Some(v) => {
                    m.insert(key.into(), v.clone());
                }
                Some(_) => {}
                None => {
                    m.remove(key);
                }
            };
        }
        m.remove("selfLink");
    }
    crate::kinds::prepare_update(state, info, old, &mut new)
        .map_err(|causes| ApiError::invalid(&info.group, &info.kind, &name, causes))?;
    let meta_causes = meta::object_meta_causes(&new);
    if !meta_causes.is_empty() {
        return Err(ApiError::invalid(
            &info.group,
            &info.kind,
            &name,
            meta_causes,
        ));
    }
    Ok(new)
}

/// What a write to the status subresource stores: the stored object with the written status
/// (none if the write has none) and the written `managedFields` (which travel with the write).
/// The written object is usually the stored one with another status (a patch copies the stored
/// object): its parts that equal the stored ones are kept, and only the others are copied from
/// the stored object.
fn status_write(old: &Value, new: Value) -> Value {
    let Value::Object(old) = old else {
        return old.clone();
    };
    let mut new = match new {
        Value::Object(new) => new,
        _ => Map::new(),
    };
    let status = new.remove("status");
    let managed_fields = new
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"));
    let mut out = Map::new();
    for (key, value) in old {
        let written = new.remove(key);
        let kept = match (key.as_str(), value, written) {
            ("status", _, _) => continue,
            ("metadata", Value::Object(old_meta), Some(Value::Object(written)))
                if managed_fields.is_some() =>
            {
                Value::Object(stored_metadata_without_managed_fields(old_meta, written))
            }
            ("metadata", Value::Object(old_meta), _) if managed_fields.is_some() => {
                Value::Object(stored_metadata_without_managed_fields(old_meta, Map::new()))
            }
            (_, _, Some(written)) if written == *value => written,
            _ => value.clone(),
        };
        out.insert(key.clone(), kept);
    }
    if let Some(status) = status {
        out.insert("status".into(), status);
    }
    let mut out = Value::Object(out);
    if let Some(mf) = managed_fields
        && let Some(m) = meta::metadata_mut(&mut out)
    {
        m.insert("managedFields".into(), mf);
    }
    out
}

/// The stored metadata without `managedFields`, taking the members of `written` (the written
/// metadata, its managedFields already removed) that equal the stored ones instead of copying.
fn stored_metadata_without_managed_fields(
    stored: &Map<String, Value>,
    mut written: Map<String, Value>,
) -> Map<String, Value> {
    stored
        .iter()
        .filter(|(k, _)| k.as_str() != "managedFields")
        .map(|(k, v)| {
            let kept = match written.remove(k) {
                Some(w) if w == *v => w,
                _ => v.clone(),
            };
            (k.clone(), kept)
        })
        .collect()
}

/// Bumps `metadata.generation` when anything outside metadata and status changed. Runs after
/// the schema has pruned and defaulted the new object, so a write that only drops a defaulted
/// field (e.g. a port's `protocol: TCP`) is the no-op it is on a real server.
pub(super) fn bump_generation(info: &ResourceInfo, old: &Value, new: &mut Value) {
    if info.tracks_generation && spec_changed(old, new) {
        let g = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if let Some(m) = meta::metadata_mut(new) {
            m.insert("generation".into(), json!(g + 1));
        }
    }
}

/// Whether anything outside `metadata` and `status` differs.
pub(super) fn spec_changed(old: &Value, new: &Value) -> bool {
    let spec_like = |(k, _): &(&String, &Value)| {
        !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
    };
    let empty = Map::new();
    let old = old.as_object().unwrap_or(&empty);
    let new = new.as_object().unwrap_or(&empty);
    old.iter().filter(spec_like).count() != new.iter().filter(spec_like).count()
        || old
            .iter()
            .filter(spec_like)
            .any(|(k, v)| new.get(k) != Some(v))
}

/// After computing the new object: a terminating object whose last finalizer went is deleted,
/// unless it is still in a grace period (a terminating pod stays until its kubelet deletes it
/// with grace 0, however often its status is written meanwhile).
fn finish(new: Value) -> WriteOp {
    if meta::finalized(&new) {
        WriteOp::DeleteWith(new)
    } else {
        WriteOp::Put(new)
    }
}

fn respond_written(
    state: &SharedState,
    req: &ResourceRequest,
    committed: Committed,
    dry_result: Option<Value>,
    created_code: StatusCode,
) -> Result<Response, ApiError> {
    let outcome = &committed.outcome;
    let code = if matches!(outcome, WriteOutcome::Created(_)) {
        created_code
    } else {
        StatusCode::OK
    };
    if let WriteOutcome::Deleted(o) = outcome {
        crate::kinds::on_deleted(state, &req.info.group_resource(), o);
    }
    crate::crd::after_write(state, &req.info, outcome);
    if let Some(d) = dry_result {
        return Ok(json_response(code, &present(&d, req)));
    }
    match outcome.object() {
        Some(obj) => Ok(object_response(code, obj, committed.event.as_deref(), req)),
        None => Err(ApiError::internal("write produced no object")),
    }
}

pub fn update(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let mut body = parse_body(req)?;
    check_type_meta(req, &body)?;
    let info = req.info.clone();
    let admitted_clean =
        crate::builtin_types::admit_onto(&state.notes, &req.query, &info, &mut body, None)?;
    let body = crate::event_versions::into_storage(&info, body);
    let name = req.name.clone().unwrap_or_default();
    if let Some(n) = meta::meta_str(&body, "name")
        && n != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({n}) does not match the name on the URL ({name})"
        )));
    }
    if info.namespaced
        && let Some(n) = meta::meta_str(&body, "namespace")
        && !n.is_empty()
        && n != req.namespace_or_empty()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if info.allow_create_on_update
        && state
            .store
            .get(&info.storage_key(), req.namespace_or_empty(), &name)
            .is_none()
    {
        check_namespace(state, req, &name)?;
    }
    let body_rv = meta::meta_str(&body, "resourceVersion")
        .filter(|s| !s.is_empty())
        .map(String::from);
    let manager = crate::patch_glue::field_manager(req);
    let sub = req.subresource.clone();
    let dry = dry_run(req);
    let mut dry_result = None;
    let mut written_onto: Option<WrittenOnto> = None;
    let now = meta::now_rfc3339();
    let committed = state.store.write_optimistic(
        &info.storage_key(),
        req.namespace_or_empty(),
        &name,
        |current| {
            let Some(current) = current else {
                if !(info.allow_create_on_update && sub.is_none() && body_rv.is_none()) {
                    return Err(ApiError::not_found(&info.group, &info.plural, &name));
                }
                let ns = req.namespace_or_empty().to_string();
                let mut created =
                    admit_new_object(state, req, &info, body.clone(), &ns, &name, &now)?;
                crate::patch_glue::record_update(None, &mut created, &manager, None, &now, &info);
                if dry {
                    dry_result = Some(created);
                    return Ok(WriteOp::Unchanged);
                }
                return Ok(WriteOp::Put(created));
            };
            let current_uid = meta::meta_str(current, "uid").unwrap_or("");
            if let Some(uid) = meta::meta_str(&body, "uid").filter(|u| !u.is_empty())
                && uid != current_uid
            {
                return Err(ApiError::conflict(
                    &info.group,
                    &info.plural,
                    &name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"),
                ));
            }
            match &body_rv {
                Some(rv) if Some(rv.as_str()) != meta::meta_str(current, "resourceVersion") => {
                    return Err(ApiError::stale(&info.group, &info.plural, &name));
                }
                None if !info.allow_unconditional_update => {
                    return Err(ApiError::invalid(
                        &info.group,
                        &info.kind,
                        &name,
                        vec![Cause {
                            reason: "FieldValueInvalid".into(),
                            message: "Invalid value: 0x0: must be specified for an update".into(),
                            field: "metadata.resourceVersion".into(),
                        }],
                    ));
                }
                _ => {}
            }
            let (mut new, onto) = admit_update(
                state,
                req,
                &info,
                sub.as_deref(),
                current,
                body.clone(),
                admitted_clean,
            )?;
            written_onto = Some(onto);
            crate::patch_glue::record_update(
                Some(current),
                &mut new,
                &manager,
                sub.as_deref(),
                &now,
                &info,
            );
            if dry {
                dry_result = Some(new);
                return Ok(WriteOp::Unchanged);
            }
            Ok(finish(new))
        },
    )?;
    note_updated(&state.notes, &info, &committed, written_onto.as_ref());
    respond_written(state, req, committed, dry_result, StatusCode::CREATED)
}

/// The version an update's or patch's computation wrote onto, whether what it admitted is clean
/// for its built-in type, and the schema it admitted under.
type WrittenOnto = (Arc<Value>, bool, Option<Arc<StructuralSchema>>);

/// Notes what a write admitted on the version it stored (`builtin_types::note_written`,
/// `crd::note_admitted`), so that later writes onto that version check only what they change.
fn note_stored(
    notes: &WriteNotes,
    info: &ResourceInfo,
    admitted_clean: bool,
    admitted_under: Option<&Arc<StructuralSchema>>,
    before: Option<&Value>,
    stored: &Value,
) {
    crate::builtin_types::note_written(notes, info, admitted_clean, before, stored);
    crate::crd::note_admitted(notes, admitted_under, before, stored);
}

/// The version an update or patch stores over `current`: what the request may change
/// (`prepare_update`), a custom resource's schema check and defaults, and the generation;
/// with what it was admitted as, for [`note_updated`]. `admitted_clean` is the built-in type
/// check's verdict on the written body.
fn admit_update(
    state: &SharedState,
    req: &ResourceRequest,
    info: &ResourceInfo,
    subresource: Option<&str>,
    current: &Arc<Value>,
    written: Value,
    admitted_clean: bool,
) -> Result<(Value, WrittenOnto), ApiError> {
    let mut new = prepare_update(state, info, subresource, current, written)?;
    let admitted_under = crate::crd::validate_custom(
        &state.notes,
        &req.query,
        &req.version,
        info,
        Some(current),
        &mut new,
    )?;
    bump_generation(info, current, &mut new);
    Ok((new, (current.clone(), admitted_clean, admitted_under)))
}

/// [`note_stored`] for an update or patch that stored a new version.
fn note_updated(
    notes: &WriteNotes,
    info: &ResourceInfo,
    committed: &Committed,
    written_onto: Option<&WrittenOnto>,
) {
    if let (WriteOutcome::Updated(stored), Some((before, clean, under))) =
        (&committed.outcome, written_onto)
    {
        note_stored(notes, info, *clean, under.as_ref(), Some(before), stored);
    }
}

/// Everything the server does to a new object written by PUT (kinds that allow create on
/// update) or server-side apply: unknown fields, identity metadata, per-kind defaults, metadata
/// and schema validation.
fn admit_new_object(
    state: &SharedState,
    req: &ResourceRequest,
    info: &ResourceInfo,
    mut created: Value,
    ns: &str,
    name: &str,
    now: &str,
) -> Result<Value, ApiError> {
    crate::builtin_types::admit(&req.query, info, &mut created)?;
    check_new_event(info, &created, ns, name, &[])?;
    let mut created = crate::event_versions::into_storage(info, created);
    if let Some(m) = meta::metadata_mut(&mut created) {
        m.insert("name".into(), json!(name));
        m.insert("uid".into(), json!(meta::new_uid()));
        m.insert("creationTimestamp".into(), json!(now));
        m.remove("resourceVersion");
        m.remove("deletionTimestamp");
        m.remove("deletionGracePeriodSeconds");
        if info.namespaced {
            m.insert("namespace".into(), json!(ns));
        } else {
            m.remove("namespace");
        }
        if info.tracks_generation {
            m.insert("generation".into(), json!(1));
        }
    }
    if let Some(o) = created.as_object_mut() {
        o.insert("apiVersion".into(), json!(info.stored_api_version()));
        o.insert("kind".into(), json!(info.kind));
        if info.has_status && info.is_custom() {
            o.remove("status");
        }
    }
    crate::kinds::prepare_create(state, info, &mut created)
        .map_err(|causes| ApiError::invalid(&info.group, &info.kind, name, causes))?;
    let meta_causes = meta::object_meta_causes(&created);
    if !meta_causes.is_empty() {
        return Err(ApiError::invalid(
            &info.group,
            &info.kind,
            name,
            meta_causes,
        ));
    }
    crate::crd::validate_custom(
        &state.notes,
        &req.query,
        &req.version,
        info,
        None,
        &mut created,
    )?;
    Ok(created)
}

pub fn patch(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let ct = req
        .content_type()
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let kind = crate::patch_glue::PatchKind::from_content_type(&ct, &req.info)?;
    // The patch options are validated before the patch is read, as by a real server.
    if kind == crate::patch_glue::PatchKind::Apply && req.query.get("fieldManager").is_none() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
        ));
    }
    let patch_body = parse_body(req)?;
    let info = req.info.clone();
    let name = req.name.clone().unwrap_or_default();
    let sub = req.subresource.clone();
    let dry = dry_run(req);
    let force = req.query.flag("force");
    let manager = crate::patch_glue::field_manager(req);
    let now = meta::now_rfc3339();
    let mut dry_result = None;
    let mut written_onto: Option<WrittenOnto> = None;
    let ns = req.namespace_or_empty().to_string();
    let needs_namespace_check = kind == crate::patch_glue::PatchKind::Apply
        && state.store.get(&info.storage_key(), &ns, &name).is_none();
    if needs_namespace_check {
        check_namespace(state, req, &name)?;
    }
    let committed = state
        .store
        .write_optimistic(&info.storage_key(), &ns, &name, |current| {
            let Some(current) = current else {
                if kind != crate::patch_glue::PatchKind::Apply || sub.is_some() {
                    return Err(ApiError::not_found(&info.group, &info.plural, &name));
                }
                let created = crate::patch_glue::apply_create(req, &patch_body, &manager, &now)?;
                let created = admit_new_object(state, req, &info, created, &ns, &name, &now)?;
                if dry {
                    dry_result = Some(created);
                    return Ok(WriteOp::Unchanged);
                }
                return Ok(WriteOp::Put(created));
            };
            let served = super::present_cow(current, req);
            let mut patched = crate::patch_glue::apply_patch(
                kind,
                &served,
                &patch_body,
                &info,
                &manager,
                force,
                sub.as_deref(),
                &now,
            )?;
            let admitted_clean = crate::builtin_types::admit_onto(
                &state.notes,
                &req.query,
                &info,
                &mut patched,
                Some(current),
            )?;
            let patched = crate::event_versions::into_storage(&info, patched);
            if let Some(rv) = meta::meta_str(&patched, "resourceVersion")
                && Some(rv) != meta::meta_str(current, "resourceVersion")
            {
                return Err(ApiError::stale(&info.group, &info.plural, &name));
            }
            let (mut new, onto) = admit_update(
                state,
                req,
                &info,
                sub.as_deref(),
                current,
                patched,
                admitted_clean,
            )?;
            written_onto = Some(onto);
            if kind != crate::patch_glue::PatchKind::Apply {
                crate::patch_glue::record_update(
                    Some(current),
                    &mut new,
                    &manager,
                    sub.as_deref(),
                    &now,
                    &info,
                );
            }
            if dry {
                dry_result = Some(new);
                return Ok(WriteOp::Unchanged);
            }
            Ok(finish(new))
        })?;
    note_updated(&state.notes, &info, &committed, written_onto.as_ref());
    respond_written(state, req, committed, dry_result, StatusCode::CREATED)
}

#[cfg(test)]
mod tests;
