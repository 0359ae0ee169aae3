//! Pure computation of a Sandbox's conditions and status (api.md section 3.1,
//! core-controller.md sections 1.6, 1.8 and 1.9).

use std::time::Duration;

use api_types::SandboxStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

pub use api_types::conditions::{FINISHED, POD_SCHEDULED, READY, SUSPENDED};

/// Condition reasons, under short names (values from `api_types::conditions`).
pub mod reason {
    pub use api_types::conditions::{
        REASON_DEPENDENCIES_NOT_READY as DEPENDENCIES_NOT_READY,
        REASON_DEPENDENCIES_READY as DEPENDENCIES_READY, REASON_MULTIPLE_PODS as MULTIPLE_PODS,
        REASON_NOT_SUSPENDED as NOT_SUSPENDED, REASON_POD_FAILED as POD_FAILED,
        REASON_POD_NOT_OWNED as POD_NOT_OWNED, REASON_POD_SCHEDULED as POD_SCHEDULED,
        REASON_POD_SCHEDULING_UNKNOWN as POD_SCHEDULING_UNKNOWN,
        REASON_POD_STATE_UNKNOWN as POD_STATE_UNKNOWN, REASON_POD_SUCCEEDED as POD_SUCCEEDED,
        REASON_POD_TERMINATED as POD_TERMINATED, REASON_POD_TERMINATING as POD_TERMINATING,
        REASON_RECONCILER_ERROR as RECONCILER_ERROR, REASON_SANDBOX_EXPIRED as SANDBOX_EXPIRED,
        REASON_SANDBOX_SUSPENDED as SANDBOX_SUSPENDED,
    };
}

/// The Pod a pass settled on, and whether this Sandbox controls it.
#[derive(Debug, Clone, Copy)]
pub struct ObservedPod<'a> {
    pub pod: &'a Pod,
    pub owned: bool,
}

/// Everything the conditions depend on, gathered by one reconcile pass.
#[derive(Debug, Default)]
pub struct Observation<'a> {
    pub generation: Option<i64>,
    pub suspended: bool,
    /// `spec.service` (tri-state).
    pub service_field: Option<bool>,
    pub pod: Option<ObservedPod<'a>>,
    /// The Pod step failed (its state is unknown when no Pod was returned).
    pub pod_step_failed: bool,
    /// Errors of this pass, in order (PVC, Pod, Service).
    pub errors: Vec<String>,
    /// The multiple-owned-Pods refusal message, when it happened.
    pub multiple_pods: Option<String>,
    /// A Service counts toward readiness (owned or just adopted/created).
    pub service_present: bool,
}

fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.into(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Condition messages are limited to 32768 bytes by the CRD schema; a longer error text would
/// make the whole status write fail.
pub const MAX_MESSAGE_BYTES: usize = 32768;

fn cap_message(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut cut = MAX_MESSAGE_BYTES - 3;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    message
}

fn pod_phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn pod_condition<'p>(
    pod: &'p Pod,
    type_: &str,
) -> Option<&'p k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == type_))
}

/// The Pod's IPs, in order (falls back to `podIP` when `podIPs` is not reported).
pub fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let ips: Vec<String> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .filter(|ip| !ip.is_empty())
        .collect();
    if ips.is_empty() {
        status
            .pod_ip
            .iter()
            .filter(|ip| !ip.is_empty())
            .cloned()
            .collect()
    } else {
        ips
    }
}

/// The conditions a non-expired pass produces, in the order Suspended, Finished, PodScheduled,
/// Ready. `lastTransitionTime` is a placeholder; [`merge_conditions`] sets it.
pub fn compute_conditions(obs: &Observation<'_>) -> Vec<Condition> {
    let g = obs.generation;
    let mut out = Vec::with_capacity(4);
    let pod_unknown = obs.pod.is_none() && obs.pod_step_failed;

    out.push(if !obs.suspended {
        condition(
            SUSPENDED,
            "False",
            reason::NOT_SUSPENDED,
            "Sandbox is not suspended",
            g,
        )
    } else if pod_unknown {
        condition(
            SUSPENDED,
            "Unknown",
            reason::POD_STATE_UNKNOWN,
            "Pod state is unknown. Sandbox suspension cannot be confirmed",
            g,
        )
    } else {
        match obs.pod {
            None => condition(
                SUSPENDED,
                "True",
                reason::POD_TERMINATED,
                "Pod has been terminated. Sandbox is suspended",
                g,
            ),
            Some(p) if !p.owned => condition(
                SUSPENDED,
                "False",
                reason::POD_NOT_OWNED,
                "Refused to delete pod because it is not owned by this sandbox",
                g,
            ),
            Some(_) => condition(
                SUSPENDED,
                "False",
                reason::POD_TERMINATING,
                "Pod is terminating. Sandbox is suspending",
                g,
            ),
        }
    });

    let owned_pod = obs.pod.filter(|p| p.owned).map(|p| p.pod);
    match owned_pod.map(pod_phase) {
        Some("Succeeded") => out.push(condition(
            FINISHED,
            "True",
            reason::POD_SUCCEEDED,
            "Pod completed successfully",
            g,
        )),
        Some("Failed") => out.push(condition(
            FINISHED,
            "True",
            reason::POD_FAILED,
            "Pod failed",
            g,
        )),
        _ => {}
    }

    if pod_unknown {
        out.push(condition(
            POD_SCHEDULED,
            "Unknown",
            reason::POD_SCHEDULING_UNKNOWN,
            "Pod state is unknown. Pod scheduling cannot be determined",
            g,
        ));
    } else if let Some(pod) = owned_pod {
        out.push(match pod_condition(pod, "PodScheduled") {
            Some(c) => {
                let reason = match (c.reason.as_deref().unwrap_or(""), c.status.as_str()) {
                    ("", "True") => reason::POD_SCHEDULED.to_string(),
                    ("", _) => reason::POD_SCHEDULING_UNKNOWN.to_string(),
                    (r, _) => r.to_string(),
                };
                condition(
                    POD_SCHEDULED,
                    &c.status,
                    &reason,
                    c.message.clone().unwrap_or_default(),
                    g,
                )
            }
            None => condition(
                POD_SCHEDULED,
                "Unknown",
                reason::POD_SCHEDULING_UNKNOWN,
                "Pod has not reported a PodScheduled condition yet",
                g,
            ),
        });
    }

    out.push(ready_condition(obs));
    out
}

fn ready_condition(obs: &Observation<'_>) -> Condition {
    let g = obs.generation;
    if let Some(msg) = &obs.multiple_pods {
        return condition(READY, "False", reason::MULTIPLE_PODS, msg.clone(), g);
    }
    if !obs.errors.is_empty() {
        return condition(
            READY,
            "False",
            reason::RECONCILER_ERROR,
            cap_message(format!("Error seen: {}", obs.errors.join("\n"))),
            g,
        );
    }
    if obs.suspended {
        let msg = if obs.pod.is_some() {
            "Sandbox is suspending"
        } else {
            "Sandbox is suspended"
        };
        return condition(READY, "False", reason::SANDBOX_SUSPENDED, msg, g);
    }
    let pod = obs.pod.map(|p| p.pod);
    match pod.map(pod_phase) {
        Some("Succeeded") => {
            return condition(
                READY,
                "False",
                reason::POD_SUCCEEDED,
                "Pod completed successfully",
                g,
            );
        }
        Some("Failed") => return condition(READY, "False", reason::POD_FAILED, "Pod failed", g),
        _ => {}
    }
    let mut pod_ready = false;
    let mut message = match pod {
        None => "Pod does not exist".to_string(),
        Some(pod) if pod_phase(pod) != "Running" => {
            format!("Pod exists with phase: {}", pod_phase(pod))
        }
        Some(pod) if pod_condition(pod, "Ready").map(|c| c.status.as_str()) != Some("True") => {
            "Pod is Running but not Ready".to_string()
        }
        Some(pod) if pod_ips(pod).is_empty() => "Pod is Ready but has no podIPs yet".to_string(),
        Some(_) => {
            pod_ready = true;
            "Pod is Ready".to_string()
        }
    };
    let service_required = obs.service_field.unwrap_or(obs.service_present);
    if service_required {
        message.push_str(if obs.service_present {
            "; Service Exists"
        } else {
            "; Service does not exist"
        });
    }
    if pod_ready && (!service_required || obs.service_present) {
        condition(READY, "True", reason::DEPENDENCIES_READY, message, g)
    } else {
        condition(READY, "False", reason::DEPENDENCIES_NOT_READY, message, g)
    }
}

/// Applies freshly computed conditions onto the stored ones: `lastTransitionTime` changes only
/// when a condition's status changes; existing conditions keep their position, new ones are
/// appended; the optional ones (`Finished`, `PodScheduled`) disappear when not produced, unless
/// listed in `keep`.
pub fn merge_conditions(
    existing: &[Condition],
    computed: Vec<Condition>,
    keep: &[&str],
    now: Timestamp,
) -> Vec<Condition> {
    let mut out: Vec<Condition> = existing
        .iter()
        .filter(|c| {
            let optional = c.type_ == FINISHED || c.type_ == POD_SCHEDULED;
            !optional
                || computed.iter().any(|n| n.type_ == c.type_)
                || keep.contains(&c.type_.as_str())
        })
        .cloned()
        .collect();
    for new in computed {
        api_types::conditions::set_condition(&mut out, new, Time(now));
    }
    out
}

/// The status after a Retain expiry: conditions only, `Ready=False/SandboxExpired`,
/// `PodScheduled` dropped, `Finished` and `Suspended` kept as they were.
pub fn expired_status(
    current: &SandboxStatus,
    generation: Option<i64>,
    now: Timestamp,
) -> SandboxStatus {
    let ready = condition(
        READY,
        "False",
        reason::SANDBOX_EXPIRED,
        "Sandbox has expired",
        generation,
    );
    let kept: Vec<Condition> = current
        .conditions
        .iter()
        .filter(|c| c.type_ != POD_SCHEDULED)
        .cloned()
        .collect();
    SandboxStatus {
        conditions: merge_conditions(&kept, vec![ready], &[FINISHED], now),
        ..Default::default()
    }
}

/// Whether a status write is needed. A change of `nodeName` alone is not written unless the
/// Sandbox is Ready (it rides along with the later Ready transition).
pub fn needs_write(current: &SandboxStatus, desired: &SandboxStatus) -> bool {
    if current == desired {
        return false;
    }
    let mut without_node = desired.clone();
    without_node.node_name = current.node_name.clone();
    if &without_node == current {
        return is_ready(desired);
    }
    true
}

pub fn ready_condition_of(status: &SandboxStatus) -> Option<&Condition> {
    status.conditions.iter().find(|c| c.type_ == READY)
}

pub fn is_ready(status: &SandboxStatus) -> bool {
    ready_condition_of(status).is_some_and(|c| c.status == "True")
}

pub fn is_marked_expired(status: &SandboxStatus) -> bool {
    ready_condition_of(status).is_some_and(|c| c.reason == reason::SANDBOX_EXPIRED)
}

/// When the Sandbox expires relative to `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No `shutdownTime`.
    Never,
    /// `now >= shutdownTime`.
    Expired,
    /// Expires after this long.
    In(Duration),
}

pub fn check_expiry(shutdown_time: Option<&Time>, now: Timestamp) -> Expiry {
    let Some(Time(at)) = shutdown_time else {
        return Expiry::Never;
    };
    if now >= *at {
        return Expiry::Expired;
    }
    let remaining = at.duration_since(now);
    Expiry::In(Duration::try_from(remaining).unwrap_or(Duration::ZERO))
}

/// The JSON merge patch body for the status subresource: the whole status, with `null` for the
/// fields that must be cleared. Serialized straight from the status it borrows (no
/// intermediate `serde_json::Value` tree: that tree's allocations were a few per cent of the
/// process).
pub fn status_patch(status: &SandboxStatus) -> StatusPatch<'_> {
    StatusPatch {
        status: StatusPatchFields {
            conditions: (!status.conditions.is_empty()).then_some(status.conditions.as_slice()),
            service: non_empty(&status.service),
            service_fqdn: non_empty(&status.service_fqdn),
            selector: non_empty(&status.label_selector),
            pod_ips: (!status.pod_ips.is_empty()).then_some(status.pod_ips.as_slice()),
            node_name: non_empty(&status.node_name),
        },
    }
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// See [`status_patch`]. `None` fields are written as `null` (a merge patch clears them).
#[derive(Debug, serde::Serialize)]
pub struct StatusPatch<'a> {
    status: StatusPatchFields<'a>,
}

#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusPatchFields<'a> {
    conditions: Option<&'a [Condition]>,
    service: Option<&'a str>,
    #[serde(rename = "serviceFQDN")]
    service_fqdn: Option<&'a str>,
    selector: Option<&'a str>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<&'a [String]>,
    node_name: Option<&'a str>,
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
