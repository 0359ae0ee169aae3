//! Claim-to-bound traced end to end: devcluster, both controller binaries exporting over OTLP
//! to a real receiver on loopback (`e2e_tests::otlp_receiver`), claims carrying a known parent
//! trace in their `opentelemetry.io/trace-context` annotation.
//!
//! One test, three phases run one after the other (so their timings are comparable on a
//! shared machine): OTLP/gRPC collector up (trace structure, timestamps, launch types,
//! exemplars), collector down (claims bind as fast; failed exports are counted), and
//! OTLP/HTTP with protobuf bodies.
//!
//! The controllers' logs of the latest phase are left in `target/tmp/otel-traces-*.log`.
//!
//! With `AGENT_SANDBOX_TRACE_SVG_DIR=DIR`, the warm and cold claims' traces are also written
//! as `DIR/warm-claim-trace.svg` and `DIR/cold-claim-trace.svg` (the pictures in
//! `docs/observability/`).

#[path = "clients_support/cargo.rs"]
mod cargo;
#[path = "clients_support/python.rs"]
mod python;

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use api_types::keys::{CLAIM_FIRST_READY_AT_ANNOTATION, TRACE_CONTEXT_ANNOTATION};
use api_types::{SandboxClaim, SandboxWarmPool};
use e2e_tests::otlp_receiver::{CapturedSpan, OtlpReceiver};
use e2e_tests::{DEADLINE, Env, EnvOptions, create_template_and_pools, install_crds, wait_for};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EXT: &str = "extensions-controller";
const CORE: &str = "sandbox-controller";

/// Both controller binaries of this build, built first if needed (cheap when fresh).
fn binaries() -> (PathBuf, PathBuf) {
    cargo::cargo_ok(&[
        "build",
        "--quiet",
        "-p",
        "sandbox-controller",
        "-p",
        "extensions-controller",
        "--bins",
    ]);
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf();
    (dir.join(CORE), dir.join(EXT))
}

/// Kills the child when dropped (also when the test panics).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn http_get_metrics(port: u16) -> Option<String> {
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\
                   Accept: application/openmetrics-text;version=1.0.0,text/plain;q=0.5\r\n\r\n";
    conn.write_all(request.as_bytes()).await.ok()?;
    let mut buf = String::new();
    conn.read_to_string(&mut buf).await.ok()?;
    buf.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

/// devcluster with both controller binaries exporting traces as `otel` says, a template, a
/// warm pool of two Ready members and an empty pool (claims from it start cold).
struct Cluster {
    env: Env,
    ext_metrics: u16,
    _controllers: [KillOnDrop; 2],
}

impl Cluster {
    async fn start(binaries: &(PathBuf, PathBuf), otel: &[(&str, String)]) -> Cluster {
        let env = Env::start(EnvOptions {
            sandbox_controller: false,
            ..EnvOptions::default()
        })
        .await;
        install_crds(&env.client, api_types::extension_crds()).await;
        let ext_metrics = free_port();
        // The controllers' logs of the latest run, for when a wait times out:
        // target/tmp/otel-traces-<binary>.log.
        let log_of = |binary: &PathBuf| {
            let name = binary.file_name().map(|n| n.to_string_lossy().into_owned());
            let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("otel-traces-{}.log", name.unwrap_or_default()));
            std::fs::File::create(&path)
                .map(Stdio::from)
                .unwrap_or_else(|_| Stdio::null())
        };
        let spawn = |binary: &PathBuf, metrics: String| {
            let mut cmd = Command::new(binary);
            for (key, _) in std::env::vars() {
                if key.starts_with("OTEL_") {
                    cmd.env_remove(key);
                }
            }
            cmd.env("KUBECONFIG", env.cluster.kubeconfig_path())
                .env("RUST_LOG", "info")
                .args([
                    "--leader-elect=false",
                    "--enable-webhook=false",
                    &format!("--metrics-bind-address={metrics}"),
                    "--health-probe-bind-address=0",
                    "--log-format=text",
                ])
                .envs(otel.iter().map(|(k, v)| (*k, v.as_str())))
                .stdout(Stdio::null())
                .stderr(log_of(binary));
            KillOnDrop(
                cmd.spawn()
                    .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display())),
            )
        };
        let core = spawn(&binaries.0, "0".into());
        let ext = spawn(&binaries.1, format!("127.0.0.1:{ext_metrics}"));

        create_template_and_pools(
            &env,
            "traced",
            serde_json::json!([{"name": "main", "image": "registry.example.invalid/agent:1"}]),
            &[("warm", 2), ("cold", 0)],
        )
        .await;
        let cluster = Cluster {
            env,
            ext_metrics,
            _controllers: [core, ext],
        };
        cluster.wait_warm_pool(2).await;
        cluster
    }

    /// Waits until the warm pool has `ready` Ready members (Sandboxes it controls with
    /// Ready=True: what a claim can adopt). On timeout, reports the members and the pool's
    /// status.
    async fn wait_warm_pool(&self, ready: usize) {
        let sandboxes: Api<api_types::Sandbox> = self.env.api("default");
        let pools: Api<SandboxWarmPool> = self.env.api("default");
        let started = Instant::now();
        loop {
            let members: Vec<(String, bool)> = sandboxes
                .list(&Default::default())
                .await
                .map(|list| list.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|s| {
                    s.metadata.deletion_timestamp.is_none()
                        && s.metadata.owner_references.iter().flatten().any(|o| {
                            o.controller == Some(true)
                                && o.kind == "SandboxWarmPool"
                                && o.name == "warm"
                        })
                })
                .map(|s| {
                    let is_ready = s.status.as_ref().is_some_and(|st| {
                        st.conditions
                            .iter()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                    });
                    (s.metadata.name.unwrap_or_default(), is_ready)
                })
                .collect();
            if members.iter().filter(|(_, r)| *r).count() >= ready {
                return;
            }
            if started.elapsed() > DEADLINE {
                let status = pools
                    .get_opt("warm")
                    .await
                    .ok()
                    .flatten()
                    .and_then(|p| serde_json::to_value(p).ok())
                    .map(|v| v["status"].to_string());
                panic!(
                    "the warm pool has no {ready} Ready members after {DEADLINE:?}: \
                     members {members:?}, pool status {status:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Creates claim `name` from `pool` (with `trace_context` as its annotation) and waits
    /// until it is Ready with a Sandbox and its first-ready time is stamped. Returns the claim
    /// and the time from create to seeing it Ready.
    async fn claim(
        &self,
        name: &str,
        pool: &str,
        trace_context: Option<String>,
    ) -> (SandboxClaim, Duration) {
        let claims: Api<SandboxClaim> = self.env.api("default");
        let mut claim: SandboxClaim = from_json(serde_json::json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": name},
            "spec": {"warmPoolRef": {"name": pool}},
        }));
        if let Some(tc) = trace_context {
            claim.metadata.annotations = Some([(TRACE_CONTEXT_ANNOTATION.to_owned(), tc)].into());
        }
        let started = Instant::now();
        claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("claim created");
        wait_for(&format!("claim {name} Ready"), DEADLINE, || async {
            let c = claims.get_opt(name).await.ok()??;
            let status = c.status.as_ref()?;
            let ready = status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            (ready && !status.sandbox.name.is_empty()).then_some(())
        })
        .await;
        let elapsed = started.elapsed();
        (self.wait_first_ready(name).await, elapsed)
    }

    /// Waits until claim `name` has its first-ready time stamped, and returns it.
    async fn wait_first_ready(&self, name: &str) -> SandboxClaim {
        let claims: Api<SandboxClaim> = self.env.api("default");
        wait_for(
            &format!("claim {name} first-ready annotation"),
            DEADLINE,
            || async {
                let c = claims.get_opt(name).await.ok()??;
                c.metadata
                    .annotations
                    .as_ref()?
                    .contains_key(CLAIM_FIRST_READY_AT_ANNOTATION)
                    .then_some(c)
            },
        )
        .await
    }

    /// Stops the controllers, then devcluster.
    async fn stop(self) {
        let Cluster {
            env, _controllers, ..
        } = self;
        drop(_controllers);
        env.stop().await;
    }

    async fn metrics(&self) -> String {
        wait_for("extensions-controller /metrics", DEADLINE, || {
            http_get_metrics(self.ext_metrics)
        })
        .await
    }
}

fn from_json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

fn traceparent(trace: &str, span: &str) -> String {
    format!(r#"{{"traceparent":"00-{trace}-{span}-01"}}"#)
}

/// Waits until the trace holds `claim-to-bound` and at least one span of the core controller,
/// and every parent inside it has arrived, then returns all its spans. On timeout, says which
/// of these is missing and lists what arrived.
async fn wait_trace(receiver: &OtlpReceiver, trace_id: &str) -> Vec<CapturedSpan> {
    let started = Instant::now();
    loop {
        let spans = receiver.trace(trace_id);
        let bound = spans.iter().find(|s| s.name == "claim-to-bound");
        let core = spans
            .iter()
            .any(|s| s.service == CORE && s.name == "ReconcileSandbox");
        // Spans are exported as they end, children before parents: wait until every parent
        // inside the trace has arrived (only the client's span is outside it).
        let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
        let bound_parent = bound.map(|s| s.parent_span_id.as_str());
        let orphans: Vec<&CapturedSpan> = spans
            .iter()
            .filter(|s| {
                !s.parent_span_id.is_empty()
                    && !ids.contains(s.parent_span_id.as_str())
                    && Some(s.parent_span_id.as_str()) != bound_parent
            })
            .collect();
        if bound.is_some() && core && orphans.is_empty() {
            return spans;
        }
        if started.elapsed() > DEADLINE {
            let listing: Vec<String> = spans
                .iter()
                .map(|s| {
                    format!(
                        "{} {} {} <- {}",
                        s.service, s.name, s.span_id, s.parent_span_id
                    )
                })
                .collect();
            panic!(
                "trace {trace_id} incomplete after {DEADLINE:?}: claim-to-bound {}, core span {}, \
                 {} spans with a missing parent\n{}",
                bound.is_some(),
                core,
                orphans.len(),
                listing.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn nanos(ts: &Timestamp) -> u64 {
    u64::try_from(ts.as_nanosecond()).expect("after 1970")
}

fn one<'a>(spans: &'a [CapturedSpan], name: &str) -> &'a CapturedSpan {
    let found: Vec<&CapturedSpan> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "exactly one {name} span: {found:#?}");
    found[0]
}

/// The structure every claim trace has; returns `claim-to-bound`.
fn assert_claim_trace<'a>(
    spans: &'a [CapturedSpan],
    claim: &SandboxClaim,
    client_parent: Option<&str>,
    launch_type: &str,
) -> &'a CapturedSpan {
    let bound = one(spans, "claim-to-bound");
    assert_eq!(bound.service, EXT);
    assert_eq!(bound.parent_span_id, client_parent.unwrap_or(""));
    assert_eq!(bound.attr("launch_type"), Some(launch_type));
    assert_eq!(bound.attr("claim.name"), claim.metadata.name.as_deref());
    let sandbox = claim.status.as_ref().map(|s| s.sandbox.name.clone());
    assert_eq!(bound.attr("sandbox.name"), sandbox.as_deref());
    assert_eq!(bound.attr("sandbox.template"), Some("traced"));
    assert_eq!(bound.attr("claim.bound_in_this_process"), Some("true"));
    let passes_before_ready: u32 = bound
        .attr("claim.reconcile_passes")
        .and_then(|n| n.parse().ok())
        .expect("reconcile pass count");
    assert!(passes_before_ready >= 1);

    // From the claim's creation to the write that made it Ready, as its own timestamps say.
    let created = nanos(
        &claim
            .metadata
            .creation_timestamp
            .as_ref()
            .expect("created")
            .0,
    );
    let first_ready: Timestamp = claim.metadata.annotations.as_ref().expect("annotations")
        [CLAIM_FIRST_READY_AT_ANNOTATION]
        .parse()
        .expect("RFC 3339 first-ready time");
    assert_eq!(
        bound.start_unix_nano, created,
        "starts at creationTimestamp"
    );
    let expected = nanos(&first_ready) - created;
    let diff = bound.duration_nanos().abs_diff(expected);
    assert!(
        diff <= 5_000_000,
        "claim-to-bound lasts {} ns, the claim's timestamps say {expected} ns",
        bound.duration_nanos()
    );
    // (The claim's Ready condition mirrors its Sandbox's, transition time included, so for a
    // warm claim it can predate the claim; the first-ready annotation is the bind time.)
    assert!(
        bound.end_unix_nano.abs_diff(nanos(&first_ready)) <= 5_000_000,
        "claim-to-bound ends at the first Ready write"
    );

    // Every claim reconcile pass hangs under claim-to-bound; the steps under a pass.
    let passes: HashSet<&str> = spans
        .iter()
        .filter(|s| s.name == "ReconcileSandboxClaim")
        .map(|s| {
            assert_eq!(s.parent_span_id, bound.span_id, "pass under claim-to-bound");
            assert_eq!(s.service, EXT);
            s.span_id.as_str()
        })
        .collect();
    assert!(!passes.is_empty(), "no ReconcileSandboxClaim span");
    let wait = one(spans, "waitForSandboxReady");
    assert_eq!(wait.parent_span_id, bound.span_id);
    assert_eq!(wait.end_unix_nano, bound.end_unix_nano);
    for step in [
        "updateClaimStatus",
        "adoptSandbox",
        "createSandbox",
        "selectCandidate",
    ] {
        for s in spans.iter().filter(|s| s.name == step) {
            assert!(
                passes.contains(s.parent_span_id.as_str()),
                "{step} under a pass: {s:#?}"
            );
        }
    }
    // The core controller's reconciles of the bound Sandbox continue the trace under the pass
    // that bound it.
    let core: Vec<&CapturedSpan> = spans
        .iter()
        .filter(|s| s.service == CORE && s.name == "ReconcileSandbox")
        .collect();
    assert!(!core.is_empty());
    for s in &core {
        assert!(
            passes.contains(s.parent_span_id.as_str()),
            "ReconcileSandbox under a pass: {s:#?}"
        );
        assert_eq!(s.attr("sandbox.name"), sandbox.as_deref());
    }
    let core_ids: HashSet<&str> = core.iter().map(|s| s.span_id.as_str()).collect();
    for s in spans.iter().filter(|s| s.name == "reconcilePod") {
        assert!(core_ids.contains(s.parent_span_id.as_str()));
    }
    bound
}

fn write_svg(name: &str, title: &str, spans: &[CapturedSpan]) {
    let Some(dir) = std::env::var_os("AGENT_SANDBOX_TRACE_SVG_DIR") else {
        return;
    };
    let path = PathBuf::from(dir).join(name);
    std::fs::write(&path, e2e_tests::trace_waterfall::render_svg(title, spans))
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

const WARM_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const WARM_PARENT: &str = "00f067aa0ba902b7";
const COLD_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const COLD_PARENT: &str = "b7ad6b7169203331";

/// The tests of this binary run one at a time: each starts two controllers and compares
/// timings.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_to_bound_is_one_trace_across_both_controllers() {
    let _serial = SERIAL.lock().await;
    let binaries = tokio::task::spawn_blocking(binaries)
        .await
        .expect("build task");

    // Phase 1: collector up, OTLP/gRPC.
    let receiver = OtlpReceiver::grpc().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-scope-orgid=agents".to_owned(),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let cluster = Cluster::start(&binaries, &otel).await;
    let mut up = Vec::new();
    let (warm, t) = cluster
        .claim(
            "warm-claim",
            "warm",
            Some(traceparent(WARM_TRACE, WARM_PARENT)),
        )
        .await;
    up.push(t);
    let (cold, t) = cluster
        .claim(
            "cold-claim",
            "cold",
            Some(traceparent(COLD_TRACE, COLD_PARENT)),
        )
        .await;
    up.push(t);
    cluster.wait_warm_pool(2).await;
    let (untraced, t) = cluster.claim("untraced-claim", "warm", None).await;
    up.push(t);

    let warm_spans = wait_trace(&receiver, WARM_TRACE).await;
    let bound = assert_claim_trace(&warm_spans, &warm, Some(WARM_PARENT), "warm");
    one(&warm_spans, "adoptSandbox");
    assert!(
        warm_spans.iter().all(|s| s.name != "createSandbox"),
        "warm: no cold create"
    );

    let cold_spans = wait_trace(&receiver, COLD_TRACE).await;
    assert_claim_trace(&cold_spans, &cold, Some(COLD_PARENT), "cold");
    one(&cold_spans, "createSandbox");
    let create_pod = one(&cold_spans, "createPod");
    assert_eq!(create_pod.service, CORE);
    // The cold path waits for the Pod; the core controller shows that wait.
    let wait = wait_for("waitForPodReady in the cold trace", DEADLINE, || async {
        receiver
            .trace(COLD_TRACE)
            .into_iter()
            .find(|s| s.name == "waitForPodReady")
    })
    .await;
    assert_eq!(wait.service, CORE);
    assert!(wait.start_unix_nano >= create_pod.start_unix_nano);

    // A claim created without a trace context gets one: claim-to-bound is its root, and the
    // claim records its context.
    let stamped = untraced
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(TRACE_CONTEXT_ANNOTATION))
        .expect("the claim is stamped with its trace context");
    let carrier: std::collections::HashMap<String, String> =
        serde_json::from_str(stamped).expect("JSON header map");
    let parts: Vec<&str> = carrier["traceparent"].split('-').collect();
    assert_eq!(parts.len(), 4, "{stamped}");
    let untraced_spans = wait_trace(&receiver, parts[1]).await;
    let root = assert_claim_trace(&untraced_spans, &untraced, None, "warm");
    assert_eq!(
        root.span_id, parts[2],
        "the annotation names claim-to-bound"
    );

    // A malformed annotation is ignored (and kept as the user wrote it): the claim binds and
    // gets a trace of its own, with the id derived from its UID.
    cluster.wait_warm_pool(2).await;
    let (garbled, _) = cluster
        .claim("garbled-claim", "warm", Some("not a header map".to_owned()))
        .await;
    assert_eq!(
        garbled.metadata.annotations.as_ref().expect("annotations")[TRACE_CONTEXT_ANNOTATION],
        "not a header map"
    );
    let derived = controller_common::telemetry::span_ids::derived_trace_id(
        garbled.metadata.uid.as_deref().expect("uid"),
    )
    .to_string();
    let garbled_spans = wait_trace(&receiver, &derived).await;
    assert_claim_trace(&garbled_spans, &garbled, None, "warm");

    // The latency histograms carry the trace ids as exemplars (OpenMetrics).
    let body = cluster.metrics().await;
    let exemplar_lines: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("agent_sandbox_claim_controller_startup_latency_ms_bucket"))
        .filter(|l| l.contains("# {trace_id=\""))
        .collect();
    assert!(
        exemplar_lines
            .iter()
            .any(|l| l.contains(WARM_TRACE) || l.contains(COLD_TRACE)),
        "no claim trace id among the exemplars:\n{}",
        exemplar_lines.join("\n")
    );
    assert!(
        body.contains("agent_sandbox_trace_spans_exported_total"),
        "{body}"
    );
    assert!(
        receiver.saw_header("x-scope-orgid", "agents"),
        "OTEL_EXPORTER_OTLP_HEADERS sent over gRPC"
    );

    // claim-to-bound stays unique after more reconciles (the warm pool refills meanwhile).
    cluster.wait_warm_pool(2).await;
    for trace in [WARM_TRACE, COLD_TRACE] {
        one(&receiver.trace(trace), "claim-to-bound");
    }
    write_svg(
        "warm-claim-trace.svg",
        "Warm claim: adopted from a warm pool (devcluster, both controllers)",
        &warm_spans_latest(&receiver, bound),
    );
    write_svg(
        "cold-claim-trace.svg",
        "Cold claim: Sandbox and Pod created for the claim (devcluster, both controllers)",
        &receiver.trace(COLD_TRACE),
    );
    cluster.stop().await;
    drop(receiver);

    // Phase 2: collector down (a closed port). Claims bind, as fast; failed exports counted.
    let closed = format!("http://127.0.0.1:{}", free_port());
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", closed),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let cluster = Cluster::start(&binaries, &otel).await;
    let mut down = Vec::new();
    let (_, t) = cluster
        .claim(
            "warm-claim",
            "warm",
            Some(traceparent(WARM_TRACE, WARM_PARENT)),
        )
        .await;
    down.push(t);
    let (_, t) = cluster
        .claim(
            "cold-claim",
            "cold",
            Some(traceparent(COLD_TRACE, COLD_PARENT)),
        )
        .await;
    down.push(t);
    cluster.wait_warm_pool(2).await;
    let (_, t) = cluster.claim("untraced-claim", "warm", None).await;
    down.push(t);
    let (up_total, down_total): (Duration, Duration) = (up.iter().sum(), down.iter().sum());
    eprintln!("create -> Ready, collector up: {up:?}; collector down: {down:?}");
    assert!(
        down_total <= up_total * 3 + Duration::from_millis(500),
        "claims bound slower with the collector down: {down:?} vs {up:?}"
    );
    wait_for("failed exports counted", DEADLINE, || async {
        let body = http_get_metrics(cluster.ext_metrics).await?;
        body.lines()
            .find(|l| {
                l.starts_with("agent_sandbox_trace_spans_dropped_total{reason=\"export_failed\"}")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .filter(|n| *n > 0.0)
    })
    .await;
    cluster.stop().await;

    // Phase 3: OTLP over HTTP with protobuf bodies.
    let receiver = OtlpReceiver::http().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_owned()),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-scope-orgid=agents".to_owned(),
        ),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let cluster = Cluster::start(&binaries, &otel).await;
    let (warm, _) = cluster
        .claim(
            "warm-claim",
            "warm",
            Some(traceparent(WARM_TRACE, WARM_PARENT)),
        )
        .await;
    let spans = wait_trace(&receiver, WARM_TRACE).await;
    assert_claim_trace(&spans, &warm, Some(WARM_PARENT), "warm");
    assert!(receiver.requests() > 0);
    assert!(
        receiver.saw_header("x-scope-orgid", "agents"),
        "OTEL_EXPORTER_OTLP_HEADERS sent"
    );
    assert!(receiver.saw_header("content-type", "application/x-protobuf"));
    cluster.stop().await;
}

/// The warm trace as received by now, restricted to the claim's own path (claim-to-bound's
/// subtree), for the picture.
fn warm_spans_latest(receiver: &OtlpReceiver, bound: &CapturedSpan) -> Vec<CapturedSpan> {
    let spans = receiver.trace(&bound.trace_id);
    let mut keep: HashSet<String> = HashSet::from([bound.span_id.clone()]);
    loop {
        let before = keep.len();
        for s in &spans {
            if keep.contains(&s.parent_span_id) {
                keep.insert(s.span_id.clone());
            }
        }
        if keep.len() == before {
            break;
        }
    }
    spans
        .into_iter()
        .filter(|s| keep.contains(&s.span_id))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdks_client_span_is_the_root_of_the_claims_trace() {
    let _serial = SERIAL.lock().await;
    let binaries = tokio::task::spawn_blocking(binaries)
        .await
        .expect("build task");
    // Prepare the venv (with the SDK's tracing extra) before starting anything on timers.
    tokio::task::spawn_blocking(python::python)
        .await
        .expect("venv task");
    let receiver = OtlpReceiver::grpc().await;
    let otel = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ];
    let cluster = Cluster::start(&binaries, &otel).await;
    let kubeconfig = cluster.env.cluster.kubeconfig_path().to_path_buf();
    let endpoint = receiver.endpoint();
    let run = tokio::task::spawn_blocking(move || {
        let args = [
            kubeconfig.as_os_str(),
            std::ffi::OsStr::new("warm"),
            std::ffi::OsStr::new(&endpoint),
        ];
        python::run_script("sdk_trace_flow.py", &args, Duration::from_secs(120))
    })
    .await
    .expect("script task");
    assert!(
        run.success && run.stdout.contains("ok traced claim Ready"),
        "SDK flow failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
    let field = |prefix: &str| {
        run.stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{}", run.stdout))
            .to_owned()
    };
    let claim_name = field("claim ");
    let carrier: std::collections::HashMap<String, String> =
        serde_json::from_str(&field("trace-context ")).expect("JSON header map");
    let parts: Vec<String> = carrier["traceparent"]
        .split('-')
        .map(String::from)
        .collect();
    let (trace_id, client_span) = (&parts[1], &parts[2]);

    let claim = cluster.wait_first_ready(&claim_name).await;
    let spans = wait_trace(&receiver, trace_id).await;
    let root = spans
        .iter()
        .find(|s| s.service == "sandbox-client" && s.name == "sandbox-client.create_claim")
        .unwrap_or_else(|| panic!("no create_claim span from the SDK: {spans:#?}"));
    assert_eq!(
        &root.span_id, client_span,
        "the annotation names create_claim"
    );
    assert_eq!(root.parent_span_id, "", "create_claim is the root");
    assert_claim_trace(&spans, &claim, Some(client_span), "warm");
    // Every span of the trace leads up to the SDK's span.
    let by_id: std::collections::HashMap<&str, &CapturedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    for span in &spans {
        let mut at = span;
        while let Some(parent) = by_id.get(at.parent_span_id.as_str()) {
            at = parent;
        }
        assert!(
            at.span_id == root.span_id || at.service == "sandbox-client",
            "{} ({}) does not lead to the client span",
            span.name,
            span.service
        );
    }
    cluster.stop().await;
}
