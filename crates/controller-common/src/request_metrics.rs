//! `rest_client_requests_total{code,host,method}`: every Kubernetes API request the process
//! sends, by HTTP status, as client-go counts them (`<error>` when no response came back).
//! API requests are the cost that matters at scale; benchmarks and dashboards read this.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tower::{Layer, Service};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    host: String,
    method: String,
}

/// The request counter family. Cheap to clone; clones share values.
#[derive(Clone, Default)]
pub struct RequestMetrics {
    requests: Family<RequestLabels, Counter>,
}

impl RequestMetrics {
    /// An unregistered family; see [`RequestMetrics::register`].
    pub fn new() -> Self {
        RequestMetrics::default()
    }

    /// Registers `rest_client_requests_total` on `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests to the Kubernetes API, partitioned by status code, method, and host",
            self.requests.clone(),
        );
    }

    /// The count for one label combination (for tests and diagnostics).
    pub fn count(&self, code: &str, host: &str, method: &str) -> u64 {
        self.requests
            .get(&RequestLabels {
                code: code.to_owned(),
                host: host.to_owned(),
                method: method.to_owned(),
            })
            .map(|c| c.get())
            .unwrap_or(0)
    }

    fn record(&self, code: String, host: &str, method: String) {
        self.requests
            .get_or_create(&RequestLabels {
                code,
                host: host.to_owned(),
                method,
            })
            .inc();
    }
}

/// Tower layer counting requests into a [`RequestMetrics`]. `host` is the API server's
/// `host:port` (requests at this layer still carry relative URIs).
#[derive(Clone)]
pub struct RequestMetricsLayer {
    metrics: RequestMetrics,
    host: String,
}

impl RequestMetricsLayer {
    /// A layer recording into `metrics` under `host`.
    pub fn new(metrics: RequestMetrics, host: impl Into<String>) -> Self {
        RequestMetricsLayer {
            metrics,
            host: host.into(),
        }
    }
}

impl<S> Layer<S> for RequestMetricsLayer {
    type Service = CountedRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountedRequests {
            inner,
            metrics: self.metrics.clone(),
            host: self.host.clone(),
        }
    }
}

/// See [`RequestMetricsLayer`].
#[derive(Clone)]
pub struct CountedRequests<S> {
    inner: S,
    metrics: RequestMetrics,
    host: String,
}

impl<S, B, RB> Service<http::Request<B>> for CountedRequests<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.method().as_str().to_owned();
        let metrics = self.metrics.clone();
        let host = self.host.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let result = response.await;
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "<error>".to_owned(),
            };
            metrics.record(code, &host, method);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    #[tokio::test]
    async fn requests_are_counted_by_code_and_method() {
        use k8s_openapi::api::coordination::v1::Lease;
        let server = tower::service_fn(|req: http::Request<kube::client::Body>| async move {
            let (status, body) = if req.method() == http::Method::GET {
                (
                    404,
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
                )
            } else {
                (
                    409,
                    r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}"#,
                )
            };
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(kube::client::Body::from(body.as_bytes().to_vec()))
                    .unwrap(),
            )
        });
        let metrics = RequestMetrics::new();
        let client = kube::client::ClientBuilder::new(server, "default")
            .with_layer(&RequestMetricsLayer::new(metrics.clone(), "127.0.0.1:6443"))
            .build();
        let api: kube::Api<Lease> = kube::Api::default_namespaced(client);
        for _ in 0..3 {
            assert!(api.get_opt("missing").await.unwrap().is_none());
        }
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some("l".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: None,
        };
        assert!(api.replace("l", &Default::default(), &lease).await.is_err());

        assert_eq!(metrics.count("404", "127.0.0.1:6443", "GET"), 3);
        assert_eq!(metrics.count("409", "127.0.0.1:6443", "PUT"), 1);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        assert!(
            out.contains(
                "rest_client_requests_total{code=\"404\",host=\"127.0.0.1:6443\",method=\"GET\"} 3"
            ),
            "{out}"
        );
    }
}
