//! Cells of the node table (`kubectl get nodes`: NAME STATUS ROLES AGE VERSION, and the wide
//! columns).

use serde_json::Value;

use super::{arr, ptr, s};

/// `Ready`, `NotReady` or `Unknown` from the Ready condition, with `SchedulingDisabled` when
/// the node is cordoned.
pub(super) fn node_status(o: &Value, _now: i64) -> Value {
    let ready = arr(o, "/status/conditions")
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .and_then(|c| c.get("status").and_then(Value::as_str));
    let mut parts = vec![match ready {
        Some("True") => "Ready",
        Some("False") => "NotReady",
        _ => "Unknown",
    }];
    if ptr(o, "/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        parts.push("SchedulingDisabled");
    }
    Value::String(parts.join(","))
}

/// Roles from `node-role.kubernetes.io/ROLE` labels and the `kubernetes.io/role` label.
pub(super) fn node_roles(o: &Value, _now: i64) -> Value {
    let mut roles: Vec<String> = ptr(o, "/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                (!role.is_empty()).then(|| role.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().filter(|r| !r.is_empty()).map(String::from)
            } else {
                None
            }
        })
        .collect();
    roles.sort();
    roles.dedup();
    Value::String(if roles.is_empty() {
        super::NONE.to_string()
    } else {
        roles.join(",")
    })
}

fn address(o: &Value, kind: &str) -> String {
    arr(o, "/status/addresses")
        .iter()
        .find(|a| a.get("type").and_then(Value::as_str) == Some(kind))
        .map(|a| s(a.get("address")))
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| super::NONE.to_string())
}

pub(super) fn node_internal_ip(o: &Value, _now: i64) -> Value {
    Value::String(address(o, "InternalIP"))
}

pub(super) fn node_external_ip(o: &Value, _now: i64) -> Value {
    Value::String(address(o, "ExternalIP"))
}

fn info_or_unknown(o: &Value, field: &str) -> Value {
    let v = s(ptr(o, &format!("/status/nodeInfo/{field}")));
    Value::String(if v.is_empty() {
        "<unknown>".to_string()
    } else {
        v
    })
}

pub(super) fn node_os_image(o: &Value, _now: i64) -> Value {
    info_or_unknown(o, "osImage")
}

pub(super) fn node_kernel_version(o: &Value, _now: i64) -> Value {
    info_or_unknown(o, "kernelVersion")
}

pub(super) fn node_container_runtime(o: &Value, _now: i64) -> Value {
    info_or_unknown(o, "containerRuntimeVersion")
}
