//! What the controller tests share: starting the controller against a [`Cluster`] (devcluster
//! in process), waiting for a condition with a deadline, building Sandboxes and playing the
//! scheduler and the kubelet.

#![allow(dead_code)] // each test binary uses a different subset

use std::time::{Duration, Instant};

use prometheus_client::registry::Registry;
use sandbox_controller::{ControllerOptions, SandboxController, Settings};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;

pub const NS: &str = "default";
pub const DEADLINE: Duration = Duration::from_secs(10);
pub const HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";

pub struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    /// The controller's metrics, as `/metrics` would serve them.
    registry: Registry,
}

pub fn start_controller(api: &Cluster) -> Running {
    start_controller_with_events(api, true)
}

pub fn start_controller_with_events(api: &Cluster, events: bool) -> Running {
    start_controller_with(api, |s| s.events = events)
}

/// Starts the controller with the test defaults, adjusted by `tweak`.
pub fn start_controller_with(api: &Cluster, tweak: impl FnOnce(&mut Settings)) -> Running {
    let mut registry = Registry::default();
    let mut settings = Settings {
        cluster_domain: "cluster.local".into(),
        ..Settings::default()
    };
    tweak(&mut settings);
    let options = ControllerOptions {
        settings,
        workers: 8,
        ..Default::default()
    };
    let controller = SandboxController::new(api.controller_client(), options, &mut registry);
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        let _ = controller.run(token).await;
    });
    Running {
        shutdown,
        task,
        registry,
    }
}

impl Running {
    /// The Prometheus text exposition of the controller's metrics now.
    pub fn scrape(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("metrics encode");
        out
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(DEADLINE, self.task).await;
    }
}

/// [`wait_for`] with an async probe.
pub async fn wait_for_async<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `probe` until it returns `Some`, failing with `what` after the deadline.
pub async fn wait_for<T>(what: &str, probe: impl FnMut() -> Option<T>) -> T {
    wait_for_within(what, DEADLINE, probe).await
}

/// [`wait_for`] with its own deadline (for a test whose watches are slowed down on purpose).
pub async fn wait_for_within<T>(
    what: &str,
    deadline: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(start.elapsed() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn sandbox(name: &str, spec_extra: Value) -> Value {
    let mut spec = json!({
        "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}, "metadata": {}},
    });
    json_patch::merge(&mut spec, &spec_extra);
    json!({"metadata": {"name": name, "namespace": NS, "generation": 1}, "spec": spec})
}

pub fn condition(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or("").to_string(),
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

pub fn ready_reason(api: &Cluster, name: &str) -> Option<String> {
    api.get("sandboxes", NS, name)
        .and_then(|s| condition(&s, "Ready"))
        .map(|c| c.1)
}

/// What the scheduler and a kubelet would do: the Pod is bound to `node` (unless it is bound
/// already) and runs with `ip`, Ready.
pub async fn make_pod_ready(api: &Cluster, name: &str, node: &str, ip: &str) {
    let pod = api.get("pods", NS, name).expect("pod exists");
    if pod["spec"]["nodeName"].is_null() {
        api.bind_pod(name, node).await;
    }
    api.patch_pod_status(
        name,
        json!({
            "phase": "Running",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"}
            ]
        }),
    )
    .await;
}
