//! A minimal in-memory API server for the node agent's tests: pods and PVCs only, list + watch,
//! create, get, `pods/binding`, status patches (merge, and strategic merge with `conditions`
//! keyed by `type`), graceful delete with uid preconditions. The real server lives in the
//! devcluster-server branch; this stand-in only does what the agent needs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use futures::StreamExt as _;
use http::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<(u64, String, &'static str, Value)>,
}

#[derive(Default)]
struct Inner {
    rv: u64,
    uid: u64,
    /// (resource, namespace, name) -> object
    objects: BTreeMap<(String, String, String), Value>,
    history: Vec<(u64, String, &'static str, Value)>,
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "code": code, "reason": reason, "message": message}),
    )
}

fn json_response(code: u16, body: &Value) -> Response {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn now() -> String {
    crate::nodes::status::format_time(k8s_openapi::jiff::Timestamp::now())
}

impl FakeApi {
    pub fn new() -> Self {
        let (events, _) = broadcast::channel(4096);
        Self {
            inner: Arc::new(Mutex::new(Inner::default())),
            events,
        }
    }

    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .fallback(handle)
            .with_state(self.clone())
    }

    fn commit(
        &self,
        inner: &mut Inner,
        resource: &str,
        kind: &'static str,
        mut obj: Value,
    ) -> Value {
        inner.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(inner.rv.to_string());
        let key = key_of(resource, &obj);
        if kind == "DELETED" {
            inner.objects.remove(&key);
        } else {
            inner.objects.insert(key, obj.clone());
        }
        inner
            .history
            .push((inner.rv, resource.to_string(), kind, obj.clone()));
        let _ = self
            .events
            .send((inner.rv, resource.to_string(), kind, obj.clone()));
        obj
    }
}

fn key_of(resource: &str, obj: &Value) -> (String, String, String) {
    let m = &obj["metadata"];
    (
        resource.to_string(),
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

fn kind_of(resource: &str) -> &'static str {
    if resource == "pods" {
        "Pod"
    } else {
        "PersistentVolumeClaim"
    }
}

async fn handle(
    State(fake): State<FakeApi>,
    method: Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: Bytes,
) -> Response {
    let parts: Vec<&str> = uri.path().trim_matches('/').split('/').collect();
    let query: BTreeMap<String, String> = uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    // /api/v1/{resource} or /api/v1/namespaces/{ns}/{resource}[/{name}[/{sub}]]
    let (ns, rest) = match parts.as_slice() {
        ["api", "v1", "namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest.to_vec()),
        ["api", "v1", rest @ ..] => (None, rest.to_vec()),
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
    };
    let resource = match rest.first() {
        Some(&r @ ("pods" | "persistentvolumeclaims")) => r.to_string(),
        _ => {
            return status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            );
        }
    };
    let name = rest.get(1).map(|s| s.to_string());
    let sub = rest.get(2).copied();

    match (method, name, sub) {
        (Method::GET, None, _) if query.get("watch").map(String::as_str) == Some("true") => {
            watch(&fake, &resource, ns, &query)
        }
        (Method::GET, None, _) => {
            let inner = fake.inner.lock().unwrap();
            let items: Vec<Value> = inner
                .objects
                .iter()
                .filter(|((r, n, _), _)| *r == resource && ns.as_ref().is_none_or(|ns| ns == n))
                .map(|(_, v)| v.clone())
                .collect();
            json_response(
                200,
                &json!({
                    "kind": format!("{}List", kind_of(&resource)), "apiVersion": "v1",
                    "metadata": { "resourceVersion": inner.rv.to_string() }, "items": items,
                }),
            )
        }
        (Method::GET, Some(name), None) => {
            let inner = fake.inner.lock().unwrap();
            match inner
                .objects
                .get(&(resource.clone(), ns.unwrap_or_default(), name.clone()))
            {
                Some(obj) => json_response(200, obj),
                None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
            }
        }
        (Method::POST, None, None) => {
            let mut obj: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", &e.to_string()),
            };
            let mut inner = fake.inner.lock().unwrap();
            let ns = ns.unwrap_or_default();
            obj["metadata"]["namespace"] = json!(ns);
            let key = key_of(&resource, &obj);
            if inner.objects.contains_key(&key) {
                return status(409, "AlreadyExists", "already exists");
            }
            inner.uid += 1;
            obj["metadata"]["uid"] = json!(format!("uid-{}", inner.uid));
            obj["metadata"]["creationTimestamp"] = json!(now());
            obj["apiVersion"] = json!("v1");
            obj["kind"] = json!(kind_of(&resource));
            obj["status"] = json!({ "phase": "Pending" });
            let obj = fake.commit(&mut inner, &resource, "ADDED", obj);
            json_response(201, &obj)
        }
        (Method::POST, Some(name), Some("binding")) => {
            let binding: Value = serde_json::from_slice(&body).unwrap_or_default();
            let mut inner = fake.inner.lock().unwrap();
            let key = (resource.clone(), ns.unwrap_or_default(), name.clone());
            let Some(mut pod) = inner.objects.get(&key).cloned() else {
                return status(404, "NotFound", &format!("pods \"{name}\" not found"));
            };
            if pod["spec"]["nodeName"].is_string() {
                return status(
                    409,
                    "Conflict",
                    &format!("pod {name} is already assigned to node"),
                );
            }
            pod["spec"]["nodeName"] = binding["target"]["name"].clone();
            let mut conditions = pod["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            conditions.retain(|c| c["type"] != "PodScheduled");
            conditions.push(
                json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": now()}),
            );
            pod["status"]["conditions"] = json!(conditions);
            fake.commit(&mut inner, &resource, "MODIFIED", pod);
            json_response(
                201,
                &json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
            )
        }
        (Method::PATCH, Some(name), Some("status")) => {
            let patch: Value = match serde_json::from_slice(&body) {
                Ok(v) => v,
                Err(e) => return status(400, "BadRequest", &e.to_string()),
            };
            let strategic = headers.get("content-type").is_some_and(|v| {
                v.as_bytes()
                    .starts_with(b"application/strategic-merge-patch")
            });
            let mut inner = fake.inner.lock().unwrap();
            let key = (resource.clone(), ns.unwrap_or_default(), name.clone());
            let Some(mut obj) = inner.objects.get(&key).cloned() else {
                return status(404, "NotFound", &format!("{resource} \"{name}\" not found"));
            };
            let mut new_status = obj["status"].clone();
            let mut status_patch = patch["status"].clone();
            if strategic && let Some(patched) = status_patch["conditions"].as_array().cloned() {
                let mut merged = new_status["conditions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for c in patched {
                    match merged.iter_mut().find(|m| m["type"] == c["type"]) {
                        Some(m) => json_patch::merge(m, &c),
                        None => merged.push(c),
                    }
                }
                status_patch["conditions"] = json!(merged);
            }
            json_patch::merge(&mut new_status, &status_patch);
            if new_status == obj["status"] {
                return json_response(200, &obj);
            }
            obj["status"] = new_status;
            let obj = fake.commit(&mut inner, &resource, "MODIFIED", obj);
            json_response(200, &obj)
        }
        (Method::DELETE, Some(name), None) => {
            let options: Value = serde_json::from_slice(&body).unwrap_or_default();
            let mut inner = fake.inner.lock().unwrap();
            let key = (resource.clone(), ns.unwrap_or_default(), name.clone());
            let Some(mut obj) = inner.objects.get(&key).cloned() else {
                return status(404, "NotFound", &format!("{resource} \"{name}\" not found"));
            };
            if let Some(uid) = options["preconditions"]["uid"].as_str()
                && obj["metadata"]["uid"] != uid
            {
                return status(
                    409,
                    "Conflict",
                    "Precondition failed: UID in precondition does not match",
                );
            }
            let grace = options["gracePeriodSeconds"].as_i64().unwrap_or(30);
            if resource != "pods" || grace == 0 || obj["spec"]["nodeName"].is_null() {
                let obj = fake.commit(&mut inner, &resource, "DELETED", obj);
                return json_response(200, &obj);
            }
            if obj["metadata"]["deletionTimestamp"].is_null() {
                let at = k8s_openapi::jiff::Timestamp::now()
                    .checked_add(std::time::Duration::from_secs(grace as u64))
                    .unwrap();
                obj["metadata"]["deletionTimestamp"] = json!(crate::nodes::status::format_time(at));
                obj["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
                obj = fake.commit(&mut inner, &resource, "MODIFIED", obj);
            }
            json_response(200, &obj)
        }
        _ => status(405, "MethodNotAllowed", "not supported by the test fake"),
    }
}

fn watch(
    fake: &FakeApi,
    resource: &str,
    ns: Option<String>,
    query: &BTreeMap<String, String>,
) -> Response {
    let since: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // Subscribe before reading current state so nothing falls between the two.
    let rx = fake.events.subscribe();
    let inner = fake.inner.lock().unwrap();
    let in_ns = |obj: &Value, ns: &Option<String>| {
        ns.as_ref()
            .is_none_or(|ns| obj["metadata"]["namespace"] == ns.as_str())
    };
    let replay: Vec<String> = if since == 0 {
        inner
            .objects
            .iter()
            .filter(|((r, _, _), v)| r == resource && in_ns(v, &ns))
            .map(|(_, v)| format!("{}\n", json!({"type": "ADDED", "object": v})))
            .collect()
    } else {
        inner
            .history
            .iter()
            .filter(|(rv, r, _, v)| *rv > since && r == resource && in_ns(v, &ns))
            .map(|(_, _, kind, v)| format!("{}\n", json!({"type": kind, "object": v})))
            .collect()
    };
    let since = since.max(inner.rv);
    drop(inner);
    let resource = resource.to_string();
    let live = futures::stream::unfold(rx, move |mut rx| {
        let resource = resource.clone();
        let ns = ns.clone();
        async move {
            loop {
                match rx.recv().await {
                    Ok((rv, r, kind, obj)) => {
                        let in_ns = ns
                            .as_ref()
                            .is_none_or(|ns| obj["metadata"]["namespace"] == ns.as_str());
                        if r == resource && rv > since && in_ns {
                            let line = format!("{}\n", json!({"type": kind, "object": obj}));
                            return Some((line, rx));
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }
    });
    let stream = futures::stream::iter(replay)
        .chain(live)
        .map(|line| Ok::<_, std::convert::Infallible>(Bytes::from(line)));
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}
