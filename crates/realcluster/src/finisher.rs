//! The pod finisher: Pods on the cluster's kwok nodes finish as their containers' commands say,
//! as they do on devcluster and on a real node.
//!
//! kwok runs no containers: its `pod-ready` Stage makes a scheduled Pod Running and Ready, and
//! nothing would ever end it. The finisher watches the Pods kwok started (those on one of the
//! cluster's nodes with a `podIP`) and reads each container's command with devcluster's grammar
//! (`pod_lifecycle::program`: `true`, `false`, `sleep N`, `sh -c "sleep 1; exit 2"`, ...). A
//! container whose program ends exits with its code at its time (counted from its `startedAt`),
//! is restarted by the Pod's `restartPolicy` with the kubelet's back-off (`restartCount`,
//! waiting in `CrashLoopBackOff`), and once every container is over the phase becomes
//! `Succeeded` or `Failed`; the status patches are the ones devcluster's kubelet writes
//! (`pod_lifecycle::status::containers_patch`, a strategic merge patch of `pods/status`,
//! field manager `kubelet`). A program outside the grammar (or `sleep infinity`) runs until the
//! Pod is deleted, as before.
//!
//! Why a component of our own rather than kwok Stages: a Stage selects Pods by field
//! expressions and renders a Go template, so it cannot parse a shell command line, add the
//! durations of its `sleep`s, or double a back-off per restart; the grammar is already written
//! (and tested) in Rust, and sharing it keeps the two grounds alike. The finisher and kwok never
//! write the same Pod at the same stage: `pod-ready` matches only Pods without a `podIP` (the
//! finisher waits for one), and `pod-delete` matches Pods being deleted (the finisher leaves
//! those alone, so a deleted Pod still goes at once).
//!
//! It runs in the test or `cargo xtask cluster` process, on a thread with a runtime of its own
//! (like the volume provisioner, it outlives the runtime of the test that started the cluster),
//! and writes what it does to `logs/pod-finisher.log`. If it ends while the cluster runs (a
//! panic), the supervisor reports it like a component process that exited, which ends
//! `cargo xtask cluster`; it stops with the cluster, before the processes.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use pod_lifecycle::kubelet::{self, Run, State};
use pod_lifecycle::status::{containers_patch, format_time};

use crate::error::Error;
use crate::process::{ExitReporter, InProcess};

/// The finisher's name, in exit reports and in its log's (`logs/pod-finisher.log`).
pub const NAME: &str = "pod-finisher";
/// The field manager of its status patches (the kubelet's, as on a node).
pub const FIELD_MANAGER: &str = "kubelet";
/// How long a failed patch waits before the Pod is looked at again.
const RETRY: Duration = Duration::from_secs(1);

/// The precise start of a container's current run (container name, restart count), for runs the
/// finisher started (the status has whole seconds).
pub type Starts = HashMap<(String, i32), Timestamp>;

/// The starts to plan `pod` with at `now`: those the finisher remembers (`known`), plus, for
/// each running container it has not seen start, the latest moment that run can have begun.
/// kwok's `startedAt` holds whole seconds, rounded down, so the run began before
/// `startedAt + 1 s`, and before `now`, when the finisher sees it running. Counting from the
/// earlier of the two never ends a program before its time (counted from the rounded-down
/// second, a `sleep 1` was over 0.2 s after the Pod started: found by devcluster's API tests on
/// the real ground); the program ends at most one watch delay late instead.
pub fn starts_for(pod: &Pod, known: &Starts, now: Timestamp) -> Starts {
    let mut starts = known.clone();
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    for cs in statuses {
        let Some(started_at) = cs
            .state
            .as_ref()
            .and_then(|s| s.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
        else {
            continue;
        };
        let latest = started_at
            .0
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(1))
            .unwrap_or(started_at.0);
        starts
            .entry((cs.name.clone(), cs.restart_count))
            .or_insert(latest.min(now));
    }
    starts
}

/// What to do about one Pod now.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Not the finisher's (another node, not started by kwok yet, being deleted, over), or its
    /// containers run until stopped: look again when it changes.
    Ignore,
    /// Nothing changed yet; look again at this time (a program ends, a back-off ends).
    WakeAt(Timestamp),
    /// Write this status patch: the containers are now `runs` (their precise starts are
    /// remembered from these).
    Patch {
        patch: serde_json::Value,
        runs: Vec<Run>,
    },
}

/// The step for `pod` at `now` (pure): `ours` says whether a node name is one of the cluster's
/// kwok nodes; `started` gives the precise starts the finisher remembers.
pub fn step(
    pod: &Pod,
    ours: &dyn Fn(&str) -> bool,
    started: &dyn Fn(&str, i32) -> Option<Timestamp>,
    now: Timestamp,
) -> Step {
    let on_our_node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(ours);
    let status = pod.status.as_ref();
    let started_by_kwok = status
        .and_then(|s| s.pod_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty());
    let phase = status.and_then(|s| s.phase.as_deref());
    if !on_our_node
        || !started_by_kwok
        || pod.metadata.deletion_timestamp.is_some()
        || phase != Some("Running")
    {
        return Step::Ignore;
    }
    let Some(runs) = kubelet::observe(pod, started) else {
        return Step::Ignore;
    };
    let advanced = kubelet::advance(pod, &runs, now);
    if advanced.runs != runs {
        let terminal = kubelet::terminal_phase(&advanced.runs);
        return Step::Patch {
            patch: containers_patch(pod, &advanced.runs, terminal, &format_time(now)),
            runs: advanced.runs,
        };
    }
    advanced.next.map_or(Step::Ignore, Step::WakeAt)
}

/// The running finisher; stops when dropped.
pub struct Finisher {
    _thread: InProcess,
}

impl Finisher {
    /// Starts the finisher on its own thread, with an admin client from `kubeconfig`, for Pods
    /// on `nodes`; it logs to `log`, and an end before it is dropped goes to `exits`.
    pub fn start(
        kubeconfig: PathBuf,
        nodes: HashSet<String>,
        log: PathBuf,
        exits: ExitReporter,
    ) -> Result<Finisher, Error> {
        let log_file = std::fs::File::create(&log).map_err(|source| Error::Io {
            action: "create log file",
            path: log.clone(),
            source,
        })?;
        let context = Arc::new(Context {
            kubeconfig,
            nodes,
            starts: Mutex::new(HashMap::new()),
            log: Mutex::new(log_file),
        });
        Finisher::spawn(run(context), log, exits)
    }

    /// Runs `work` until dropped; if it ends first (or panics), the end is reported to `exits`
    /// as [`NAME`]'s, with the last lines of `log`.
    fn spawn(
        work: impl Future<Output = ()> + Send + 'static,
        log: PathBuf,
        exits: ExitReporter,
    ) -> Result<Finisher, Error> {
        let thread = InProcess::spawn(NAME, work, move |status| {
            append(&log, &format!("{NAME} {status}"));
            exits.report(NAME, status, &log);
        })?;
        Ok(Finisher { _thread: thread })
    }
}

fn append(path: &Path, line: &str) {
    if let Ok(mut file) = std::fs::OpenOptions::new().append(true).open(path) {
        let _ = writeln!(file, "{line}");
    }
}

struct Context {
    kubeconfig: PathBuf,
    nodes: HashSet<String>,
    /// Precise starts by Pod uid (only Pods with a run the finisher started).
    starts: Mutex<HashMap<String, Starts>>,
    log: Mutex<std::fs::File>,
}

impl Context {
    fn log(&self, line: &str) {
        let mut file = self.log.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(file, "{} {line}", Timestamp::now());
    }
}

#[derive(Debug, thiserror::Error)]
#[error("patching the status of Pod {pod}: {source}")]
struct PatchError {
    pod: String,
    #[source]
    source: kube::Error,
}

/// Watches every Pod until stopped (the watcher retries a failed watch with back-off).
async fn run(context: Arc<Context>) {
    let client = loop {
        match crate::cluster::client_from_kubeconfig(&context.kubeconfig).await {
            Ok(client) => break client,
            Err(e) => {
                context.log(&format!("no client yet: {e}"));
                tokio::time::sleep(RETRY).await;
            }
        }
    };
    context.log("watching Pods");
    let pods: Api<Pod> = Api::all(client.clone());
    Controller::new(pods, watcher::Config::default())
        .run(
            move |pod, context| reconcile(pod, context, client.clone()),
            |pod, error, context| {
                let name = pod.metadata.name.as_deref().unwrap_or_default();
                context.log(&format!("{name}: {error}; again in {RETRY:?}"));
                Action::requeue(RETRY)
            },
            context,
        )
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    pod: Arc<Pod>,
    context: Arc<Context>,
    client: kube::Client,
) -> Result<Action, PatchError> {
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let now = Timestamp::now();
    let remembered: Starts = context
        .starts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&uid)
        .cloned()
        .unwrap_or_default();
    let known = starts_for(&pod, &remembered, now);
    let started = |name: &str, restarts: i32| known.get(&(name.to_owned(), restarts)).copied();
    let step = step(&pod, &|node| context.nodes.contains(node), &started, now);
    match step {
        Step::Ignore => {
            context
                .starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&uid);
            Ok(Action::await_change())
        }
        Step::WakeAt(at) => {
            // Plan from the same starts when it wakes.
            context
                .starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid, known);
            let wait = at.duration_since(now).try_into().unwrap_or(Duration::ZERO);
            Ok(Action::requeue(wait.max(Duration::from_millis(1))))
        }
        Step::Patch { patch, runs } => {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_owned()),
                ..PatchParams::default()
            };
            Api::<Pod>::namespaced(client, namespace)
                .patch_status(name, &params, &Patch::Strategic(&patch))
                .await
                .map_err(|source| PatchError {
                    pod: format!("{namespace}/{name}"),
                    source,
                })?;
            context.log(&format!("{namespace}/{name}: {}", describe(&runs)));
            let running: Starts = runs
                .iter()
                .filter_map(|run| match run.state {
                    State::Running { since } => {
                        Some(((run.name.clone(), run.restart_count), since))
                    }
                    _ => None,
                })
                .collect();
            context
                .starts
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid, running);
            // The patch's own watch event brings the Pod back.
            Ok(Action::await_change())
        }
    }
}

/// One line per patch for the log: each container's state and restart count.
fn describe(runs: &[Run]) -> String {
    runs.iter()
        .map(|run| {
            let state = match &run.state {
                State::Running { .. } => "running".to_owned(),
                State::BackOff { until } => format!("back-off until {until}"),
                State::Exited(exit) => format!("exited {}", exit.code),
            };
            format!("{} {state} (restarts {})", run.name, run.restart_count)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests;
