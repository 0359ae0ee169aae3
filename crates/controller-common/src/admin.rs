//! The admin HTTP endpoints: `/metrics` on the metrics address, `/healthz` and `/readyz` on the
//! probe address (one listener serves all three when both addresses are the same).
//!
//! - `/metrics`: the process' prometheus-client [`Registry`]. OpenMetrics text when the scraper
//!   asks for it (`Accept: application/openmetrics-text`, as Prometheus does; exemplars are only
//!   carried there), else the classic Prometheus text format 0.0.4.
//! - `/healthz`: 200 while the process does its work; 503 naming what it is not doing when a
//!   [`Liveness`] check finds work left undone for the stall threshold (keys due in a work
//!   queue with no reconcile started or finished, a watch event its controller has not taken;
//!   see [`crate::work_queue::WorkQueue::stall`]), so the kubelet restarts the process. It does
//!   not depend on the API server: an outage is not something a restart fixes.
//! - `/readyz`: 200 when every [`ReadyGate`] is ready, or when this replica is a leader-election
//!   standby (so rolling updates proceed while another replica leads); else 503 listing the
//!   gates still pending.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::encoding::{prometheus_text, text};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::args::BindAddress;
use crate::error::Error;
use crate::metrics::ControllerMetrics;
use crate::work_queue::WorkQueue;

/// Content type of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Shared readiness state behind `/readyz`. Cheap to clone; all clones see the same state.
#[derive(Clone, Default)]
pub struct Readiness {
    inner: Arc<ReadinessInner>,
}

#[derive(Default)]
struct ReadinessInner {
    gates: Mutex<Vec<ReadyGate>>,
    standby: AtomicBool,
}

/// One condition `/readyz` waits for, e.g. "sandbox cache synced". Starts not ready.
#[derive(Clone)]
pub struct ReadyGate {
    name: Arc<str>,
    ready: Arc<AtomicBool>,
}

impl ReadyGate {
    /// Marks this gate ready.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::SeqCst);
    }

    /// Marks this gate not ready again (e.g. a cache lost its watch).
    pub fn set_not_ready(&self) {
        self.ready.store(false, Ordering::SeqCst);
    }

    /// Whether the gate is ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What `/readyz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessReport {
    /// Whether `/readyz` answers 200.
    pub ready: bool,
    /// Whether this replica is a leader-election standby.
    pub standby: bool,
    /// Names of gates not ready yet.
    pub pending: Vec<String>,
}

impl Readiness {
    /// A readiness state with no gates (ready) and not on standby.
    pub fn new() -> Self {
        Readiness::default()
    }

    /// Registers a new gate, not ready until [`ReadyGate::set_ready`]. Register gates before
    /// the controllers start (before [`crate::Runtime::run`]), so `/readyz` is not briefly
    /// true between winning the Lease and creating them.
    pub fn gate(&self, name: impl Into<String>) -> ReadyGate {
        let gate = ReadyGate {
            name: Arc::from(name.into()),
            ready: Arc::new(AtomicBool::new(false)),
        };
        self.lock_gates().push(gate.clone());
        gate
    }

    /// Sets whether this replica is a leader-election standby (ready regardless of gates).
    /// Maintained by the runtime.
    pub fn set_standby(&self, standby: bool) {
        self.inner.standby.store(standby, Ordering::SeqCst);
    }

    /// The current report.
    pub fn report(&self) -> ReadinessReport {
        let pending: Vec<String> = self
            .lock_gates()
            .iter()
            .filter(|g| !g.is_ready())
            .map(|g| g.name().to_owned())
            .collect();
        let standby = self.inner.standby.load(Ordering::SeqCst);
        ReadinessReport {
            ready: standby || pending.is_empty(),
            standby,
            pending,
        }
    }

    fn lock_gates(&self) -> std::sync::MutexGuard<'_, Vec<ReadyGate>> {
        // Gates are only pushed and read; a poisoned list is still consistent.
        self.inner
            .gates
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Router serving `/metrics` from `registry`.
pub fn metrics_router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(registry)
}

/// A check of the liveness probe: at `now`, with the stall threshold, what is not being done
/// (one line each; empty when all is well).
type LivenessCheck = Arc<dyn Fn(tokio::time::Instant, Duration) -> Vec<String> + Send + Sync>;

/// Shared liveness state behind `/healthz`: the checks and the stall threshold. Cheap to
/// clone; all clones see the same checks.
#[derive(Clone)]
pub struct Liveness {
    threshold: Duration,
    checks: Arc<Mutex<Vec<LivenessCheck>>>,
}

impl Liveness {
    /// A liveness state with no checks (healthy) failing a check once work has been left
    /// undone for `threshold` (zero: never).
    pub fn new(threshold: Duration) -> Self {
        Liveness {
            threshold,
            checks: Arc::default(),
        }
    }

    /// Adds the work queues of `metrics` (every controller that reconciles through
    /// [`crate::runner::Runner`] with a queue of `metrics`).
    pub fn watch(&self, metrics: &ControllerMetrics) {
        let metrics = metrics.clone();
        self.add_check(Arc::new(move |now, threshold| {
            metrics.stalls(now, threshold)
        }));
    }

    /// Adds one work queue (a controller that builds its queue without [`ControllerMetrics`]).
    pub fn watch_queue(&self, queue: WorkQueue) {
        self.add_check(Arc::new(move |now, threshold| {
            queue.stall(now, threshold).into_iter().collect()
        }));
    }

    /// Adds a check.
    pub fn add_check(&self, check: LivenessCheck) {
        self.checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(check);
    }

    /// What is not being done now (empty: healthy).
    pub fn problems(&self) -> Vec<String> {
        let checks = self
            .checks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        let now = tokio::time::Instant::now();
        checks
            .iter()
            .flat_map(|check| check(now, self.threshold))
            .collect()
    }
}

impl Default for Liveness {
    /// Healthy with no checks; the threshold of `--health-stall-threshold`'s default.
    fn default() -> Self {
        Liveness::new(Duration::from_secs(60))
    }
}

/// Router serving `/healthz` and `/readyz`.
pub fn probe_router(readiness: Readiness, liveness: Liveness) -> Router {
    Router::new()
        .route(
            "/healthz",
            get(move || {
                let liveness = liveness.clone();
                async move { serve_healthz(&liveness) }
            }),
        )
        .route("/readyz", get(serve_readyz))
        .with_state(readiness)
}

fn serve_healthz(liveness: &Liveness) -> Response {
    let problems = liveness.problems();
    if problems.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    tracing::error!(problems = ?problems, "liveness probe failing: work left undone");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("not doing its work:\n{}\n", problems.join("\n")),
    )
        .into_response()
}

async fn serve_metrics(State(registry): State<Arc<Registry>>, headers: HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let mut body = String::new();
    let (encoded, content_type) = if wants_openmetrics {
        (text::encode(&mut body, &registry), OPENMETRICS_CONTENT_TYPE)
    } else {
        (
            prometheus_text::encode(&mut body, &registry),
            prometheus_text::CONTENT_TYPE,
        )
    };
    match encoded {
        Ok(()) => ([(header::CONTENT_TYPE, content_type)], body).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("encoding metrics failed: {e}\n"),
            )
                .into_response()
        }
    }
}

async fn serve_readyz(State(readiness): State<Readiness>) -> Response {
    let report = readiness.report();
    if report.ready {
        let body = if report.standby {
            "ok (standby)\n".to_owned()
        } else {
            "ok\n".to_owned()
        };
        (StatusCode::OK, body).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: waiting for {}\n", report.pending.join(", ")),
        )
            .into_response()
    }
}

/// The running admin servers.
pub struct AdminServers {
    /// Bound address of the metrics server (None when disabled or merged into the probe one).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Bound address of the probe server (None when disabled).
    pub probe_addr: Option<std::net::SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

impl AdminServers {
    /// Waits until the servers have stopped (after the shutdown token is cancelled).
    pub async fn join(self) {
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// Binds both addresses (failing early with the address in the error) and serves until
/// `shutdown` is cancelled. When both addresses are equal, one listener serves all routes.
pub async fn serve_admin(
    metrics: &BindAddress,
    probes: &BindAddress,
    registry: Arc<Registry>,
    readiness: Readiness,
    liveness: Liveness,
    shutdown: CancellationToken,
) -> Result<AdminServers, Error> {
    let mut servers = AdminServers {
        metrics_addr: None,
        probe_addr: None,
        tasks: Vec::new(),
    };
    // Port 0 means "any free port" for each server, so two port-0 addresses stay separate.
    let same =
        metrics == probes && matches!(metrics, BindAddress::Listen { port, .. } if *port != 0);
    if same {
        let listener = bind("metrics and health probe", metrics).await?;
        servers.probe_addr = listener.local_addr().ok();
        servers.metrics_addr = servers.probe_addr;
        let router = metrics_router(registry).merge(probe_router(readiness, liveness));
        servers.tasks.push(spawn_server(listener, router, shutdown));
        return Ok(servers);
    }
    if metrics != &BindAddress::Disabled {
        let listener = bind("metrics", metrics).await?;
        servers.metrics_addr = listener.local_addr().ok();
        let router = metrics_router(registry);
        servers
            .tasks
            .push(spawn_server(listener, router, shutdown.clone()));
    }
    if probes != &BindAddress::Disabled {
        let listener = bind("health probe", probes).await?;
        servers.probe_addr = listener.local_addr().ok();
        servers.tasks.push(spawn_server(
            listener,
            probe_router(readiness, liveness),
            shutdown,
        ));
    }
    Ok(servers)
}

async fn bind(server: &'static str, address: &BindAddress) -> Result<TcpListener, Error> {
    let mut last_error = std::io::Error::other("address is disabled");
    for (host, port) in address.bind_candidates() {
        match TcpListener::bind((host.as_str(), port)).await {
            Ok(listener) => return Ok(listener),
            Err(e) => last_error = e,
        }
    }
    Err(Error::Bind {
        server,
        address: address.to_string(),
        source: last_error,
    })
}

fn spawn_server(
    listener: TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let addr = listener.local_addr().ok();
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(e) = served {
            tracing::error!(error = %e, ?addr, "admin server stopped with an error");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get_text(
        router: Router,
        path: &str,
        accept: Option<&str>,
    ) -> (StatusCode, String, String) {
        let mut req = Request::get(path);
        if let Some(accept) = accept {
            req = req.header(header::ACCEPT, accept);
        }
        let resp = router
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn registry_with_counter() -> (Arc<Registry>, Counter) {
        let mut registry = Registry::default();
        let counter = Counter::default();
        registry.register(
            "test_requests",
            "Requests seen by the test",
            counter.clone(),
        );
        (Arc::new(registry), counter)
    }

    #[tokio::test]
    async fn metrics_serve_registered_values_in_both_formats() {
        let (registry, counter) = registry_with_counter();
        counter.inc_by(3);
        let (status, ct, body) = get_text(metrics_router(registry.clone()), "/metrics", None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
        assert!(body.contains("test_requests_total 3"), "{body}");
        assert!(
            !body.contains("# EOF"),
            "classic text has no EOF marker: {body}"
        );

        let (status, ct, body) = get_text(
            metrics_router(registry),
            "/metrics",
            Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(ct, OPENMETRICS_CONTENT_TYPE);
        assert!(body.contains("test_requests_total 3"), "{body}");
        assert!(body.trim_end().ends_with("# EOF"), "{body}");
    }

    /// `/healthz` fails, naming what is undone, while a check finds work left undone for the
    /// threshold (`--health-stall-threshold`); readiness is not affected.
    #[tokio::test(start_paused = true)]
    async fn healthz_fails_while_a_controller_leaves_its_work_undone() {
        let mut registry = Registry::default();
        let metrics = ControllerMetrics::register(&mut registry);
        let queue = metrics.work_queue("sandboxclaim");
        let liveness = Liveness::new(Duration::from_secs(60));
        liveness.watch(&metrics);
        let readiness = Readiness::new();
        let router = || probe_router(readiness.clone(), liveness.clone());

        queue.set_due(true);
        tokio::time::sleep(Duration::from_secs(30)).await;
        let (status, _, _) = get_text(router(), "/healthz", None).await;
        assert_eq!(status, StatusCode::OK, "not yet the threshold");
        tokio::time::sleep(Duration::from_secs(31)).await;
        let (status, _, body) = get_text(router(), "/healthz", None).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("sandboxclaim: 0 keys waiting, due for 61s"),
            "{body}"
        );
        let (status, _, _) = get_text(router(), "/readyz", None).await;
        assert_eq!(status, StatusCode::OK, "readiness is the caches' business");

        // A reconcile starts: progress, healthy again.
        drop(queue.start(Some("ns"), "c"));
        let (status, _, _) = get_text(router(), "/healthz", None).await;
        assert_eq!(status, StatusCode::OK);
    }

    #[tokio::test]
    async fn healthz_is_ok_and_readyz_follows_gates() {
        let readiness = Readiness::new();
        let (status, _, _) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/healthz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);

        let cache = readiness.gate("sandbox cache");
        let pods = readiness.gate("pod cache");
        let (status, _, body) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            body.contains("sandbox cache") && body.contains("pod cache"),
            "{body}"
        );

        cache.set_ready();
        let (status, _, body) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(
            !body.contains("sandbox cache") && body.contains("pod cache"),
            "{body}"
        );

        pods.set_ready();
        let (status, _, _) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);

        pods.set_not_ready();
        let (status, _, _) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn standby_replica_is_ready_even_without_synced_caches() {
        let readiness = Readiness::new();
        let _cache = readiness.gate("sandbox cache");
        readiness.set_standby(true);
        let (status, _, body) = get_text(
            probe_router(readiness.clone(), Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("standby"), "{body}");
        readiness.set_standby(false);
        let (status, _, _) = get_text(
            probe_router(readiness, Liveness::default()),
            "/readyz",
            None,
        )
        .await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    }

    #[tokio::test]
    async fn servers_listen_and_stop_on_shutdown() {
        let (registry, _) = registry_with_counter();
        let readiness = Readiness::new();
        let token = CancellationToken::new();
        let local = |port| BindAddress::Listen {
            host: "127.0.0.1".into(),
            port,
        };
        let servers = serve_admin(
            &local(0),
            &local(0),
            registry,
            readiness,
            Liveness::default(),
            token.clone(),
        )
        .await
        .unwrap();
        let metrics = servers.metrics_addr.unwrap();
        let probes = servers.probe_addr.unwrap();
        assert_ne!(metrics, probes, "port 0 twice gives two listeners");

        let resp = raw_get(metrics, "/metrics").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.contains("test_requests_total 0"), "{resp}");
        let resp = raw_get(probes, "/healthz").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        let resp = raw_get(probes, "/metrics").await;
        assert!(
            resp.starts_with("HTTP/1.1 404"),
            "metrics are not on the probe port: {resp}"
        );

        token.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(10), servers.join())
            .await
            .expect("servers stop after cancellation");
    }

    #[tokio::test]
    async fn disabled_and_busy_addresses() {
        let (registry, _) = registry_with_counter();
        let token = CancellationToken::new();
        let servers = serve_admin(
            &BindAddress::Disabled,
            &BindAddress::Disabled,
            registry.clone(),
            Readiness::new(),
            Liveness::default(),
            token.clone(),
        )
        .await
        .unwrap();
        assert!(servers.metrics_addr.is_none() && servers.probe_addr.is_none());

        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let busy = BindAddress::Listen {
            host: "127.0.0.1".into(),
            port,
        };
        let err = serve_admin(
            &busy,
            &BindAddress::Disabled,
            registry,
            Readiness::new(),
            Liveness::default(),
            token,
        )
        .await
        .err()
        .expect("a busy port is an error");
        assert!(
            err.to_string().contains(&format!("127.0.0.1:{port}")),
            "{err}"
        );
        assert!(err.to_string().contains("metrics"), "{err}");
    }

    #[tokio::test]
    async fn go_style_all_interfaces_address_accepts_ipv4_clients() {
        let (registry, _) = registry_with_counter();
        let token = CancellationToken::new();
        let all: BindAddress = ":0".parse().unwrap();
        let servers = serve_admin(
            &all,
            &BindAddress::Disabled,
            registry,
            Readiness::new(),
            Liveness::default(),
            token.clone(),
        )
        .await
        .unwrap();
        let port = servers.metrics_addr.unwrap().port();
        let resp = raw_get(([127, 0, 0, 1], port).into(), "/metrics").await;
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        token.cancel();
    }

    async fn raw_get(addr: std::net::SocketAddr, path: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n");
        stream.write_all(req.as_bytes()).await.unwrap();
        let mut out = String::new();
        stream.read_to_string(&mut out).await.unwrap();
        out
    }
}
