//! The load the benchmark drives with its own client: CRDs, templates, pools, claims and bare
//! Sandboxes, created open-loop at a rate or closed-loop as fast as they are taken, and a watch
//! that records when each object became Ready.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::error::BenchError;

/// Namespace every benchmark object lives in.
pub const NAMESPACE: &str = "default";

/// Wall-clock seconds since the Unix epoch (all processes run on this machine, so the
/// controllers' RFC 3339 annotations and this clock are comparable).
pub fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Parses an RFC 3339 timestamp (as the controllers write annotations) to epoch seconds.
pub fn parse_rfc3339_s(text: &str) -> Option<f64> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    Some(ts.as_nanosecond() as f64 / 1e9)
}

/// The four kinds the benchmark creates or watches.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Sandbox,
    Template,
    Pool,
    Claim,
}

impl Kind {
    pub fn resource(self) -> ApiResource {
        match self {
            Kind::Sandbox => ApiResource::erase::<api_types::Sandbox>(&()),
            Kind::Template => ApiResource::erase::<api_types::SandboxTemplate>(&()),
            Kind::Pool => ApiResource::erase::<api_types::SandboxWarmPool>(&()),
            Kind::Claim => ApiResource::erase::<api_types::SandboxClaim>(&()),
        }
    }

    pub fn api(self, client: &kube::Client) -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), NAMESPACE, &self.resource())
    }
}

/// Creates the agent-sandbox CRDs (core and extensions) from the Rust types.
pub async fn install_crds(client: &kube::Client) -> Result<(), BenchError> {
    let crds = api_types::core_crds()
        .into_iter()
        .chain(api_types::extension_crds())
        .collect();
    install_crd_list(client, crds).await
}

/// Creates `crds` (the agent-sandbox ones) and waits until their kinds are served.
pub async fn install_crd_list(
    client: &kube::Client,
    crds: Vec<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >,
) -> Result<(), BenchError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            // Created by an earlier attempt whose check below came too early (a real
            // kube-apiserver serves a CRD's kinds a moment after the create returns).
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(BenchError::kube(format!("creating CRD {name}"), e)),
        }
    }
    // devcluster serves a CRD's kinds once the create returns, kube-apiserver once the CRD is
    // Established, a moment later: wait until every kind answers.
    let deadline = Instant::now() + Duration::from_secs(60);
    for kind in [Kind::Sandbox, Kind::Template, Kind::Pool, Kind::Claim] {
        loop {
            match kind.api(client).list(&Default::default()).await {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => {
                    return Err(BenchError::kube(
                        format!(
                            "listing {} 60 s after installing the CRDs",
                            kind.resource().plural
                        ),
                        e,
                    ));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
    Ok(())
}

fn object(kind: Kind, body: Value) -> Result<DynamicObject, BenchError> {
    let resource = kind.resource();
    let mut body = body;
    body["apiVersion"] = json!(resource.api_version);
    body["kind"] = json!(resource.kind);
    serde_json::from_value(body).map_err(BenchError::Json)
}

fn pod_template() -> Value {
    json!({
        "spec": {
            "containers": [{
                "name": "agent",
                "image": "alpine:3.20",
                "command": ["sleep", "28800"],
            }],
            "terminationGracePeriodSeconds": 1,
        }
    })
}

/// Creates one object of `kind` from `body` (its `metadata` and `spec`).
async fn create_object(client: &kube::Client, kind: Kind, body: Value) -> Result<(), BenchError> {
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let obj = object(kind, body)?;
    kind.api(client)
        .create(&PostParams::default(), &obj)
        .await
        .map_err(|e| BenchError::kube(format!("creating {} {name}", kind.resource().kind), e))?;
    Ok(())
}

/// Creates a SandboxTemplate `name`.
pub async fn create_template(client: &kube::Client, name: &str) -> Result<(), BenchError> {
    let body = json!({"metadata": {"name": name}, "spec": {"podTemplate": pod_template()}});
    create_object(client, Kind::Template, body).await
}

/// Creates a SandboxWarmPool `name` of `replicas` using template `template`.
pub async fn create_pool(
    client: &kube::Client,
    name: &str,
    template: &str,
    replicas: u32,
) -> Result<(), BenchError> {
    let body = json!({"metadata": {"name": name},
                      "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}}});
    create_object(client, Kind::Pool, body).await
}

/// Sets `spec.replicas` of pool `name`.
pub async fn scale_pool(
    client: &kube::Client,
    name: &str,
    replicas: u32,
) -> Result<(), BenchError> {
    let patch = json!({"spec": {"replicas": replicas}});
    Kind::Pool
        .api(client)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map_err(|e| BenchError::kube(format!("scaling SandboxWarmPool {name}"), e))?;
    Ok(())
}

/// Creates a SandboxClaim `name` against pool `pool`.
pub async fn create_claim(client: &kube::Client, name: &str, pool: &str) -> Result<(), BenchError> {
    let body = json!({"metadata": {"name": name}, "spec": {"warmPoolRef": {"name": pool}}});
    create_object(client, Kind::Claim, body).await
}

/// Creates a bare (core) Sandbox `name`.
pub async fn create_sandbox(client: &kube::Client, name: &str) -> Result<(), BenchError> {
    let body = json!({"metadata": {"name": name}, "spec": {"podTemplate": pod_template()}});
    create_object(client, Kind::Sandbox, body).await
}

/// `status.readyReplicas` of pool `name` (0 when unset).
pub async fn pool_ready_replicas(client: &kube::Client, name: &str) -> Result<i64, BenchError> {
    let pool = Kind::Pool
        .api(client)
        .get(name)
        .await
        .map_err(|e| BenchError::kube(format!("reading SandboxWarmPool {name}"), e))?;
    Ok(pool.data["status"]["readyReplicas"].as_i64().unwrap_or(0))
}

/// What the watch knows about one object.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// When this client created it (claims and sandboxes it made), epoch seconds.
    pub created_at: Option<f64>,
    /// When the watch first delivered it with `Ready=True`, epoch seconds.
    pub ready_seen_at: Option<f64>,
    /// The claim annotation `controller-first-observed-at`, epoch seconds.
    pub controller_first_observed_at: Option<f64>,
    /// The claim annotation `claim-first-ready-at`, epoch seconds.
    pub controller_first_ready_at: Option<f64>,
    /// A claim's `status.sandbox.name`.
    pub sandbox_name: Option<String>,
    /// A Sandbox carrying the warm-pool membership label (not yet adopted, not terminating).
    pub pool_member: bool,
    /// `Ready=True` in the latest state.
    pub ready_now: bool,
}

#[derive(Default)]
struct WatchState {
    objects: HashMap<String, Observed>,
    pool_members: usize,
    max_pool_members: usize,
    ready_now: usize,
    ready_members: usize,
    /// Every object in the order it was first seen Ready, with that moment (epoch seconds).
    ready_log: Vec<(String, f64)>,
}

/// A watch over one kind in [`NAMESPACE`], recording Ready transitions and claim annotations.
/// Stops when dropped.
pub struct ReadyWatch {
    state: Arc<Mutex<WatchState>>,
    ever_ready: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReadyWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn is_ready(object: &DynamicObject) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

impl ReadyWatch {
    /// Starts watching `kind`; returns once the initial list has been received.
    pub async fn start(client: &kube::Client, kind: Kind) -> Result<ReadyWatch, BenchError> {
        let state = Arc::new(Mutex::new(WatchState::default()));
        let ever_ready = Arc::new(AtomicUsize::new(0));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
        let api = kind.api(client);
        let task_state = state.clone();
        let task_ready = ever_ready.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = stream.next().await {
                let Ok(event) = event else {
                    // The watcher retries by itself; back off a little on errors.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let now = now_s();
                match event {
                    watcher::Event::Apply(object) | watcher::Event::InitApply(object) => {
                        record(&task_state, &task_ready, &object, now)
                    }
                    watcher::Event::Delete(object) => forget(&task_state, &object),
                    watcher::Event::InitDone => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Init => {}
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), synced_rx)
            .await
            .map_err(|_| BenchError::Timeout {
                what: "the benchmark's watch to list its objects".into(),
                seconds: 60,
            })?
            .map_err(|_| BenchError::Unavailable("the benchmark's watch stopped".into()))?;
        Ok(ReadyWatch {
            state,
            ever_ready,
            task,
        })
    }

    /// Notes that this client created `name` at `at` (epoch seconds).
    pub fn mark_created(&self, name: &str, at: f64) {
        if let Ok(mut state) = self.state.lock() {
            let entry = state.objects.entry(name.to_string()).or_default();
            entry.created_at.get_or_insert(at);
        }
    }

    /// Objects that were ever seen Ready.
    pub fn ever_ready(&self) -> usize {
        self.ever_ready.load(Ordering::Relaxed)
    }

    /// Objects Ready right now.
    pub fn ready_now(&self) -> usize {
        self.state.lock().map(|s| s.ready_now).unwrap_or(0)
    }

    /// Sandboxes that are pool members and Ready right now.
    pub fn ready_members(&self) -> usize {
        self.state.lock().map(|s| s.ready_members).unwrap_or(0)
    }

    /// Sandboxes currently carrying the warm-pool label, and the most seen at once.
    pub fn pool_members(&self) -> (usize, usize) {
        self.state
            .lock()
            .map(|s| (s.pool_members, s.max_pool_members))
            .unwrap_or((0, 0))
    }

    /// Restarts the "most pool members at once" figure from the current count.
    pub fn reset_max_pool_members(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.max_pool_members = s.pool_members;
        }
    }

    /// The objects first seen Ready after the first `cursor` of them, in that order, with the
    /// moment each was seen Ready (epoch seconds). Pass the count seen so far as `cursor`.
    pub fn ready_since(&self, cursor: usize) -> Vec<(String, f64)> {
        self.state
            .lock()
            .map(|s| s.ready_log.get(cursor..).unwrap_or_default().to_vec())
            .unwrap_or_default()
    }

    /// A copy of what is known about the objects whose name starts with `prefix`.
    pub fn snapshot(&self, prefix: &str) -> Vec<(String, Observed)> {
        self.state
            .lock()
            .map(|s| {
                s.objects
                    .iter()
                    .filter(|(name, _)| name.starts_with(prefix))
                    .map(|(name, o)| (name.clone(), o.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Waits until `done(ever_ready)` holds, ticking `progress`; fails after `timeout`.
    pub async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        progress: &indicatif::ProgressBar,
        done: impl Fn(&ReadyWatch) -> bool,
    ) -> Result<(), BenchError> {
        let deadline = Instant::now() + timeout;
        loop {
            progress.set_position(self.ever_ready() as u64);
            if done(self) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout {
                    what: what.to_string(),
                    seconds: timeout.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn name_of(object: &DynamicObject) -> String {
    object.metadata.name.clone().unwrap_or_default()
}

fn record(state: &Mutex<WatchState>, ever_ready: &AtomicUsize, object: &DynamicObject, now: f64) {
    let Some(name) = object.metadata.name.clone() else {
        return;
    };
    let ready = is_ready(object);
    let annotations = object.metadata.annotations.clone().unwrap_or_default();
    let labels = object.metadata.labels.clone().unwrap_or_default();
    let member = labels.contains_key(api_types::keys::SANDBOX_WARM_POOL_LABEL)
        && object.metadata.deletion_timestamp.is_none();
    let Ok(mut state) = state.lock() else {
        return;
    };
    let state = &mut *state;
    let entry = state.objects.entry(name).or_default();
    let was_ready_member = entry.ready_now && entry.pool_member;
    if ready && entry.ready_seen_at.is_none() {
        entry.ready_seen_at = Some(now);
        ever_ready.fetch_add(1, Ordering::Relaxed);
        state.ready_log.push((name_of(object), now));
    }
    if ready != entry.ready_now {
        if ready {
            state.ready_now += 1;
        } else {
            state.ready_now = state.ready_now.saturating_sub(1);
        }
        entry.ready_now = ready;
    }
    if member != entry.pool_member {
        if member {
            state.pool_members += 1;
        } else {
            state.pool_members = state.pool_members.saturating_sub(1);
        }
        entry.pool_member = member;
        state.max_pool_members = state.max_pool_members.max(state.pool_members);
    }
    let is_ready_member = entry.ready_now && entry.pool_member;
    if is_ready_member != was_ready_member {
        if is_ready_member {
            state.ready_members += 1;
        } else {
            state.ready_members = state.ready_members.saturating_sub(1);
        }
    }
    if entry.controller_first_observed_at.is_none() {
        entry.controller_first_observed_at = annotations
            .get(api_types::keys::CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION)
            .and_then(|v| parse_rfc3339_s(v));
    }
    if entry.controller_first_ready_at.is_none() {
        entry.controller_first_ready_at = annotations
            .get(api_types::keys::CLAIM_FIRST_READY_AT_ANNOTATION)
            .and_then(|v| parse_rfc3339_s(v));
    }
    if let Some(sandbox) = object.data["status"]["sandbox"]["name"].as_str()
        && !sandbox.is_empty()
    {
        entry.sandbox_name = Some(sandbox.to_string());
    }
}

fn forget(state: &Mutex<WatchState>, object: &DynamicObject) {
    let Some(name) = object.metadata.name.as_deref() else {
        return;
    };
    let Ok(mut state) = state.lock() else {
        return;
    };
    if let Some(entry) = state.objects.get_mut(name) {
        let (was_ready, was_member) = (entry.ready_now, entry.pool_member);
        entry.ready_now = false;
        entry.pool_member = false;
        if was_ready && was_member {
            state.ready_members = state.ready_members.saturating_sub(1);
        }
        if was_ready {
            state.ready_now = state.ready_now.saturating_sub(1);
        }
        if was_member {
            state.pool_members = state.pool_members.saturating_sub(1);
        }
    }
}

/// Outcome of a batch of creates.
#[derive(Debug, Default, Clone)]
pub struct CreateOutcome {
    pub created: usize,
    pub failed: usize,
    pub first_error: Option<String>,
    /// Wall time from the first create's start to the last create's answer.
    pub elapsed: Duration,
}

impl CreateOutcome {
    /// Counts one create's result.
    fn record(&mut self, result: Result<(), impl std::fmt::Display>) {
        match result {
            Ok(()) => self.created += 1,
            Err(e) => {
                self.failed += 1;
                self.first_error.get_or_insert(e.to_string());
            }
        }
    }

    /// Adds another writer's counts (keeping the first error seen).
    fn merge(&mut self, other: CreateOutcome) {
        self.created += other.created;
        self.failed += other.failed;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
    }
}

/// Creates `count` objects named `{prefix}{i}` open-loop at `rate` per second (all at once
/// when `rate` is `None`), recording each creation time in `watch`. `make` performs one create.
pub async fn create_open_loop<F, Fut>(
    watch: &ReadyWatch,
    prefix: &str,
    count: usize,
    rate: Option<f64>,
    make: F,
) -> CreateOutcome
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), BenchError>> + Send + 'static,
{
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        if let Some(rate) = rate.filter(|r| *r > 0.0) {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            tokio::time::sleep_until(due.into()).await;
        }
        let name = format!("{prefix}{i}");
        watch.mark_created(&name, now_s());
        tasks.push(tokio::spawn(make(name)));
    }
    collect(tasks, start).await
}

/// Creates objects named `{prefix}{i}` from `writers` concurrent loops until `duration` has
/// passed, never letting more than `max_pending` of them be created-but-not-Ready.
pub async fn create_closed_loop<F, Fut>(
    watch: Arc<ReadyWatch>,
    prefix: &str,
    writers: usize,
    duration: Duration,
    max_pending: usize,
    make: F,
) -> CreateOutcome
where
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BenchError>> + Send + 'static,
{
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..writers {
        let (watch, next, make, prefix) = (
            watch.clone(),
            next.clone(),
            make.clone(),
            prefix.to_string(),
        );
        tasks.push(tokio::spawn(async move {
            let mut outcome = CreateOutcome::default();
            while start.elapsed() < duration {
                let issued = next.load(Ordering::Relaxed);
                if issued.saturating_sub(watch.ever_ready()) >= max_pending {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                let name = format!("{prefix}{i}");
                watch.mark_created(&name, now_s());
                outcome.record(make(name).await);
            }
            Ok::<CreateOutcome, BenchError>(outcome)
        }));
    }
    let mut total = CreateOutcome::default();
    for task in tasks {
        if let Ok(Ok(outcome)) = task.await {
            total.merge(outcome);
        }
    }
    total.elapsed = start.elapsed();
    total
}

/// Awaits spawned creates and counts their outcomes (a panicked task counts as failed).
pub async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<(), BenchError>>>,
    start: Instant,
) -> CreateOutcome {
    let mut outcome = CreateOutcome::default();
    for task in tasks {
        match task.await {
            Ok(result) => outcome.record(result),
            Err(e) => outcome.record(Err(e)),
        }
    }
    outcome.elapsed = start.elapsed();
    outcome
}

/// Creates objects with `writers` concurrent loops, `count` in all, and returns the outcome
/// (used for bulk set-up such as 10,000 Sandboxes).
pub async fn create_bounded<F, Fut>(count: usize, writers: usize, make: F) -> CreateOutcome
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), BenchError>> + Send + 'static,
{
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..writers.max(1) {
        let (next, make) = (next.clone(), make.clone());
        tasks.push(tokio::spawn(async move {
            let mut outcome = CreateOutcome::default();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count {
                    break;
                }
                outcome.record(make(i).await);
            }
            outcome
        }));
    }
    let mut total = CreateOutcome::default();
    for task in tasks {
        if let Ok(outcome) = task.await {
            total.merge(outcome);
        }
    }
    total.elapsed = start.elapsed();
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_with_nanoseconds_parses() {
        let t = parse_rfc3339_s("2026-01-02T03:04:05.123456789Z").unwrap();
        assert!((t - 1_767_323_045.123_456_7).abs() < 1e-6);
        assert!(parse_rfc3339_s("yesterday").is_none());
    }
}
