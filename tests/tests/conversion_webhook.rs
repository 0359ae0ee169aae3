//! The core controller's conversion webhook as the binary runs it, with managed certificates,
//! against devcluster: it creates its certificate Secret, points the Sandbox CRD at its Service
//! with the CA, and converts Sandboxes both ways over TLS for a client that trusts only that CA
//! and checks the Service's DNS name (what the API server does). A second replica reuses the
//! Secret. devcluster does not itself call conversion webhooks, so the test plays the API
//! server's part.

use std::net::SocketAddr;

use clap::Parser;
use controller_common::runtime::{RunSpec, Runtime};
use e2e_tests::http_probe::free_port;
use e2e_tests::{DEADLINE, Env, EnvOptions, wait_for};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const SERVICE: &str = "sandbox-controller-webhook";
/// The webhook's namespace (its Secret's): where the release's Roles let the controller keep
/// it on the real control plane.
fn namespace() -> &'static str {
    e2e_tests::lease_namespace()
}

const SECRET: &str = "sandbox-controller-webhook-certs";

fn args(webhook_port: u16) -> sandbox_controller::args::Args {
    sandbox_controller::args::Args::try_parse_from([
        "sandbox-controller".to_owned(),
        format!("--leader-election-namespace={}", namespace()),
        "--metrics-bind-address=0".to_owned(),
        "--health-probe-bind-address=0".to_owned(),
        "--webhook-host=127.0.0.1".to_owned(),
        format!("--webhook-port={webhook_port}"),
        format!("--webhook-namespace={}", namespace()),
    ])
    .unwrap()
}

/// Runs the controller binary's `run_with` on `env`'s client until `shutdown`.
fn spawn_controller(
    env: &Env,
    port: u16,
    shutdown: &CancellationToken,
) -> tokio::task::JoinHandle<Result<(), sandbox_controller::Error>> {
    let args = args(port);
    let runtime = Runtime::with_client(
        &args.common,
        RunSpec::new("sandbox-controller", sandbox_controller::args::LEASE_NAME),
        env.controller_client.clone(),
        shutdown.clone(),
    );
    tokio::spawn(async move { sandbox_controller::run_with(runtime, &args).await })
}

/// The caBundle the controller patched into the Sandbox CRD, once it is there. The CRD as
/// installed already names the release's Service and namespace; the controller rewrites the
/// whole client config in the same patch as the caBundle, so the Service is checked only once
/// the caBundle has arrived.
async fn ca_bundle(env: &Env) -> String {
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let config = wait_for("the Sandbox CRD carries a caBundle", DEADLINE, || async {
        let crd = crds.get("sandboxes.agents.x-k8s.io").await.ok()?;
        let config = crd.spec.conversion?.webhook?.client_config?;
        config.ca_bundle.is_some().then_some(config)
    })
    .await;
    let service = config.service.expect("a Service client config");
    assert_eq!(service.name, SERVICE);
    assert_eq!(service.namespace, namespace());
    assert_eq!(service.path.as_deref(), Some("/convert"));
    String::from_utf8(config.ca_bundle.unwrap().0).expect("PEM")
}

/// A client that trusts only `ca_pem` and reaches `addr` under the Service's DNS name.
fn client(ca_pem: &str, addr: SocketAddr) -> reqwest::Client {
    e2e_tests::webhook_client::client(ca_pem, &format!("{SERVICE}.{}.svc", namespace()), addr)
}

async fn convert(http: &reqwest::Client, port: u16, desired: &str, object: Value) -> Value {
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "review-1", "desiredAPIVersion": desired, "objects": [object]}});
    let response = http
        .post(format!(
            "https://{SERVICE}.{}.svc:{port}/convert",
            namespace()
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&review).unwrap())
        .send()
        .await
        .expect("the webhook answers over TLS");
    assert_eq!(response.status(), 200);
    let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(answer["response"]["uid"], "review-1");
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    answer["response"]["convertedObjects"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_certificates_are_shared_patched_into_the_crd_and_serve_conversions() {
    let env = Env::start(EnvOptions {
        sandbox_controller: false,
        ..EnvOptions::default()
    })
    .await;
    let shutdown = CancellationToken::new();
    let port = free_port();
    let first = spawn_controller(&env, port, &shutdown);
    let ca = ca_bundle(&env).await;

    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), namespace());
    let secret = secrets.get(SECRET).await.expect("the certificate Secret");
    let data = secret.data.unwrap();
    assert_eq!(
        data["ca.crt"].0,
        ca.as_bytes(),
        "the CRD trusts the Secret's CA"
    );
    assert!(!data["tls.crt"].0.is_empty() && !data["tls.key"].0.is_empty());

    let http = client(&ca, format!("127.0.0.1:{port}").parse().unwrap());
    let alpha = json!({
        "apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "old", "namespace": "default", "uid": "u-1"},
        "spec": {"replicas": 0,
                 "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
    });
    wait_for("the webhook answers", DEADLINE, || async {
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "probe", "desiredAPIVersion": "agents.x-k8s.io/v1beta1",
                        "objects": [alpha.clone()]}});
        http.post(format!(
            "https://{SERVICE}.{}.svc:{port}/convert",
            namespace()
        ))
        .body(serde_json::to_vec(&review).unwrap())
        .send()
        .await
        .ok()
        .map(|_| ())
    })
    .await;
    let beta = convert(&http, port, "agents.x-k8s.io/v1beta1", alpha.clone()).await;
    assert_eq!(beta["spec"]["operatingMode"], "Suspended");
    let back = convert(&http, port, "agents.x-k8s.io/v1alpha1", beta).await;
    assert_eq!(
        back, alpha,
        "v1alpha1 -> v1beta1 -> v1alpha1 gives the original back"
    );

    // A second replica (same flags, another port) reuses the Secret: same CA, same CRD.
    let second_port = free_port();
    let second = spawn_controller(&env, second_port, &shutdown);
    let http2 = client(&ca, format!("127.0.0.1:{second_port}").parse().unwrap());
    wait_for("the second replica converts", DEADLINE, || async {
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "r2", "desiredAPIVersion": "agents.x-k8s.io/v1beta1",
                        "objects": [alpha.clone()]}});
        let response = http2
            .post(format!(
                "https://{SERVICE}.{}.svc:{second_port}/convert",
                namespace()
            ))
            .body(serde_json::to_vec(&review).unwrap())
            .send()
            .await
            .ok()?;
        (response.status() == 200).then_some(())
    })
    .await;
    assert_eq!(
        ca_bundle(&env).await,
        ca,
        "the second replica did not replace the CA"
    );

    shutdown.cancel();
    for task in [first, second] {
        tokio::time::timeout(DEADLINE, task)
            .await
            .expect("the controller stops")
            .unwrap()
            .expect("clean shutdown");
    }
    env.stop().await;
}
