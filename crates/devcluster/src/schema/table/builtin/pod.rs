//! Cells of the pod table: READY, STATUS (as kubectl derives it), RESTARTS, READINESS GATES.
//! Restartable init containers (sidecars) count as containers once started, as in kubectl.

use serde_json::Value;

use super::{NONE, arr, ptr, s};
use crate::schema::timefmt;

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

/// Whether the init container named `name` is a sidecar (`restartPolicy: Always`).
fn is_sidecar(o: &Value, name: &str) -> bool {
    arr(o, "/spec/initContainers").iter().any(|c| {
        c.get("name").and_then(Value::as_str) == Some(name)
            && c.get("restartPolicy").and_then(Value::as_str) == Some("Always")
    })
}

fn status_name(c: &Value) -> String {
    s(c.get("name"))
}

/// READY: ready containers (and started, ready sidecars) out of containers plus sidecars.
pub(super) fn pod_ready(o: &Value, _: i64) -> Value {
    let sidecars = arr(o, "/spec/initContainers")
        .iter()
        .filter(|c| c.get("restartPolicy").and_then(Value::as_str) == Some("Always"))
        .count();
    let total = arr(o, "/spec/containers").len() + sidecars;
    let ready_sidecars = arr(o, "/status/initContainerStatuses")
        .iter()
        .filter(|c| {
            is_sidecar(o, &status_name(c)) && is_true(c.get("started")) && is_true(c.get("ready"))
        })
        .count();
    let ready = arr(o, "/status/containerStatuses")
        .iter()
        .filter(|c| is_true(c.get("ready")))
        .count();
    Value::String(format!("{}/{total}", ready + ready_sidecars))
}

/// RESTARTS: restarts of every container, with the age of the last one ("2 (5m ago)").
pub(super) fn pod_restarts(o: &Value, now: i64) -> Value {
    let statuses = arr(o, "/status/initContainerStatuses")
        .iter()
        .chain(arr(o, "/status/containerStatuses"));
    let mut restarts = 0;
    let mut last: Option<i64> = None;
    for c in statuses {
        restarts += c.get("restartCount").and_then(Value::as_i64).unwrap_or(0);
        let finished = c
            .pointer("/lastState/terminated/finishedAt")
            .and_then(Value::as_str)
            .and_then(timefmt::parse_date_time);
        last = last.max(finished);
    }
    Value::String(match last {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", timefmt::human_duration(now - t))
        }
        _ => restarts.to_string(),
    })
}

/// READINESS GATES: gates whose condition is True out of all gates.
pub(super) fn pod_readiness_gates(o: &Value, _: i64) -> Value {
    let gates = arr(o, "/spec/readinessGates");
    if gates.is_empty() {
        return Value::String(NONE.into());
    }
    let conditions = arr(o, "/status/conditions");
    let true_count = gates
        .iter()
        .filter(|g| {
            let t = g.get("conditionType");
            conditions.iter().any(|c| {
                c.get("type") == t && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
        .count();
    Value::String(format!("{true_count}/{}", gates.len()))
}

/// `Signal:N` / `ExitCode:N` / the reason of a terminated state.
fn terminated_text(term: &Value) -> String {
    let r = s(term.get("reason"));
    if !r.is_empty() {
        return r;
    }
    match term
        .get("signal")
        .and_then(Value::as_i64)
        .filter(|s| *s != 0)
    {
        Some(sig) => format!("Signal:{sig}"),
        None => format!(
            "ExitCode:{}",
            term.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
        ),
    }
}

/// The reason while init containers run, or None once they are done.
fn init_reason(o: &Value) -> Option<String> {
    let total = arr(o, "/spec/initContainers").len();
    for (i, c) in arr(o, "/status/initContainerStatuses").iter().enumerate() {
        let terminated = c.pointer("/state/terminated");
        if terminated
            .and_then(|t| t.get("exitCode"))
            .and_then(Value::as_i64)
            == Some(0)
        {
            continue;
        }
        if is_sidecar(o, &status_name(c)) && is_true(c.get("started")) {
            continue;
        }
        if let Some(term) = terminated {
            return Some(format!("Init:{}", terminated_text(term)));
        }
        let waiting = s(c.pointer("/state/waiting/reason"));
        if !waiting.is_empty() && waiting != "PodInitializing" {
            return Some(format!("Init:{waiting}"));
        }
        return Some(format!("Init:{i}/{total}"));
    }
    None
}

/// The STATUS column of `kubectl get pods`.
pub(super) fn pod_status(o: &Value) -> String {
    let status_reason = s(ptr(o, "/status/reason"));
    let mut reason = if status_reason.is_empty() {
        s(ptr(o, "/status/phase"))
    } else {
        status_reason.clone()
    };
    match init_reason(o) {
        Some(r) => reason = r,
        None => {
            let mut has_running = false;
            for c in arr(o, "/status/containerStatuses").iter().rev() {
                let waiting = s(c.pointer("/state/waiting/reason"));
                if !waiting.is_empty() {
                    reason = waiting;
                } else if let Some(term) = c.pointer("/state/terminated") {
                    reason = terminated_text(term);
                } else if is_true(c.get("ready")) && c.pointer("/state/running").is_some() {
                    has_running = true;
                }
            }
            if reason == "Completed" && has_running {
                let ready = arr(o, "/status/conditions").iter().any(|c| {
                    c.get("type").and_then(Value::as_str) == Some("Ready")
                        && c.get("status").and_then(Value::as_str) == Some("True")
                });
                reason = if ready {
                    "Running".into()
                } else {
                    "NotReady".into()
                };
            }
        }
    }
    if ptr(o, "/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}
