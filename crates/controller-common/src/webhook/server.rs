//! The HTTPS server: `POST /convert` over TLS (HTTP/1.1, no client certificates, like the
//! reference), with a serving certificate that can be swapped while connections are open, and
//! controller-runtime's webhook metrics.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Conversions;
use super::review;

/// The path the CRDs name.
pub const CONVERT_PATH: &str = "/convert";
/// Largest accepted review. The API server sends every item of a list it converts in one
/// review: 64 MiB holds a list of about 20,000 Sandboxes of 3 KiB each.
pub const MAX_REVIEW_BYTES: usize = 64 << 20;
/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long open connections get to finish after shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// controller-runtime's webhook latency buckets (Prometheus' defaults).
const LATENCY_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// The serving certificate, replaceable at any time (a renewal, a re-mounted file).
#[derive(Debug)]
pub struct Resolver {
    current: RwLock<Arc<CertifiedKey>>,
}

impl Resolver {
    pub fn new(key: Arc<CertifiedKey>) -> Self {
        Resolver {
            current: RwLock::new(key),
        }
    }

    /// Serves `key` from the next handshake on.
    pub fn set(&self, key: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = key;
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(
            self.current
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        )
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: String,
    webhook: String,
}

/// `controller_runtime_webhook_{requests_total,latency_seconds,requests_in_flight}`, the
/// families the reference's controller-runtime exposes (dashboards use them).
#[derive(Clone)]
pub struct WebhookMetrics {
    requests: Family<CodeLabels, Counter>,
    latency: Family<WebhookLabel, Histogram, fn() -> Histogram>,
    in_flight: Family<WebhookLabel, Gauge>,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS.iter().copied())
}

impl WebhookMetrics {
    pub fn register(registry: &mut Registry) -> WebhookMetrics {
        let metrics = WebhookMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            in_flight: Family::default(),
        };
        registry.register(
            "controller_runtime_webhook_requests",
            "Total number of admission requests by HTTP status code",
            metrics.requests.clone(),
        );
        registry.register(
            "controller_runtime_webhook_latency_seconds",
            "Histogram of the latency of processing admission requests",
            metrics.latency.clone(),
        );
        registry.register(
            "controller_runtime_webhook_requests_in_flight",
            "Current number of admission requests being served",
            metrics.in_flight.clone(),
        );
        metrics
    }
}

#[derive(Clone)]
struct AppState {
    conversions: Conversions,
    metrics: Option<WebhookMetrics>,
}

async fn convert(State(state): State<AppState>, body: Bytes) -> Response {
    let label = WebhookLabel {
        webhook: CONVERT_PATH.to_owned(),
    };
    let started = Instant::now();
    if let Some(m) = &state.metrics {
        m.in_flight.get_or_create(&label).inc();
    }
    // Conversion is CPU work on possibly large lists: keep it off the I/O threads.
    let conversions = state.conversions.clone();
    let answer = tokio::task::spawn_blocking(move || review::handle(&body, &conversions))
        .await
        .unwrap_or_else(|e| review::Answer {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            review: serde_json::json!({"apiVersion": review::REVIEW_API_VERSIONS[0],
                "kind": "ConversionReview", "response": {"uid": "",
                "result": {"status": "Failure", "message": format!("conversion task failed: {e}")}}}),
        });
    if !answer.succeeded() {
        tracing::warn!(
            status = answer.status.as_u16(),
            message = %answer.review.pointer("/response/result/message").and_then(|m| m.as_str()).unwrap_or_default(),
            "conversion review failed"
        );
    }
    if let Some(m) = &state.metrics {
        m.in_flight.get_or_create(&label).dec();
        m.latency
            .get_or_create(&label)
            .observe(started.elapsed().as_secs_f64());
        m.requests
            .get_or_create(&CodeLabels {
                code: answer.status.as_u16().to_string(),
                webhook: CONVERT_PATH.to_owned(),
            })
            .inc();
    }
    let body = serde_json::to_vec(&answer.review).unwrap_or_default();
    (
        answer.status,
        [(header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// The webhook's routes: `POST /convert`.
pub fn router(conversions: Conversions, metrics: Option<WebhookMetrics>) -> Router {
    Router::new()
        .route(CONVERT_PATH, post(convert))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(AppState {
            conversions,
            metrics,
        })
}

/// The rustls configuration serving whatever `resolver` holds (ring provider, TLS 1.2 and
/// 1.3, ALPN `http/1.1`).
pub fn tls_config(resolver: Arc<Resolver>) -> Result<rustls::ServerConfig, rustls::Error> {
    let mut config =
        rustls::ServerConfig::builder_with_provider(Arc::new(super::certs::provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Serves `app` over TLS on `listener` until `shutdown`, then lets open requests finish (up to
/// five seconds). Failed handshakes never stop the server.
pub async fn serve(
    listener: TcpListener,
    config: rustls::ServerConfig,
    app: Router,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a webhook connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        while connections.try_join_next().is_some() {}
        let acceptor = acceptor.clone();
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "webhook TLS handshake timed out");
                    return;
                }
            };
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app));
            tokio::pin!(connection);
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
                    }
                }
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    drop(listener);
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drain).await.is_err() {
        connections.abort_all();
    }
}
