//! Pods on the simulated nodes as a client watches them: containers whose command ends finish
//! by the restart policy, and a deleted pod stops in the kubelet's order before it goes.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::{Cluster, devcluster_only, eventually, start_with, status_code};

/// A cluster whose simulated kubelets take `termination_delay` to stop a container by TERM
/// (devcluster's; on the real control plane kwok's nodes and the pod finisher, which do not
/// simulate graceful termination: the tests of it are [`devcluster_only`]).
async fn cluster(termination_delay: Duration) -> Cluster {
    start_with(devcluster::Config {
        nodes: devcluster::nodes::NodeConfig {
            termination_delay,
            ..Default::default()
        },
        ..devcluster::Config::ephemeral()
    })
    .await
}

async fn create(api: &Api<Pod>, manifest: serde_json::Value) {
    api.create(
        &PostParams::default(),
        &serde_json::from_value(manifest).unwrap(),
    )
    .await
    .unwrap();
}

fn pod(name: &str, policy: &str, containers: serde_json::Value) -> serde_json::Value {
    json!({
        "metadata": {"name": name},
        "spec": {"restartPolicy": policy, "containers": containers},
    })
}

fn condition(pod: &Pod, type_: &str) -> Option<(String, Option<String>)> {
    pod_lifecycle::status::condition(pod, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn container<'a>(pod: &'a Pod, name: &str) -> &'a ContainerStatus {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == name))
        .unwrap_or_else(|| panic!("no status of container {name}"))
}

async fn phase_becomes(api: &Api<Pod>, name: &str, phase: &str) -> Pod {
    eventually(&format!("{name} {phase}"), || async {
        let pod = api.get(name).await.ok()?;
        (pod.status.as_ref()?.phase.as_deref() == Some(phase)).then_some(pod)
    })
    .await
}

#[tokio::test]
async fn containers_whose_command_ends_finish_the_pod_by_its_restart_policy() {
    let dc = cluster(Duration::ZERO).await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    let begun = Instant::now();
    create(
        &api,
        pod(
            "done",
            "Never",
            json!([{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 1; exit 0"]}]),
        ),
    )
    .await;
    create(
        &api,
        pod(
            "broken",
            "Never",
            json!([{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 3"]}]),
        ),
    )
    .await;
    create(
        &api,
        pod(
            "job",
            "OnFailure",
            json!([{"name": "c", "image": "busybox", "command": ["true"]}]),
        ),
    )
    .await;

    let done = phase_becomes(&api, "done", "Succeeded").await;
    assert!(begun.elapsed() >= Duration::from_secs(1), "after the sleep");
    let c = container(&done, "c");
    let ended = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (0, Some("Completed"))
    );
    assert!(!c.ready);
    assert!(ended.finished_at.is_some() && ended.started_at.is_some());
    assert_eq!(
        condition(&done, "Ready"),
        Some(("False".into(), Some("PodCompleted".into())))
    );
    assert_eq!(
        condition(&done, "ContainersReady"),
        Some(("False".into(), Some("PodCompleted".into())))
    );
    assert_eq!(
        condition(&done, "Initialized"),
        Some(("True".into(), Some("PodCompleted".into())))
    );
    assert_eq!(
        condition(&done, "PodReadyToStartContainers").map(|c| c.0),
        Some("False".into())
    );
    assert_eq!(
        condition(&done, "PodScheduled").map(|c| c.0),
        Some("True".into())
    );

    let broken = phase_becomes(&api, "broken", "Failed").await;
    let ended = container(&broken, "c")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(
        (ended.exit_code, ended.reason.as_deref()),
        (3, Some("Error"))
    );
    assert_eq!(
        condition(&broken, "Ready"),
        Some(("False".into(), Some("PodFailed".into())))
    );

    let job = phase_becomes(&api, "job", "Succeeded").await;
    assert_eq!(
        container(&job, "c").restart_count,
        0,
        "success is not restarted"
    );

    // A terminal pod is deleted at once.
    api.delete("done", &DeleteParams::default()).await.unwrap();
    assert!(matches!(api.get("done").await, Err(ref e) if status_code(e) == 404));
}

#[tokio::test]
async fn failing_or_restart_always_containers_are_restarted_and_never_finish() {
    let dc = cluster(Duration::ZERO).await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    create(
        &api,
        pod(
            "retry",
            "OnFailure",
            json!([{"name": "c", "image": "busybox", "command": ["sh", "-c", "exit 1"]}]),
        ),
    )
    .await;
    create(
        &api,
        pod(
            "service",
            "Always",
            json!([
                {"name": "quits", "image": "busybox", "command": ["true"]},
                {"name": "serves", "image": "nginx"},
            ]),
        ),
    )
    .await;
    for (name, container_name, exit) in [("retry", "c", 1), ("service", "quits", 0)] {
        // Restarted at once the first time, then waiting out the back-off.
        let looping = eventually(&format!("{name} in back-off"), || async {
            let pod = api.get(name).await.ok()?;
            // No container statuses until a node has started the Pod.
            let c = pod
                .status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == container_name)?;
            let waiting = c.state.as_ref()?.waiting.as_ref()?;
            (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(pod)
        })
        .await;
        assert_eq!(
            looping.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        let c = container(&looping, container_name);
        assert_eq!(c.restart_count, 1);
        assert!(!c.ready);
        let last = c.last_state.clone().unwrap().terminated.unwrap();
        assert_eq!(last.exit_code, exit);
        assert!(
            c.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .message
                .as_deref()
                .is_some_and(|m| m.starts_with(&format!(
                    "back-off 10s restarting failed container={container_name} pod={name}_default("
                ))),
            "{c:?}"
        );
        assert_eq!(
            condition(&looping, "Ready"),
            Some(("False".into(), Some("ContainersNotReady".into())))
        );
    }
    let service = api.get("service").await.unwrap();
    assert!(
        container(&service, "serves").ready,
        "the other container runs on"
    );
}

#[tokio::test]
async fn a_deleted_pod_runs_its_pre_stop_hook_then_stops_before_it_goes() {
    if !devcluster_only(
        "a_deleted_pod_runs_its_pre_stop_hook_then_stops_before_it_goes",
        "kwok does not simulate graceful termination (docs/cluster.md)",
    ) {
        return;
    }
    // TERM takes 1 s; the hook 1 s: the pod stays Terminating about 2 s, then goes.
    let dc = cluster(Duration::from_secs(1)).await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    create(
        &api,
        json!({
            "metadata": {"name": "web"},
            "spec": {
                "terminationGracePeriodSeconds": 30,
                "containers": [{
                    "name": "c", "image": "nginx",
                    "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
                }],
            },
        }),
    )
    .await;
    phase_becomes(&api, "web", "Running").await;
    let mut events = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
    while !matches!(events.next().await, Some(Ok(watcher::Event::InitDone))) {}
    let asked = Instant::now();
    // Foreground, as a controller deleting its children step by step does.
    api.delete("web", &DeleteParams::foreground())
        .await
        .unwrap();
    let terminating = api.get("web").await.expect("still there: Terminating");
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    assert_eq!(
        terminating.status.as_ref().unwrap().phase.as_deref(),
        Some("Running"),
        "running until its containers stop"
    );
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let last = loop {
        let event = tokio::time::timeout_at(deadline.into(), events.next())
            .await
            .expect("pod deleted before the deadline")
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::Apply(pod) => {
                let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
                seen.push(phase.unwrap_or_default());
            }
            watcher::Event::Delete(pod) => break pod,
            _ => {}
        }
    };
    assert!(
        asked.elapsed() >= Duration::from_millis(1500),
        "gone after {:?}: the hook and TERM take about 2 s",
        asked.elapsed()
    );
    assert!(seen.contains(&"Succeeded".to_string()), "{seen:?}");
    let ended = container(&last, "c")
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(ended.exit_code, 0, "stopped by TERM");
}

#[tokio::test]
async fn a_container_that_ends_during_the_grace_period_ends_the_wait() {
    if !devcluster_only(
        "a_container_that_ends_during_the_grace_period_ends_the_wait",
        "kwok does not simulate graceful termination (docs/cluster.md)",
    ) {
        return;
    }
    // TERM would take 20 s; the container's own command ends after 1 s.
    let dc = cluster(Duration::from_secs(20)).await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    create(
        &api,
        pod(
            "short",
            "Always",
            json!([{"name": "c", "image": "busybox", "command": ["sh", "-c", "sleep 2"]}]),
        ),
    )
    .await;
    phase_becomes(&api, "short", "Running").await;
    let asked = Instant::now();
    api.delete("short", &DeleteParams::default()).await.unwrap();
    eventually("pod gone", || async {
        matches!(api.get("short").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "ended with its command, not after the 20 s TERM takes: {:?}",
        asked.elapsed()
    );
}

#[tokio::test]
async fn a_pod_whose_containers_stopped_goes_when_its_last_finalizer_does() {
    if !devcluster_only(
        "a_pod_whose_containers_stopped_goes_when_its_last_finalizer_does",
        "kwok does not stop a deleted Pod's containers (its phase stays Running); docs/cluster.md",
    ) {
        return;
    }
    let dc = cluster(Duration::ZERO).await;
    let api: Api<Pod> = Api::default_namespaced(dc.client());
    create(
        &api,
        json!({
            "metadata": {"name": "held", "finalizers": ["example.com/hold"]},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }),
    )
    .await;
    phase_becomes(&api, "held", "Running").await;
    api.delete("held", &DeleteParams::default()).await.unwrap();
    // The kubelet stops it and deletes it with grace 0: the finalizer still holds it.
    let stopped = eventually("held pod stopped", || async {
        let pod = api.get("held").await.ok()?;
        (pod.metadata.deletion_grace_period_seconds == Some(0)).then_some(pod)
    })
    .await;
    assert_eq!(
        stopped.status.as_ref().unwrap().phase.as_deref(),
        Some("Succeeded")
    );
    let release = json!({"metadata": {"finalizers": null}});
    api.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&release),
    )
    .await
    .unwrap();
    eventually("pod gone with its finalizer", || async {
        matches!(api.get("held").await, Err(ref e) if status_code(e) == 404).then_some(())
    })
    .await;
}
