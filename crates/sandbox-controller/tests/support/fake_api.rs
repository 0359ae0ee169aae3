//! A small in-process Kubernetes API server for the controller tests: list, streaming watch,
//! get, create, replace (resourceVersion-checked), JSON merge patch (with resourceVersion
//! precondition), status subresources, delete with finalizers and owner-reference garbage
//! collection, equality/exists label selectors, write counting and fault injection. It is the
//! minimum the reconciler needs; devcluster is the full implementation used by `tests/`.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::sync::broadcast;

#[derive(Clone)]
struct Kind {
    api_version: &'static str,
    kind: &'static str,
    status_subresource: bool,
    bump_generation: bool,
}

#[derive(Clone, Debug)]
pub struct WatchEvent {
    rv: u64,
    collection: String,
    type_: &'static str,
    object: Value,
}

/// One recorded write request.
#[derive(Clone, Debug)]
pub struct Write {
    pub method: String,
    pub path: String,
}

type FaultFn = dyn Fn(&str, &str) -> Option<(u16, String)> + Send + Sync;

/// Watch and list misbehaviour a real API server shows under load.
#[derive(Default)]
struct Knobs {
    /// Collections whose live watch events are not delivered (a watcher falling behind).
    paused: std::collections::HashSet<String>,
    /// Collections whose paginated lists return one item first and the rest after a delay.
    slow_lists: HashMap<String, std::time::Duration>,
}

/// rv of control frames (410 Expired), so they pass every watcher's "newer than" filter.
const CONTROL_RV: u64 = u64::MAX;

struct State_ {
    objects: BTreeMap<String, BTreeMap<(String, String), Value>>,
    rv: u64,
    history: Vec<WatchEvent>,
    writes: Vec<Write>,
    reads: Vec<String>,
    uid: u64,
}

#[derive(Clone)]
pub struct FakeApi {
    kinds: Arc<HashMap<&'static str, Kind>>,
    state: Arc<Mutex<State_>>,
    tx: broadcast::Sender<WatchEvent>,
    fault: Arc<Mutex<Option<Box<FaultFn>>>>,
    knobs: Arc<Mutex<Knobs>>,
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "code": code, "reason": reason, "message": message});
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(body),
    )
        .into_response()
}

struct Target {
    collection: String,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

fn parse_path(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let plural = rest.first()?;
    Some(Target {
        collection: plural.to_string(),
        namespace,
        name: rest.get(1).map(|s| s.to_string()),
        subresource: rest.get(2).map(|s| s.to_string()),
    })
}

fn query(req: &Request) -> HashMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(if bytes[i] == b'+' { b' ' } else { bytes[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn matches_selector(obj: &Value, selector: Option<&String>) -> bool {
    let Some(selector) = selector.filter(|s| !s.is_empty()) else {
        return true;
    };
    let labels = obj["metadata"]["labels"].as_object();
    selector.split(',').all(|term| match term.split_once('=') {
        Some((k, v)) => {
            labels
                .and_then(|l| l.get(k.trim_end_matches('=')))
                .and_then(Value::as_str)
                == Some(v)
        }
        None => labels.is_some_and(|l| l.contains_key(term)),
    })
}

impl FakeApi {
    pub fn new() -> Self {
        let mut kinds = HashMap::new();
        let mut add = |plural, api_version, kind, status_subresource, bump_generation| {
            kinds.insert(
                plural,
                Kind {
                    api_version,
                    kind,
                    status_subresource,
                    bump_generation,
                },
            );
        };
        add(
            "sandboxes",
            "agents.x-k8s.io/v1beta1",
            "Sandbox",
            true,
            true,
        );
        add("pods", "v1", "Pod", true, false);
        add("services", "v1", "Service", true, false);
        add(
            "persistentvolumeclaims",
            "v1",
            "PersistentVolumeClaim",
            true,
            false,
        );
        add("events", "events.k8s.io/v1", "Event", false, false);
        let (tx, _) = broadcast::channel(4096);
        FakeApi {
            kinds: Arc::new(kinds),
            state: Arc::new(Mutex::new(State_ {
                objects: BTreeMap::new(),
                rv: 1,
                history: Vec::new(),
                writes: Vec::new(),
                reads: Vec::new(),
                uid: 0,
            })),
            tx,
            fault: Arc::new(Mutex::new(None)),
            knobs: Arc::new(Mutex::new(Knobs::default())),
        }
    }

    /// Stops delivering live watch events of `collection` (they are still stored and listed),
    /// like a watcher that fell behind.
    pub fn pause_watches(&self, collection: &str) {
        self.knobs
            .lock()
            .unwrap()
            .paused
            .insert(collection.to_string());
    }

    /// Ends every open watch of `collection` with an in-stream `410 Expired` (the client must
    /// relist) and resumes delivery for new watches.
    pub fn expire_watches(&self, collection: &str) {
        self.knobs.lock().unwrap().paused.remove(collection);
        let object = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "code": 410, "reason": "Expired",
            "message": "the watcher fell behind; resume with a new list"});
        let _ = self.tx.send(WatchEvent {
            rv: CONTROL_RV,
            collection: collection.to_string(),
            type_: "ERROR",
            object,
        });
    }

    /// Paginated lists of `collection` return one item, and the remaining page only after
    /// `delay` (a large relist in progress).
    pub fn slow_lists(&self, collection: &str, delay: std::time::Duration) {
        self.knobs
            .lock()
            .unwrap()
            .slow_lists
            .insert(collection.to_string(), delay);
    }

    pub fn client(&self) -> kube::Client {
        let router = Router::new().fallback(handle).with_state(self.clone());
        kube::Client::new(router, "default")
    }

    /// Makes matching requests fail: `f(method, path)` returns `(code, message)` to fail.
    pub fn inject_fault(
        &self,
        f: impl Fn(&str, &str) -> Option<(u16, String)> + Send + Sync + 'static,
    ) {
        *self.fault.lock().unwrap() = Some(Box::new(f));
    }

    pub fn clear_fault(&self) {
        *self.fault.lock().unwrap() = None;
    }

    /// Write requests (non-GET) whose path contains `fragment`, excluding Events.
    pub fn writes_matching(&self, fragment: &str) -> Vec<Write> {
        self.state
            .lock()
            .unwrap()
            .writes
            .iter()
            .filter(|w| w.path.contains(fragment) && !w.path.contains("/events"))
            .cloned()
            .collect()
    }

    /// Paths of the single-object reads (GET by name) made so far.
    pub fn reads(&self) -> Vec<String> {
        self.state.lock().unwrap().reads.clone()
    }

    /// Number of writes to Events.
    pub fn event_writes(&self) -> usize {
        self.state
            .lock()
            .unwrap()
            .writes
            .iter()
            .filter(|w| w.path.contains("/events"))
            .count()
    }

    pub fn get(&self, collection: &str, ns: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(collection)
            .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            .cloned()
    }

    pub fn list(&self, collection: &str) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(collection)
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default()
    }

    fn emit(&self, st: &mut State_, collection: &str, type_: &'static str, object: Value) {
        let ev = WatchEvent {
            rv: st.rv,
            collection: collection.to_string(),
            type_,
            object,
        };
        st.history.push(ev.clone());
        if !self.knobs.lock().unwrap().paused.contains(collection) {
            let _ = self.tx.send(ev);
        }
    }

    /// Stores `obj` (already complete), bumping resourceVersion and emitting a watch event.
    fn put(&self, st: &mut State_, collection: &str, mut obj: Value, type_: &'static str) -> Value {
        st.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        st.objects
            .entry(collection.to_string())
            .or_default()
            .insert((ns, name), obj.clone());
        self.emit(st, collection, type_, obj.clone());
        obj
    }

    fn remove(&self, st: &mut State_, collection: &str, ns: &str, name: &str) {
        let Some(obj) = st
            .objects
            .get_mut(collection)
            .and_then(|m| m.remove(&(ns.to_string(), name.to_string())))
        else {
            return;
        };
        st.rv += 1;
        let mut last = obj.clone();
        last["metadata"]["resourceVersion"] = json!(st.rv.to_string());
        self.emit(st, collection, "DELETED", last);
        // Background garbage collection of dependents.
        let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let dependents: Vec<(String, String, String)> = st
            .objects
            .iter()
            .flat_map(|(c, m)| {
                m.iter()
                    .map(move |((n, nm), o)| (c.clone(), n.clone(), nm.clone(), o))
            })
            .filter(|(_, _, _, o)| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| {
                        refs.iter().any(|r| r["uid"].as_str() == Some(uid.as_str()))
                    })
            })
            .map(|(c, n, nm, _)| (c, n, nm))
            .collect();
        for (c, n, nm) in dependents {
            self.delete_object(st, &c, &n, &nm);
        }
    }

    fn delete_object(
        &self,
        st: &mut State_,
        collection: &str,
        ns: &str,
        name: &str,
    ) -> Option<Value> {
        let obj = st
            .objects
            .get(collection)?
            .get(&(ns.to_string(), name.to_string()))?
            .clone();
        let has_finalizers = obj["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if obj["metadata"]["deletionTimestamp"].is_null() {
                let mut obj = obj;
                obj["metadata"]["deletionTimestamp"] = json!(now());
                return Some(self.put(st, collection, obj, "MODIFIED"));
            }
            return Some(obj);
        }
        self.remove(st, collection, ns, name);
        Some(obj)
    }

    /// Writes an object directly (test setup), as a create or an update.
    pub fn apply(&self, collection: &str, mut obj: Value) -> Value {
        let mut st = self.state.lock().unwrap();
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string();
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
        let existing = st
            .objects
            .get(collection)
            .and_then(|m| m.get(&(ns, name)))
            .cloned();
        let type_ = if existing.is_some() {
            "MODIFIED"
        } else {
            "ADDED"
        };
        if let Some(e) = &existing
            && self
                .kinds
                .get(collection)
                .is_some_and(|k| k.bump_generation)
            && e["spec"] != obj["spec"]
        {
            obj["metadata"]["generation"] =
                json!(e["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
        }
        if obj["metadata"]["uid"].is_null() {
            st.uid += 1;
            obj["metadata"]["uid"] = existing.map_or_else(
                || json!(format!("uid-{}", st.uid)),
                |e| e["metadata"]["uid"].clone(),
            );
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            obj["metadata"]["creationTimestamp"] = json!(now());
        }
        if let Some(k) = self.kinds.get(collection) {
            obj["apiVersion"] = json!(k.api_version);
            obj["kind"] = json!(k.kind);
        }
        let finalized = !obj["metadata"]["deletionTimestamp"].is_null()
            && obj["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
        let stored = self.put(&mut st, collection, obj, type_);
        if finalized {
            let ns = stored["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let name = stored["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string();
            self.remove(&mut st, collection, &ns, &name);
        }
        stored
    }

    /// Deletes an object directly (test action), honouring finalizers and GC.
    pub fn delete(&self, collection: &str, ns: &str, name: &str) {
        let mut st = self.state.lock().unwrap();
        self.delete_object(&mut st, collection, ns, name);
    }
}

fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

async fn handle(State(api): State<FakeApi>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let q = query(&req);
    if let Some(f) = api.fault.lock().unwrap().as_ref()
        && let Some((code, msg)) = f(method.as_str(), &path)
    {
        return status(code, "InternalError", &msg);
    }
    let Some(target) = parse_path(&path) else {
        return status(404, "NotFound", "unknown path");
    };
    let Some(kind) = api.kinds.get(target.collection.as_str()).cloned() else {
        return status(404, "NotFound", "unknown resource");
    };
    let body = axum::body::to_bytes(req.into_body(), 16 << 20)
        .await
        .unwrap_or_default();
    if method != Method::GET {
        api.state.lock().unwrap().writes.push(Write {
            method: method.to_string(),
            path: path.clone(),
        });
    } else if target.name.is_some() {
        api.state.lock().unwrap().reads.push(path.clone());
    }
    let ns = target.namespace.clone().unwrap_or_default();
    let is_put = method == Method::PUT;
    match (method, target.name.clone()) {
        (Method::GET, None) if q.get("watch").map(String::as_str) == Some("true") => {
            watch(api, target, q)
        }
        (Method::GET, None) => {
            let slow = api
                .knobs
                .lock()
                .unwrap()
                .slow_lists
                .get(&target.collection)
                .copied()
                .filter(|_| q.contains_key("limit"));
            let offset: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
            if let Some(delay) = slow
                && offset > 0
            {
                tokio::time::sleep(delay).await;
            }
            let st = api.state.lock().unwrap();
            let items: Vec<Value> = st
                .objects
                .get(&target.collection)
                .map(|m| {
                    m.iter()
                        .filter(|((n, _), _)| target.namespace.as_ref().is_none_or(|t| t == n))
                        .map(|(_, o)| o.clone())
                        .filter(|o| matches_selector(o, q.get("labelSelector")))
                        .collect()
                })
                .unwrap_or_default();
            let mut metadata = json!({"resourceVersion": st.rv.to_string()});
            let items: Vec<Value> = match slow {
                Some(_) if offset == 0 => {
                    metadata["continue"] = json!("1");
                    items.into_iter().take(1).collect()
                }
                Some(_) => items.into_iter().skip(offset).collect(),
                None => items,
            };
            axum::Json(
                json!({"kind": format!("{}List", kind.kind), "apiVersion": kind.api_version,
                              "metadata": metadata, "items": items}),
            )
            .into_response()
        }
        (Method::GET, Some(name)) => match api.get(&target.collection, &ns, &name) {
            Some(o) => axum::Json(o).into_response(),
            None => status(
                404,
                "NotFound",
                &format!("{} \"{name}\" not found", target.collection),
            ),
        },
        (Method::POST, None) => {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "invalid body");
            };
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            let mut st = api.state.lock().unwrap();
            if st
                .objects
                .get(&target.collection)
                .is_some_and(|m| m.contains_key(&(ns.clone(), name.clone())))
            {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", target.collection),
                );
            }
            st.uid += 1;
            obj["metadata"]["uid"] = json!(format!("uid-{}", st.uid));
            obj["metadata"]["namespace"] = json!(ns);
            obj["metadata"]["creationTimestamp"] = json!(now());
            if kind.bump_generation {
                obj["metadata"]["generation"] = json!(1);
            }
            if target.collection == "pods" {
                obj["status"] = json!({"phase": "Pending"});
            }
            let stored = api.put(&mut st, &target.collection, obj, "ADDED");
            (StatusCode::CREATED, axum::Json(stored)).into_response()
        }
        (Method::PUT | Method::PATCH, Some(name)) => {
            let mut st = api.state.lock().unwrap();
            let Some(current) = st
                .objects
                .get(&target.collection)
                .and_then(|m| m.get(&(ns.clone(), name.clone())))
                .cloned()
            else {
                return status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.collection),
                );
            };
            let Ok(input) = serde_json::from_slice::<Value>(&body) else {
                return status(400, "BadRequest", "invalid body");
            };
            let precondition = input["metadata"]["resourceVersion"]
                .as_str()
                .map(String::from);
            if let Some(rv) = precondition
                && Some(rv.as_str()) != current["metadata"]["resourceVersion"].as_str()
            {
                return status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version and try again",
                );
            }
            let mut next = if is_put {
                input.clone()
            } else {
                let mut n = current.clone();
                json_patch::merge(&mut n, &input);
                n
            };
            let on_status = target.subresource.as_deref() == Some("status");
            if on_status {
                let mut only_status = current.clone();
                only_status["status"] = next["status"].clone();
                next = only_status;
            } else if kind.status_subresource {
                next["status"] = current["status"].clone();
            }
            for key in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "generation",
                "deletionTimestamp",
            ] {
                next["metadata"][key] = current["metadata"][key].clone();
            }
            if kind.bump_generation && !on_status && next["spec"] != current["spec"] {
                next["metadata"]["generation"] =
                    json!(current["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
            }
            next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
            strip_nulls(&mut next);
            if next == current {
                return axum::Json(current).into_response();
            }
            let finalizers_gone = next["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|f| f.is_empty());
            let stored = api.put(&mut st, &target.collection, next, "MODIFIED");
            if finalizers_gone && !stored["metadata"]["deletionTimestamp"].is_null() {
                api.remove(&mut st, &target.collection, &ns, &name);
            }
            axum::Json(stored).into_response()
        }
        (Method::DELETE, Some(name)) => {
            let mut st = api.state.lock().unwrap();
            match api.delete_object(&mut st, &target.collection, &ns, &name) {
                Some(o) => axum::Json(o).into_response(),
                None => status(
                    404,
                    "NotFound",
                    &format!("{} \"{name}\" not found", target.collection),
                ),
            }
        }
        _ => status(405, "MethodNotAllowed", "not supported"),
    }
}

fn strip_nulls(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, v| !v.is_null());
        for v in m.values_mut() {
            strip_nulls(v);
        }
    }
}

fn watch(api: FakeApi, target: Target, q: HashMap<String, String>) -> Response {
    let from: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rx = api.tx.subscribe();
    let backlog: Vec<WatchEvent> = api
        .state
        .lock()
        .unwrap()
        .history
        .iter()
        .filter(|e| e.rv > from)
        .cloned()
        .collect();
    let last = backlog.last().map_or(from, |e| e.rv);
    let selector = q.get("labelSelector").cloned();
    let wanted = move |e: &WatchEvent| {
        if e.rv == CONTROL_RV {
            return e.collection == target.collection;
        }
        e.collection == target.collection
            && target
                .namespace
                .as_ref()
                .is_none_or(|ns| e.object["metadata"]["namespace"].as_str() == Some(ns))
            && matches_selector(&e.object, selector.as_ref())
    };
    let wanted2 = wanted.clone();
    let backlog = futures::stream::iter(backlog.into_iter().filter(move |e| wanted(e)));
    let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |e| {
        let keep = e.ok().filter(|e| e.rv > last && wanted2(e));
        async move { keep }
    });
    // A control frame (410) is the last one of its stream.
    let until_error = backlog.chain(live).scan(false, |ended, e| {
        let item = (!*ended).then(|| {
            *ended = e.type_ == "ERROR";
            e
        });
        async move { item }
    });
    let frames = until_error.map(|e| {
        let mut line =
            serde_json::to_vec(&json!({"type": e.type_, "object": e.object})).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(bytes::Bytes::from(line))
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from_stream(frames))
        .unwrap_or_else(|_| status(500, "InternalError", "watch"))
}
