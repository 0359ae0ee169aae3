use super::*;
use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

fn pod(value: Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn web_pod() -> Pod {
    pod(json!({
        "metadata": { "name": "web", "namespace": "team", "uid": "1234", "generation": 2 },
        "spec": {
            "nodeName": "devcluster-node-0",
            "initContainers": [
                { "name": "setup", "image": "busybox:1.36" },
                { "name": "proxy", "image": "envoy:v1", "restartPolicy": "Always" }
            ],
            "containers": [
                { "name": "app", "image": "registry.example:5000/team/app:v2" },
                { "name": "log", "image": "fluent-bit" }
            ]
        },
        "status": { "phase": "Pending", "conditions": [
            { "type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z" },
            { "type": "example.com/Gate", "status": "True", "lastTransitionTime": "2026-01-01T00:00:01Z" }
        ] }
    }))
}

const NOW: &str = "2026-01-01T00:00:05Z";

fn start(pod: &Pod, outcome: Outcome) -> PodStatus {
    let patch = start_patch(
        pod,
        &StartContext {
            node_ip: "127.0.1.1",
            pod_ip: "127.2.0.7",
            now: NOW,
            outcome,
        },
    );
    // The patch must be a valid PodStatus as clients will read it.
    serde_json::from_value(patch["status"].clone()).unwrap()
}

fn cond<'a>(status: &'a PodStatus, type_: &str) -> &'a PodCondition {
    status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn running_status_is_ready_with_addresses_and_containers() {
    let s = start(&web_pod(), Outcome::Running);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ] {
        assert_eq!(cond(&s, t).status, "True", "{t}");
        assert_eq!(cond(&s, t).observed_generation, Some(2));
    }
    assert_eq!(
        format_time(
            cond(&s, "PodScheduled")
                .last_transition_time
                .as_ref()
                .unwrap()
                .0
        ),
        "2026-01-01T00:00:00Z",
        "an unchanged condition keeps its transition time"
    );
    assert_eq!(
        format_time(cond(&s, "Ready").last_transition_time.as_ref().unwrap().0),
        NOW
    );
    assert_eq!(
        cond(&s, "example.com/Gate").status,
        "True",
        "other writers' conditions are kept"
    );
    assert_eq!(s.pod_ip.as_deref(), Some("127.2.0.7"));
    assert_eq!(s.pod_ips.as_ref().unwrap()[0].ip, "127.2.0.7");
    assert_eq!(s.host_ip.as_deref(), Some("127.0.1.1"));
    assert_eq!(s.host_ips.as_ref().unwrap()[0].ip, "127.0.1.1");
    assert_eq!(format_time(s.start_time.as_ref().unwrap().0), NOW);
    assert_eq!(s.observed_generation, Some(2));

    let containers = s.container_statuses.as_ref().unwrap();
    assert_eq!(containers.len(), 2);
    let app = &containers[0];
    assert_eq!(app.name, "app");
    assert!(app.ready && app.started == Some(true));
    assert_eq!(app.restart_count, 0);
    assert!(app.state.as_ref().unwrap().running.is_some());
    assert_eq!(app.image, "registry.example:5000/team/app:v2");
    assert!(
        app.image_id
            .starts_with("registry.example:5000/team/app@sha256:"),
        "{}",
        app.image_id
    );
    assert!(
        app.container_id
            .as_deref()
            .unwrap()
            .starts_with("containerd://")
    );
    assert_ne!(app.container_id, containers[1].container_id);

    let init = s.init_container_statuses.as_ref().unwrap();
    let setup = init[0].state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (setup.exit_code, setup.reason.as_deref()),
        (0, Some("Completed"))
    );
    assert!(
        init[1].state.as_ref().unwrap().running.is_some(),
        "sidecars keep running"
    );
}

#[test]
fn failed_status_terminates_the_first_container_with_exit_code_1() {
    let s = start(&web_pod(), Outcome::Failed);
    assert_eq!(s.phase.as_deref(), Some("Failed"));
    assert_eq!(cond(&s, "Ready").status, "False");
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodFailed"));
    assert_eq!(cond(&s, "ContainersReady").status, "False");
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
    let app = &s.container_statuses.as_ref().unwrap()[0];
    let terminated = app.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert!(!app.ready);
}

#[test]
fn crash_loop_status_waits_in_back_off_and_is_not_ready() {
    let s = start(&web_pod(), Outcome::CrashLoop);
    assert_eq!(s.phase.as_deref(), Some("Running"));
    let ready = cond(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ContainersNotReady"));
    assert_eq!(
        ready.message.as_deref(),
        Some("containers with unready status: [app]")
    );
    let app = &s.container_statuses.as_ref().unwrap()[0];
    let waiting = app.state.as_ref().unwrap().waiting.as_ref().unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("CrashLoopBackOff"));
    assert!(
        waiting
            .message
            .as_deref()
            .unwrap()
            .contains("pod=web_team(1234)")
    );
    assert_eq!(app.restart_count, 1);
    assert_eq!(
        app.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
    assert!(
        s.container_statuses.as_ref().unwrap()[1].ready,
        "the other container runs"
    );
}

#[test]
fn unmet_readiness_gates_keep_ready_false() {
    let mut v = serde_json::to_value(web_pod()).unwrap();
    v["spec"]["readinessGates"] =
        json!([{ "conditionType": "example.com/Gate" }, { "conditionType": "example.com/Other" }]);
    let s = start(&pod(v), Outcome::Running);
    assert_eq!(cond(&s, "ContainersReady").status, "True");
    let ready = cond(&s, "Ready");
    assert_eq!(ready.status, "False");
    assert_eq!(ready.reason.as_deref(), Some("ReadinessGatesNotReady"));
    assert!(
        ready
            .message
            .as_deref()
            .unwrap()
            .contains("example.com/Other")
    );
}

#[test]
fn unschedulable_patch_keeps_the_pod_pending_with_a_reason() {
    let p = pod(json!({ "metadata": { "name": "p" }, "spec": { "containers": [] } }));
    assert!(!is_marked_unschedulable(&p));
    let patch = unschedulable_patch(&p, 3, NOW);
    let s: PodStatus = serde_json::from_value(patch["status"].clone()).unwrap();
    assert_eq!(s.phase.as_deref(), Some("Pending"));
    let c = cond(&s, "PodScheduled");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("Unschedulable"))
    );
    assert!(
        c.message
            .as_deref()
            .unwrap()
            .starts_with("0/3 nodes are available")
    );
    let marked = pod(
        json!({ "metadata": { "name": "p" }, "spec": { "containers": [] }, "status": patch["status"] }),
    );
    assert!(is_marked_unschedulable(&marked));
}

#[test]
fn started_means_status_written_by_a_kubelet() {
    let mut p = web_pod();
    assert!(!is_started(&p));
    let patch = start_patch(
        &p,
        &StartContext {
            node_ip: "127.0.1.1",
            pod_ip: "127.2.0.1",
            now: NOW,
            outcome: Outcome::Running,
        },
    );
    p.status = Some(serde_json::from_value(patch["status"].clone()).unwrap());
    assert!(is_started(&p));
}

#[test]
fn binding_targets_the_node() {
    let b = binding("team", "web", Some("1234"), "devcluster-node-2");
    let parsed: k8s_openapi::api::core::v1::Binding = serde_json::from_value(b).unwrap();
    assert_eq!(parsed.target.name.as_deref(), Some("devcluster-node-2"));
    assert_eq!(parsed.target.kind.as_deref(), Some("Node"));
    assert_eq!(parsed.metadata.uid.as_deref(), Some("1234"));
}

#[test]
fn pvc_bound_patch_reports_requested_capacity() {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": "data" },
        "spec": { "accessModes": ["ReadWriteMany"], "resources": { "requests": { "storage": "5Gi" } } }
    }))
    .unwrap();
    assert_eq!(
        pvc_bound_patch(&pvc),
        json!({ "status": { "phase": "Bound", "accessModes": ["ReadWriteMany"], "capacity": { "storage": "5Gi" } } })
    );
    let bare: PersistentVolumeClaim =
        serde_json::from_value(json!({ "metadata": { "name": "x" }, "spec": {} })).unwrap();
    assert_eq!(
        pvc_bound_patch(&bare),
        json!({ "status": { "phase": "Bound", "accessModes": ["ReadWriteOnce"] } })
    );
}

#[test]
fn containers_patch_reports_exits_restarts_and_the_terminal_phase() {
    use crate::nodes::kubelet::{Exit, Run, State};
    let ts = |t: &str| t.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    let mut p = web_pod();
    let running = start_patch(
        &p,
        &StartContext {
            node_ip: "127.0.1.1",
            pod_ip: "127.2.0.1",
            now: NOW,
            outcome: Outcome::Running,
        },
    );
    p.status = Some(serde_json::from_value(running["status"].clone()).unwrap());
    assert!(!is_terminal(&p));
    let exited = |name: &str, code: i32| Run {
        name: name.into(),
        restart_count: 0,
        state: State::Exited(Exit {
            code,
            reason: if code == 0 { "Completed" } else { "Error" },
            started: ts(NOW),
            finished: ts("2026-01-01T00:01:00Z"),
        }),
        last: None,
    };
    let patch = containers_patch(
        &p,
        &[exited("app", 0), exited("log", 0)],
        Some("Succeeded"),
        "2026-01-01T00:01:00Z",
    );
    let s: PodStatus = serde_json::from_value(patch["status"].clone()).unwrap();
    assert_eq!(s.phase.as_deref(), Some("Succeeded"));
    assert_eq!(cond(&s, "Ready").status, "False");
    assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    assert_eq!(
        cond(&s, "Initialized").reason.as_deref(),
        Some("PodCompleted")
    );
    assert_eq!(cond(&s, "PodReadyToStartContainers").status, "False");
    for cs in s.container_statuses.as_ref().unwrap() {
        let t = cs.state.as_ref().unwrap().terminated.as_ref().unwrap();
        assert_eq!((t.exit_code, t.reason.as_deref()), (0, Some("Completed")));
        assert_eq!(format_time(t.started_at.as_ref().unwrap().0), NOW);
        assert!(!cs.ready);
        assert!(
            cs.image_id
                .ends_with(&cs.image_id[cs.image_id.len() - 64..])
        );
    }
    assert_eq!(cond(&s, "example.com/Gate").status, "True");
    // The patch replaces the running state rather than adding to it.
    assert_eq!(
        patch["status"]["containerStatuses"][0]["state"]["running"],
        Value::Null
    );
    assert!(
        patch["status"]["containerStatuses"][0]["state"]
            .get("running")
            .is_some()
    );

    // One container waits to restart, the other runs: Running, not ready.
    let looping = Run {
        name: "app".into(),
        restart_count: 2,
        state: State::BackOff {
            until: ts("2026-01-01T00:01:20Z"),
        },
        last: Some(Exit {
            code: 1,
            reason: "Error",
            started: ts(NOW),
            finished: ts("2026-01-01T00:01:00Z"),
        }),
    };
    let log = Run {
        name: "log".into(),
        restart_count: 0,
        state: State::Running { since: ts(NOW) },
        last: None,
    };
    let s: PodStatus = serde_json::from_value(
        containers_patch(&p, &[looping, log], None, "2026-01-01T00:01:00Z")["status"].clone(),
    )
    .unwrap();
    assert_eq!(s.phase.as_deref(), Some("Running"));
    assert_eq!(
        cond(&s, "Ready").reason.as_deref(),
        Some("ContainersNotReady")
    );
    assert_eq!(
        cond(&s, "ContainersReady").message.as_deref(),
        Some("containers with unready status: [app]")
    );
    let app = &s.container_statuses.as_ref().unwrap()[0];
    assert_eq!(app.restart_count, 2);
    assert_eq!(
        app.state
            .as_ref()
            .unwrap()
            .waiting
            .as_ref()
            .unwrap()
            .message
            .as_deref(),
        Some("back-off 20s restarting failed container=app pod=web_team(1234)")
    );
    assert_eq!(
        app.last_state
            .as_ref()
            .unwrap()
            .terminated
            .as_ref()
            .unwrap()
            .exit_code,
        1
    );
}
