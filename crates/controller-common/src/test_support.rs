//! In-test fake of the Lease endpoints (get, create, replace with resourceVersion conflicts,
//! and an outage switch), served on 127.0.0.1 and reached through a real kube client.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kube::Client;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::leader_election::{LeaderElectionConfig, LeaderElector, LeaseTimings};
use crate::rate_limit::RateLimit;

#[derive(Default)]
pub(crate) struct FakeState {
    pub(crate) leases: HashMap<(String, String), Value>,
    last_rv: u64,
    pub(crate) unavailable: bool,
    /// Requests never get an answer while set.
    pub(crate) hang: bool,
}

pub(crate) type Shared = Arc<Mutex<FakeState>>;

fn status(code: StatusCode, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, Json(body)).into_response()
}

pub(crate) fn lock(state: &Shared) -> std::sync::MutexGuard<'_, FakeState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeState {
    pub(crate) fn store(&mut self, ns: &str, name: &str, mut body: Value) -> Value {
        self.last_rv += 1;
        body["apiVersion"] = json!("coordination.k8s.io/v1");
        body["kind"] = json!("Lease");
        body["metadata"]["name"] = json!(name);
        body["metadata"]["namespace"] = json!(ns);
        body["metadata"]["resourceVersion"] = json!(self.last_rv.to_string());
        self.leases
            .insert((ns.to_owned(), name.to_owned()), body.clone());
        body
    }
}

async fn get_lease(
    State(state): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
) -> Response {
    if lock(&state).hang {
        std::future::pending::<()>().await;
    }
    let state = lock(&state);
    if state.unavailable {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "outage",
        );
    }
    match state.leases.get(&(ns, name.clone())) {
        Some(lease) => Json(lease.clone()).into_response(),
        None => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("leases \"{name}\" not found"),
        ),
    }
}

async fn create_lease(
    State(state): State<Shared>,
    Path(ns): Path<String>,
    Json(body): Json<Value>,
) -> Response {
    if lock(&state).hang {
        std::future::pending::<()>().await;
    }
    let mut state = lock(&state);
    if state.unavailable {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "outage",
        );
    }
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if state.leases.contains_key(&(ns.clone(), name.clone())) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            &format!("leases \"{name}\" already exists"),
        );
    }
    let stored = state.store(&ns, &name, body);
    (StatusCode::CREATED, Json(stored)).into_response()
}

async fn replace_lease(
    State(state): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    if lock(&state).hang {
        std::future::pending::<()>().await;
    }
    let mut state = lock(&state);
    if state.unavailable {
        return status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "outage",
        );
    }
    let Some(current) = state.leases.get(&(ns.clone(), name.clone())) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("leases \"{name}\" not found"),
        );
    };
    if body["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
        return status(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version and try again",
        );
    }
    let stored = state.store(&ns, &name, body);
    Json(stored).into_response()
}

pub(crate) struct Fake {
    pub(crate) state: Shared,
    pub(crate) client: Client,
    pub(crate) addr: std::net::SocketAddr,
    _server: JoinHandle<()>,
}

/// The Lease endpoints over `state`.
fn lease_router(state: Shared) -> Router {
    Router::new()
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            post(create_lease),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
            get(get_lease).put(replace_lease),
        )
        .with_state(state)
}

impl Fake {
    /// The Lease endpoints plus `extra` routes, called in-process by the client (no socket,
    /// so tests can pause time).
    pub(crate) fn in_process(extra: Router) -> Fake {
        let state: Shared = Arc::default();
        let router = lease_router(state.clone()).merge(extra);
        Fake {
            state,
            client: Client::new(router, "default"),
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            _server: tokio::spawn(async {}),
        }
    }

    pub(crate) async fn start() -> Fake {
        let state: Shared = Arc::default();
        let router = lease_router(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = crate::client::client_with_rate_limit(config, RateLimit::Unlimited).unwrap();
        Fake {
            state,
            client,
            addr,
            _server: server,
        }
    }

    pub(crate) fn lease(&self) -> Option<Value> {
        lock(&self.state)
            .leases
            .get(&("ops".to_owned(), "test-lease".to_owned()))
            .cloned()
    }

    pub(crate) fn holder(&self) -> Option<String> {
        self.lease()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_owned))
    }

    pub(crate) fn elector(&self, identity: &str, timings: LeaseTimings) -> LeaderElector {
        LeaderElector::new(
            self.client.clone(),
            LeaderElectionConfig {
                namespace: "ops".into(),
                name: "test-lease".into(),
                identity: identity.into(),
                timings,
            },
        )
    }
}

/// Polls `cond` every 20 ms until it holds or `deadline_secs` pass.
pub(crate) async fn wait_for(what: &str, deadline_secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(deadline_secs);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
