//! The webhook server over real TLS: `ConversionReview`s round trip through `POST /convert`,
//! clients that trust the CA verify the Service name, garbage gets a 400, the metrics count
//! requests, and a renewed certificate file is served without a restart.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use controller_common::webhook::certs::{self, CertBundle};
use controller_common::webhook::{self, Conversions, ConvertibleKind, Recheck, WebhookArgs};
use prometheus_client::registry::Registry;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    webhook: WebhookArgs,
}

const SERVICE: &str = "widget-webhook";
const NAMESPACE: &str = "widgets";

fn widgets() -> Conversions {
    Conversions::new(
        vec![ConvertibleKind::new(
            "example.com",
            "Widget",
            "widgets.example.com",
            &["v2", "v1"],
        )],
        |object: &Value, desired: &str| {
            let mut out = object.clone();
            out["apiVersion"] = json!(desired);
            Ok(out)
        },
    )
}

fn bundle() -> CertBundle {
    let names = certs::service_dns_names(SERVICE, NAMESPACE, "cluster.local");
    certs::generate(&names, std::time::SystemTime::now(), None).unwrap()
}

fn write_pair(dir: &Path, bundle: &CertBundle) {
    // Written aside and renamed, as kubelet swaps a mounted Secret.
    for (name, text) in [("tls.crt", &bundle.cert_pem), ("tls.key", &bundle.key_pem)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// A client that trusts `ca_pem` and reaches the server under the Service's DNS name.
fn client(ca_pem: &str, addr: std::net::SocketAddr) -> reqwest::Client {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .resolve(&format!("{SERVICE}.{NAMESPACE}.svc"), addr)
        .build()
        .unwrap()
}

fn url(addr: std::net::SocketAddr) -> String {
    format!("https://{SERVICE}.{NAMESPACE}.svc:{}/convert", addr.port())
}

struct Running {
    addr: std::net::SocketAddr,
    registry: Registry,
    shutdown: CancellationToken,
    webhook: webhook::Webhook,
}

async fn start(dir: &Path, files_every: Duration) -> Running {
    let args = Cli::try_parse_from([
        "test".to_owned(),
        "--manage-webhook-certs=false".to_owned(),
        "--webhook-host=127.0.0.1".to_owned(),
        "--webhook-port=0".to_owned(),
        format!("--webhook-cert-dir={}", dir.display()),
        format!("--webhook-service-name={SERVICE}"),
        format!("--webhook-namespace={NAMESPACE}"),
        "--webhook-cert-secret=unused".to_owned(),
    ])
    .unwrap()
    .webhook;
    // Unmanaged certificates never reach the API server: any client will do.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let kube = kube::Client::try_from(config).unwrap();
    let mut registry = Registry::default();
    let shutdown = CancellationToken::new();
    let webhook = webhook::start_with(
        &args,
        "cluster.local",
        "test",
        kube,
        widgets(),
        &mut registry,
        shutdown.clone(),
        Recheck {
            managed: Duration::from_secs(3600),
            files: files_every,
        },
    )
    .await
    .unwrap()
    .expect("enabled");
    Running {
        addr: webhook.local_addr,
        registry,
        shutdown,
        webhook,
    }
}

/// POSTs `body` to the webhook; the status and the parsed answer.
async fn post(
    http: &reqwest::Client,
    addr: std::net::SocketAddr,
    body: Vec<u8>,
) -> Result<(u16, Value), reqwest::Error> {
    let response = http
        .post(url(addr))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

fn review_bytes(objects: Vec<Value>) -> Vec<u8> {
    serde_json::to_vec(&review(objects)).unwrap()
}

fn review(objects: Vec<Value>) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
           "request": {"uid": "u-1", "desiredAPIVersion": "example.com/v2", "objects": objects}})
}

#[tokio::test]
async fn reviews_round_trip_over_tls_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundle();
    write_pair(dir.path(), &bundle);
    let running = start(dir.path(), Duration::from_secs(3600)).await;
    let http = client(&bundle.ca_pem, running.addr);

    let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": "w", "namespace": "ns"}, "spec": {"size": 3}});
    let (status, answer) = post(&http, running.addr, review_bytes(vec![widget.clone()]))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer["response"]["uid"], "u-1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    assert_eq!(
        answer["response"]["convertedObjects"][0]["apiVersion"],
        "example.com/v2"
    );
    assert_eq!(
        answer["response"]["convertedObjects"][0]["spec"],
        widget["spec"]
    );

    let (status, answer) = post(&http, running.addr, b"definitely not a review".to_vec())
        .await
        .unwrap();
    assert_eq!(status, 400);
    assert_eq!(answer["response"]["result"]["status"], "Failure");

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &running.registry).unwrap();
    assert!(
        text.contains(
            r#"controller_runtime_webhook_requests_total{code="200",webhook="/convert"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"controller_runtime_webhook_requests_total{code="400",webhook="/convert"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains("controller_runtime_webhook_latency_seconds_bucket"));
    assert!(
        text.contains(r#"controller_runtime_webhook_requests_in_flight{webhook="/convert"} 0"#)
    );

    running.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), running.webhook.stopped())
        .await
        .expect("the server stops on shutdown");
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_pair(dir.path(), &bundle());
    let running = start(dir.path(), Duration::from_secs(3600)).await;
    let stranger = client(&bundle().ca_pem, running.addr);
    let error = post(&stranger, running.addr, review_bytes(vec![]))
        .await
        .unwrap_err();
    assert!(error.is_connect(), "{error:?}");
    running.shutdown.cancel();
}

#[tokio::test]
async fn a_renewed_certificate_file_is_served_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let old = bundle();
    write_pair(dir.path(), &old);
    let running = start(dir.path(), Duration::from_millis(100)).await;
    let trusts_old = client(&old.ca_pem, running.addr);
    let ok = post(&trusts_old, running.addr, review_bytes(vec![])).await;
    assert_eq!(ok.unwrap().0, 200);

    let new = bundle();
    write_pair(dir.path(), &new);
    let trusts_new = client(&new.ca_pem, running.addr);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = post(&trusts_new, running.addr, review_bytes(vec![])).await;
        if attempt.as_ref().is_ok_and(|(status, _)| *status == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 20 s: {attempt:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A broken replacement is not served: the last good certificate stays.
    std::fs::write(dir.path().join("tls.crt"), "garbage").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let still = post(&trusts_new, running.addr, review_bytes(vec![])).await;
    assert_eq!(still.unwrap().0, 200);
    running.shutdown.cancel();
}

#[tokio::test]
async fn missing_certificate_files_stop_the_start_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let args = Cli::try_parse_from([
        "test".to_owned(),
        "--manage-webhook-certs=false".to_owned(),
        "--webhook-host=127.0.0.1".to_owned(),
        "--webhook-port=0".to_owned(),
        format!("--webhook-cert-dir={}", dir.path().display()),
        "--webhook-service-name=x".to_owned(),
        "--webhook-cert-secret=x".to_owned(),
    ])
    .unwrap()
    .webhook;
    let kube =
        kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
    let error = webhook::start(
        &args,
        "cluster.local",
        "test",
        kube,
        widgets(),
        &mut Registry::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(error.contains("no webhook certificate in"), "{error}");
}
