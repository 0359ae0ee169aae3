//! Pure builders of what the simulated scheduler and kubelet write: the binding, the
//! `Unschedulable` condition, the running / failed / crash-looping pod status, the bound PVC status
//! (the containers' later statuses are `pod_lifecycle::status`'s).
//!
//! Pod status patches are strategic merge patches (lists keyed by `type`, `name` and `ip`, as
//! kubelet sends them). Each patch also repeats the conditions other writers own unchanged, so a
//! server that merges those lists as whole values still keeps them.

use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaim, Pod};
use pod_lifecycle::status::{
    KubeletView, condition, container_id, foreign_conditions, hex_digest, kubelet_conditions,
    transition_time,
};
use serde_json::{Value, json};

// The containers' lifecycle after the start is shared with the real cluster's pod finisher.
pub use pod_lifecycle::status::{containers_patch, format_time};

/// Why a started pod is not healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every container runs and is ready.
    Running,
    /// The first container exited with code 1 and the pod is over (phase `Failed`).
    Failed,
    /// The first container keeps exiting with code 1 and is restarted with back-off (phase
    /// `Running`, not ready, waiting in `CrashLoopBackOff`).
    CrashLoop,
}

/// The node and addresses a pod starts with, and the time to stamp.
#[derive(Debug, Clone)]
pub struct StartContext<'a> {
    pub node_ip: &'a str,
    pub pod_ip: &'a str,
    /// RFC 3339, second precision (as the API server stores times).
    pub now: &'a str,
    pub outcome: Outcome,
}

/// The `v1 Binding` the scheduler posts to `pods/NAME/binding`.
pub fn binding(pod_namespace: &str, pod_name: &str, pod_uid: Option<&str>, node: &str) -> Value {
    let mut metadata = json!({ "name": pod_name, "namespace": pod_namespace });
    if let Some(uid) = pod_uid {
        metadata["uid"] = json!(uid);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": metadata,
        "target": { "apiVersion": "v1", "kind": "Node", "name": node },
    })
}

/// The scheduler's message for a pod no node accepts.
pub fn unschedulable_message(node_count: u32) -> String {
    format!(
        "0/{node_count} nodes are available: {node_count} Insufficient cpu. preemption: 0/{node_count} \
         nodes are available: {node_count} No preemption victims found for incoming pod."
    )
}

/// Whether the pod already carries `PodScheduled=False` with reason `Unschedulable`.
pub fn is_marked_unschedulable(pod: &Pod) -> bool {
    condition(pod, "PodScheduled")
        .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// Status patch that keeps a pod Pending with `PodScheduled=False/Unschedulable`.
pub fn unschedulable_patch(pod: &Pod, node_count: u32, now: &str) -> Value {
    let scheduled = json!({
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": unschedulable_message(node_count),
        "lastProbeTime": null,
        "lastTransitionTime": transition_time(pod, "PodScheduled", "False", now),
    });
    let mut conditions = foreign_conditions(pod, &["PodScheduled"]);
    conditions.insert(0, scheduled);
    json!({ "status": { "phase": "Pending", "conditions": conditions } })
}

/// Status patch that starts a bound pod: conditions, phase, addresses, start time and container
/// statuses for the given outcome.
pub fn start_patch(pod: &Pod, ctx: &StartContext<'_>) -> Value {
    let spec = pod.spec.as_ref();
    let containers: &[Container] = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let init_containers: &[Container] = spec
        .and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default();
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let now = ctx.now;

    let container_statuses: Vec<Value> = containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let failing = i == 0 && ctx.outcome != Outcome::Running;
            match (failing, ctx.outcome) {
                (true, Outcome::Failed) => terminated_status(c, uid, now, 1, "Error", 0),
                (true, _) => crash_loop_status(c, uid, name, namespace, now),
                (false, Outcome::Failed) => terminated_status(c, uid, now, 0, "Completed", 0),
                (false, _) => running_status(c, uid, now),
            }
        })
        .collect();
    let init_statuses: Vec<Value> = init_containers
        .iter()
        .map(|c| {
            if c.restart_policy.as_deref() == Some("Always") {
                // A sidecar: it keeps running next to the main containers.
                running_status(c, uid, now)
            } else {
                terminated_status(c, uid, now, 0, "Completed", 0)
            }
        })
        .collect();

    let unready: Vec<&str> = match ctx.outcome {
        Outcome::Running => Vec::new(),
        Outcome::Failed => containers.iter().map(|c| c.name.as_str()).collect(),
        Outcome::CrashLoop => containers
            .first()
            .map(|c| c.name.as_str())
            .into_iter()
            .collect(),
    };
    let (not_ready_reason, not_ready_message) = if unready.is_empty() {
        (None, None)
    } else if ctx.outcome == Outcome::Failed {
        (Some("PodFailed"), None)
    } else {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: [{}]",
                unready.join(" ")
            )),
        )
    };
    let conditions = kubelet_conditions(
        pod,
        KubeletView {
            sandbox_ready: ctx.outcome != Outcome::Failed,
            initialized_reason: None,
            not_ready_reason,
            not_ready_message,
            scheduled: true,
        },
        now,
    );

    let phase = if ctx.outcome == Outcome::Failed {
        "Failed"
    } else {
        "Running"
    };
    let start_time = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| format_time(t.0))
        .unwrap_or_else(|| now.to_string());
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": ctx.node_ip,
        "hostIPs": [{ "ip": ctx.node_ip }],
        "podIP": ctx.pod_ip,
        "podIPs": [{ "ip": ctx.pod_ip }],
        "startTime": start_time,
        "containerStatuses": container_statuses,
    });
    if !init_statuses.is_empty() {
        status["initContainerStatuses"] = json!(init_statuses);
    }
    if let Some(generation) = pod.metadata.generation {
        status["observedGeneration"] = json!(generation);
    }
    json!({ "status": status })
}

/// Whether the pod's phase is final (`Succeeded` or `Failed`).
pub fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether the kubelet has already reported this pod as started (so there is nothing to do).
pub fn is_started(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| {
        s.start_time.is_some()
            && s.container_statuses.as_ref().is_some_and(|c| !c.is_empty())
            && matches!(s.phase.as_deref(), Some("Running" | "Failed" | "Succeeded"))
    })
}

/// Status patch that binds a claim: phase `Bound`, the requested capacity and access modes.
pub fn pvc_bound_patch(pvc: &PersistentVolumeClaim) -> Value {
    let spec = pvc.spec.as_ref();
    let access_modes = spec
        .and_then(|s| s.access_modes.clone())
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_string()]);
    let mut status = json!({ "phase": "Bound", "accessModes": access_modes });
    if let Some(storage) = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
    {
        status["capacity"] = json!({ "storage": storage.0 });
    }
    json!({ "status": status })
}

fn image_of(c: &Container) -> String {
    c.image.clone().unwrap_or_default()
}

/// `repo@sha256:<digest>` as containerd reports it (the digest is derived from the image name;
/// nothing is pulled).
fn image_id(image: &str) -> String {
    let repo = match image.rsplit_once('@') {
        Some((repo, _)) => repo,
        None => match image.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => repo,
            _ => image,
        },
    };
    format!("{repo}@sha256:{}", hex_digest(image.as_bytes()))
}

fn running_status(c: &Container, uid: &str, now: &str) -> Value {
    let image = image_of(c);
    json!({
        "name": c.name,
        "image": image,
        "imageID": image_id(&image),
        "containerID": container_id(uid, &c.name),
        "ready": true,
        "started": true,
        "restartCount": 0,
        "state": { "running": { "startedAt": now } },
        "lastState": {},
    })
}

fn terminated_status(
    c: &Container,
    uid: &str,
    now: &str,
    exit_code: i32,
    reason: &str,
    restart_count: i32,
) -> Value {
    let image = image_of(c);
    let id = container_id(uid, &c.name);
    json!({
        "name": c.name,
        "image": image,
        "imageID": image_id(&image),
        "containerID": id,
        "ready": exit_code == 0 && reason == "Completed",
        "started": false,
        "restartCount": restart_count,
        "state": { "terminated": {
            "exitCode": exit_code, "reason": reason, "startedAt": now, "finishedAt": now, "containerID": id,
        } },
        "lastState": {},
    })
}

fn crash_loop_status(
    c: &Container,
    uid: &str,
    pod_name: &str,
    namespace: &str,
    now: &str,
) -> Value {
    let image = image_of(c);
    let id = container_id(uid, &c.name);
    json!({
        "name": c.name,
        "image": image,
        "imageID": image_id(&image),
        "containerID": id,
        "ready": false,
        "started": false,
        "restartCount": 1,
        "state": { "waiting": {
            "reason": "CrashLoopBackOff",
            "message": format!(
                "back-off 10s restarting failed container={} pod={pod_name}_{namespace}({uid})",
                c.name
            ),
        } },
        "lastState": { "terminated": {
            "exitCode": 1, "reason": "Error", "startedAt": now, "finishedAt": now, "containerID": id,
        } },
    })
}

#[cfg(test)]
mod tests;
