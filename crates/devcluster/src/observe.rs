//! Request observation for tests and benchmarks: counters and latency histograms (readable from
//! the library and as Prometheus text for `/metrics`), an optional JSON-lines audit log, and fault
//! injection (errors, latency, early watch closes). All of it sits in one axum middleware
//! ([`Observer::layer`]) in front of the API handlers.
//!
//! Timing: a request's latency is measured until its response headers are ready, so a watch
//! counts the time to start streaming, not its lifetime (open watches have their own gauge).
//! Compacting history so that watchers get `410 Expired` is the store's job, not this module's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt as _;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

pub mod audit;
pub mod faults;
pub mod metrics;
pub mod request_info;

pub use audit::{AuditLog, AuditRecord};
pub use faults::{FaultConfig, FaultConfigError, FaultRule, WatchClose};
pub use metrics::{PROMETHEUS_CONTENT_TYPE, RequestKey, RequestMetrics};
pub use request_info::{RequestInfo, parse_request_info};

/// How a server's requests are observed.
#[derive(Debug, Clone, Default)]
pub struct ObserverConfig {
    /// Append one JSON line per request to this file.
    pub audit_log: Option<PathBuf>,
    /// Fault injection (none by default); can be replaced at run time with
    /// [`Observer::set_faults`].
    pub faults: FaultConfig,
}

/// Errors setting up an [`Observer`].
#[derive(Debug, thiserror::Error)]
pub enum ObserveError {
    #[error("cannot open audit log {path}: {source}")]
    AuditLog {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Faults(#[from] FaultConfigError),
}

/// Counts, audits and (when configured) disturbs requests. Share it as `Arc<Observer>`.
pub struct Observer {
    metrics: RequestMetrics,
    audit: Option<AuditLog>,
    faults: RwLock<FaultConfig>,
    rng: Mutex<StdRng>,
}

/// What fault injection decided for one request.
#[derive(Debug, Clone, Default, PartialEq)]
struct FaultDecision {
    latency: Duration,
    error_code: Option<u16>,
    /// The failing rule's message, if it has one.
    message: Option<String>,
    retry_after_seconds: u64,
    close_watch_after: Option<Duration>,
}

impl Observer {
    pub fn new(config: ObserverConfig) -> Result<Self, ObserveError> {
        config.faults.validate()?;
        let audit = match &config.audit_log {
            Some(path) => Some(
                AuditLog::open(path).map_err(|source| ObserveError::AuditLog {
                    path: path.clone(),
                    source,
                })?,
            ),
            None => None,
        };
        let rng = seeded_rng(config.faults.seed);
        Ok(Self {
            metrics: RequestMetrics::new(),
            audit,
            faults: RwLock::new(config.faults),
            rng: Mutex::new(rng),
        })
    }

    /// Replaces the fault injection settings (and reseeds the RNG when a seed is given).
    pub fn set_faults(&self, faults: FaultConfig) -> Result<(), FaultConfigError> {
        faults.validate()?;
        if faults.seed.is_some()
            && let Ok(mut rng) = self.rng.lock()
        {
            *rng = seeded_rng(faults.seed);
        }
        if let Ok(mut current) = self.faults.write() {
            *current = faults;
        }
        Ok(())
    }

    /// The fault injection settings in force.
    pub fn faults(&self) -> FaultConfig {
        self.faults.read().map(|f| f.clone()).unwrap_or_default()
    }

    /// Counters, histograms and the open-watch gauge.
    pub fn metrics(&self) -> &RequestMetrics {
        &self.metrics
    }

    /// Forgets all counts and latency observations (e.g. between benchmark phases).
    pub fn reset_counts(&self) {
        self.metrics.reset();
    }

    /// Every counted class of request with its count.
    pub fn counts(&self) -> Vec<(RequestKey, u64)> {
        self.metrics.counts()
    }

    /// Prometheus text for `/metrics` (serve with [`PROMETHEUS_CONTENT_TYPE`]).
    pub fn render_prometheus(&self) -> String {
        self.metrics.render_prometheus()
    }

    /// Wraps `router` so every request passes through [`observe_middleware`].
    pub fn layer(self: &Arc<Self>, router: axum::Router) -> axum::Router {
        router.layer(axum::middleware::from_fn_with_state(
            Arc::clone(self),
            observe_middleware,
        ))
    }

    /// How long the next event of a watch described by `info` is held
    /// ([`FaultRule::event_delay`], summed over the matching rules).
    fn event_delay(&self, info: &RequestInfo) -> Duration {
        let Ok(faults) = self.faults.read() else {
            return Duration::ZERO;
        };
        faults
            .matching_rules(info)
            .map(|rule| rule.event_delay)
            .sum()
    }

    fn decide(&self, info: &RequestInfo) -> FaultDecision {
        let Ok(faults) = self.faults.read() else {
            return FaultDecision::default();
        };
        if faults.rules.is_empty() && faults.watch_close.is_none() {
            return FaultDecision::default();
        }
        let Ok(mut rng) = self.rng.lock() else {
            return FaultDecision::default();
        };
        let mut decision = FaultDecision {
            retry_after_seconds: faults.retry_after_seconds,
            ..FaultDecision::default()
        };
        for rule in faults.matching_rules(info) {
            decision.latency += rule.latency;
            if decision.error_code.is_none()
                && rule.error_rate > 0.0
                && rng.random::<f64>() < rule.error_rate
            {
                decision.error_code = Some(rule.error_code);
                decision.message = rule.message.clone();
            }
        }
        if info.verb == "watch"
            && let Some(close) = &faults.watch_close
            && close.probability > 0.0
            && rng.random::<f64>() < close.probability
        {
            let after = if close.max_after > close.min_after {
                rng.random_range(close.min_after..=close.max_after)
            } else {
                close.min_after
            };
            decision.close_watch_after = Some(after);
        }
        decision
    }
}

fn seeded_rng(seed: Option<u64>) -> StdRng {
    match seed {
        Some(seed) => StdRng::seed_from_u64(seed),
        None => StdRng::from_os_rng(),
    }
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// The axum middleware (use with `axum::middleware::from_fn_with_state`, or [`Observer::layer`]).
pub async fn observe_middleware(
    State(observer): State<Arc<Observer>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let received = if observer.audit.is_some() {
        now_rfc3339()
    } else {
        String::new()
    };
    let info = parse_request_info(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    );
    let user_agent = request
        .headers()
        .get(http::header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let request_uri = request
        .uri()
        .path_and_query()
        .map(|pq| pq.as_str().to_string())
        .unwrap_or_else(|| request.uri().path().to_string());
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let dry_run = dry_run_values(request.uri().query());
    let source_ip = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip().to_string());

    let decision = observer.decide(&info);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }

    let (response, injected) = match decision.error_code {
        Some(code) => (
            injected_response(
                code,
                decision.retry_after_seconds,
                decision.message.as_deref(),
            ),
            true,
        ),
        None => (next.run(request).await, false),
    };
    let code = response.status().as_u16();
    let elapsed = started.elapsed();
    observer.metrics.record(
        &info,
        content_type.as_deref(),
        &dry_run,
        &user_agent,
        code,
        elapsed,
    );
    if injected {
        observer.metrics.record_injected(&info, code);
    }
    if let Some(audit) = &observer.audit {
        audit.write(&AuditRecord {
            info: &info,
            request_uri: &request_uri,
            user_agent: &user_agent,
            source_ip,
            code,
            latency: elapsed,
            received,
            responded: now_rfc3339(),
            injected_fault: injected,
        });
    }

    if info.verb == "watch" && response.status().is_success() {
        track_watch(response, &observer, info, decision.close_watch_after)
    } else {
        response
    }
}

/// The `dryRun` query values joined by commas, as kube-apiserver labels its metrics.
fn dry_run_values(query: Option<&str>) -> String {
    let Some(query) = query else {
        return String::new();
    };
    let mut values: Vec<String> = form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "dryRun")
        .map(|(_, v)| v.into_owned())
        .collect();
    values.sort();
    values.dedup();
    values.join(",")
}

fn injected_response(code: u16, retry_after_seconds: u64, message: Option<&str>) -> Response {
    let body = faults::injected_status(code, retry_after_seconds, message).to_string();
    let status =
        http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    let mut builder = Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json");
    if matches!(code, 429 | 503) {
        builder = builder.header(http::header::RETRY_AFTER, retry_after_seconds.to_string());
    }
    builder
        .body(Body::from(body))
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

/// Decrements the open-watch gauge when the response body is dropped (stream ended or client gone).
struct OpenWatch(Arc<Observer>);

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.metrics.watch_closed();
    }
}

fn track_watch(
    response: Response,
    observer: &Arc<Observer>,
    info: RequestInfo,
    close_after: Option<Duration>,
) -> Response {
    observer.metrics.watch_opened();
    let guard = OpenWatch(Arc::clone(observer));
    let (parts, body) = response.into_parts();
    let stream = body.into_data_stream();
    let stream = match close_after {
        Some(after) => stream.take_until(tokio::time::sleep(after)).left_stream(),
        None => stream.right_stream(),
    };
    let delays = Arc::clone(observer);
    let stream = stream.then(move |chunk| {
        let delay = delays.event_delay(&info);
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            chunk
        }
    });
    let stream = stream.map(move |chunk| {
        let _keep_alive = &guard;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests;
