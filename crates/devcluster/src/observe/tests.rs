//! The observer middleware in front of a small router, driven with real HTTP requests.

use super::*;
use axum::routing::get;
use bytes::Bytes;
use http::StatusCode;
use http_body_util_shim::collect_body;
use tower::ServiceExt as _;

mod real_server;

/// Collecting a response body without pulling in another crate.
mod http_body_util_shim {
    use axum::body::Body;
    use futures::StreamExt as _;

    pub async fn collect_body(body: Body) -> Vec<u8> {
        let mut out = Vec::new();
        let mut stream = body.into_data_stream();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    }
}

fn app() -> axum::Router {
    axum::Router::new()
        .route(
            "/api/v1/namespaces/{ns}/pods",
            get(|query: axum::extract::RawQuery| async move {
                if query
                    .0
                    .as_deref()
                    .unwrap_or_default()
                    .contains("watch=true")
                {
                    // A watch that sends one frame and then stays open.
                    let first = futures::stream::once(async {
                        Ok::<_, std::convert::Infallible>(Bytes::from_static(
                            b"{\"type\":\"BOOKMARK\",\"object\":{}}\n",
                        ))
                    });
                    let stream = first.chain(futures::stream::pending());
                    Response::new(Body::from_stream(stream))
                } else {
                    Response::new(Body::from(r#"{"kind":"PodList","items":[]}"#))
                }
            })
            .post(|| async { (StatusCode::CREATED, "{}") }),
        )
        .route("/version", get(|| async { "{}" }))
}

fn observer(faults: FaultConfig) -> Arc<Observer> {
    Arc::new(
        Observer::new(ObserverConfig {
            audit_log: None,
            faults,
        })
        .unwrap(),
    )
}

async fn send(router: &axum::Router, method: http::Method, uri: &str, ua: &str) -> Response {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header(http::header::USER_AGENT, ua)
        .body(Body::empty())
        .unwrap();
    router.clone().oneshot(request).await.unwrap()
}

#[tokio::test]
async fn requests_are_counted_by_verb_resource_agent_and_code() {
    let obs = observer(FaultConfig::default());
    let router = obs.layer(app());
    for _ in 0..3 {
        let r = send(
            &router,
            http::Method::GET,
            "/api/v1/namespaces/default/pods?limit=500",
            "kubectl/v1.32.0",
        )
        .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
    send(
        &router,
        http::Method::POST,
        "/api/v1/namespaces/default/pods",
        "kube-rs/5.0.0",
    )
    .await;
    send(
        &router,
        http::Method::GET,
        "/api/v1/namespaces/default/pods/missing",
        "kube-rs/5.0.0",
    )
    .await;
    send(&router, http::Method::GET, "/version", "python").await;

    let count = |verb: &str, resource: &str, ua: &str, code: u16| {
        obs.metrics().total(|k| {
            k.verb == verb && k.resource == resource && k.user_agent == ua && k.code == code
        })
    };
    assert_eq!(count("list", "pods", "kubectl/v1.32.0", 200), 3);
    assert_eq!(count("create", "pods", "kube-rs/5.0.0", 201), 1);
    assert_eq!(count("get", "pods", "kube-rs/5.0.0", 404), 1);
    assert_eq!(count("get", "", "python", 200), 1);
    assert_eq!(obs.counts().iter().map(|(_, n)| n).sum::<u64>(), 6);

    let text = obs.render_prometheus();
    assert!(text.contains(r#"devcluster_requests_total{verb="create",group="",resource="pods",subresource="",user_agent="kube-rs/5.0.0",code="201"} 1"#), "{text}");
}

#[tokio::test]
async fn injected_errors_are_status_bodies_and_only_hit_matching_requests() {
    let obs = observer(FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["create".into()],
            resources: vec!["pods".into()],
            error_rate: 1.0,
            error_code: 429,
            ..Default::default()
        }],
        retry_after_seconds: 3,
        ..Default::default()
    });
    let router = obs.layer(app());

    let r = send(
        &router,
        http::Method::POST,
        "/api/v1/namespaces/default/pods",
        "t",
    )
    .await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()[http::header::RETRY_AFTER], "3");
    let status: kube::core::Status =
        serde_json::from_slice(&collect_body(r.into_body()).await).unwrap();
    assert_eq!(status.reason, "TooManyRequests");
    assert_eq!(status.code, 429);

    let r = send(
        &router,
        http::Method::GET,
        "/api/v1/namespaces/default/pods",
        "t",
    )
    .await;
    assert_eq!(r.status(), StatusCode::OK, "list is not a create");
    assert!(obs.render_prometheus().contains(
        r#"devcluster_injected_faults_total{verb="create",resource="pods",code="429"} 1"#
    ));
}

#[tokio::test]
async fn a_seeded_error_rate_is_reproducible() {
    let faults = FaultConfig {
        rules: vec![FaultRule {
            error_rate: 0.3,
            error_code: 503,
            ..Default::default()
        }],
        seed: Some(42),
        ..Default::default()
    };
    let mut runs = Vec::new();
    for _ in 0..2 {
        let obs = observer(faults.clone());
        let router = obs.layer(app());
        let mut outcomes = Vec::new();
        for _ in 0..200 {
            outcomes.push(
                send(&router, http::Method::GET, "/version", "t")
                    .await
                    .status()
                    .as_u16(),
            );
        }
        runs.push(outcomes);
    }
    assert_eq!(runs[0], runs[1], "same seed, same requests, same faults");
    let failed = runs[0].iter().filter(|c| **c == 503).count();
    assert!(
        (30..=90).contains(&failed),
        "about 30% of 200 fail, got {failed}"
    );
    assert!(runs[0].iter().all(|c| *c == 200 || *c == 503));
}

#[tokio::test]
async fn latency_is_added_to_matching_requests() {
    let obs = observer(FaultConfig {
        rules: vec![FaultRule {
            resources: vec!["/version".into()],
            latency: Duration::from_millis(150),
            ..Default::default()
        }],
        ..Default::default()
    });
    let router = obs.layer(app());
    let started = Instant::now();
    assert_eq!(
        send(&router, http::Method::GET, "/version", "t")
            .await
            .status(),
        StatusCode::OK
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
}

/// A watch of the pods in `default` through `router`.
async fn open_pods_watch(router: &axum::Router) -> Response {
    send(
        router,
        http::Method::GET,
        "/api/v1/namespaces/default/pods?watch=true",
        "t",
    )
    .await
}

#[tokio::test]
async fn watches_are_closed_early_when_configured_and_the_gauge_follows() {
    let obs = observer(FaultConfig {
        watch_close: Some(WatchClose {
            probability: 1.0,
            min_after: Duration::from_millis(50),
            max_after: Duration::from_millis(100),
        }),
        ..Default::default()
    });
    let router = obs.layer(app());
    let r = open_pods_watch(&router).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(obs.metrics().open_watches(), 1);
    // The handler's stream never ends by itself; the injected close ends it.
    let body = tokio::time::timeout(Duration::from_secs(5), collect_body(r.into_body()))
        .await
        .expect("watch closed by fault injection");
    assert!(body.starts_with(b"{\"type\":\"BOOKMARK\""));
    assert_eq!(obs.metrics().open_watches(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_watch_event_delay_holds_the_events_of_open_watches_it_matches() {
    let obs = observer(FaultConfig::default());
    let router = obs.layer(app());
    let watch = |router: axum::Router| async move {
        let r = open_pods_watch(&router).await;
        assert_eq!(r.status(), StatusCode::OK);
        r.into_body().into_data_stream()
    };
    // Opened before the rule: the rule still applies to its events.
    let mut lagging = watch(router.clone()).await;
    let delay = |resource: &str| FaultConfig {
        rules: vec![FaultRule {
            verbs: vec!["watch".into()],
            resources: vec![resource.into()],
            event_delay: Duration::from_secs(10),
            ..Default::default()
        }],
        ..Default::default()
    };
    obs.set_faults(delay("pods")).unwrap();
    let started = tokio::time::Instant::now();
    let first = lagging.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"{\"type\":\"BOOKMARK\""));
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "the event was held for the rule's delay, not {:?}",
        started.elapsed()
    );
    // A rule for another resource holds nothing.
    obs.set_faults(delay("services")).unwrap();
    let started = tokio::time::Instant::now();
    let mut prompt = watch(router).await;
    prompt.next().await.unwrap().unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn watches_stay_open_without_faults() {
    let obs = observer(FaultConfig::default());
    let router = obs.layer(app());
    let r = open_pods_watch(&router).await;
    let mut stream = r.into_body().into_data_stream();
    let first = stream.next().await.unwrap().unwrap();
    assert!(first.starts_with(b"{\"type\":\"BOOKMARK\""));
    let next = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(next.is_err(), "the watch stays open");
    assert_eq!(obs.metrics().open_watches(), 1);
    drop(stream);
    assert_eq!(
        obs.metrics().open_watches(),
        0,
        "a client going away closes the watch"
    );
}

#[tokio::test]
async fn audit_log_gets_one_line_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let obs = Arc::new(
        Observer::new(ObserverConfig {
            audit_log: Some(path.clone()),
            faults: FaultConfig::default(),
        })
        .unwrap(),
    );
    let router = obs.layer(app());
    send(
        &router,
        http::Method::GET,
        "/api/v1/namespaces/default/pods",
        "kubectl/v1.32.0",
    )
    .await;
    send(
        &router,
        http::Method::POST,
        "/api/v1/namespaces/default/pods",
        "kubectl/v1.32.0",
    )
    .await;
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["verb"], "list");
    assert_eq!(lines[1]["verb"], "create");
    assert_eq!(lines[1]["responseStatus"]["code"], 201);
    assert_eq!(lines[1]["requestURI"], "/api/v1/namespaces/default/pods");
    assert!(
        lines[1]["requestReceivedTimestamp"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
}

#[test]
fn an_unopenable_audit_log_and_bad_faults_are_errors() {
    let err = Observer::new(ObserverConfig {
        audit_log: Some(PathBuf::from("/nonexistent-dir/audit.log")),
        faults: FaultConfig::default(),
    })
    .err()
    .unwrap();
    assert!(
        err.to_string().contains("/nonexistent-dir/audit.log"),
        "{err}"
    );

    let obs = observer(FaultConfig::default());
    let bad = FaultConfig {
        rules: vec![FaultRule {
            error_rate: -0.1,
            ..Default::default()
        }],
        ..Default::default()
    };
    assert!(obs.set_faults(bad).is_err());
    assert_eq!(
        obs.faults(),
        FaultConfig::default(),
        "a rejected config changes nothing"
    );
}

#[tokio::test]
async fn faults_can_be_switched_at_run_time() {
    let obs = observer(FaultConfig::default());
    let router = obs.layer(app());
    assert_eq!(
        send(&router, http::Method::GET, "/version", "t")
            .await
            .status(),
        StatusCode::OK
    );
    obs.set_faults(FaultConfig {
        rules: vec![FaultRule {
            error_rate: 1.0,
            error_code: 500,
            ..Default::default()
        }],
        ..Default::default()
    })
    .unwrap();
    let r = send(&router, http::Method::GET, "/version", "t").await;
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    obs.set_faults(FaultConfig::default()).unwrap();
    assert_eq!(
        send(&router, http::Method::GET, "/version", "t")
            .await
            .status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn apply_patches_and_dry_runs_are_labelled_like_kube_apiserver() {
    let obs = observer(FaultConfig::default());
    let router = obs.layer(app());
    let request = http::Request::builder()
        .method(http::Method::PATCH)
        .uri("/api/v1/namespaces/default/pods/web?fieldManager=kubectl&dryRun=All")
        .header(http::header::CONTENT_TYPE, "application/apply-patch+yaml")
        .body(Body::empty())
        .unwrap();
    let code = router
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .status()
        .as_u16();
    let text = obs.render_prometheus();
    let want = format!(
        r#"apiserver_request_total{{verb="APPLY",dry_run="All",group="",version="v1",resource="pods",subresource="",scope="resource",component="apiserver",code="{code}"}} 1"#
    );
    assert!(text.contains(&want), "{text}");

    obs.reset_counts();
    assert!(obs.counts().is_empty());
    assert!(!obs.render_prometheus().contains("apiserver_request_total{"));
}
