//! Serving options: TLS, token files, request counters at /metrics and from the library.

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;

use super::{devcluster_only, status_code};

#[tokio::test]
async fn tls_with_generated_ca_and_kubeconfig() {
    if !devcluster_only(
        "tls_with_generated_ca_and_kubeconfig",
        "it checks devcluster's own serving options",
    ) {
        return;
    }
    let dc = devcluster::DevCluster::start(devcluster::Config {
        tls: true,
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .unwrap();
    assert!(dc.url().starts_with("https://"));
    let kubeconfig = std::fs::read_to_string(dc.kubeconfig_path()).unwrap();
    assert!(kubeconfig.contains("certificate-authority-data"));
    let api: Api<Namespace> = Api::all(dc.client());
    assert!(api.get("default").await.is_ok());
}

#[tokio::test]
async fn token_file_restricts_access() {
    if !devcluster_only(
        "token_file_restricts_access",
        "it checks devcluster's own serving options",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "good-token\n").unwrap();
    let dc = devcluster::DevCluster::start(devcluster::Config {
        token: "good-token".into(),
        token_file: Some(tokens),
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .unwrap();
    let api: Api<Namespace> = Api::all(dc.client());
    assert!(
        api.get("default").await.is_ok(),
        "the kubeconfig token is accepted"
    );

    let mut cfg = kube::Config::new(dc.url().parse().unwrap());
    cfg.auth_info.token = Some("bad-token".to_string().into());
    let bad: Api<Namespace> = Api::all(kube::Client::try_from(cfg).unwrap());
    assert_eq!(status_code(&bad.get("default").await.unwrap_err()), 401);
}

#[tokio::test]
async fn requests_are_counted_at_metrics_and_in_the_library() {
    if !devcluster_only(
        "requests_are_counted_at_metrics_and_in_the_library",
        "it checks devcluster's own serving options",
    ) {
        return;
    }
    let dc = devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .unwrap();
    let api: Api<Namespace> = Api::all(dc.client());
    api.get("default").await.unwrap();
    api.list(&Default::default()).await.unwrap();
    let counted = dc
        .observer()
        .counts()
        .into_iter()
        .filter(|(k, _)| k.resource == "namespaces" && (k.verb == "get" || k.verb == "list"))
        .map(|(_, n)| n)
        .sum::<u64>();
    assert_eq!(counted, 2);
    let text: String = dc
        .client()
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert!(text.contains("namespaces"), "{text}");
}
