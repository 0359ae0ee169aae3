//! Table columns of the built-in kinds devcluster serves: the columns kubectl shows for them.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{CellSource, Column};

mod event;
mod node;
mod pod;
#[cfg(test)]
mod tests;

use event::*;
use node::*;
use pod::*;

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
        ]
        .into_iter()
        .chain(pod_template_wide_columns())
        .collect(),
        "Node" => vec![
            name,
            computed("Status", "string", "The node's readiness.", 0, node_status),
            computed("Roles", "string", "The node's roles.", 0, node_roles),
            age(),
            computed("Version", "string", "The kubelet version.", 0, |o, _| {
                Value::String(s(ptr(o, "/status/nodeInfo/kubeletVersion")))
            }),
            computed(
                "Internal-IP",
                "string",
                "The internal address.",
                1,
                node_internal_ip,
            ),
            computed(
                "External-IP",
                "string",
                "The external address.",
                1,
                node_external_ip,
            ),
            computed(
                "OS-Image",
                "string",
                "The operating system image.",
                1,
                node_os_image,
            ),
            computed(
                "Kernel-Version",
                "string",
                "The kernel version.",
                1,
                node_kernel_version,
            ),
            computed(
                "Container-Runtime",
                "string",
                "The container runtime and its version.",
                1,
                node_container_runtime,
            ),
        ],
        "ReplicaSet" => vec![
            name,
            computed("Desired", "integer", "Desired replicas.", 0, |o, _| {
                Value::from(int(o, "/spec/replicas"))
            }),
            computed("Current", "integer", "Current replicas.", 0, |o, _| {
                Value::from(int(o, "/status/replicas"))
            }),
            computed("Ready", "integer", "Ready replicas.", 0, |o, _| {
                Value::from(int(o, "/status/readyReplicas"))
            }),
            age(),
        ]
        .into_iter()
        .chain(pod_template_wide_columns())
        .collect(),
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

/// The `-o wide` columns of a workload with a Pod template (Deployment, ReplicaSet).
fn pod_template_wide_columns() -> [Column; 3] {
    [
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
    ]
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
