//! The runtime lifecycle against the in-test Lease endpoint of `crate::test_support`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use super::*;
use crate::test_support::{Fake, lock, wait_for};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
}

fn args(leader_elect: bool) -> CommonArgs {
    Cli::try_parse_from([
        "test".to_owned(),
        format!("--leader-elect={leader_elect}"),
        "--leader-election-namespace=ops".to_owned(),
        "--metrics-bind-address=127.0.0.1:0".to_owned(),
        "--health-probe-bind-address=127.0.0.1:0".to_owned(),
    ])
    .unwrap()
    .common
}

fn spec() -> RunSpec {
    RunSpec {
        service_name: "test-controller".into(),
        lease_name: "test-lease".into(),
        shutdown_timeout: Duration::from_secs(5),
        lease_timings: LeaseTimings {
            lease_duration: Duration::from_secs(30),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(100),
        },
    }
}

/// Observations of one replica's controllers.
#[derive(Default)]
struct Probe {
    started: AtomicBool,
    stopped: AtomicBool,
    starts: AtomicUsize,
}

/// Records that the controllers stopped when dropped: their future returned or was dropped.
struct Stopped(Arc<Probe>);

impl Drop for Stopped {
    fn drop(&mut self) {
        self.0.stopped.store(true, Ordering::SeqCst);
    }
}

/// A well-behaved `start`: records the start, waits for the shutdown token, records the stop
/// (also when stopped without a drain).
fn polite(
    probe: Arc<Probe>,
) -> impl FnOnce(Context) -> futures::future::BoxFuture<'static, Result<(), std::io::Error>> {
    move |ctx: Context| {
        Box::pin(async move {
            assert!(*ctx.leader.borrow(), "controllers start only while leading");
            probe.starts.fetch_add(1, Ordering::SeqCst);
            probe.started.store(true, Ordering::SeqCst);
            let _stopped = Stopped(probe.clone());
            ctx.shutdown.cancelled().await;
            Ok(())
        })
    }
}

struct Replica {
    probe: Arc<Probe>,
    shutdown: CancellationToken,
    readiness: Readiness,
    task: JoinHandle<Result<(), Error>>,
}

fn spawn_replica(client: Client, leader_elect: bool) -> Replica {
    let probe = Arc::new(Probe::default());
    let shutdown = CancellationToken::new();
    let runtime = Runtime::with_client(&args(leader_elect), spec(), client, shutdown.clone());
    let readiness = runtime.readiness().clone();
    let _gate = readiness.gate("test cache");
    let task = tokio::spawn(runtime.run(polite(probe.clone())));
    Replica {
        probe,
        shutdown,
        readiness,
        task,
    }
}

async fn finish(task: JoinHandle<Result<(), Error>>) -> Result<(), Error> {
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("run returns within the deadline")
        .expect("run does not panic")
}

#[tokio::test]
async fn without_leader_election_controllers_start_and_stop_on_signal() {
    let fake = Fake::start().await;
    let replica = spawn_replica(fake.client.clone(), false);
    wait_for("controllers to start", 10, || {
        replica.probe.started.load(Ordering::SeqCst)
    })
    .await;
    assert!(fake.lease().is_none(), "no Lease without --leader-elect");
    assert!(
        !replica.readiness.report().ready,
        "not ready until the gate is set"
    );

    replica.shutdown.cancel();
    finish(replica.task).await.unwrap();
    assert!(
        replica.probe.stopped.load(Ordering::SeqCst),
        "controllers saw the shutdown"
    );
}

#[tokio::test]
async fn only_the_leader_runs_controllers_and_a_clean_exit_hands_over() {
    let fake = Fake::start().await;
    let first = spawn_replica(fake.client.clone(), true);
    wait_for("first replica to lead", 10, || {
        first.probe.started.load(Ordering::SeqCst)
    })
    .await;
    assert!(
        !first.readiness.report().ready,
        "the leader waits for its gate"
    );

    let second = spawn_replica(fake.client.clone(), true);
    wait_for("second replica to stand by", 10, || {
        second.readiness.report().standby
    })
    .await;
    assert!(
        second.readiness.report().ready,
        "a standby is ready so rollouts proceed"
    );
    // The second keeps retrying every 100 ms; its controllers must not start while the first
    // holds the 30 s Lease. Observe a few of the first's renewals to give it the chance.
    let renewals_before = fake.lease().unwrap()["spec"]["renewTime"].clone();
    wait_for("the leader to renew", 10, || {
        fake.lease().unwrap()["spec"]["renewTime"] != renewals_before
    })
    .await;
    assert!(!second.probe.started.load(Ordering::SeqCst));

    first.shutdown.cancel();
    finish(first.task).await.unwrap();
    assert!(first.probe.stopped.load(Ordering::SeqCst));
    // Released, so the second takes over long before the 30 s lease would expire.
    wait_for("second replica to lead", 10, || {
        second.probe.started.load(Ordering::SeqCst)
    })
    .await;
    assert!(!second.readiness.report().standby);
    let lease = fake.lease().unwrap();
    assert_eq!(lease["spec"]["leaseTransitions"], json!(1));

    second.shutdown.cancel();
    finish(second.task).await.unwrap();
    assert_eq!(fake.holder().as_deref(), Some(""), "released on clean exit");
    assert_eq!(second.probe.starts.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn losing_the_lease_stops_controllers_and_fails() {
    let fake = Fake::start().await;
    let replica = spawn_replica(fake.client.clone(), true);
    wait_for("replica to lead", 10, || {
        replica.probe.started.load(Ordering::SeqCst)
    })
    .await;

    lock(&fake.state).unavailable = true;
    let err = finish(replica.task).await.unwrap_err();
    assert!(matches!(err, Error::LeadershipLost { .. }), "{err}");
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains("ops/test-lease"), "{err}");
    assert!(
        replica.probe.stopped.load(Ordering::SeqCst),
        "controllers were stopped"
    );
}

#[tokio::test]
async fn controllers_that_ignore_shutdown_are_bounded() {
    let fake = Fake::start().await;
    let shutdown = CancellationToken::new();
    let mut short = spec();
    short.shutdown_timeout = Duration::from_millis(200);
    let runtime = Runtime::with_client(&args(true), short, fake.client.clone(), shutdown.clone());
    let started = Arc::new(AtomicBool::new(false));
    let flag = started.clone();
    let task = tokio::spawn(runtime.run(move |_ctx: Context| async move {
        flag.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
        Ok::<(), std::io::Error>(())
    }));
    wait_for("controllers to start", 10, || {
        started.load(Ordering::SeqCst)
    })
    .await;
    shutdown.cancel();
    let err = finish(task).await.unwrap_err();
    assert!(matches!(err, Error::ShutdownTimedOut(_)), "{err}");
    assert_eq!(
        fake.holder().as_deref(),
        Some(""),
        "the Lease is still released"
    );
}

#[tokio::test]
async fn a_controller_error_is_returned() {
    let fake = Fake::start().await;
    let runtime = Runtime::with_client(
        &args(false),
        spec(),
        fake.client.clone(),
        CancellationToken::new(),
    );
    let err = runtime
        .run(|_ctx: Context| async {
            Err::<(), _>(std::io::Error::other("watch failed: sandboxes CRD missing"))
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Controllers(_)));
    assert!(err.to_string().contains("sandboxes CRD missing"), "{err}");
}

#[tokio::test]
async fn shutdown_before_leading_returns_cleanly_without_starting() {
    let fake = Fake::start().await;
    // Someone else holds the Lease for 30 s.
    let mut other = fake.elector("other", spec().lease_timings);
    assert!(other.try_acquire_or_renew().await.unwrap());

    let replica = spawn_replica(fake.client.clone(), true);
    wait_for("replica to stand by", 10, || {
        replica.readiness.report().standby
    })
    .await;
    replica.shutdown.cancel();
    finish(replica.task).await.unwrap();
    assert!(!replica.probe.started.load(Ordering::SeqCst));
    assert_eq!(
        fake.holder().as_deref(),
        Some("other"),
        "a standby never writes the Lease holder"
    );
}

#[tokio::test]
async fn admin_endpoints_serve_leader_status_and_the_binary_metrics() {
    use prometheus_client::metrics::counter::Counter;
    let fake = Fake::start().await;
    let shutdown = CancellationToken::new();
    let mut runtime =
        Runtime::with_client(&args(true), spec(), fake.client.clone(), shutdown.clone());
    let counter = Counter::<u64>::default();
    runtime
        .registry_mut()
        .register("test_reconciles", "Reconciles of the test", counter.clone());
    let (addrs_tx, addrs_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(runtime.run(move |ctx: Context| async move {
        counter.inc();
        let _ = addrs_tx.send((ctx.metrics_addr, ctx.probe_addr));
        ctx.shutdown.cancelled().await;
        Ok::<(), std::io::Error>(())
    }));
    let (metrics, probes) = tokio::time::timeout(Duration::from_secs(10), addrs_rx)
        .await
        .expect("controllers start")
        .unwrap();
    let metrics = raw_get(metrics.unwrap(), "/metrics").await;
    assert!(
        metrics.contains("leader_election_master_status{name=\"test-lease\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("test_reconciles_total 1"), "{metrics}");
    let ready = raw_get(probes.unwrap(), "/readyz").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    shutdown.cancel();
    finish(task).await.unwrap();
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

/// Marks the child run of `signal_child`.
const SIGNAL_CHILD_MARKER: &str = "CONTROLLER_COMMON_SIGNAL_CHILD";

#[cfg(unix)]
#[test]
fn first_signal_cancels_and_second_signal_exits_at_once() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "runtime::tests::signal_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SIGNAL_CHILD_MARKER, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = String::new();
    let mut wait_line = |wanted: &str| {
        for line in lines.by_ref() {
            let line = line.unwrap();
            seen.push_str(&line);
            seen.push('\n');
            if line.contains(wanted) {
                return;
            }
        }
        panic!("child ended before printing {wanted}; it printed:\n{seen}");
    };
    let kill = |sig: &str| {
        let status = Command::new("kill").args([sig, &pid]).status().unwrap();
        assert!(status.success());
    };

    wait_line("SIGNAL-CHILD-READY");
    kill("-TERM");
    wait_line("SIGNAL-CHILD-CANCELLED");
    kill("-INT");
    // The child now waits forever; only the second signal ends it.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the second signal did not end the child");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
}

/// Child half of `first_signal_cancels_and_second_signal_exits_at_once`, which runs it in a
/// separate process: installing signal handlers in the test process itself would swallow a
/// developer's Ctrl-C.
#[tokio::test]
#[ignore = "child process of first_signal_cancels_and_second_signal_exits_at_once, run by it"]
async fn signal_child() {
    assert!(
        std::env::var_os(SIGNAL_CHILD_MARKER).is_some(),
        "run only as a child process"
    );
    let token = shutdown_on_signals();
    assert!(!token.is_cancelled());
    println!("SIGNAL-CHILD-READY");
    token.cancelled().await;
    println!("SIGNAL-CHILD-CANCELLED");
    std::future::pending::<()>().await;
}

/// Issue 21 item 3: a leader paused past its renew deadline (SIGSTOP, a frozen VM) while
/// another replica takes the Lease sends no write once it runs again, although its controllers
/// try: the fence refuses them from the deadline on, and the runtime stops at once. Without the
/// fence the controllers' writes that were due during the pause went out before the renewal
/// noticed the loss.
#[tokio::test(start_paused = true)]
async fn a_leader_paused_past_its_renew_deadline_sends_no_write_after_it() {
    use axum::routing::post;
    type Writes = Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>;
    let writes: Writes = Arc::default();
    let received = writes.clone();
    let config_maps = axum::Router::new().route(
        "/api/v1/namespaces/{ns}/configmaps",
        post(move |axum::Json(mut body): axum::Json<serde_json::Value>| {
            let received = received.clone();
            async move {
                received.lock().unwrap().push(tokio::time::Instant::now());
                body["metadata"]["uid"] = json!("u");
                body["metadata"]["resourceVersion"] = json!("1");
                (axum::http::StatusCode::CREATED, axum::Json(body))
            }
        }),
    );
    let fake = Fake::in_process(config_maps);
    let runtime = Runtime::with_client(
        &args(true),
        spec(),
        fake.client.clone(),
        CancellationToken::new(),
    );
    let fence = runtime.fence().clone();
    let refused = Arc::new(AtomicUsize::new(0));
    let refusals = refused.clone();
    let task = tokio::spawn(runtime.run(move |ctx: Context| async move {
        // A pass that writes every 50 ms, whatever happens, in a task of its own (as the
        // runner spawns its passes): stopping the controllers does not stop it.
        let api = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(ctx.client, "ops");
        tokio::spawn(async move {
            for i in 0.. {
                let mut cm = k8s_openapi::api::core::v1::ConfigMap::default();
                cm.metadata.name = Some(format!("cm-{i}"));
                if api.create(&Default::default(), &cm).await.is_err() {
                    refusals.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        ctx.shutdown.cancelled().await;
        Ok::<(), std::io::Error>(())
    }));
    wait_for("the leader to write", 10, || {
        writes.lock().unwrap().len() >= 5
    })
    .await;
    let deadline = fence.valid_until().expect("leading");

    // The pause: another replica takes the Lease, and 40 s pass (past the 2 s renew deadline
    // and the 30 s lease) before any task of this replica runs again.
    {
        let mut state = lock(&fake.state);
        let mut lease = state.leases[&("ops".to_owned(), "test-lease".to_owned())].clone();
        lease["spec"]["holderIdentity"] = json!("successor");
        state.store("ops", "test-lease", lease);
    }
    tokio::time::advance(Duration::from_secs(40)).await;
    let err = finish(task).await.unwrap_err();
    assert!(matches!(err, Error::LeadershipLost { .. }), "{err}");
    // The pass keeps trying after the loss (the process would exit here).
    tokio::time::sleep(Duration::from_secs(1)).await;

    let writes = writes.lock().unwrap().clone();
    let late: Vec<_> = writes.iter().filter(|at| **at >= deadline).collect();
    assert!(
        late.is_empty(),
        "{} of {} writes reached the server after the renew deadline",
        late.len(),
        writes.len()
    );
    assert!(
        refused.load(Ordering::SeqCst) > 0,
        "writes were tried after the deadline"
    );
    assert_eq!(
        fence.check(),
        Err(crate::leader_election::fence::Fenced::NotLeading)
    );
}
