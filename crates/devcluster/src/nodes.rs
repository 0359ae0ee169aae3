//! Simulated nodes: a scheduler, kubelets and a volume binder that make pods and claims live.
//!
//! The agent is an ordinary API client (kube-runtime watchers and reflector stores of pods and
//! PVCs, each with a first come, first served work loop of its own, `work_loop.rs`), so it
//! exercises the server exactly as a real scheduler and
//! kubelet would (a devcluster hands it a client that calls the server's router in process,
//! without a socket):
//!
//! - a pod without `spec.nodeName` (and no other `schedulerName`) is bound to one of
//!   `devcluster-node-0..N` with `POST pods/NAME/binding`, or, for the configured fraction, gets
//!   `PodScheduled=False` with reason `Unschedulable` and stays Pending;
//! - after the startup delay, a pod bound to one of our nodes gets its status (strategic merge
//!   patch on `pods/NAME/status`, field manager `kubelet`): `Running` with `Initialized`,
//!   `ContainersReady`, `Ready`, `PodScheduled` (and `PodReadyToStartContainers`), `podIP(s)` from
//!   `127.2.0.0` upward, `hostIP(s)` `127.0.1.x`, `startTime`, container statuses; or, for the
//!   configured failure fraction, `Failed` / `CrashLoopBackOff`;
//! - a started pod's containers whose command ends (`program`, a small documented grammar)
//!   exit with its code at its time and are restarted by the pod's `restartPolicy` with the
//!   kubelet's back-off; when every container is over, the phase becomes `Succeeded` or
//!   `Failed` (`kubelet`; both modules are the `pod-lifecycle` crate's, shared with the real
//!   cluster's pod finisher);
//! - a terminating pod (`deletionTimestamp` set) stops in the kubelet's order, counted from the
//!   deletion request (the stamp's whole seconds, or when the agent first saw it if later):
//!   `preStop` hooks, TERM (the container exits after the termination delay), KILL at the end of
//!   the grace period; its status reports the containers as they stop and then the terminal
//!   phase, then it is deleted with `gracePeriodSeconds=0` and a uid precondition;
//! - a claim that is not `Bound` gets `status.phase: Bound`, its requested capacity and access
//!   modes (merge patch on `persistentvolumeclaims/NAME/status`).
//!
//! Decisions are per pod, from the seed and the pod's uid (`fate.rs`), so a restarted agent
//! repeats them; everything is re-derived from a fresh list. Failed API calls are retried per
//! object with exponential back-off (100 ms doubling to 5 s).
//!
//! Not simulated: probes (containers are ready as soon as they start), images, resources and
//! node capacity, Node objects, Events, evictions, `WaitForFirstConsumer` volume binding,
//! PersistentVolume objects.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt as _};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

mod config;
mod fate;
mod ip_pool;
mod plan;
pub mod status;

// The containers' lifecycle is shared with the real cluster's pod finisher (`realcluster`).
pub use pod_lifecycle::{kubelet, program};
mod work_loop;

use work_loop::Next;

pub use config::{Delay, FailureMode, MAX_NODES, NodeConfig, NodeConfigError, parse_duration};
pub use fate::{PodFate, pod_fate};
pub use ip_pool::IpPool;
pub use plan::{DEFAULT_SCHEDULER, Memory, PodStep, next_step};

/// Field manager of the scheduler's writes (binding, `Unschedulable`).
pub const SCHEDULER_MANAGER: &str = "kube-scheduler";
/// Field manager of the kubelet's writes (pod status, deletion).
pub const KUBELET_MANAGER: &str = "kubelet";
/// Field manager of the volume binder's writes.
pub const VOLUME_BINDER_MANAGER: &str = "persistentvolume-binder";

const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// A failed step of the agent (retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum NodeAgentError {
    #[error("{action} {object}: {source}")]
    Api {
        action: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("no free pod IP left in 127.2.0.0-127.255.255.254")]
    PodIpsExhausted,
}

type ContainerStarts = HashMap<(String, i32), k8s_openapi::jiff::Timestamp>;

struct AgentState {
    client: kube::Client,
    cfg: NodeConfig,
    pool: Mutex<IpPool>,
    /// When the agent first knew each pod (by uid) bound to one of its nodes.
    bound_since: Mutex<HashMap<String, Instant>>,
    /// When the agent first saw each pod (by uid) terminating.
    terminating_since: Mutex<HashMap<String, k8s_openapi::jiff::Timestamp>>,
    /// When each container's current run started, precisely (by pod uid, then container name
    /// and restart count; the status has whole seconds).
    container_starts: Mutex<HashMap<String, ContainerStarts>>,
    /// Consecutive failures per object, for back-off.
    failures: Mutex<HashMap<String, u32>>,
}

/// Starts the simulated nodes; they run until `shutdown` is cancelled.
///
/// An invalid configuration is logged as an error and the task ends at once (validate with
/// [`NodeConfig::validate`] first to report it to a user).
pub fn spawn_node_agent(
    client: kube::Client,
    cfg: NodeConfig,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(err) = cfg.validate() {
            tracing::error!(error = %err, "simulated nodes not started: invalid configuration");
            return;
        }
        let state = Arc::new(AgentState {
            client: client.clone(),
            cfg: cfg.clone(),
            pool: Mutex::new(IpPool::default()),
            bound_since: Mutex::new(HashMap::new()),
            terminating_since: Mutex::new(HashMap::new()),
            container_starts: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
        });
        if !seed_ip_pool(&state, &shutdown).await {
            return;
        }
        // First come, first served (`work_loop.rs`): kube-runtime's runner served waiting pods
        // in hash order, so under load some waited many seconds to be bound or started.
        let workers = usize::from(cfg.concurrency);
        let (pod_store, pod_keys) = reflected(Api::<Pod>::all(client.clone()));
        let sweeper = sweep_forgotten_pods(pod_store.clone(), Arc::clone(&state), shutdown.clone());
        let pods = work_loop::run(
            workers,
            pod_store,
            pod_keys,
            |pod: Arc<Pod>, state: Arc<AgentState>| async move {
                match reconcile_pod(Arc::clone(&pod), Arc::clone(&state)).await {
                    Ok(next) => next,
                    Err(err) => pod_error_policy(&pod, &err, &state),
                }
            },
            Arc::clone(&state),
            shutdown.clone(),
        );
        let (claim_store, claim_keys) = reflected(Api::<PersistentVolumeClaim>::all(client));
        let claims = work_loop::run(
            workers,
            claim_store,
            claim_keys,
            |pvc: Arc<PersistentVolumeClaim>, state: Arc<AgentState>| async move {
                match reconcile_claim(Arc::clone(&pvc), Arc::clone(&state)).await {
                    Ok(next) => next,
                    Err(err) => claim_error_policy(&pvc, &err, &state),
                }
            },
            state,
            shutdown.clone(),
        );
        tokio::join!(pods, claims, sweeper);
    })
}

/// A watch of every `K` reflected into a store, and the keys of the objects it delivers (a
/// failed watch is retried with back-off by the watcher; its errors are logged here).
fn reflected<K>(api: Api<K>) -> (Store<K>, impl Stream<Item = ObjectRef<K>> + Send + 'static)
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let keys = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .filter_map(|obj| {
            std::future::ready(match obj {
                Ok(obj) => Some(ObjectRef::from_obj(&obj)),
                Err(err) => {
                    tracing::warn!(error = %err, "simulated nodes: watch failed; retrying");
                    None
                }
            })
        });
    (store, keys)
}

/// How often pod bookkeeping (IPs, start clocks, failure counts) is pruned of pods that are gone.
const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

/// Pods deleted by others (grace period 0, namespace deletion ...) never come back to the
/// reconciler, so their bookkeeping is dropped periodically against the watch cache.
async fn sweep_forgotten_pods(
    store: kube::runtime::reflector::Store<Pod>,
    state: Arc<AgentState>,
    shutdown: CancellationToken,
) {
    tokio::select! {
        _ = shutdown.cancelled() => return,
        ready = store.wait_until_ready() => if ready.is_err() { return },
    }
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SWEEP_INTERVAL) => {}
        }
        let pods = store.state();
        let live_uids: std::collections::HashSet<&str> = pods
            .iter()
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        let live_keys: std::collections::HashSet<String> = pods
            .iter()
            .map(|p| {
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                let name = p.metadata.name.as_deref().unwrap_or_default();
                format!("pod/{ns}/{name}")
            })
            .collect();
        if let Ok(mut pool) = state.pool.lock() {
            pool.retain(|uid| live_uids.contains(uid));
        }
        if let Ok(mut bound) = state.bound_since.lock() {
            bound.retain(|uid, _| live_uids.contains(uid.as_str()));
        }
        if let Ok(mut terminating) = state.terminating_since.lock() {
            terminating.retain(|uid, _| live_uids.contains(uid.as_str()));
        }
        if let Ok(mut starts) = state.container_starts.lock() {
            starts.retain(|uid, _| live_uids.contains(uid.as_str()));
        }
        if let Ok(mut failures) = state.failures.lock() {
            failures.retain(|key, _| !key.starts_with("pod/") || live_keys.contains(key));
        }
    }
}

/// Learns the pod IPs already in use, so a restarted agent does not hand them out again.
/// Returns false when shut down first.
async fn seed_ip_pool(state: &AgentState, shutdown: &CancellationToken) -> bool {
    let api = Api::<Pod>::all(state.client.clone());
    let mut delay = BACKOFF_START;
    let params = kube::api::ListParams::default();
    loop {
        let result = tokio::select! {
            _ = shutdown.cancelled() => return false,
            result = api.list(&params) => result,
        };
        match result {
            Ok(list) => {
                if let Ok(mut pool) = state.pool.lock() {
                    for pod in &list.items {
                        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                        for ip in pod_ips(pod) {
                            pool.observe(uid, ip);
                        }
                    }
                }
                return true;
            }
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?delay, "listing pods to learn used pod IPs failed");
                tokio::select! {
                    _ = shutdown.cancelled() => return false,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(BACKOFF_MAX);
            }
        }
    }
}

fn pod_ips(pod: &Pod) -> Vec<&str> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let mut ips: Vec<&str> = status.pod_ip.as_deref().into_iter().collect();
    for ip in status.pod_ips.iter().flatten() {
        if !ips.contains(&ip.ip.as_str()) {
            ips.push(ip.ip.as_str());
        }
    }
    ips
}

fn describe(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

/// Treats "gone" (404) and "someone else got there first" (409) as done: the next watch event
/// brings the new state.
fn settled(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404 || status.code == 409)
}

async fn reconcile_pod(pod: Arc<Pod>, state: Arc<AgentState>) -> Result<Next, NodeAgentError> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let key = format!("pod/{ns}/{name}");
    let fate = pod_fate(&state.cfg, &uid);
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    let ours = node_name.is_some_and(|n| state.cfg.node_index(n).is_some());
    // The startup clock only matters until the pod is started.
    let waiting_to_start =
        ours && pod.metadata.deletion_timestamp.is_none() && !status::is_started(&pod);
    let since_bound = if waiting_to_start {
        let mut bound = state.bound_since.lock().unwrap_or_else(|e| e.into_inner());
        bound
            .entry(uid.clone())
            .or_insert_with(Instant::now)
            .elapsed()
    } else {
        Duration::ZERO
    };
    if ours && let Ok(mut pool) = state.pool.lock() {
        for ip in pod_ips(&pod) {
            pool.observe(&uid, ip);
        }
    }

    let api = Api::<Pod>::namespaced(state.client.clone(), &ns);
    let now = k8s_openapi::jiff::Timestamp::now();
    let now_text = status::format_time(now);
    let seen_terminating = if pod.metadata.deletion_timestamp.is_some() {
        let mut terminating = state
            .terminating_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Some(*terminating.entry(uid.clone()).or_insert(now))
    } else {
        None
    };
    let step = {
        let starts: ContainerStarts = state
            .container_starts
            .lock()
            .ok()
            .and_then(|s| s.get(&uid).cloned())
            .unwrap_or_default();
        let started =
            |name: &str, restarts: i32| starts.get(&(name.to_string(), restarts)).copied();
        let memory = Memory {
            since_bound,
            seen_terminating,
            started: &started,
        };
        next_step(&pod, &state.cfg, &fate, &memory, now)
    };
    tracing::trace!(pod = %describe(&ns, &name), ?step, "simulated node step");
    let result = match step {
        PodStep::Ignore => Ok(Next::change()),
        PodStep::StartAfter(wait) | PodStep::WaitFor(wait) | PodStep::DeleteAfter(wait) => {
            Ok(Next::after(wait))
        }
        PodStep::Bind { node } => {
            let body = status::binding(&ns, &name, pod.metadata.uid.as_deref(), &node);
            let params = PostParams {
                dry_run: false,
                field_manager: Some(SCHEDULER_MANAGER.into()),
            };
            match api
                .create_subresource::<_, serde_json::Value>("binding", &name, &params, &body)
                .await
            {
                Ok(_) => {
                    if let Ok(mut bound) = state.bound_since.lock() {
                        bound.entry(uid.clone()).or_insert_with(Instant::now);
                    }
                    Ok(Next::change())
                }
                Err(err) if settled(&err) => Ok(Next::change()),
                Err(source) => Err(NodeAgentError::Api {
                    action: "binding",
                    object: describe(&ns, &name),
                    source,
                }),
            }
        }
        PodStep::MarkUnschedulable => {
            let patch = status::unschedulable_patch(&pod, state.cfg.nodes, &now_text);
            patch_pod_status(&api, &ns, &name, SCHEDULER_MANAGER, patch).await
        }
        PodStep::Start {
            node_index,
            outcome,
        } => {
            let node_ip = NodeConfig::node_ip(node_index).to_string();
            let host_network = pod
                .spec
                .as_ref()
                .and_then(|s| s.host_network)
                .unwrap_or(false);
            let pod_ip = if host_network {
                node_ip.clone()
            } else {
                let allocated = state
                    .pool
                    .lock()
                    .ok()
                    .and_then(|mut pool| pool.allocate(&uid));
                match allocated {
                    Some(ip) => ip.to_string(),
                    None => return Err(NodeAgentError::PodIpsExhausted),
                }
            };
            let ctx = status::StartContext {
                node_ip: &node_ip,
                pod_ip: &pod_ip,
                now: &now_text,
                outcome,
            };
            let patch = status::start_patch(&pod, &ctx);
            let result = patch_pod_status(&api, &ns, &name, KUBELET_MANAGER, patch).await;
            if result.is_ok() {
                if let Ok(mut bound) = state.bound_since.lock() {
                    bound.remove(&uid);
                }
                let containers = pod.spec.iter().flat_map(|s| s.containers.iter());
                remember_starts(&state, &uid, containers.map(|c| (c.name.clone(), 0, now)));
            }
            result
        }
        PodStep::Containers { runs, terminal } => {
            let patch = status::containers_patch(&pod, &runs, terminal, &now_text);
            let result = patch_pod_status(&api, &ns, &name, KUBELET_MANAGER, patch).await;
            if result.is_ok() {
                let running = runs.iter().filter_map(|run| match run.state {
                    kubelet::State::Running { since } => {
                        Some((run.name.clone(), run.restart_count, since))
                    }
                    _ => None,
                });
                remember_starts(&state, &uid, running);
            }
            result
        }
        PodStep::Delete => {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: Some(uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {
                    forget_pod(&state, &uid);
                    Ok(Next::change())
                }
                Err(err) if settled(&err) => {
                    forget_pod(&state, &uid);
                    Ok(Next::change())
                }
                Err(source) => Err(NodeAgentError::Api {
                    action: "deleting",
                    object: describe(&ns, &name),
                    source,
                }),
            }
        }
    };
    if result.is_ok() {
        clear_failures(&state, &key);
    }
    result
}

/// Notes the precise starts of container runs (name, restart count, start).
fn remember_starts(
    state: &AgentState,
    uid: &str,
    runs: impl Iterator<Item = (String, i32, k8s_openapi::jiff::Timestamp)>,
) {
    if let Ok(mut starts) = state.container_starts.lock() {
        let pod = starts.entry(uid.to_string()).or_default();
        for (name, restarts, since) in runs {
            pod.entry((name, restarts)).or_insert(since);
        }
    }
}

fn forget_pod(state: &AgentState, uid: &str) {
    if let Ok(mut pool) = state.pool.lock() {
        pool.release(uid);
    }
    if let Ok(mut bound) = state.bound_since.lock() {
        bound.remove(uid);
    }
    if let Ok(mut terminating) = state.terminating_since.lock() {
        terminating.remove(uid);
    }
    if let Ok(mut starts) = state.container_starts.lock() {
        starts.remove(uid);
    }
}

async fn patch_pod_status(
    api: &Api<Pod>,
    ns: &str,
    name: &str,
    manager: &str,
    patch: serde_json::Value,
) -> Result<Next, NodeAgentError> {
    let params = PatchParams {
        field_manager: Some(manager.to_string()),
        ..PatchParams::default()
    };
    // The written pod comes back through the watch: the response body is not decoded.
    let request = kube::core::Request::new(api.resource_url()).patch_subresource(
        "status",
        name,
        &params,
        &Patch::Strategic(patch),
    );
    let result = match request {
        Ok(request) => api.clone().into_client().request_text(request).await,
        Err(e) => Err(kube::Error::BuildRequest(e)),
    };
    match result {
        Ok(_) => Ok(Next::change()),
        Err(err) if settled(&err) => Ok(Next::change()),
        Err(source) => Err(NodeAgentError::Api {
            action: "patching status of",
            object: describe(ns, name),
            source,
        }),
    }
}

async fn reconcile_claim(
    pvc: Arc<PersistentVolumeClaim>,
    state: Arc<AgentState>,
) -> Result<Next, NodeAgentError> {
    if pvc.metadata.deletion_timestamp.is_some()
        || pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    {
        return Ok(Next::change());
    }
    let ns = pvc.metadata.namespace.clone().unwrap_or_default();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    let api = Api::<PersistentVolumeClaim>::namespaced(state.client.clone(), &ns);
    let params = PatchParams {
        field_manager: Some(VOLUME_BINDER_MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = status::pvc_bound_patch(&pvc);
    match api.patch_status(&name, &params, &Patch::Merge(patch)).await {
        Ok(_) => {
            clear_failures(&state, &format!("pvc/{ns}/{name}"));
            Ok(Next::change())
        }
        Err(err) if settled(&err) => Ok(Next::change()),
        Err(source) => Err(NodeAgentError::Api {
            action: "binding claim",
            object: describe(&ns, &name),
            source,
        }),
    }
}

fn clear_failures(state: &AgentState, key: &str) {
    if let Ok(mut failures) = state.failures.lock() {
        failures.remove(key);
    }
}

/// Exponential back-off per object: 100 ms, 200 ms, ... up to 5 s.
fn backoff(state: &AgentState, key: String, err: &NodeAgentError) -> Next {
    let attempts = state
        .failures
        .lock()
        .map(|mut failures| {
            let n = failures.entry(key.clone()).or_insert(0);
            *n = n.saturating_add(1);
            *n
        })
        .unwrap_or(1);
    let delay = BACKOFF_START
        .saturating_mul(1u32 << attempts.saturating_sub(1).min(16))
        .min(BACKOFF_MAX);
    tracing::warn!(object = %key, error = %err, attempts, retry_in = ?delay, "simulated node step failed");
    Next::after(delay)
}

fn pod_error_policy(pod: &Pod, err: &NodeAgentError, state: &AgentState) -> Next {
    let key = ObjectRef::from_obj(pod);
    backoff(
        state,
        format!("pod/{}/{}", key.namespace.unwrap_or_default(), key.name),
        err,
    )
}

fn claim_error_policy(
    pvc: &PersistentVolumeClaim,
    err: &NodeAgentError,
    state: &AgentState,
) -> Next {
    let key = ObjectRef::from_obj(pvc);
    backoff(
        state,
        format!("pvc/{}/{}", key.namespace.unwrap_or_default(), key.name),
        err,
    )
}

#[cfg(test)]
mod tests;
