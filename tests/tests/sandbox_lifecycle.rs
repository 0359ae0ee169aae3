//! Sandbox lifecycle on devcluster with only the core CRD installed: Pod, Service, PVCs,
//! status, readiness and garbage collection.

use e2e_tests::{
    DEADLINE, Env, EnvOptions, GC_DEADLINE, condition, sandbox, wait_for, wait_ready_reason,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn sandbox_becomes_ready_with_pod_service_and_pvc() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let pods = env.api::<Pod>("default");
    let mut sb = sandbox(
        "life",
        json!({"service": true,
               "volumeClaimTemplates": [{"metadata": {"name": "work"},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}),
    );
    sb.spec.blueprint.pod_template.spec.containers[0].ports =
        Some(vec![k8s_openapi::api::core::v1::ContainerPort {
            container_port: 8888,
            ..Default::default()
        }]);
    let created = sandboxes.create(&PostParams::default(), &sb).await.unwrap();

    let sb = wait_ready_reason(&sandboxes, "life", "DependenciesReady").await;
    let ready = condition(&sb, "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.message, "Pod is Ready; Service Exists");
    assert_eq!(ready.observed_generation, created.metadata.generation);
    let status = sb.status.clone().unwrap();
    let hash = api_types::name_hash("life");
    assert_eq!(
        status.label_selector,
        format!("agents.x-k8s.io/sandbox-name-hash={hash}")
    );
    assert_eq!(status.service, "life");
    assert_eq!(status.service_fqdn, "life.default.svc.cluster.local");
    assert!(
        !status.pod_ips.is_empty() && status.pod_ips[0].starts_with("127."),
        "{:?}",
        status.pod_ips
    );
    assert!(!status.node_name.is_empty());
    assert_eq!(condition(&sb, "PodScheduled").unwrap().status, "True");
    assert_eq!(condition(&sb, "Suspended").unwrap().reason, "NotSuspended");
    assert_eq!(
        sb.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("agents.x-k8s.io/pod-name"))
            .map(String::as_str),
        Some("life")
    );

    let pod = pods.get("life").await.unwrap();
    let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Sandbox", created.metadata.uid.as_deref().unwrap())
    );
    assert_eq!(owner.controller, Some(true));
    assert_eq!(
        pod.metadata.labels.as_ref().unwrap()["agents.x-k8s.io/sandbox-name-hash"],
        hash
    );
    // Found by name: kube-apiserver's ServiceAccount admission adds its token volume too.
    let volumes = pod.spec.unwrap().volumes.unwrap();
    let work = volumes
        .iter()
        .find(|v| v.name == "work")
        .unwrap_or_else(|| panic!("no volume `work` in {volumes:?}"));
    assert_eq!(
        work.persistent_volume_claim.as_ref().unwrap().claim_name,
        "work-life"
    );

    let svc = env.api::<Service>("default").get("life").await.unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("None"));
    assert_eq!(
        spec.selector.unwrap()["agents.x-k8s.io/sandbox-name-hash"],
        hash
    );
    assert_eq!(spec.ports.unwrap()[0].port, 8888);
    let pvc = env
        .api::<PersistentVolumeClaim>("default")
        .get("work-life")
        .await
        .unwrap();
    assert_eq!(pvc.metadata.owner_references.unwrap()[0].kind, "Sandbox");

    // Deleting the Sandbox takes its children with it (owner references, no finalizer).
    sandboxes
        .delete("life", &DeleteParams::default())
        .await
        .unwrap();
    let deleted = std::time::Instant::now();
    wait_for("children collected", GC_DEADLINE, || async {
        let pod = pods.get_opt("life").await.ok()?;
        let svc = env.api::<Service>("default").get_opt("life").await.ok()?;
        (pod.is_none() && svc.is_none()).then_some(())
    })
    .await;
    eprintln!(
        "children collected {:?} after the delete",
        deleted.elapsed()
    );
    env.stop().await;
}

#[tokio::test]
async fn deleted_pod_is_recreated() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let pods = env.api::<Pod>("default");
    sandboxes
        .create(&PostParams::default(), &sandbox("heal", json!({})))
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "heal", "DependenciesReady").await;
    let first = pods.get("heal").await.unwrap().metadata.uid;
    pods.delete("heal", &DeleteParams::default()).await.unwrap();
    wait_for("a new pod", DEADLINE, || async {
        pods.get_opt("heal")
            .await
            .ok()
            .flatten()
            .filter(|p| p.metadata.uid != first)
    })
    .await;
    wait_ready_reason(&sandboxes, "heal", "DependenciesReady").await;
    env.stop().await;
}

#[tokio::test]
async fn service_false_removes_the_owned_service() {
    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let services = env.api::<Service>("default");
    sandboxes
        .create(
            &PostParams::default(),
            &sandbox("svc", json!({"service": true})),
        )
        .await
        .unwrap();
    wait_for("service", DEADLINE, || async {
        services.get_opt("svc").await.ok().flatten()
    })
    .await;
    // A merge patch, as `kubectl patch` sends it: a read-modify-replace could lose the race
    // with the controller's own writes to this Sandbox (409), which is not what is tested here.
    sandboxes
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"service": false}})),
        )
        .await
        .unwrap();
    assert_eq!(
        sandboxes.get("svc").await.unwrap().spec.blueprint.service,
        Some(false)
    );
    wait_for("service deleted", DEADLINE, || async {
        services
            .get_opt("svc")
            .await
            .ok()
            .filter(Option::is_none)
            .map(|_| ())
    })
    .await;
    let sb = e2e_tests::wait_sandbox(&sandboxes, "svc", "service fields cleared", |s| {
        s.status
            .as_ref()
            .is_some_and(|st| st.service.is_empty() && st.service_fqdn.is_empty())
    })
    .await;
    assert_eq!(condition(&sb, "Ready").unwrap().message, "Pod is Ready");
    env.stop().await;
}

#[tokio::test]
async fn happy_path_costs_few_sandbox_writes_and_idle_costs_none() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::StreamExt;
    use kube::api::WatchParams;
    use kube::core::WatchEvent;

    let env = Env::start(EnvOptions::default()).await;
    let sandboxes = env.sandboxes("default");
    let mut watch = sandboxes
        .watch(&WatchParams::default().fields("metadata.name=frugal"), "0")
        .await
        .unwrap()
        .boxed();
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = writes.clone();
    let counter = tokio::spawn(async move {
        while let Some(Ok(ev)) = watch.next().await {
            if matches!(ev, WatchEvent::Modified(_)) {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    sandboxes
        .create(&PostParams::default(), &sandbox("frugal", json!({})))
        .await
        .unwrap();
    wait_ready_reason(&sandboxes, "frugal", "DependenciesReady").await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let at_ready = writes.load(Ordering::SeqCst);
    // The pod-name annotation plus one status write per observed Pod state (created, scheduled,
    // running/ready): never more than four writes to the Sandbox.
    assert!(
        (2..=4).contains(&at_ready),
        "{at_ready} Sandbox writes on the happy path"
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        writes.load(Ordering::SeqCst),
        at_ready,
        "no writes once Ready"
    );
    counter.abort();
    env.stop().await;
}
