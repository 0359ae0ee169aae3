//! The node agent against devcluster's own API handlers and store, in process (no listener),
//! through a real `kube::Client`.

use std::future::Future;
use std::net::Ipv4Addr;

use kube::api::PostParams;
use serde_json::json;

use super::*;
use crate::observe::{FaultConfig, FaultRule, Observer, ObserverConfig};

mod real_server;

const DEADLINE: Duration = Duration::from_secs(10);

struct Harness {
    client: kube::Client,
    shutdown: CancellationToken,
    agent: JoinHandle<()>,
}

impl Harness {
    fn start(cfg: NodeConfig) -> Self {
        Self::start_with(crate::cluster::in_process_router(), cfg)
    }

    fn start_with(router: axum::Router, cfg: NodeConfig) -> Self {
        Self::with_client(kube::Client::new(router, "default"), cfg)
    }

    fn with_client(client: kube::Client, cfg: NodeConfig) -> Self {
        let shutdown = CancellationToken::new();
        let agent = spawn_node_agent(client.clone(), cfg, shutdown.clone());
        Self {
            client,
            shutdown,
            agent,
        }
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), "default")
    }

    async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(DEADLINE, self.agent)
            .await
            .expect("agent stops on shutdown")
            .unwrap();
    }
}

/// Polls `probe` until it yields a value, failing the test at the deadline.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn pod_manifest(name: &str, restart_policy: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": name },
        "spec": { "restartPolicy": restart_policy, "containers": [{ "name": "app", "image": "busybox:1.36" }] }
    }))
    .unwrap()
}

async fn create_pod(api: &Api<Pod>, name: &str) -> Pod {
    api.create(&PostParams::default(), &pod_manifest(name, "Always"))
        .await
        .unwrap()
}

fn condition_status(pod: &Pod, type_: &str) -> Option<String> {
    pod_lifecycle::status::condition(pod, type_).map(|c| c.status.clone())
}

async fn wait_running(api: &Api<Pod>, name: &str) -> Pod {
    eventually(&format!("pod {name} Running and Ready"), || async {
        let pod = api.get(name).await.ok()?;
        let phase = pod.status.as_ref()?.phase.as_deref()?;
        (phase == "Running" && condition_status(&pod, "Ready").as_deref() == Some("True"))
            .then_some(pod)
    })
    .await
}

#[tokio::test]
async fn a_created_pod_is_scheduled_and_becomes_running_and_ready() {
    let h = Harness::start(NodeConfig::default());
    let api = h.pods();
    create_pod(&api, "web").await;
    let pod = wait_running(&api, "web").await;

    let node = pod.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(
        NodeConfig::default().node_index(&node).is_some(),
        "bound to {node}"
    );
    let status = pod.status.as_ref().unwrap();
    let pod_ip: Ipv4Addr = status.pod_ip.as_deref().unwrap().parse().unwrap();
    assert!(pod_ip.is_loopback() && pod_ip.octets()[1] >= 2, "{pod_ip}");
    let host_ip: Ipv4Addr = status.host_ip.as_deref().unwrap().parse().unwrap();
    assert_eq!(host_ip.octets()[..3], [127, 0, 1]);
    for t in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(condition_status(&pod, t).as_deref(), Some("True"), "{t}");
    }
    let container = &status.container_statuses.as_ref().unwrap()[0];
    assert!(container.ready && container.state.as_ref().unwrap().running.is_some());

    // A second pod gets a different address.
    create_pod(&api, "web-2").await;
    let other = wait_running(&api, "web-2").await;
    assert_ne!(other.status.unwrap().pod_ip, status.pod_ip);
    h.stop().await;
}

#[tokio::test]
async fn unschedulable_pods_stay_pending_with_the_condition() {
    let h = Harness::start(NodeConfig {
        unschedulable_fraction: 1.0,
        ..NodeConfig::default()
    });
    let api = h.pods();
    create_pod(&api, "stuck").await;
    let pod = eventually("PodScheduled=False", || async {
        let pod = api.get("stuck").await.ok()?;
        (condition_status(&pod, "PodScheduled").as_deref() == Some("False")).then_some(pod)
    })
    .await;
    let status = pod.status.as_ref().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let scheduled = status
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    assert_eq!(scheduled.reason.as_deref(), Some("Unschedulable"));
    assert!(
        scheduled
            .message
            .as_deref()
            .unwrap()
            .contains("0/3 nodes are available")
    );
    assert!(pod.spec.as_ref().unwrap().node_name.is_none());
    assert!(status.pod_ip.is_none());
    h.stop().await;
}

#[tokio::test]
async fn deleting_a_pod_completes() {
    let h = Harness::start(NodeConfig::default());
    let api = h.pods();
    create_pod(&api, "doomed").await;
    wait_running(&api, "doomed").await;
    // Default grace period (30 s): the kubelet finishes it well before.
    api.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    eventually("pod gone", || async {
        match api.get("doomed").await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn a_deleted_pod_reports_its_containers_stopped_before_it_goes() {
    let h = Harness::start(NodeConfig::default());
    let api = h.pods();
    create_pod(&api, "ending").await;
    wait_running(&api, "ending").await;
    let mut events = Box::pin(watcher::watcher(api.clone(), watcher::Config::default()));
    // Listed before the delete (the node may finish the pod within milliseconds).
    let listed = Instant::now() + DEADLINE;
    loop {
        let event = tokio::time::timeout_at(listed.into(), events.next())
            .await
            .expect("initial list before the deadline")
            .unwrap()
            .unwrap();
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    api.delete("ending", &DeleteParams::default())
        .await
        .unwrap();
    let mut phases = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let event = tokio::time::timeout_at(deadline.into(), events.next())
            .await
            .expect("pod deleted before the deadline")
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                phases.push(pod.status.and_then(|s| s.phase).unwrap_or_default());
            }
            watcher::Event::Delete(pod) => {
                let last = pod.status.unwrap();
                assert_eq!(last.phase.as_deref(), Some("Succeeded"));
                let cs = &last.container_statuses.unwrap()[0];
                assert!(cs.state.as_ref().unwrap().terminated.is_some());
                break;
            }
            _ => {}
        }
    }
    assert!(phases.contains(&"Succeeded".to_string()), "{phases:?}");
    h.stop().await;
}

#[tokio::test]
async fn termination_delay_keeps_a_terminating_pod_visible_for_a_while() {
    let h = Harness::start(NodeConfig {
        termination_delay: Duration::from_secs(3),
        ..NodeConfig::default()
    });
    let api = h.pods();
    create_pod(&api, "slow").await;
    wait_running(&api, "slow").await;
    let started = Instant::now();
    api.delete("slow", &DeleteParams::default()).await.unwrap();
    // deletionTimestamp has whole seconds, so the kubelet's clock starts up to 1 s early:
    // the pod stays at least 2 s.
    let pod = api.get("slow").await.unwrap();
    assert!(
        pod.metadata.deletion_timestamp.is_some(),
        "terminating, not gone"
    );
    eventually("pod gone", || async {
        matches!(api.get("slow").await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "gone after {:?}",
        started.elapsed()
    );
    h.stop().await;
}

#[tokio::test]
async fn failing_pods_fail_by_restart_policy() {
    let h = Harness::start(NodeConfig {
        failure_fraction: 1.0,
        ..NodeConfig::default()
    });
    let api = h.pods();
    api.create(&PostParams::default(), &pod_manifest("once", "Never"))
        .await
        .unwrap();
    api.create(&PostParams::default(), &pod_manifest("again", "Always"))
        .await
        .unwrap();
    let failed = eventually("phase Failed", || async {
        let pod = api.get("once").await.ok()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(pod)
    })
    .await;
    let state = failed.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap();
    assert_eq!(state.terminated.unwrap().exit_code, 1);
    let looping = eventually("CrashLoopBackOff", || async {
        let pod = api.get("again").await.ok()?;
        let cs = pod
            .status
            .as_ref()?
            .container_statuses
            .as_ref()?
            .first()?
            .clone();
        let waiting = cs.state?.waiting?;
        (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(pod)
    })
    .await;
    assert_eq!(
        condition_status(&looping, "Ready").as_deref(),
        Some("False")
    );
    assert_eq!(looping.status.unwrap().phase.as_deref(), Some("Running"));
    h.stop().await;
}

#[tokio::test]
async fn startup_delay_holds_pods_back() {
    let delay = Duration::from_millis(400);
    let h = Harness::start(NodeConfig {
        startup_delay: Delay::Fixed(delay),
        ..NodeConfig::default()
    });
    let api = h.pods();
    let created = Instant::now();
    create_pod(&api, "later").await;
    eventually("bound", || async {
        api.get("later").await.ok()?.spec?.node_name.map(|_| ())
    })
    .await;
    wait_running(&api, "later").await;
    assert!(
        created.elapsed() >= delay,
        "Running after {:?}",
        created.elapsed()
    );
    h.stop().await;
}

#[tokio::test]
async fn claims_become_bound_with_their_requested_capacity() {
    let h = Harness::start(NodeConfig::default());
    let api: Api<PersistentVolumeClaim> = Api::namespaced(h.client.clone(), "default");
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": { "name": "data" },
        "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Gi" } } }
    }))
    .unwrap();
    api.create(&PostParams::default(), &pvc).await.unwrap();
    let bound = eventually("claim Bound", || async {
        let pvc = api.get("data").await.ok()?;
        (pvc.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(pvc)
    })
    .await;
    let status = bound.status.unwrap();
    assert_eq!(status.capacity.unwrap()["storage"].0, "1Gi");
    assert_eq!(
        status.access_modes.unwrap(),
        vec!["ReadWriteOnce".to_string()]
    );
    h.stop().await;
}

#[tokio::test]
async fn a_restarted_agent_does_not_reuse_pod_ips() {
    let server = crate::cluster::in_process_router();
    let first = Harness::start_with(server.clone(), NodeConfig::default());
    let api = first.pods();
    create_pod(&api, "a").await;
    let a = wait_running(&api, "a").await;
    first.stop().await;

    let second = Harness::start_with(server, NodeConfig::default());
    create_pod(&api, "b").await;
    let b = wait_running(&api, "b").await;
    assert_ne!(a.status.unwrap().pod_ip, b.status.unwrap().pod_ip);
    // The old pod was not touched again.
    assert_eq!(
        api.get("a").await.unwrap().metadata.resource_version,
        a.metadata.resource_version
    );
    second.stop().await;
}

#[tokio::test]
async fn failing_status_writes_are_retried_until_they_succeed() {
    let observer = Arc::new(
        Observer::new(ObserverConfig {
            audit_log: None,
            faults: FaultConfig {
                rules: vec![FaultRule {
                    verbs: vec!["patch".into(), "create".into()],
                    resources: vec!["pods/status".into(), "pods/binding".into()],
                    // Low enough that the seven failures in a row it takes to use up the
                    // deadline (12.7 s of back-off) stay out of reach (0.2^7 per write).
                    error_rate: 0.2,
                    error_code: 500,
                    ..Default::default()
                }],
                seed: Some(7),
                ..Default::default()
            },
        })
        .unwrap(),
    );
    let router = observer.layer(crate::cluster::in_process_router());
    let h = Harness::start_with(router, NodeConfig::default());
    let api = h.pods();
    for i in 0..4 {
        create_pod(&api, &format!("p{i}")).await;
    }
    for i in 0..4 {
        wait_running(&api, &format!("p{i}")).await;
    }
    let failed = observer.metrics().total(|k| k.code == 500);
    assert!(failed > 0, "faults were injected");
    h.stop().await;
}

#[tokio::test]
async fn an_invalid_configuration_does_not_start() {
    let h = Harness::start(NodeConfig {
        nodes: 0,
        ..NodeConfig::default()
    });
    tokio::time::timeout(DEADLINE, h.agent)
        .await
        .expect("ends at once")
        .unwrap();
}
