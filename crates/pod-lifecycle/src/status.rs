//! The status a kubelet reports for a Pod's containers as [`crate::kubelet`] left them (pure).
//!
//! Pod status patches are strategic merge patches (lists keyed by `type` and `name`, as
//! kubelet sends them). Each patch also repeats the conditions other writers own unchanged, so a
//! server that merges those lists as whole values still keeps them.

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use rand::rngs::StdRng;
use rand::{RngCore as _, SeedableRng as _};
use serde_json::{Value, json};

use crate::kubelet::{Exit, Run, State, backoff};

/// Status patch reporting the containers as the kubelet lifecycle (`kubelet.rs`) left them, and
/// what follows for the pod, as a kubelet reports it: each container `running` (ready),
/// `waiting` in `CrashLoopBackOff`, or `terminated` with its exit code and reason (`Completed`
/// or `Error`), the previous run in `lastState`; `ContainersReady`/`Ready` true only while every
/// container runs (`ContainersNotReady` naming the others); once the pod is over (`terminal`:
/// `Succeeded` or `Failed`), the phase, `Ready`/`ContainersReady` false with `PodCompleted` or
/// `PodFailed`, `Initialized` with `PodCompleted` after a success, and
/// `PodReadyToStartContainers` false (the sandbox is gone).
pub fn containers_patch(pod: &Pod, runs: &[Run], terminal: Option<&str>, now: &str) -> Value {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let known = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let exit_json = |e: &Exit, id: &str| {
        json!({
            "exitCode": e.code,
            "reason": e.reason,
            "startedAt": format_time(e.started),
            "finishedAt": format_time(e.finished),
            "containerID": id,
        })
    };
    let mut unready = Vec::new();
    let container_statuses: Vec<Value> = runs
        .iter()
        .map(|run| {
            let old = known.iter().find(|cs| cs.name == run.name);
            let id = old
                .and_then(|cs| cs.container_id.clone())
                .unwrap_or_else(|| container_id(uid, &run.name));
            let (ready, state) = match &run.state {
                State::Running { since } => (
                    true,
                    json!({ "running": { "startedAt": format_time(*since) },
                            "waiting": null, "terminated": null }),
                ),
                State::BackOff { .. } => (
                    false,
                    json!({ "waiting": {
                        "reason": "CrashLoopBackOff",
                        "message": format!(
                            "back-off {} restarting failed container={} pod={name}_{namespace}({uid})",
                            go_duration(backoff(run.restart_count)),
                            run.name
                        ),
                    }, "running": null, "terminated": null }),
                ),
                State::Exited(exit) => (
                    false,
                    json!({ "terminated": exit_json(exit, &id), "running": null, "waiting": null }),
                ),
            };
            if !ready {
                unready.push(run.name.as_str());
            }
            let last = match &run.last {
                Some(exit) => json!({ "terminated": exit_json(exit, &id) }),
                None => json!({ "terminated": null }),
            };
            let mut cs = json!({
                "name": run.name,
                "containerID": id,
                "ready": ready,
                "started": ready,
                "restartCount": run.restart_count,
                "state": state,
                "lastState": last,
            });
            if let Some(old) = old {
                cs["image"] = json!(old.image);
                cs["imageID"] = json!(old.image_id);
            }
            cs
        })
        .collect();
    let (not_ready_reason, not_ready_message) = match terminal {
        Some("Succeeded") => (Some("PodCompleted"), None),
        Some(_) => (Some("PodFailed"), None),
        None if unready.is_empty() => (None, None),
        None => (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        ),
    };
    let conditions = kubelet_conditions(
        pod,
        KubeletView {
            sandbox_ready: terminal.is_none(),
            initialized_reason: (terminal == Some("Succeeded")).then_some("PodCompleted"),
            not_ready_reason,
            not_ready_message,
            scheduled: false,
        },
        now,
    );
    let mut status = json!({
        "phase": terminal.unwrap_or("Running"),
        "conditions": conditions,
        "containerStatuses": container_statuses,
    });
    if let Some(generation) = pod.metadata.generation {
        status["observedGeneration"] = json!(generation);
    }
    json!({ "status": status })
}

/// What the kubelet's conditions of a Pod are made from.
pub struct KubeletView {
    /// `PodReadyToStartContainers`.
    pub sandbox_ready: bool,
    /// The reason of `Initialized` (always `True`): `PodCompleted` once a Pod has succeeded.
    pub initialized_reason: Option<&'static str>,
    /// Why the containers are not ready (`ContainersReady=False`), `None` when they are.
    pub not_ready_reason: Option<&'static str>,
    /// The message beside `not_ready_reason`.
    pub not_ready_message: Option<String>,
    /// Also write `PodScheduled=True` (devcluster binds and starts in one status patch; on a
    /// real cluster the scheduler owns it and it stays among the foreign conditions).
    pub scheduled: bool,
}

/// The kubelet's conditions of a Pod, in its order (`PodReadyToStartContainers`,
/// `Initialized`, `Ready`, `ContainersReady`, then `PodScheduled` when asked), followed by the
/// ones other writers own, unchanged: devcluster's simulated nodes and the real cluster's
/// finisher write the same list.
pub fn kubelet_conditions(pod: &Pod, view: KubeletView, now: &str) -> Vec<Value> {
    let make = |type_: &str, ok: bool, reason: Option<&str>, message: Option<String>| {
        kubelet_condition(pod, type_, ok, reason, message, now)
    };
    let (ready, ready_reason, ready_message) =
        ready_condition(pod, view.not_ready_reason, view.not_ready_message.clone());
    let mut conditions = vec![
        make("PodReadyToStartContainers", view.sandbox_ready, None, None),
        make("Initialized", true, view.initialized_reason, None),
        make("Ready", ready, ready_reason, ready_message),
        make(
            "ContainersReady",
            view.not_ready_reason.is_none(),
            view.not_ready_reason,
            view.not_ready_message,
        ),
    ];
    let mut ours = vec![
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    ];
    if view.scheduled {
        conditions.push(make("PodScheduled", true, None, None));
        ours.push("PodScheduled");
    }
    conditions.extend(foreign_conditions(pod, &ours));
    conditions
}

/// `Ready` as the kubelet reports it: `False` with the containers' reason and message while
/// they are not ready (`not_ready_reason` set), else `False` with `ReadinessGatesNotReady` while
/// a readiness gate's condition is not `True`, else `True`. Returns (ready, reason, message).
pub fn ready_condition(
    pod: &Pod,
    not_ready_reason: Option<&'static str>,
    not_ready_message: Option<String>,
) -> (bool, Option<&'static str>, Option<String>) {
    if not_ready_reason.is_some() {
        return (false, not_ready_reason, not_ready_message);
    }
    match missing_readiness_gates(pod).first() {
        Some(gate) => (
            false,
            Some("ReadinessGatesNotReady"),
            Some(format!(
                "corresponding condition of pod readiness gate \"{gate}\" does not exist."
            )),
        ),
        None => (true, None, None),
    }
}

/// A pod condition as the kubelet writes it in a status patch: `True` when `ok`, the transition
/// time kept while the status stays, the pod's generation as `observedGeneration`; a missing
/// `reason` or `message` is written as null, so the patch removes an old one.
pub fn kubelet_condition(
    pod: &Pod,
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &str,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let mut c = json!({
        "type": type_,
        "status": status,
        "lastProbeTime": null,
        "lastTransitionTime": transition_time(pod, type_, status, now),
        "reason": reason,
        "message": message,
    });
    if let Some(generation) = pod.metadata.generation {
        c["observedGeneration"] = json!(generation);
    }
    c
}

/// A duration as Go's `time.Duration` prints whole seconds (`10s`, `1m20s`, `5m0s`).
fn go_duration(d: k8s_openapi::jiff::SignedDuration) -> String {
    let secs = d.as_secs().max(0);
    if secs < 60 {
        format!("{secs}s")
    } else if secs < 3600 {
        format!("{}m{}s", secs / 60, secs % 60)
    } else {
        format!("{}h{}m{}s", secs / 3600, secs % 3600 / 60, secs % 60)
    }
}

/// Formats a time as the API server does (`2006-01-02T15:04:05Z`, UTC, whole seconds).
pub fn format_time(ts: k8s_openapi::jiff::Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The pod's condition of this type, if it has one.
pub fn condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Keeps a condition's transition time when its status does not change.
pub fn transition_time(pod: &Pod, type_: &str, status: &str, now: &str) -> String {
    condition(pod, type_)
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| format_time(t.0))
        .unwrap_or_else(|| now.to_string())
}

/// The pod's conditions of other types, unchanged, as JSON.
pub fn foreign_conditions(pod: &Pod, ours: &[&str]) -> Vec<Value> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|conditions| {
            conditions
                .iter()
                .filter(|c| !ours.contains(&c.type_.as_str()))
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Readiness gates whose condition is not `True` on the pod.
pub fn missing_readiness_gates(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .map(|gates| {
            gates
                .iter()
                .filter(|g| condition(pod, &g.condition_type).is_none_or(|c| c.status != "True"))
                .map(|g| g.condition_type.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// The `containerd://...` ID of a pod's container (derived from its uid and name).
pub fn container_id(pod_uid: &str, container: &str) -> String {
    format!(
        "containerd://{}",
        hex_digest(format!("{pod_uid}/{container}").as_bytes())
    )
}

/// A 64-hex-digit string derived from `input` (container IDs and image digests; not a
/// cryptographic hash, nothing verifies it).
pub fn hex_digest(input: &[u8]) -> String {
    let mut rng = StdRng::seed_from_u64(fnv1a(input));
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// FNV-1a, 64 bit: a stable mixing of a pod's uid into the seed (std's hashers are not
/// guaranteed stable across Rust releases).
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_digest_is_stable_and_64_hex_digits() {
        let a = hex_digest(b"nginx:1.27");
        assert_eq!(a, hex_digest(b"nginx:1.27"));
        assert_ne!(a, hex_digest(b"nginx:1.28"));
        assert_eq!(a.len(), 64);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
}
