//! REST handlers for resource endpoints: dispatch by verb, and the read side (get, list,
//! PartialObjectMetadata and Table answers). Writes are in `rest/write.rs`, deletion in
//! `rest/delete.rs`.

mod delete;
mod subresources;
mod write;

use std::borrow::Cow;
use std::sync::Arc;

use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::api_error::ApiError;
use crate::list_filter::ListFilter;
use crate::registry::ResourceInfo;
use crate::server::{ResourceRequest, SharedState, json_response};

pub use delete::{DeleteOptions, Propagation, delete_stored};

pub async fn dispatch(
    state: &SharedState,
    method: &Method,
    req: ResourceRequest,
) -> Result<Response, ApiError> {
    let sub = req.subresource.as_deref();
    // A namespaced resource addressed across all namespaces is read-only (list and watch).
    if req.info.namespaced && req.namespace.is_none() && method != Method::GET {
        return Err(ApiError::method_not_allowed());
    }
    if req.info.namespaced && req.namespace.is_none() && req.name.is_some() {
        return Err(ApiError::not_found_path());
    }
    if let Some(sub) = sub
        && !known_subresource(&req, sub)
    {
        return Err(missing_subresource(&req));
    }
    if method == Method::GET && !req.query.flag("watch") && req.query.get("continue").is_none() {
        wait_until_fresh(state, &req).await?;
    }
    match (method.as_str(), req.name.is_some(), sub) {
        ("GET", false, None) => {
            if req.query.flag("watch") {
                crate::watch::serve(state, req)
            } else {
                list(state, &req)
            }
        }
        ("GET", true, None) | ("GET", true, Some("status")) => get(state, &req),
        ("GET", true, Some("scale")) => subresources::get_scale(state, &req),
        ("POST", false, None) => write::create(state, &req),
        ("POST", true, Some("binding")) if req.info.plural == "pods" => {
            subresources::bind(state, &req)
        }
        ("PUT", true, None) | ("PUT", true, Some("status")) | ("PUT", true, Some("finalize")) => {
            write::update(state, &req)
        }
        ("PUT", true, Some("scale")) => subresources::update_scale(state, &req),
        ("PATCH", true, None) | ("PATCH", true, Some("status")) => write::patch(state, &req),
        ("PATCH", true, Some("scale")) => subresources::patch_scale(state, &req),
        ("DELETE", true, None) => delete::delete(state, &req),
        ("DELETE", false, None) => delete::delete_collection(state, &req),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// How long a read at a resourceVersion the server has not reached yet waits for it (the real
/// server's watch cache waits 3 s).
const FRESHNESS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A get or list at a resourceVersion beyond the current one (`resourceVersionMatch`
/// `NotOlderThan`, `Exact` or unset) waits briefly for the store to reach it, then answers
/// 504 `Timeout` "Too large resource version", as a real server does.
async fn wait_until_fresh(state: &SharedState, req: &ResourceRequest) -> Result<(), ApiError> {
    let Some(raw) = req.query.get("resourceVersion") else {
        return Ok(());
    };
    let wanted: u64 = raw
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {raw:?}")))?;
    if wanted == 0 || state.store.wait_for_rv(wanted, FRESHNESS_WAIT).await {
        return Ok(());
    }
    let current = state.store.current_rv();
    let mut e = ApiError::new(
        504,
        "Timeout",
        format!("Timeout: Too large resource version: {wanted}, current: {current}"),
    );
    e.details = Some(json!({
        "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
        "retryAfterSeconds": 1,
    }));
    Err(e)
}

fn known_subresource(req: &ResourceRequest, sub: &str) -> bool {
    match sub {
        "status" => req.info.has_status,
        "scale" => req.info.scale.is_some(),
        "binding" => req.info.plural == "pods",
        "finalize" => req.info.plural == "namespaces",
        _ => false,
    }
}

/// Whether `obj` (a stored object) is served to `req` exactly as stored: no conversion of its
/// form, and the same apiVersion and kind. [`present`] then returns an equal copy.
pub fn served_as_stored(obj: &Value, req: &ResourceRequest) -> bool {
    req.info.shared_storage.is_none()
        && obj.get("kind").and_then(Value::as_str) == Some(req.info.kind.as_str())
        && obj.get("apiVersion").and_then(Value::as_str) == Some(req.api_version().as_str())
}

/// [`present`], borrowing the stored object when it is served as stored.
pub fn present_cow<'a>(obj: &'a Value, req: &ResourceRequest) -> Cow<'a, Value> {
    if served_as_stored(obj, req) {
        Cow::Borrowed(obj)
    } else {
        Cow::Owned(present(obj, req))
    }
}

/// The response carrying one stored object: the object's JSON as stored when it is served as
/// stored (shared with the watch event `event` of the write that stored it, when given), else
/// [`present`]'s form.
pub fn object_response(
    code: StatusCode,
    obj: &Arc<Value>,
    event: Option<&crate::store::Event>,
    req: &ResourceRequest,
) -> Response {
    if !served_as_stored(obj, req) {
        return json_response(code, &present(obj, req));
    }
    let body = match event {
        Some(e) if e.holds(obj) => e.encoded(),
        _ => bytes::Bytes::from(serde_json::to_vec(&**obj).unwrap_or_default()),
    };
    crate::server::json_bytes_response(code, body)
}

/// The object as served at the requested version.
pub fn present(obj: &Value, req: &ResourceRequest) -> Value {
    present_as(&req.info, obj, &req.api_version())
}

/// `obj` as served at `api_version` (`group/version`) as kind `info.kind`: a core Event in the
/// `events.k8s.io/v1` form when read through that group; a custom resource stored at another
/// version pruned by the schema of the version it is read at, as kube-apiserver does after a
/// conversion (`None` rewrites only `apiVersion`, so a field that version does not declare is
/// not served). Like kube-apiserver, it does not apply that version's defaults on the way out
/// (checked on both by the API test `crds::responses_and_watch_events_carry_the_requested_version`).
pub fn present_as(info: &ResourceInfo, obj: &Value, api_version: &str) -> Value {
    let other_version =
        obj.get("apiVersion").and_then(Value::as_str) != Some(api_version) && info.is_custom();
    let mut out = crate::event_versions::from_storage(info, obj.clone());
    if other_version {
        let version = api_version.rsplit('/').next().unwrap_or(api_version);
        if let Some(schema) = info.schema_for(version) {
            schema.prune(&mut out);
        }
    }
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), Value::String(api_version.to_owned()));
        o.insert("kind".into(), Value::String(info.kind.clone()));
    }
    out
}

fn get(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let name = req.name.as_deref().unwrap_or("");
    let obj = state
        .store
        .get(&req.info.storage_key(), req.namespace_or_empty(), name)
        .ok_or_else(|| ApiError::not_found(&req.info.group, &req.info.plural, name))?;
    let accept = req.accept();
    if !wants_table(accept) && !accept.contains("as=PartialObjectMetadata") {
        return Ok(object_response(StatusCode::OK, &obj, None, req));
    }
    let obj = present(&obj, req);
    if wants_table(accept) {
        return Ok(json_response(
            StatusCode::OK,
            &crate::table_glue::render(state, req, &[obj], json!({}))?,
        ));
    }
    if accept.contains("as=PartialObjectMetadata") {
        return Ok(json_response(StatusCode::OK, &partial_metadata(&obj)));
    }
    Ok(json_response(StatusCode::OK, &obj))
}

pub fn wants_table(accept: &str) -> bool {
    accept
        .split(',')
        .next()
        .is_some_and(|first| first.contains("as=Table"))
}

fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list continuation token: the resourceVersion of the first page and the last key served.
fn encode_continue(rv: u64, namespace: &str, name: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
        serde_json::to_vec(&json!({"rv": rv, "ns": namespace, "name": name})).unwrap_or_default(),
    )
}

fn decode_continue(token: &str) -> Result<(u64, String, String), ApiError> {
    use base64::Engine;
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().ok_or_else(bad)?,
        v["ns"].as_str().unwrap_or("").to_string(),
        v["name"].as_str().unwrap_or("").to_string(),
    ))
}

fn list(state: &SharedState, req: &ResourceRequest) -> Result<Response, ApiError> {
    let filter = ListFilter::from_query(&req.info, &req.query)?;
    let limit = req
        .query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let mut after: Option<(String, String)> = None;
    let mut first_rv = None;
    if let Some(token) = req.query.get("continue") {
        let (rv, ns, name) = decode_continue(token)?;
        first_rv = Some(rv);
        after = Some((ns, name));
    }
    // Only the objects this page reads are parsed (older versions are kept as JSON).
    let (versions, rv) = state.store.list_versions_after(
        &req.info.storage_key(),
        req.namespace.as_deref(),
        after.as_ref(),
    );
    let list_rv = first_rv.unwrap_or(rv);
    let mut items: Vec<Arc<Value>> = Vec::new();
    let mut next: Option<String> = None;
    // Like the apiserver, the count of what is left is given only without selectors (it
    // would otherwise mean reading every remaining object).
    let mut remaining = filter.is_empty().then_some(0u64);
    for (i, version) in versions.iter().enumerate() {
        if let Some(l) = limit
            && items.len() >= l
        {
            if let Some(last) = items.last() {
                next = Some(encode_continue(
                    list_rv,
                    crate::meta::meta_str(last, "namespace").unwrap_or(""),
                    crate::meta::meta_str(last, "name").unwrap_or(""),
                ));
            }
            if let Some(r) = remaining.as_mut() {
                *r = (versions.len() - i) as u64;
            }
            break;
        }
        let obj = version.tree();
        if !filter.matches(&obj) {
            continue;
        }
        items.push(obj);
    }
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some(n) = &next {
        metadata["continue"] = json!(n);
        if let Some(r) = remaining {
            metadata["remainingItemCount"] = json!(r);
        }
    }
    let presented: Vec<Value> = items.iter().map(|o| present(o, req)).collect();
    let accept = req.accept();
    if wants_table(accept) {
        return Ok(json_response(
            StatusCode::OK,
            &crate::table_glue::render(state, req, &presented, metadata)?,
        ));
    }
    if accept.contains("as=PartialObjectMetadataList") {
        return Ok(json_response(
            StatusCode::OK,
            &json!({
                "kind": "PartialObjectMetadataList",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": metadata,
                "items": presented.iter().map(partial_metadata).collect::<Vec<_>>(),
            }),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": req.info.list_kind,
            "apiVersion": req.api_version(),
            "metadata": metadata,
            "items": presented,
        }),
    ))
}

/// A subresource the kind does not have: kube-apiserver's answer names the object for a custom
/// resource (`widgets.example.com "x" not found`) and is a bare 404 `Status` for a built-in one.
pub fn missing_subresource(req: &ResourceRequest) -> ApiError {
    if req.info.is_custom() {
        ApiError::not_found(
            &req.info.group,
            &req.info.plural,
            req.name.as_deref().unwrap_or_default(),
        )
    } else {
        ApiError::not_found_path()
    }
}
