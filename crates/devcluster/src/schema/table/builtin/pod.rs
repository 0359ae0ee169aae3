//! Cells of the pod table: READY, STATUS (as kubectl derives it), RESTARTS, READINESS GATES.

use serde_json::Value;

use super::{NONE, arr, ptr, s};

pub(super) fn pod_ready(o: &Value, _: i64) -> Value {
    let total = arr(o, "/spec/containers").len();
    let ready = arr(o, "/status/containerStatuses")
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    Value::String(format!("{ready}/{total}"))
}

pub(super) fn pod_restarts(o: &Value, now: i64) -> Value {
    let statuses = arr(o, "/status/containerStatuses");
    let restarts: i64 = statuses
        .iter()
        .map(|c| c.get("restartCount").and_then(Value::as_i64).unwrap_or(0))
        .sum();
    let last = statuses
        .iter()
        .filter_map(|c| {
            c.pointer("/lastState/terminated/finishedAt")
                .and_then(Value::as_str)
        })
        .filter_map(crate::schema::timefmt::parse_date_time)
        .max();
    Value::String(match last {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            crate::schema::timefmt::human_duration(now - t)
        ),
        _ => restarts.to_string(),
    })
}

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

/// The STATUS column of `kubectl get pods`.
pub(super) fn pod_status(o: &Value) -> String {
    let mut reason = s(ptr(o, "/status/phase"));
    let status_reason = s(ptr(o, "/status/reason"));
    if !status_reason.is_empty() {
        reason = status_reason.clone();
    }
    let init_statuses = arr(o, "/status/initContainerStatuses");
    let init_total = arr(o, "/spec/initContainers").len();
    let mut initializing = false;
    for (i, c) in init_statuses.iter().enumerate() {
        if let Some(term) = c.pointer("/state/terminated") {
            if term.get("exitCode").and_then(Value::as_i64) == Some(0) {
                continue;
            }
            let r = s(term.get("reason"));
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if let Some(sig) = term
                .get("signal")
                .and_then(Value::as_i64)
                .filter(|s| *s != 0)
            {
                format!("Init:Signal:{sig}")
            } else {
                format!(
                    "Init:ExitCode:{}",
                    term.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                )
            };
        } else if let Some(waiting) = c.pointer("/state/waiting")
            && let r = s(waiting.get("reason"))
            && !r.is_empty()
            && r != "PodInitializing"
        {
            reason = format!("Init:{r}");
        } else if c.get("started").and_then(Value::as_bool) == Some(true)
            && c.pointer("/state/running").is_some()
            && false_restartable(o, i)
        {
            continue;
        } else {
            reason = format!("Init:{i}/{init_total}");
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for c in arr(o, "/status/containerStatuses").iter().rev() {
            let waiting = s(c.pointer("/state/waiting/reason"));
            let term = c.pointer("/state/terminated");
            if !waiting.is_empty() {
                reason = waiting;
            } else if let Some(term) = term {
                let r = s(term.get("reason"));
                reason = if !r.is_empty() {
                    r
                } else if let Some(sig) = term
                    .get("signal")
                    .and_then(Value::as_i64)
                    .filter(|s| *s != 0)
                {
                    format!("Signal:{sig}")
                } else {
                    format!(
                        "ExitCode:{}",
                        term.get("exitCode").and_then(Value::as_i64).unwrap_or(0)
                    )
                };
            } else if c.get("ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some()
            {
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
    if ptr(o, "/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

/// Whether init container `i` is a restartable (sidecar) container, which keeps running.
fn false_restartable(o: &Value, i: usize) -> bool {
    arr(o, "/spec/initContainers")
        .get(i)
        .and_then(|c| c.get("restartPolicy"))
        .and_then(Value::as_str)
        == Some("Always")
}
