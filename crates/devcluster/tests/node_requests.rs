//! The simulated nodes call the server in process: their requests must look to the server (and
//! to anyone reading its request counters and audit log) as they did over loopback.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

/// Polls `probe` until it returns `Some`, or panics after 20 s.
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn node_writes_pass_the_token_check_and_are_counted_and_audited_like_client_requests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "node-token\n").expect("write tokens");
    let audit = dir.path().join("audit.jsonl");
    let dc = devcluster::DevCluster::start(devcluster::Config {
        token: "node-token".into(),
        token_file: Some(tokens),
        observer: devcluster::observe::ObserverConfig {
            audit_log: Some(audit.clone()),
            ..Default::default()
        },
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts");
    let pods: Api<Pod> = Api::namespaced(dc.client(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "counted" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] },
    }))
    .expect("pod manifest");
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create pod");

    // With a token file, a node request without the kubeconfig's token would be refused (401)
    // and the pod would never run.
    eventually("the pod running", || async {
        let pod = pods.get("counted").await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;

    let counts = dc.observer().counts();
    let count = |verb: &str, subresource: &str, code: u16| {
        counts
            .iter()
            .filter(|(k, _)| {
                k.verb == verb
                    && k.resource == "pods"
                    && k.subresource == subresource
                    && k.code == code
                    && k.user_agent.is_empty()
            })
            .map(|(_, n)| *n)
            .sum::<u64>()
    };
    assert_eq!(count("create", "binding", 201), 1, "{counts:?}");
    assert_eq!(count("patch", "status", 200), 1, "{counts:?}");
    assert!(
        counts
            .iter()
            .any(|(k, _)| k.verb == "watch" && k.resource == "pods" && k.user_agent.is_empty()),
        "the nodes' pod watch is counted: {counts:?}"
    );

    let binding = eventually("the binding in the audit log", || {
        let audit = audit.clone();
        async move {
            let text = std::fs::read_to_string(&audit).ok()?;
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .find(|l| {
                    l["objectRef"]["subresource"] == "binding"
                        && l["objectRef"]["name"] == "counted"
                })
        }
    })
    .await;
    assert_eq!(binding["verb"], "create");
    assert_eq!(binding["responseStatus"]["code"], 201);
    assert_eq!(binding["userAgent"], "");
    assert_eq!(binding["sourceIPs"], serde_json::json!(["127.0.0.1"]));
    dc.shutdown().await;
}
