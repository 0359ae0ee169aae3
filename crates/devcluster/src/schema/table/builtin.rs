//! Table columns of the built-in kinds devcluster serves: the columns kubectl shows for them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CellSource, Column, age};

const NONE: &str = "<none>";

fn s(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or_default().to_string()
}

fn or_none(text: String) -> Value {
    Value::String(if text.is_empty() {
        NONE.to_string()
    } else {
        text
    })
}

fn ptr<'a>(obj: &'a Value, p: &str) -> Option<&'a Value> {
    obj.pointer(p)
}

fn arr<'a>(obj: &'a Value, p: &str) -> &'a [Value] {
    obj.pointer(p)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn computed(
    name: &str,
    column_type: &str,
    description: &str,
    priority: i64,
    f: fn(&Value, i64) -> Value,
) -> Column {
    Column::new(
        name,
        column_type,
        description,
        priority,
        CellSource::Computed(f),
    )
}

fn age_string(name: &str, description: &str) -> Column {
    // Built-in printers send ages as strings in "string"-typed columns.
    Column::new(name, "string", description, 0, CellSource::Age)
}

fn created_at() -> Column {
    Column::new(
        "Created At",
        "date",
        "CreationTimestamp is the time the server created this object, in UTC (RFC 3339).",
        0,
        CellSource::CreatedAt,
    )
}

/// The columns of a built-in kind (by `kind`, e.g. `Pod`); unknown kinds get the server's
/// default table, Name and Created At.
pub fn builtin_columns(kind: &str) -> Vec<Column> {
    let name = Column::name_column();
    let age = || age_string("Age", "Time since the object was created.");
    match kind {
        "Pod" => vec![
            name,
            computed(
                "Ready",
                "string",
                "Ready containers out of all containers.",
                0,
                pod_ready,
            ),
            computed(
                "Status",
                "string",
                "The aggregate state of the pod's containers.",
                0,
                |o, _| Value::String(pod_status(o)),
            ),
            computed(
                "Restarts",
                "string",
                "Container restarts, and how long ago the last one was.",
                0,
                pod_restarts,
            ),
            age(),
            computed("IP", "string", "The pod's IP address.", 1, |o, _| {
                or_none(s(ptr(o, "/status/podIP")))
            }),
            computed(
                "Node",
                "string",
                "The node the pod is bound to.",
                1,
                |o, _| or_none(s(ptr(o, "/spec/nodeName"))),
            ),
            computed(
                "Nominated Node",
                "string",
                "The node nominated by preemption.",
                1,
                |o, _| or_none(s(ptr(o, "/status/nominatedNodeName"))),
            ),
            computed(
                "Readiness Gates",
                "string",
                "Readiness gates that are true out of all.",
                1,
                pod_readiness_gates,
            ),
        ],
        "Service" => vec![
            name,
            computed("Type", "string", "The service type.", 0, |o, _| {
                Value::String(s(ptr(o, "/spec/type")).if_empty("ClusterIP"))
            }),
            computed("Cluster-IP", "string", "The cluster IP.", 0, |o, _| {
                or_none(s(ptr(o, "/spec/clusterIP")))
            }),
            computed(
                "External-IP",
                "string",
                "External addresses.",
                0,
                service_external_ip,
            ),
            computed(
                "Port(s)",
                "string",
                "Ports the service exposes.",
                0,
                service_ports,
            ),
            age(),
            computed("Selector", "string", "The pod selector.", 1, |o, _| {
                or_none(format_labels(ptr(o, "/spec/selector")))
            }),
        ],
        "Namespace" => vec![
            name,
            computed("Status", "string", "The namespace phase.", 0, |o, _| {
                Value::String(s(ptr(o, "/status/phase")))
            }),
            age(),
        ],
        "ConfigMap" => vec![
            name,
            computed("Data", "integer", "Number of keys.", 0, |o, _| {
                Value::from(count_keys(o, "/data") + count_keys(o, "/binaryData"))
            }),
            age(),
        ],
        "Secret" => vec![
            name,
            computed("Type", "string", "The secret type.", 0, |o, _| {
                Value::String(s(ptr(o, "/type")))
            }),
            computed("Data", "integer", "Number of keys.", 0, |o, _| {
                Value::from(count_keys(o, "/data") + count_keys(o, "/stringData"))
            }),
            age(),
        ],
        "ServiceAccount" => vec![
            name,
            computed(
                "Secrets",
                "integer",
                "Number of token secrets.",
                0,
                |o, _| Value::from(arr(o, "/secrets").len()),
            ),
            age(),
        ],
        "Event" => vec![
            computed(
                "Last Seen",
                "string",
                "Time since the event was last seen.",
                0,
                event_last_seen,
            ),
            computed("Type", "string", "Normal or Warning.", 0, |o, _| {
                Value::String(s(ptr(o, "/type")))
            }),
            computed("Reason", "string", "Why the event happened.", 0, |o, _| {
                Value::String(s(ptr(o, "/reason")))
            }),
            computed(
                "Object",
                "string",
                "The object the event is about.",
                0,
                event_object,
            ),
            computed(
                "Subobject",
                "string",
                "The part of the object the event is about.",
                1,
                |o, _| {
                    Value::String(s(ptr(o, "/involvedObject/fieldPath")
                        .or_else(|| ptr(o, "/regarding/fieldPath"))))
                },
            ),
            computed(
                "Source",
                "string",
                "Who reported the event.",
                1,
                event_source,
            ),
            computed("Message", "string", "What happened.", 0, |o, _| {
                Value::String(s(ptr(o, "/message").or_else(|| ptr(o, "/note"))))
            }),
            computed(
                "First Seen",
                "string",
                "Time since the event was first seen.",
                1,
                event_first_seen,
            ),
            computed(
                "Count",
                "integer",
                "How often the event happened.",
                1,
                event_count,
            ),
            computed("Name", "string", "The event's name.", 1, |o, _| {
                Value::String(s(ptr(o, "/metadata/name")))
            }),
        ],
        "Lease" => vec![
            name,
            computed("Holder", "string", "The current holder.", 0, |o, _| {
                Value::String(s(ptr(o, "/spec/holderIdentity")))
            }),
            age(),
        ],
        "PersistentVolumeClaim" => vec![
            name,
            computed("Status", "string", "The claim phase.", 0, |o, _| {
                if ptr(o, "/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
                    Value::String("Terminating".into())
                } else {
                    Value::String(s(ptr(o, "/status/phase")))
                }
            }),
            computed("Volume", "string", "The bound volume.", 0, |o, _| {
                Value::String(s(ptr(o, "/spec/volumeName")))
            }),
            computed("Capacity", "string", "The bound capacity.", 0, |o, _| {
                Value::String(s(ptr(o, "/status/capacity/storage")))
            }),
            computed(
                "Access Modes",
                "string",
                "How the volume may be mounted.",
                0,
                pvc_access_modes,
            ),
            computed("StorageClass", "string", "The storage class.", 0, |o, _| {
                Value::String(s(ptr(o, "/spec/storageClassName")))
            }),
            computed(
                "VolumeAttributesClass",
                "string",
                "The volume attributes class.",
                0,
                |o, _| {
                    Value::String(s(ptr(o, "/spec/volumeAttributesClassName")).if_empty("<unset>"))
                },
            ),
            age(),
            computed("VolumeMode", "string", "Filesystem or Block.", 1, |o, _| {
                Value::String(s(ptr(o, "/spec/volumeMode")))
            }),
        ],
        "NetworkPolicy" => vec![
            name,
            computed(
                "Pod-Selector",
                "string",
                "The pods the policy applies to.",
                0,
                |o, _| or_none(format_label_selector(ptr(o, "/spec/podSelector"))),
            ),
            age(),
        ],
        "Deployment" => vec![
            name,
            computed(
                "Ready",
                "string",
                "Ready replicas out of desired.",
                0,
                |o, _| {
                    Value::String(format!(
                        "{}/{}",
                        int(o, "/status/readyReplicas"),
                        int(o, "/spec/replicas")
                    ))
                },
            ),
            computed(
                "Up-to-date",
                "integer",
                "Replicas on the current template.",
                0,
                |o, _| Value::from(int(o, "/status/updatedReplicas")),
            ),
            computed("Available", "integer", "Available replicas.", 0, |o, _| {
                Value::from(int(o, "/status/availableReplicas"))
            }),
            age(),
            computed("Containers", "string", "Container names.", 1, |o, _| {
                Value::String(join_field(arr(o, "/spec/template/spec/containers"), "name"))
            }),
            computed("Images", "string", "Container images.", 1, |o, _| {
                Value::String(join_field(
                    arr(o, "/spec/template/spec/containers"),
                    "image",
                ))
            }),
            computed("Selector", "string", "The pod selector.", 1, |o, _| {
                or_none(format_label_selector(ptr(o, "/spec/selector")))
            }),
        ],
        "RoleBinding" | "ClusterRoleBinding" => vec![
            name,
            computed("Role", "string", "The bound role.", 0, |o, _| {
                Value::String(format!(
                    "{}/{}",
                    s(ptr(o, "/roleRef/kind")),
                    s(ptr(o, "/roleRef/name"))
                ))
            }),
            age(),
            computed("Users", "string", "Bound users.", 1, |o, _| {
                Value::String(subjects(o, "User"))
            }),
            computed("Groups", "string", "Bound groups.", 1, |o, _| {
                Value::String(subjects(o, "Group"))
            }),
            computed(
                "ServiceAccounts",
                "string",
                "Bound service accounts.",
                1,
                |o, _| Value::String(subjects(o, "ServiceAccount")),
            ),
        ],
        _ => vec![name, created_at()],
    }
}

trait IfEmpty {
    fn if_empty(self, fallback: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, fallback: &str) -> String {
        if self.is_empty() {
            fallback.to_string()
        } else {
            self
        }
    }
}

fn int(obj: &Value, p: &str) -> i64 {
    ptr(obj, p).and_then(Value::as_i64).unwrap_or(0)
}

fn count_keys(obj: &Value, p: &str) -> usize {
    ptr(obj, p)
        .and_then(Value::as_object)
        .map_or(0, |m| m.len())
}

fn join_field(items: &[Value], field: &str) -> String {
    items
        .iter()
        .map(|i| s(i.get(field)))
        .collect::<Vec<_>>()
        .join(",")
}

fn subjects(obj: &Value, kind: &str) -> String {
    arr(obj, "/subjects")
        .iter()
        .filter(|sub| sub.get("kind").and_then(Value::as_str) == Some(kind))
        .map(|sub| {
            let n = s(sub.get("name"));
            match (kind, sub.get("namespace").and_then(Value::as_str)) {
                ("ServiceAccount", Some(ns)) => format!("{ns}/{n}"),
                _ => n,
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `a=b,c=d` from a string map, sorted by key.
fn format_labels(map: Option<&Value>) -> String {
    let Some(map) = map.and_then(Value::as_object) else {
        return String::new();
    };
    let sorted: BTreeMap<&String, String> = map.iter().map(|(k, v)| (k, s(Some(v)))).collect();
    sorted
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A `LabelSelector` as kubectl prints it: `a=b,tier in (x,y),!gone`.
fn format_label_selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel else { return String::new() };
    let mut parts: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            parts.push((k.clone(), format!("{k}={}", s(Some(v)))));
        }
    }
    for expr in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let key = s(expr.get("key"));
        let mut values: Vec<String> = expr
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().map(|x| s(Some(x))).collect())
            .unwrap_or_default();
        values.sort();
        let text = match expr
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        parts.push((key, text));
    }
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    parts
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

fn pod_ready(o: &Value, _: i64) -> Value {
    let total = arr(o, "/spec/containers").len();
    let ready = arr(o, "/status/containerStatuses")
        .iter()
        .filter(|c| c.get("ready").and_then(Value::as_bool) == Some(true))
        .count();
    Value::String(format!("{ready}/{total}"))
}

fn pod_restarts(o: &Value, now: i64) -> Value {
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
        .filter_map(super::timefmt::parse_date_time)
        .max();
    Value::String(match last {
        Some(t) if restarts != 0 => format!(
            "{restarts} ({} ago)",
            super::timefmt::human_duration(now - t)
        ),
        _ => restarts.to_string(),
    })
}

fn pod_readiness_gates(o: &Value, _: i64) -> Value {
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
fn pod_status(o: &Value) -> String {
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

fn service_external_ip(o: &Value, _: i64) -> Value {
    let external: Vec<String> = arr(o, "/spec/externalIPs")
        .iter()
        .map(|v| s(Some(v)))
        .collect();
    let text = match s(ptr(o, "/spec/type")).as_str() {
        "LoadBalancer" => {
            let mut ips: Vec<String> = arr(o, "/status/loadBalancer/ingress")
                .iter()
                .map(|i| {
                    let ip = s(i.get("ip"));
                    if ip.is_empty() {
                        s(i.get("hostname"))
                    } else {
                        ip
                    }
                })
                .filter(|x| !x.is_empty())
                .collect();
            ips.extend(external);
            if ips.is_empty() {
                "<pending>".to_string()
            } else {
                ips.join(",")
            }
        }
        "ExternalName" => s(ptr(o, "/spec/externalName")),
        _ => external.join(","),
    };
    or_none(text)
}

fn service_ports(o: &Value, _: i64) -> Value {
    let ports: Vec<String> = arr(o, "/spec/ports")
        .iter()
        .map(|p| {
            let port = p.get("port").and_then(Value::as_i64).unwrap_or(0);
            let proto = s(p.get("protocol")).if_empty("TCP");
            match p.get("nodePort").and_then(Value::as_i64).filter(|n| *n > 0) {
                Some(np) => format!("{port}:{np}/{proto}"),
                None => format!("{port}/{proto}"),
            }
        })
        .collect();
    or_none(ports.join(","))
}

fn pvc_access_modes(o: &Value, _: i64) -> Value {
    let modes = arr(o, "/status/accessModes");
    let modes = if modes.is_empty() {
        arr(o, "/spec/accessModes")
    } else {
        modes
    };
    let short: Vec<&str> = modes
        .iter()
        .filter_map(Value::as_str)
        .map(|m| match m {
            "ReadWriteOnce" => "RWO",
            "ReadOnlyMany" => "ROX",
            "ReadWriteMany" => "RWX",
            "ReadWriteOncePod" => "RWOP",
            other => other,
        })
        .collect();
    Value::String(short.join(","))
}

fn event_time(o: &Value, fields: &[&str]) -> Option<Value> {
    fields.iter().find_map(|f| {
        ptr(o, f)
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
    })
}

fn event_last_seen(o: &Value, now: i64) -> Value {
    let t = event_time(
        o,
        &[
            "/series/lastObservedTime",
            "/lastTimestamp",
            "/deprecatedLastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ],
    );
    Value::String(age(t.as_ref(), now))
}

fn event_first_seen(o: &Value, now: i64) -> Value {
    let t = event_time(
        o,
        &[
            "/firstTimestamp",
            "/deprecatedFirstTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ],
    );
    Value::String(age(t.as_ref(), now))
}

fn event_count(o: &Value, _: i64) -> Value {
    let n = ptr(o, "/series/count")
        .or_else(|| ptr(o, "/count"))
        .or_else(|| ptr(o, "/deprecatedCount"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    Value::from(n)
}

fn event_object(o: &Value, _: i64) -> Value {
    let obj = ptr(o, "/involvedObject").or_else(|| ptr(o, "/regarding"));
    let kind = s(obj.and_then(|x| x.get("kind"))).to_lowercase();
    let name = s(obj.and_then(|x| x.get("name")));
    Value::String(format!("{kind}/{name}"))
}

fn event_source(o: &Value, _: i64) -> Value {
    let component =
        s(ptr(o, "/source/component").or_else(|| ptr(o, "/deprecatedSource/component")));
    let host = s(ptr(o, "/source/host").or_else(|| ptr(o, "/deprecatedSource/host")));
    let (first, second) = if component.is_empty() {
        (
            s(ptr(o, "/reportingController")),
            s(ptr(o, "/reportingInstance")),
        )
    } else {
        (component, host)
    };
    Value::String(if second.is_empty() {
        first
    } else {
        format!("{first}, {second}")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::{IncludeObject, render};
    use super::*;

    const NOW: i64 = 1_709_294_400; // 2024-03-01T12:00:00Z

    fn one_row(kind: &str, obj: Value) -> (Vec<String>, Vec<i64>, Value) {
        let cols = builtin_columns(kind);
        let table = render(&cols, &[obj], IncludeObject::None, Value::Null, NOW);
        let defs = table["columnDefinitions"].as_array().unwrap();
        let names = defs
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        let prios = defs
            .iter()
            .map(|d| d["priority"].as_i64().unwrap())
            .collect();
        (names, prios, table["rows"][0]["cells"].clone())
    }

    #[test]
    fn running_pod_row() {
        let (names, prios, cells) = one_row(
            "Pod",
            json!({
                "metadata": {"name": "web", "creationTimestamp": "2024-03-01T11:59:00Z"},
                "spec": {"nodeName": "node-1", "containers": [{"name": "a"}, {"name": "b"}]},
                "status": {"phase": "Running", "podIP": "127.0.1.5", "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 0, "state": {"running": {}}},
                    {"name": "b", "ready": true, "restartCount": 2, "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-03-01T11:55:00Z"}}}
                ]}
            }),
        );
        assert_eq!(
            names,
            [
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        assert_eq!(prios, [0, 0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(
            cells,
            json!([
                "web",
                "2/2",
                "Running",
                "2 (5m ago)",
                "60s",
                "127.0.1.5",
                "node-1",
                "<none>",
                "<none>"
            ])
        );
    }

    #[test]
    fn pod_status_reflects_waiting_terminating_and_init_states() {
        let pending = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "containerStatuses": [{"name": "a", "ready": false, "state": {"waiting": {"reason": "ContainerCreating"}}}]}});
        assert_eq!(pod_status(&pending), "ContainerCreating");
        let mut deleting = pending.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2024-03-01T12:00:00Z");
        assert_eq!(pod_status(&deleting), "Terminating");
        let init = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
            "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"running": {}}}]}});
        assert_eq!(pod_status(&init), "Init:0/1");
        let failed = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 137}}}]}});
        assert_eq!(pod_status(&failed), "ExitCode:137");
        let unschedulable = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Pending"}});
        assert_eq!(pod_status(&unschedulable), "Pending");
    }

    #[test]
    fn service_rows() {
        let (names, _, cells) = one_row(
            "Service",
            json!({"metadata": {"name": "svc", "creationTimestamp": "2024-03-01T09:00:00Z"},
                   "spec": {"type": "NodePort", "clusterIP": "10.96.0.10", "selector": {"b": "2", "a": "1"},
                            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}}),
        );
        assert_eq!(
            names,
            [
                "Name",
                "Type",
                "Cluster-IP",
                "External-IP",
                "Port(s)",
                "Age",
                "Selector"
            ]
        );
        assert_eq!(
            cells,
            json!([
                "svc",
                "NodePort",
                "10.96.0.10",
                "<none>",
                "80:30080/TCP,53/UDP",
                "3h",
                "a=1,b=2"
            ])
        );
        let (_, _, headless) = one_row(
            "Service",
            json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}}),
        );
        assert_eq!(
            headless,
            json!([
                "h",
                "ClusterIP",
                "None",
                "<none>",
                "<none>",
                "<unknown>",
                "<none>"
            ])
        );
    }

    #[test]
    fn small_kinds() {
        let (_, _, cm) = one_row(
            "ConfigMap",
            json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": ""}}),
        );
        assert_eq!(cm, json!(["c", 3, "<unknown>"]));
        let (_, _, secret) = one_row(
            "Secret",
            json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}}),
        );
        assert_eq!(secret, json!(["s", "Opaque", 1, "<unknown>"]));
        let (_, _, ns) = one_row(
            "Namespace",
            json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}}),
        );
        assert_eq!(ns, json!(["default", "Active", "<unknown>"]));
        let (_, _, lease) = one_row(
            "Lease",
            json!({"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}),
        );
        assert_eq!(lease, json!(["l", "me", "<unknown>"]));
        let (names, _, np) = one_row(
            "NetworkPolicy",
            json!({"metadata": {"name": "np"}, "spec": {"podSelector": {
            "matchLabels": {"app": "x"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}, {"key": "gone", "operator": "DoesNotExist"}]}}}),
        );
        assert_eq!(names, ["Name", "Pod-Selector", "Age"]);
        assert_eq!(np, json!(["np", "app=x,!gone,tier in (a,b)", "<unknown>"]));
        let (_, _, pvc) = one_row(
            "PersistentVolumeClaim",
            json!({"metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "standard", "volumeName": "pv-1", "volumeMode": "Filesystem"},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}}),
        );
        assert_eq!(
            pvc,
            json!([
                "data",
                "Bound",
                "pv-1",
                "1Gi",
                "RWO",
                "standard",
                "<unset>",
                "<unknown>",
                "Filesystem"
            ])
        );
        let (_, _, dep) = one_row(
            "Deployment",
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": "d"}}, "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
        );
        assert_eq!(
            dep,
            json!(["d", "2/3", 3, 2, "<unknown>", "c", "nginx", "app=d"])
        );
    }

    #[test]
    fn events_and_fallback() {
        let (names, _, ev) = one_row(
            "Event",
            json!({"metadata": {"name": "e1"}, "type": "Normal", "reason": "Scheduled",
            "involvedObject": {"kind": "Pod", "name": "web"}, "message": "assigned", "source": {"component": "scheduler"},
            "lastTimestamp": "2024-03-01T11:59:30Z", "firstTimestamp": "2024-03-01T11:50:00Z", "count": 4}),
        );
        assert_eq!(
            names,
            [
                "Last Seen",
                "Type",
                "Reason",
                "Object",
                "Subobject",
                "Source",
                "Message",
                "First Seen",
                "Count",
                "Name"
            ]
        );
        assert_eq!(
            ev,
            json!([
                "30s",
                "Normal",
                "Scheduled",
                "pod/web",
                "",
                "scheduler",
                "assigned",
                "10m",
                4,
                "e1"
            ])
        );
        let (_, _, new_style) = one_row(
            "Event",
            json!({"metadata": {"name": "e2"}, "type": "Warning", "reason": "R",
            "regarding": {"kind": "Sandbox", "name": "sb"}, "note": "n", "reportingController": "ctl", "reportingInstance": "i-1",
            "eventTime": "2024-03-01T11:58:00.000000Z"}),
        );
        assert_eq!(
            new_style,
            json!([
                "2m",
                "Warning",
                "R",
                "sandbox/sb",
                "",
                "ctl, i-1",
                "n",
                "2m",
                1,
                "e2"
            ])
        );
        let (names, _, crd) = one_row(
            "CustomResourceDefinition",
            json!({"metadata": {"name": "x.y", "creationTimestamp": "2024-03-01T11:00:00+01:00"}}),
        );
        assert_eq!(names, ["Name", "Created At"]);
        assert_eq!(crd, json!(["x.y", "2024-03-01T10:00:00Z"]));
        let (_, _, rb) = one_row(
            "RoleBinding",
            json!({"metadata": {"name": "rb"}, "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}, {"kind": "User", "name": "u"}]}),
        );
        assert_eq!(rb, json!(["rb", "Role/r", "<unknown>", "u", "", "ns/sa"]));
    }
}
