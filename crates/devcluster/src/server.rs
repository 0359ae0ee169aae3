//! The HTTP front: one axum fallback handler that parses Kubernetes API paths (like the real
//! server's request-info factory) and dispatches to discovery, REST and watch handlers.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::Value;

use crate::api_error::ApiError;
use crate::registry::{Registry, ResourceInfo};
use crate::store::Store;

/// Everything the handlers share.
pub struct AppState {
    pub store: Store,
    pub registry: Registry,
    pub options: ServerOptions,
    pub service_ips: crate::kinds::ServiceIpAllocator,
    /// What writes noted about the versions they stored (later writes onto them check less).
    pub notes: crate::store::notes::WriteNotes,
    /// Cancelled when the server stops (ends open watches).
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// Behaviour knobs of the server itself.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Period of BOOKMARK frames on watches that ask for them.
    pub bookmark_interval: std::time::Duration,
    /// Whether a node agent finishes graceful pod deletion; when not, pods are deleted at once.
    pub node_agent: bool,
    /// Accepted bearer tokens; `None` accepts any request.
    pub tokens: Option<crate::kubeconfig::TokenFile>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bookmark_interval: std::time::Duration::from_secs(1),
            node_agent: false,
            tokens: None,
        }
    }
}

pub type SharedState = Arc<AppState>;

pub fn router(state: SharedState) -> Router {
    Router::new().fallback(handle).with_state(state)
}

/// Query parameters, in order.
#[derive(Debug, Default, Clone)]
pub struct Query(pub Vec<(String, String)>);

impl Query {
    /// Decodes a query string (`application/x-www-form-urlencoded`: `+` is a space, `%XX`
    /// escapes, invalid UTF-8 replaced), keeping repeated keys in order.
    pub fn parse(q: Option<&str>) -> Query {
        let Some(q) = q else { return Query::default() };
        Query(
            form_urlencoded::parse(q.as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }

    pub fn flag(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true") | Some("1"))
    }
}

/// The query of a legacy `/watch/` path: a watch, narrowed to the named object by a field
/// selector (a selector naming another object is a 400, as on a real server).
fn legacy_watch_query(mut query: Query, name: Option<&str>) -> Result<Query, ApiError> {
    query.0.retain(|(k, _)| k != "watch");
    query.0.insert(0, ("watch".to_string(), "true".to_string()));
    let Some(name) = name else {
        return Ok(query);
    };
    match query.get("fieldSelector") {
        None => {
            query.0.retain(|(k, _)| k != "fieldSelector");
            query
                .0
                .push(("fieldSelector".to_string(), format!("metadata.name={name}")));
        }
        Some(existing) => {
            let selected = crate::selector::FieldSelector::parse(existing)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            let names_it = selected.requirements().iter().any(|r| {
                r.field == "metadata.name"
                    && r.operator == crate::selector::FieldOperator::Equals
                    && r.value == name
            });
            if !names_it {
                return Err(ApiError::bad_request(
                    "fieldSelector metadata.name doesn't match requested name",
                ));
            }
        }
    }
    Ok(query)
}

/// A parsed request to a resource endpoint.
pub struct ResourceRequest {
    pub info: Arc<ResourceInfo>,
    pub version: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub query: Query,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl ResourceRequest {
    pub fn api_version(&self) -> String {
        self.info.api_version(&self.version)
    }
    pub fn namespace_or_empty(&self) -> &str {
        self.namespace.as_deref().unwrap_or("")
    }
    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn accept(&self) -> &str {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
    pub fn user_agent(&self) -> &str {
        self.headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

pub fn json_response(code: StatusCode, body: &Value) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    json_bytes_response(code, bytes::Bytes::from(bytes))
}

/// A JSON response from an already serialized body.
pub fn json_bytes_response(code: StatusCode, body: bytes::Bytes) -> Response {
    (code, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

async fn handle(State(state): State<SharedState>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    if !authorized(&state, &parts.headers) {
        return ApiError::new(401, "Unauthorized", "Unauthorized").into_response();
    }
    let path = parts.uri.path().to_string();
    let query = Query::parse(parts.uri.query());
    let body = match axum::body::to_bytes(body, 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("reading body: {e}")).into_response(),
    };
    match route(&state, &parts.method, &path, query, parts.headers, body).await {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}

fn authorized(state: &AppState, headers: &HeaderMap) -> bool {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    crate::kubeconfig::check_bearer(state.options.tokens.as_ref(), header).is_ok()
}

async fn route(
    state: &SharedState,
    method: &Method,
    path: &str,
    query: Query,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let decoded: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = decoded.iter().map(String::as_str).collect();
    match segments.as_slice() {
        ["healthz"] | ["readyz"] | ["livez"] => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            );
        }
        ["healthz", ..] | ["readyz", ..] | ["livez", ..] => {
            return Ok(
                (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], "ok").into_response(),
            );
        }
        ["version"] => return Ok(crate::discovery::version()),
        ["openapi", ..] => return crate::openapi::serve(state, &segments[1..], &headers),
        _ => {}
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["api"] => return Ok(crate::discovery::core_versions(state, &headers)),
        ["apis"] => return Ok(crate::discovery::groups(state, &headers)),
        ["api", v] => return crate::discovery::resources(state, "", v),
        ["apis", g] => {
            return crate::discovery::group(state, g).map_err(|e| outside_builtins(state, g, e));
        }
        ["apis", g, v] => {
            return crate::discovery::resources(state, g, v)
                .map_err(|e| outside_builtins(state, g, e));
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(ApiError::not_found_path()),
    };
    // The deprecated verb-in-path form: /api/v1/watch/namespaces/{ns}/pods[/{name}].
    let (legacy_watch, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    // namespaces/{ns}/{resource}... ; namespaces/{name}[/status|/finalize] is the namespace itself.
    let (namespace, rest): (Option<String>, &[&str]) = match rest {
        ["namespaces", ns, resource, ..] if !matches!(*resource, "status" | "finalize") => {
            (Some(ns.to_string()), &rest[2..])
        }
        _ => (None, rest),
    };
    let (resource, name, subresource) = match rest {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(name.to_string()), None),
        [resource, name, sub] => (*resource, Some(name.to_string()), Some(sub.to_string())),
        _ => return Err(ApiError::not_found_path()),
    };
    let info = state
        .registry
        .lookup(group, version, resource)
        .ok_or_else(|| outside_builtins(state, group, ApiError::not_found_path()))?
        .at_version(version);
    if namespace.is_some() && !info.namespaced {
        return Err(ApiError::not_found_path());
    }
    let (name, query) = if legacy_watch {
        if subresource.is_some() {
            return Err(ApiError::not_found_path());
        }
        (None, legacy_watch_query(query, name.as_deref())?)
    } else {
        (name, query)
    };
    // client-go asks for protobuf first for built-in kinds: their answers are re-encoded.
    let protobuf = crate::protobuf::wants_protobuf(
        headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or(""),
    ) && crate::protobuf::serves(&info.api_version(version), &info.kind);
    let watching = query.flag("watch");
    let req = ResourceRequest {
        info,
        version: version.to_string(),
        namespace,
        name,
        subresource,
        query,
        headers,
        body,
    };
    let response = crate::rest::dispatch(state, method, req).await?;
    Ok(match (protobuf, watching) {
        (true, true) => protobuf_watch(response),
        (true, false) => protobuf_answer(response).await,
        (false, _) => response,
    })
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"))
}

/// A JSON answer re-encoded in protobuf (kept as JSON when it has no protobuf form).
async fn protobuf_answer(response: Response) -> Response {
    if !is_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => return ApiError::internal(format!("reading the answer: {e}")).into_response(),
    };
    let encoded = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| crate::protobuf::encode(&v));
    match encoded {
        Some(Ok(proto)) => {
            parts.headers.insert(
                header::CONTENT_TYPE,
                http::HeaderValue::from_static(crate::protobuf::MEDIA_TYPE),
            );
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, axum::body::Body::from(proto))
        }
        Some(Err(e)) => {
            ApiError::internal(format!("encoding the answer in protobuf: {e}")).into_response()
        }
        None => Response::from_parts(parts, axum::body::Body::from(bytes)),
    }
}

/// A JSON watch stream re-framed as a protobuf watch stream: each newline-delimited JSON frame
/// becomes one length-prefixed `WatchEvent`.
fn protobuf_watch(response: Response) -> Response {
    use futures::StreamExt as _;
    if !is_json(&response) {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let mut pending: Vec<u8> = Vec::new();
    let frames = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(frame) = serde_json::from_slice::<Value>(&line) else {
                continue;
            };
            match crate::protobuf::encode_watch_frame(&frame) {
                Ok(encoded) => out.extend_from_slice(&encoded),
                Err(e) => tracing::warn!(error = %e, "a watch event has no protobuf form; skipped"),
            }
        }
        Ok::<_, axum::Error>(Bytes::from(out))
    });
    parts.headers.insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::protobuf::WATCH_MEDIA_TYPE),
    );
    Response::from_parts(parts, axum::body::Body::from_stream(frames))
}

/// A 404 for a path nothing serves, as kube-apiserver words it: a JSON `Status` inside its
/// built-in groups, plain-text `404 page not found` for a group it does not serve or a
/// resource a custom group does not have (those paths fall through to its not-found handler).
fn outside_builtins(state: &SharedState, group: &str, error: ApiError) -> ApiError {
    if error.code == 404 && !state.registry.is_builtin_group(group) {
        ApiError::page_not_found()
    } else {
        error
    }
}
