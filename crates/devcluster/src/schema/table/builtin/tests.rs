//! Rows of the built-in tables.
use serde_json::json;

use super::super::{IncludeObject, render};
use super::pod::pod_status;
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
    let init_failed = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}});
    assert_eq!(pod_status(&init_failed), "Init:Error");
}

#[test]
fn sidecars_count_as_containers_once_started() {
    let (_, _, cells) = one_row(
        "Pod",
        json!({
            "metadata": {"name": "with-sidecar"},
            "spec": {"initContainers": [{"name": "proxy", "restartPolicy": "Always"}], "containers": [{"name": "app"}]},
            "status": {"phase": "Running",
                "initContainerStatuses": [{"name": "proxy", "started": true, "ready": true, "restartCount": 1, "state": {"running": {}}}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "state": {"running": {}}}]}
        }),
    );
    assert_eq!(cells[1], "2/2");
    assert_eq!(cells[2], "Running");
    assert_eq!(cells[3], "1");
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

#[test]
fn node_rows_show_status_roles_and_version() {
    let (names, prios, cells) = one_row(
        "Node",
        json!({
            "metadata": {"name": "node-0", "creationTimestamp": "2024-03-01T11:00:00Z", "labels": {
                "node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker",
                "kubernetes.io/hostname": "node-0"}},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.2"}],
                "nodeInfo": {"kubeletVersion": "v1.36.0", "containerRuntimeVersion": "sim://1"},
            },
        }),
    );
    assert_eq!(
        names,
        [
            "Name",
            "Status",
            "Roles",
            "Age",
            "Version",
            "Internal-IP",
            "External-IP",
            "OS-Image",
            "Kernel-Version",
            "Container-Runtime"
        ]
    );
    assert_eq!(prios, [0, 0, 0, 0, 0, 1, 1, 1, 1, 1]);
    assert_eq!(
        cells,
        json!([
            "node-0",
            "Ready,SchedulingDisabled",
            "control-plane,worker",
            "60m",
            "v1.36.0",
            "127.0.0.2",
            "<none>",
            "<unknown>",
            "<unknown>",
            "sim://1"
        ])
    );
    let (_, _, cells) = one_row(
        "Node",
        json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
    );
    assert_eq!(cells[1], "NotReady");
    assert_eq!(cells[2], "<none>");
    let (_, _, cells) = one_row("Node", json!({"metadata": {"name": "n"}}));
    assert_eq!(cells[1], "Unknown");
}

#[test]
fn replica_set_rows() {
    let (names, _, cells) = one_row(
        "ReplicaSet",
        json!({
            "metadata": {"name": "web-5d4f", "creationTimestamp": "2024-03-01T11:59:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1},
        }),
    );
    assert_eq!(
        names,
        [
            "Name",
            "Desired",
            "Current",
            "Ready",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        cells,
        json!(["web-5d4f", 3, 2, 1, "60s", "c", "nginx", "app=web"])
    );
}
