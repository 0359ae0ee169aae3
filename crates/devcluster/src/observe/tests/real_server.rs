//! The observer in front of the devcluster server, seen from a kube-rs client over TCP.

use super::*;
use crate::{Config, DevCluster};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name }, "data": { "k": "v" }
    }))
    .unwrap()
}

#[tokio::test]
async fn requests_metrics_audit_and_faults_on_the_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let running = DevCluster::start(Config {
        node_agent: false,
        observer: ObserverConfig {
            audit_log: Some(audit.clone()),
            faults: FaultConfig::default(),
        },
        ..Config::ephemeral()
    })
    .await
    .unwrap();
    let client = running.client();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &config_map("one"))
        .await
        .unwrap();
    api.get("one").await.unwrap();
    assert!(api.get("missing").await.is_err());

    let observer = running.observer();
    let count = |verb: &str, code: u16| {
        observer
            .metrics()
            .total(|k| k.verb == verb && k.resource == "configmaps" && k.code == code)
    };
    assert_eq!(count("create", 201), 1);
    assert_eq!(count("get", 200), 1);
    assert_eq!(count("get", 404), 1);

    // /metrics over HTTP carries the same numbers.
    let text = client
        .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
        .await
        .unwrap();
    assert!(
        text.contains(r#"apiserver_request_total{verb="POST",dry_run="",group="",version="v1",resource="configmaps",subresource="",scope="namespace",component="apiserver",code="201"} 1"#),
        "{text}"
    );

    // Injected faults reach the client as API errors with the Status reason.
    observer
        .set_faults(FaultConfig {
            rules: vec![FaultRule {
                verbs: vec!["create".into()],
                resources: vec!["configmaps".into()],
                error_rate: 1.0,
                error_code: 500,
                ..Default::default()
            }],
            ..Default::default()
        })
        .unwrap();
    match api.create(&PostParams::default(), &config_map("two")).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (500, "InternalError")
            )
        }
        other => panic!("expected an injected 500, got {other:?}"),
    }
    observer.set_faults(FaultConfig::default()).unwrap();
    assert!(
        api.get("two").await.is_err(),
        "the failed create stored nothing"
    );

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let create_line = lines
        .iter()
        .find(|l| l["verb"] == "create" && l["objectRef"]["resource"] == "configmaps")
        .expect("the create is audited");
    assert_eq!(create_line["responseStatus"]["code"], 201);
    assert_eq!(create_line["sourceIPs"][0], "127.0.0.1");
    assert!(lines.iter().any(|l| l["injectedFault"] == true));
    running.shutdown().await;
}
