//! The API server of the controller tests: devcluster in process ([`devcluster::InProcess`]),
//! without simulated nodes (the test plays the scheduler and the kubelet through the `binding`
//! and `status` subresources). The controller's client goes through one more layer,
//! [`lag_layer`], for what a loaded real server shows and devcluster does not simulate: a watch
//! falling behind, watches ended with `410 Expired`, a slow paginated relist. The controller's
//! requests carry [`CONTROLLER_AGENT`], so that the test's own are not counted as its.

#![allow(dead_code)] // each suite uses a different subset

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::Response;
use devcluster::observe::{FaultConfig, FaultRule, RequestKey, parse_request_info};
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::harness::{NS, wait_for_async};

/// The `User-Agent` of the controller's requests.
pub const CONTROLLER_AGENT: &str = "sandbox-controller-test";

/// API path prefix and stored resource name of each collection the tests touch.
fn resource(collection: &str) -> (&'static str, String) {
    let group = |prefix, group: &str| (prefix, format!("{collection}.{group}"));
    match collection {
        "sandboxes" => group("/apis/agents.x-k8s.io/v1beta1", "agents.x-k8s.io"),
        "sandboxwarmpools" | "sandboxclaims" => group(
            "/apis/extensions.agents.x-k8s.io/v1beta1",
            "extensions.agents.x-k8s.io",
        ),
        "deployments" => group("/apis/apps/v1", "apps"),
        _ => ("/api/v1", collection.to_string()),
    }
}

fn path(collection: &str, ns: &str, name: Option<&str>) -> String {
    let (prefix, _) = resource(collection);
    match name {
        Some(name) => format!("{prefix}/namespaces/{ns}/{collection}/{name}"),
        None => format!("{prefix}/namespaces/{ns}/{collection}"),
    }
}

pub struct Cluster {
    server: devcluster::InProcess,
    /// The test's own client (no `User-Agent`).
    client: kube::Client,
    lag: Arc<Lag>,
}

impl Cluster {
    /// A fresh server with the Sandbox CRD established.
    pub async fn start() -> Cluster {
        let config = devcluster::Config {
            node_agent: false,
            ..devcluster::Config::ephemeral()
        };
        let server = devcluster::InProcess::start(&config).expect("devcluster in process");
        let client = server.client();
        let cluster = Cluster {
            server,
            client,
            lag: Arc::default(),
        };
        cluster.install(api_types::core_crds()).await;
        cluster
    }

    /// Installs the extension CRDs (SandboxTemplate, SandboxWarmPool, SandboxClaim), for
    /// tests whose Sandboxes have such owners.
    pub async fn install_extension_crds(&self) {
        self.install(api_types::extension_crds()).await;
    }

    async fn install(&self, crds: Vec<CustomResourceDefinition>) {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        for crd in crds {
            let name = crd.metadata.name.clone().expect("a CRD has a name");
            api.create(&PostParams::default(), &crd)
                .await
                .expect("CRD created");
            wait_for_async(&format!("CRD {name} established"), || async {
                let crd = api.get(&name).await.ok()?;
                crd.status?
                    .conditions?
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(())
            })
            .await;
        }
    }

    /// A client for the controller: through [`lag_layer`], with [`CONTROLLER_AGENT`].
    pub fn controller_client(&self) -> kube::Client {
        let service = self
            .server
            .service()
            .layer(axum::middleware::from_fn_with_state(
                self.lag.clone(),
                lag_layer,
            ));
        kube::Client::new(service, "default")
    }

    /// The stored object, read without a request.
    pub fn get(&self, collection: &str, ns: &str, name: &str) -> Option<Value> {
        self.server.get(&resource(collection).1, ns, name)
    }

    /// Every stored object of `collection`, read without a request.
    pub fn list(&self, collection: &str) -> Vec<Value> {
        self.server.list(&resource(collection).1)
    }

    async fn send(&self, method: Method, uri: &str, content_type: &str, body: &Value) -> Value {
        let request = axum::http::Request::builder()
            .method(method.clone())
            .uri(uri)
            .header(header::CONTENT_TYPE, content_type)
            .body(serde_json::to_vec(body).expect("JSON"))
            .expect("request");
        self.client
            .request::<Value>(request)
            .await
            .unwrap_or_else(|e| panic!("{method} {uri}: {e}"))
    }

    /// Creates `obj` or, when it exists, replaces its metadata and spec (as a user's `PUT` at
    /// the current resourceVersion; the status is the controller's and the kubelet's).
    pub async fn apply(&self, collection: &str, mut obj: Value) -> Value {
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or(NS)
            .to_string();
        let name = obj["metadata"]["name"]
            .as_str()
            .expect("a name")
            .to_string();
        let json = "application/json";
        match self.get(collection, &ns, &name) {
            None => {
                self.send(Method::POST, &path(collection, &ns, None), json, &obj)
                    .await
            }
            Some(current) => {
                obj["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
                let uri = path(collection, &ns, Some(&name));
                self.send(Method::PUT, &uri, json, &obj).await
            }
        }
    }

    /// Deletes an object (background propagation: the garbage collector takes its dependents).
    pub async fn delete(&self, collection: &str, ns: &str, name: &str) {
        let uri = path(collection, ns, Some(name));
        self.send(Method::DELETE, &uri, "application/json", &json!({}))
            .await;
    }

    /// What the scheduler does: binds Pod `name` to `node` (sets `spec.nodeName` and the
    /// `PodScheduled` condition).
    pub async fn bind_pod(&self, name: &str, node: &str) {
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": NS},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let uri = format!("{}/binding", path("pods", NS, Some(name)));
        self.send(Method::POST, &uri, "application/json", &binding)
            .await;
    }

    /// What the kubelet does: merges `status` into Pod `name`'s status (lists are replaced).
    pub async fn patch_pod_status(&self, name: &str, status: Value) -> Value {
        let uri = format!("{}/status", path("pods", NS, Some(name)));
        let patch = json!({ "status": status });
        self.send(Method::PATCH, &uri, "application/merge-patch+json", &patch)
            .await
    }

    /// devcluster's request counts of the controller's requests.
    fn controller_counts(&self) -> impl Iterator<Item = (RequestKey, u64)> {
        let counts = self.server.observer().counts();
        counts
            .into_iter()
            .filter(|(key, _)| key.user_agent == CONTROLLER_AGENT)
    }

    /// The controller's writes (create, update, patch, delete) apart from Events, as
    /// `METHOD resource[/subresource]` -> count.
    pub fn writes(&self) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for (key, count) in self.controller_counts() {
            let method = match key.verb.as_str() {
                "create" => "POST",
                "update" => "PUT",
                "patch" => "PATCH",
                "delete" => "DELETE",
                _ => continue,
            };
            if key.resource == "events" {
                continue;
            }
            let sub = if key.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", key.subresource)
            };
            *out.entry(format!("{method} {}{sub}", key.resource))
                .or_default() += count as usize;
        }
        out
    }

    /// The controller's writes to `resource` (any subresource) apart from Events.
    pub fn writes_to(&self, resource: &str) -> usize {
        self.writes()
            .iter()
            .filter(|(k, _)| {
                let target = k.split_once(' ').map_or("", |(_, t)| t);
                target.split('/').next() == Some(resource)
            })
            .map(|(_, v)| v)
            .sum()
    }

    /// The controller's single-object reads (GET by name), as `resource` -> count.
    pub fn reads(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (key, count) in self.controller_counts().filter(|(k, _)| k.verb == "get") {
            *out.entry(key.resource).or_default() += count;
        }
        out
    }

    /// The controller's writes to Events.
    pub fn event_writes(&self) -> u64 {
        self.controller_counts()
            .filter(|(k, _)| {
                k.resource == "events"
                    && matches!(k.verb.as_str(), "create" | "update" | "patch" | "delete")
            })
            .map(|(_, c)| c)
            .sum()
    }

    /// Fails every `verb` request on `resource` with `code` and `message` (devcluster's fault
    /// injection; the test's own requests are refused too).
    pub fn reject(&self, verb: &str, resource: &str, code: u16, message: &str) {
        let rule = FaultRule {
            verbs: vec![verb.to_string()],
            resources: vec![resource.to_string()],
            error_rate: 1.0,
            error_code: code,
            message: Some(message.to_string()),
            ..FaultRule::default()
        };
        self.set_fault(rule);
    }

    /// Makes `rule` devcluster's only fault rule.
    fn set_fault(&self, rule: FaultRule) {
        let faults = FaultConfig {
            rules: vec![rule],
            ..FaultConfig::default()
        };
        self.server
            .observer()
            .set_faults(faults)
            .expect("valid faults");
    }

    /// The open and future watches of every `collections` entry (e.g. `pods`) hold each event
    /// for `delay` before sending it (devcluster's `event_delay`): a watcher falling behind, as
    /// kube-apiserver's under load. Replaces the fault rules in place.
    pub fn delay_watch_events(&self, collections: &[&str], delay: Duration) {
        let rule = FaultRule {
            verbs: vec!["watch".to_string()],
            resources: collections.iter().map(|c| c.to_string()).collect(),
            event_delay: delay,
            ..FaultRule::default()
        };
        self.set_fault(rule);
    }

    /// The controller's requests answered with `code`, as `verb resource` -> count (e.g.
    /// `create pods` -> 1 for a create refused with 409).
    pub fn answered_with(&self, code: u16) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for (key, count) in self.controller_counts().filter(|(k, _)| k.code == code) {
            *out.entry(format!("{} {}", key.verb, key.resource))
                .or_default() += count;
        }
        out
    }

    pub fn clear_faults(&self) {
        self.server
            .observer()
            .set_faults(FaultConfig::default())
            .expect("no faults");
    }

    /// The controller's open and future watches of `collection` deliver nothing (the events
    /// are stored and listed), like a watcher that fell behind.
    pub fn pause_watches(&self, collection: &str) {
        self.lag.pause(collection);
    }

    /// Ends the controller's open watches of `collection` with an in-stream `410 Expired` (it
    /// must relist), and resumes delivery.
    pub fn expire_watches(&self, collection: &str) {
        self.lag.expire(collection);
    }

    /// The controller's paginated lists of `collection` return one item first and the next
    /// page only after `delay` (a large relist in progress).
    pub fn slow_lists(&self, collection: &str, delay: Duration) {
        self.lag
            .lock()
            .slow_lists
            .insert(collection.to_string(), delay);
    }

    /// Pauses the controller's watches of `collection` as soon as it sends a `verb` request on
    /// `resource` (e.g. its first Pod create).
    pub fn pause_watches_after(&self, verb: &str, resource: &str, collection: &str) {
        self.lag.lock().pause_after = Some((
            verb.to_string(),
            resource.to_string(),
            collection.to_string(),
        ));
    }

    pub fn clear_pause_after(&self) {
        self.lag.lock().pause_after = None;
    }
}

/// What [`lag_layer`] does to the controller's requests.
#[derive(Default)]
struct Lag(Mutex<LagState>);

#[derive(Default)]
struct LagState {
    paused: HashSet<String>,
    /// Cancelled by [`Lag::expire`]: each watch holds the token of its collection at its start.
    expiry: HashMap<String, CancellationToken>,
    slow_lists: HashMap<String, Duration>,
    /// (verb, resource, collection): pause `collection` when such a request arrives.
    pause_after: Option<(String, String, String)>,
}

impl Lag {
    fn lock(&self) -> std::sync::MutexGuard<'_, LagState> {
        self.0.lock().expect("lag state")
    }

    fn pause(&self, collection: &str) {
        self.lock().paused.insert(collection.to_string());
    }

    fn paused(&self, collection: &str) -> bool {
        self.lock().paused.contains(collection)
    }

    fn expire(&self, collection: &str) {
        let mut state = self.lock();
        state.paused.remove(collection);
        if let Some(token) = state.expiry.remove(collection) {
            token.cancel();
        }
    }

    fn expiry(&self, collection: &str) -> CancellationToken {
        self.lock()
            .expiry
            .entry(collection.to_string())
            .or_default()
            .clone()
    }
}

/// The frame a watcher that fell too far behind gets before its stream ends.
fn expired_frame() -> bytes::Bytes {
    let status = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "metadata": {}, "status": "Failure", "code": 410, "reason": "Expired",
        "message": "the watcher fell behind; resume with a new list"}});
    let mut line = serde_json::to_vec(&status).expect("JSON");
    line.push(b'\n');
    bytes::Bytes::from(line)
}

async fn lag_layer(State(lag): State<Arc<Lag>>, mut request: Request, next: Next) -> Response {
    request.headers_mut().insert(
        header::USER_AGENT,
        HeaderValue::from_static(CONTROLLER_AGENT),
    );
    let query = request.uri().query().unwrap_or("").to_string();
    let info = parse_request_info(request.method(), request.uri().path(), Some(&query));
    let collection = info.resource.clone();
    let pause_now = lag
        .lock()
        .pause_after
        .as_ref()
        .filter(|(verb, resource, _)| *verb == info.verb && *resource == collection)
        .map(|(_, _, paused)| paused.clone());
    if let Some(paused) = pause_now {
        lag.pause(&paused);
    }
    let slow = lag.lock().slow_lists.get(&collection).copied();
    let paginated = query.split('&').any(|kv| kv.starts_with("limit="));
    if info.verb == "list"
        && paginated
        && let Some(delay) = slow
    {
        if query.split('&').any(|kv| kv.starts_with("continue=")) {
            tokio::time::sleep(delay).await;
        } else {
            // The first page holds one item; devcluster hands out the continue token.
            let query: Vec<&str> = query
                .split('&')
                .map(|kv| {
                    if kv.starts_with("limit=") {
                        "limit=1"
                    } else {
                        kv
                    }
                })
                .collect();
            let uri = format!("{}?{}", request.uri().path(), query.join("&"));
            *request.uri_mut() = uri.parse().expect("URI");
        }
    }
    if info.verb != "watch" {
        return next.run(request).await;
    }
    let expiry = lag.expiry(&collection);
    let response = next.run(request).await;
    let (parts, body) = response.into_parts();
    // Each body chunk holds whole frames: a paused watch drops whole chunks.
    let frames = body
        .into_data_stream()
        .filter(move |_| std::future::ready(!lag.paused(&collection)))
        .take_until(expiry.clone().cancelled_owned());
    let ending = futures::stream::iter(std::iter::once(())).filter_map(move |()| {
        std::future::ready(expiry.is_cancelled().then(|| Ok(expired_frame())))
    });
    Response::from_parts(parts, Body::from_stream(frames.chain(ending)))
}
