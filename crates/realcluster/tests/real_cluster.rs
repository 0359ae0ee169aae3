//! The real control plane works as a production cluster would: Pods run on kwok nodes with
//! their claimed volumes bound by the default StorageClass's provisioner, and finish as their
//! commands say (the pod finisher), RBAC denies a ServiceAccount what no role grants it, and the
//! audit log records that request.
//!
//! The first run builds the upstream binaries (minutes; see docs/cluster.md). Without `go` the
//! tests print one line and pass, except under `CI` or `AGENT_SANDBOX_REQUIRE_GO=1`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, Pod, ServiceAccount,
};
use kube::api::{Api, ListParams, PostParams};

const DEADLINE: Duration = Duration::from_secs(60);

/// Polls `probe` every 100 ms until it yields, panicking with `what` after [`DEADLINE`].
async fn wait_for<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("create namespace {name}: {error}"),
    }
}

/// Creates namespace `name` and waits for its `default` ServiceAccount, which the
/// ServiceAccount admission plugin wants for a Pod and kube-controller-manager creates.
async fn namespace_for_pods(client: &kube::Client, name: &str) {
    create_namespace(client, name).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait_for(&format!("the default ServiceAccount of {name}"), || async {
        accounts.get_opt("default").await.ok()?
    })
    .await;
}

#[tokio::test]
async fn a_pod_runs_on_a_kwok_node() {
    if !realcluster::go_or_skip("a_pod_runs_on_a_kwok_node") {
        return;
    }
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let client = cluster.client().await.unwrap();
    namespace_for_pods(&client, "pod-runs").await;

    // A claim naming no class gets the default one, and a volume bound to it.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "pod-runs");
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "2Gi"}}},
    }))
    .unwrap();
    let claim = claims.create(&PostParams::default(), &claim).await.unwrap();
    let spec = claim.spec.as_ref().unwrap();
    assert_eq!(
        spec.storage_class_name.as_deref(),
        Some(realcluster::provisioner::STORAGE_CLASS)
    );

    let pods: Api<Pod> = Api::namespaced(client.clone(), "pod-runs");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36",
                                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();

    let volume_name = wait_for("pod-runs/data to be Bound", || async {
        let claim = claims.get("data").await.ok()?;
        let phase = claim.status.as_ref()?.phase.as_deref()?;
        (phase == "Bound").then(|| claim.spec?.volume_name)?
    })
    .await;
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    let volume = volumes.get(&volume_name).await.unwrap();
    let volume_spec = volume.spec.unwrap();
    assert_eq!(volume_spec.capacity.unwrap()["storage"].0, "2Gi");
    assert_eq!(
        volume_spec.claim_ref.unwrap().uid,
        claim.metadata.uid,
        "bound to this claim"
    );

    let running = wait_for("pod-runs/web to be Running and Ready", || async {
        let pod = pods.get("web").await.ok()?;
        let status = pod.status.as_ref()?;
        let ready = status
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (status.phase.as_deref() == Some("Running") && ready).then_some(pod)
    })
    .await;
    let node = running.spec.as_ref().unwrap().node_name.clone().unwrap();
    assert!(node.starts_with("kwok-node-"), "scheduled on {node}");
    let ip = running.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(
        ip.starts_with("127."),
        "simulated Pod IPs are loopback: {ip}"
    );

    // A deleted Pod goes (kwok plays the kubelet's final delete).
    pods.delete("web", &Default::default()).await.unwrap();
    wait_for("pod-runs/web to be gone", || async {
        pods.get_opt("web")
            .await
            .ok()
            .and_then(|pod| pod.is_none().then_some(()))
    })
    .await;

    // The claim deleted, its volume is released and deleted.
    claims.delete("data", &Default::default()).await.unwrap();
    wait_for("the released volume to be deleted", || async {
        volumes
            .get_opt(&volume_name)
            .await
            .ok()
            .and_then(|volume| volume.is_none().then_some(()))
    })
    .await;
}

#[tokio::test]
async fn pods_finish_as_their_commands_say() {
    if !realcluster::go_or_skip("pods_finish_as_their_commands_say") {
        return;
    }
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let client = cluster.client().await.unwrap();
    namespace_for_pods(&client, "pods-finish").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "pods-finish");
    for (name, policy, script) in [
        ("fails", "Never", "sleep 1; exit 3"),
        ("retries", "OnFailure", "exit 1"),
        ("serves", "Always", "sleep infinity"),
    ] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"restartPolicy": policy, "containers": [{"name": "main",
                "image": "busybox:1.36", "command": ["sh", "-c", script]}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let main_status = |pod: &Pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .cloned()
    };

    let failed = wait_for("pods-finish/fails to fail", || async {
        let pod = pods.get("fails").await.ok()?;
        (pod.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(pod)
    })
    .await;
    let terminated = main_status(&failed)
        .and_then(|c| c.state?.terminated)
        .expect("the container reports its end");
    assert_eq!(
        (terminated.exit_code, terminated.reason.as_deref()),
        (3, Some("Error"))
    );

    let retrying = wait_for(
        "pods-finish/retries to wait in CrashLoopBackOff",
        || async {
            let pod = pods.get("retries").await.ok()?;
            let waiting = main_status(&pod)?.state?.waiting?;
            (waiting.reason.as_deref() == Some("CrashLoopBackOff")).then_some(pod)
        },
    )
    .await;
    assert_eq!(main_status(&retrying).unwrap().restart_count, 1);
    assert_eq!(
        retrying.status.unwrap().phase.as_deref(),
        Some("Running"),
        "a Pod that restarts is not over"
    );

    let serving = pods.get("serves").await.unwrap();
    let status = serving.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let state = main_status(&pods.get("serves").await.unwrap())
        .and_then(|c| c.state)
        .unwrap();
    assert!(state.running.is_some(), "sleep infinity runs: {state:?}");
    assert!(
        cluster.exited().is_none(),
        "{:?}",
        cluster.exited().map(|e| e.to_string())
    );
}

#[tokio::test]
async fn rbac_denies_an_unprivileged_service_account_and_the_audit_log_shows_it() {
    if !realcluster::go_or_skip(
        "rbac_denies_an_unprivileged_service_account_and_the_audit_log_shows_it",
    ) {
        return;
    }
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let client = cluster.client().await.unwrap();
    // The audit policy records every request of this namespace's ServiceAccounts.
    create_namespace(&client, "agent-sandbox-system").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "agent-sandbox-system");
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "rbac-probe"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();

    let probe = cluster
        .service_account_client("agent-sandbox-system", "rbac-probe")
        .await
        .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(probe.clone(), "kube-system");
    match secrets.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status
                    .message
                    .contains("system:serviceaccount:agent-sandbox-system:rbac-probe"),
                "the denial names the user: {}",
                status.message
            );
        }
        other => panic!("listing kube-system's Secrets must be forbidden, got {other:?}"),
    }
    // What the token may do, it can: authentication works (SelfSubjectReview is open to all).
    let request = http::Request::post("/apis/authentication.k8s.io/v1/selfsubjectreviews")
        .header("content-type", "application/json")
        .body(
            serde_json::to_vec(&serde_json::json!({
                "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"
            }))
            .unwrap(),
        )
        .unwrap();
    let review: serde_json::Value = probe.request(request).await.unwrap();
    assert_eq!(
        review["status"]["userInfo"]["username"],
        "system:serviceaccount:agent-sandbox-system:rbac-probe"
    );

    let audit = cluster.audit_log_path().to_path_buf();
    let event = wait_for("the denied list in the audit log", || async {
        let text = std::fs::read_to_string(&audit).ok()?;
        text.lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .find(|event| {
                event["user"]["username"] == "system:serviceaccount:agent-sandbox-system:rbac-probe"
                    && event["verb"] == "list"
                    && event["objectRef"]["resource"] == "secrets"
            })
    })
    .await;
    assert_eq!(event["objectRef"]["namespace"], "kube-system");
    assert_eq!(event["responseStatus"]["code"], 403);
    assert_eq!(
        event["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
    // Only the audited namespace's ServiceAccounts are logged, not the admin.
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        !text.contains("\"username\":\"kubernetes-admin\""),
        "the admin's requests are not audited"
    );
}
