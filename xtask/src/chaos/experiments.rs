//! The experiments: load, disturbance, convergence, checks, cleanup (see [`super`]).

use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::runtime::watcher;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::bench::BenchError;
use crate::bench::cluster::{Binaries, ControllerKind};
use crate::bench::workload::{self, Kind, NAMESPACE};

use super::audit;
use super::invariants::{self, History, Listing, Seen, Violation};
use super::lab::{Lab, LabOptions};
use super::{Outcome, Sizes, scaled};

/// The experiments, in the order a full run takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, serde::Serialize)]
pub enum Experiment {
    KillStorm,
    ApiFaults,
    LeaderPause,
    ChurnReady,
    ChurnFast,
    BadInput,
}

impl Experiment {
    pub const ALL: [Experiment; 6] = [
        Experiment::KillStorm,
        Experiment::ApiFaults,
        Experiment::LeaderPause,
        Experiment::ChurnReady,
        Experiment::ChurnFast,
        Experiment::BadInput,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Experiment::KillStorm => "kill-storm",
            Experiment::ApiFaults => "api-faults",
            Experiment::LeaderPause => "leader-pause",
            Experiment::ChurnReady => "churn-ready",
            Experiment::ChurnFast => "churn-fast",
            Experiment::BadInput => "bad-input",
        }
    }

    fn lab(self) -> LabOptions {
        match self {
            // Every watch is closed 1-4 s after it opens: each controller watch is closed and
            // reopened several times even in a quick run.
            Experiment::ApiFaults => LabOptions {
                error_rate: 0.1,
                watch_close_probability: 1.0,
                watch_close_after: Some(WATCH_CLOSE_AFTER),
                ..LabOptions::default()
            },
            Experiment::LeaderPause => LabOptions {
                leader_elect: true,
                extensions_replicas: 2,
                ..LabOptions::default()
            },
            _ => LabOptions::default(),
        }
    }
}

/// What one experiment gets from the run.
pub struct Ctx<'a> {
    pub binaries: &'a Binaries,
    pub cluster: super::ClusterKind,
    pub dir: PathBuf,
    pub sizes: Sizes,
    pub seed: u64,
    pub timeout_factor: f64,
}

const TEMPLATE: &str = "chaos-template";
/// When `api-faults` has devcluster close each watch, from its start.
const WATCH_CLOSE_AFTER: &str = "1s..4s";
const POOL: &str = "chaos-pool";
/// The extensions controller's Lease, in devcluster's default Lease namespace.
const LEASE_NAMESPACE: &str = "agent-sandbox-system";

/// Runs one experiment; a harness failure is recorded in the outcome, never propagated.
pub async fn run(experiment: Experiment, ctx: &Ctx<'_>) -> Outcome {
    let started = Instant::now();
    let mut outcome = Outcome::default();
    // A fresh directory: the audit log and the controllers' logs are appended to, and a
    // previous run's lines would count as this one's (faults, watches, takeovers, takes).
    if let Err(error) = std::fs::remove_dir_all(&ctx.dir)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        outcome.error = Some(format!("removing {}: {error}", ctx.dir.display()));
        return outcome;
    }
    if let Err(error) = std::fs::create_dir_all(&ctx.dir) {
        outcome.error = Some(format!("creating {}: {error}", ctx.dir.display()));
        return outcome;
    }
    match Lab::start(ctx.binaries, &ctx.dir, ctx.cluster, &experiment.lab()).await {
        Ok(mut lab) => {
            if let Err(error) = drive(experiment, ctx, &mut lab, &mut outcome).await {
                outcome.error = Some(error.to_string());
            }
            lab.shutdown().await;
        }
        Err(error) => outcome.error = Some(error.to_string()),
    }
    outcome.violations.sort();
    outcome.violations.dedup();
    outcome.duration_s = started.elapsed().as_secs_f64();
    outcome
}

async fn drive(
    experiment: Experiment,
    ctx: &Ctx<'_>,
    lab: &mut Lab,
    outcome: &mut Outcome,
) -> Result<(), BenchError> {
    let client = lab.client().clone();
    let (bound_tx, bound_rx) = mpsc::unbounded_channel::<String>();
    let observer = Observer::start(&client, bound_tx).await?;
    retry("creating the template", || {
        workload::create_template(&client, TEMPLATE)
    })
    .await?;
    retry("creating the pool", || {
        workload::create_pool(&client, POOL, TEMPLATE, ctx.sizes.pool)
    })
    .await?;
    wait_for(
        "the warm pool to be Ready",
        scaled(120.0, ctx.timeout_factor),
        || async {
            workload::pool_ready_replicas(&client, POOL)
                .await
                .is_ok_and(|ready| ready == i64::from(ctx.sizes.pool))
        },
    )
    .await?;

    let mut rng = StdRng::seed_from_u64(ctx.seed);
    let load = Load::new(experiment, ctx, &client, bound_rx);
    let disturbed_until = Instant::now() + Duration::from_secs_f64(ctx.sizes.seconds);
    let load_task = tokio::spawn(load.clone().run(disturbed_until, ctx.seed));
    match experiment {
        Experiment::KillStorm => kill_storm(lab, &mut rng, disturbed_until, outcome).await?,
        Experiment::LeaderPause => {
            leader_pause(lab, ctx, disturbed_until, outcome).await?;
        }
        Experiment::BadInput => bad_input(lab, ctx, &client, outcome).await?,
        Experiment::ApiFaults | Experiment::ChurnReady | Experiment::ChurnFast => {
            tokio::time::sleep_until(disturbed_until.into()).await;
        }
    }
    let _ = load_task.await;
    let disturbance_ended = Instant::now();
    if experiment == Experiment::ChurnFast {
        // The churn must not have stopped the controller: claims created now are bound.
        for i in 0..5 {
            let name = format!("after-churn-{i}");
            create(
                &client,
                Kind::Claim,
                claim_body(&name, json!({}), json!({})),
            )
            .await?;
        }
    }
    // Claims still waiting for their delete-after-Ready are left alone from here: at rest
    // every live claim must be bound.
    load.stop_deleting();

    // Convergence: every at-rest invariant holds.
    let deadline = disturbance_ended + scaled(120.0, ctx.timeout_factor);
    let mut at_rest = Vec::new();
    loop {
        lab.check_alive()?;
        at_rest = match listing(&client).await {
            Ok(listing) => invariants::check_at_rest(&listing),
            Err(_) => at_rest,
        };
        if at_rest.is_empty() {
            outcome.convergence_s = Some(disturbance_ended.elapsed().as_secs_f64());
            break;
        }
        if Instant::now() > deadline {
            outcome.violations.push(Violation {
                invariant: "did-not-converge",
                detail: format!(
                    "{} s after the disturbance ended, {} at-rest invariant(s) still fail",
                    deadline.duration_since(disturbance_ended).as_secs(),
                    at_rest.len()
                ),
            });
            outcome.violations.extend(at_rest.iter().take(50).cloned());
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    lab.check_alive()?;

    // Cleanup leaves nothing.
    let cleanup = Instant::now();
    for kind in [Kind::Claim, Kind::Pool, Kind::Template] {
        retry("deleting everything", || async {
            kind.api(&client)
                .delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
                .map(|_| ())
                .map_err(|e| BenchError::kube("deleting a collection", e))
        })
        .await?;
    }
    let deadline = cleanup + scaled(120.0, ctx.timeout_factor);
    loop {
        let left = match listing(&client).await {
            Ok(listing) => invariants::leftovers(&listing),
            Err(_) => vec![],
        };
        if left.is_empty() {
            outcome.cleanup_s = Some(cleanup.elapsed().as_secs_f64());
            break;
        }
        if Instant::now() > deadline {
            outcome.violations.extend(left.into_iter().take(50));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    let mut history = observer.stop();
    for (claim, sandbox, version) in lab.takes() {
        history.decided(&claim, &sandbox, version);
    }
    outcome.takes_raced_deletion = history.raced_deletion();
    outcome.takes_abandoned = lab.abandoned_takes();
    outcome.violations.extend(history.violations());
    outcome.events = history.events();
    outcome.claims_bound = history.claims_bound();
    outcome.claims_created += load.created();
    outcome.claims_deleted = load.deleted();
    let requests = lab.audit();
    outcome.faults_injected = audit::injected_faults(&requests, "extensions-controller")
        + audit::injected_faults(&requests, "sandbox-controller");
    outcome.watches_opened = audit::watches_opened(&requests, "extensions-controller")
        + audit::watches_opened(&requests, "sandbox-controller");
    let streams: Vec<audit::WatchStream> = ["extensions-controller", "sandbox-controller"]
        .into_iter()
        .flat_map(|binary| audit::watch_streams(&requests, binary))
        .collect();
    outcome.watches_reopened = streams.iter().map(|s| s.opened.saturating_sub(1)).sum();
    outcome.watches_never_reopened = streams
        .iter()
        .filter(|s| s.opened < 2)
        .map(|s| s.to_string())
        .collect();
    outcome.lease_takeovers = audit::takeovers(&requests).len();
    for late in audit::writes_after_lost_lease(&requests) {
        outcome.violations.push(Violation {
            invariant: "write-after-lost-lease",
            detail: late.to_string(),
        });
    }
    outcome
        .violations
        .extend(not_exercised(experiment, outcome));
    Ok(())
}

/// What shows that `experiment` did what it claims (a run that disturbed nothing proves
/// nothing): a violation `not-exercised` for each figure that says it did not.
pub fn not_exercised(experiment: Experiment, o: &Outcome) -> Vec<Violation> {
    let mut missing = Vec::new();
    if o.claims_created == 0 || o.claims_bound == 0 {
        missing.push(format!(
            "{} claims created and {} bound: no load",
            o.claims_created, o.claims_bound
        ));
    }
    match experiment {
        Experiment::KillStorm if o.kills == 0 => missing.push("no controller was killed".into()),
        Experiment::ApiFaults => {
            if o.faults_injected == 0 {
                missing.push("no fault was injected into the controllers' requests".into());
            }
            if o.watches_reopened == 0 {
                missing.push("no controller watch was closed and reopened".into());
            } else if !o.watches_never_reopened.is_empty() {
                missing.push(format!(
                    "controller watches never closed and reopened: {}",
                    o.watches_never_reopened.join(", ")
                ));
            }
        }
        Experiment::LeaderPause => {
            if o.pauses == 0 {
                missing.push("no leader was paused".into());
            }
            if o.takeover_s.len() < o.pauses || o.lease_takeovers < o.pauses {
                missing.push(format!(
                    "{} pause(s) but {} takeover(s) seen by the harness and {} in the audit log",
                    o.pauses,
                    o.takeover_s.len(),
                    o.lease_takeovers
                ));
            }
        }
        Experiment::ChurnReady | Experiment::ChurnFast if o.claims_deleted == 0 => {
            missing.push("no claim was deleted".into());
        }
        _ => {}
    }
    if o.convergence_s.is_none() {
        missing.push("no convergence time: the at-rest checks never passed".into());
    }
    if o.cleanup_s.is_none() {
        missing.push("no cleanup time: the cleanup check never passed".into());
    }
    missing
        .into_iter()
        .map(|detail| Violation {
            invariant: "not-exercised",
            detail: format!("{}: {detail}", experiment.key()),
        })
        .collect()
}

/// Retries `attempt` on errors (the API server may be injecting them) for up to 30 s.
pub async fn retry<T, F, Fut>(what: &str, mut attempt: F) -> Result<T, BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, BenchError>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) if Instant::now() > deadline => {
                return Err(BenchError::Unavailable(format!("{what}: {error}")));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut done: F) -> Result<(), BenchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !done().await {
        if Instant::now() > deadline {
            return Err(BenchError::Timeout {
                what: what.into(),
                seconds: timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Every claim, Sandbox, pool and Pod now.
async fn listing(client: &kube::Client) -> Result<Listing, BenchError> {
    let list = |kind: ApiResource| async move {
        Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &kind)
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| BenchError::kube(format!("listing {}", kind.plural), e))
    };
    Ok(Listing {
        claims: list(Kind::Claim.resource()).await?,
        sandboxes: list(Kind::Sandbox.resource()).await?,
        pools: list(Kind::Pool.resource()).await?,
        pods: list(ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())).await?,
    })
}

/// The harness's watches of claims, Sandboxes and pools, feeding a [`History`].
struct Observer {
    history: Arc<Mutex<History>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Observer {
    /// Starts the watches and returns once each has listed. Each claim's name is sent on
    /// `bound` the first time it is seen bound.
    async fn start(
        client: &kube::Client,
        bound: mpsc::UnboundedSender<String>,
    ) -> Result<Observer, BenchError> {
        let history = Arc::new(Mutex::new(History::default()));
        let mut tasks = Vec::new();
        let mut synced = Vec::new();
        for kind in [Kind::Pool, Kind::Claim, Kind::Sandbox] {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            synced.push(rx);
            let api = kind.api(client);
            let history = history.clone();
            let bound = bound.clone();
            tasks.push(tokio::spawn(async move {
                let mut synced = Some(tx);
                let mut relist = BTreeSet::new();
                let mut stream = watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    let Ok(event) = event else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let mut history = history.lock().unwrap_or_else(|e| e.into_inner());
                    let mut feed = |obj: &DynamicObject, seen: Seen| match kind {
                        Kind::Pool => history.pool(obj, seen),
                        Kind::Sandbox => history.sandbox(obj, seen),
                        Kind::Claim => {
                            let uid = obj.metadata.uid.clone().unwrap_or_default();
                            let was = history.bound_claim(&uid);
                            history.claim(obj, seen);
                            if !was && history.bound_claim(&uid) && seen != Seen::Deleted {
                                let _ = bound.send(obj.metadata.name.clone().unwrap_or_default());
                            }
                        }
                        Kind::Template => {}
                    };
                    match &event {
                        watcher::Event::Apply(obj) => feed(obj, Seen::Live),
                        watcher::Event::Delete(obj) => feed(obj, Seen::Deleted),
                        watcher::Event::Init => relist.clear(),
                        watcher::Event::InitApply(obj) => {
                            relist.insert(obj.metadata.uid.clone().unwrap_or_default());
                            feed(obj, Seen::Relisted);
                        }
                        watcher::Event::InitDone => {
                            history.relisted(invariants::SANDBOX_KIND, &relist);
                            if let Some(tx) = synced.take() {
                                let _ = tx.send(());
                            }
                        }
                    }
                }
            }));
        }
        for rx in synced {
            tokio::time::timeout(Duration::from_secs(60), rx)
                .await
                .map_err(|_| BenchError::Timeout {
                    what: "the harness's watches to list".into(),
                    seconds: 60,
                })?
                .map_err(|_| BenchError::Unavailable("a harness watch stopped".into()))?;
        }
        Ok(Observer { history, tasks })
    }

    fn stop(self) -> History {
        for task in &self.tasks {
            task.abort();
        }
        std::mem::take(&mut *self.history.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The claims an experiment creates, and when it deletes them.
#[derive(Clone)]
struct Load {
    client: kube::Client,
    rate: f64,
    prefix: &'static str,
    /// Delete each claim this long after it is first bound (`None`: never).
    after_bound: Option<Duration>,
    /// Delete each claim 0..N ms after its create.
    after_create_ms: Option<u64>,
    bound: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>>,
    created: Arc<Mutex<usize>>,
    deleted: Arc<Mutex<usize>>,
    deleting: Arc<std::sync::atomic::AtomicBool>,
}

impl Load {
    fn new(
        experiment: Experiment,
        ctx: &Ctx<'_>,
        client: &kube::Client,
        bound: mpsc::UnboundedReceiver<String>,
    ) -> Load {
        let (after_bound, after_create_ms) = match experiment {
            Experiment::ChurnReady => (Some(Duration::ZERO), None),
            Experiment::ChurnFast => (None, Some(60)),
            Experiment::BadInput => (None, None),
            _ => (Some(Duration::from_secs(3)), None),
        };
        Load {
            client: client.clone(),
            rate: if experiment == Experiment::BadInput {
                0.0
            } else {
                ctx.sizes.rate
            },
            prefix: experiment.key(),
            after_bound,
            after_create_ms,
            bound: Arc::new(tokio::sync::Mutex::new(bound)),
            created: Arc::default(),
            deleted: Arc::default(),
            deleting: Arc::new(std::sync::atomic::AtomicBool::new(true)),
        }
    }

    fn created(&self) -> usize {
        *self.created.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deleted(&self) -> usize {
        *self.deleted.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_deleting(&self) -> bool {
        self.deleting.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn stop_deleting(&self) {
        self.deleting
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    async fn delete(&self, name: String) {
        if !self.is_deleting() {
            return;
        }
        let api = Kind::Claim.api(&self.client);
        let deleted = retry("deleting a claim", || async {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
                Err(e) => Err(BenchError::kube("deleting a claim", e)),
            }
        })
        .await;
        if matches!(deleted, Ok(true)) {
            *self.deleted.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        }
    }

    /// Creates claims at the rate until `until`, deleting them as configured.
    async fn run(self, until: Instant, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc1a1);
        let deleter = self.after_bound.map(|delay| {
            let load = self.clone();
            tokio::spawn(async move {
                loop {
                    let name = { load.bound.lock().await.recv().await };
                    let Some(name) = name else { break };
                    if !name.starts_with(load.prefix) || !load.is_deleting() {
                        continue;
                    }
                    let load = load.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        load.delete(name).await;
                    });
                }
            })
        });
        if self.rate > 0.0 {
            let interval = Duration::from_secs_f64(1.0 / self.rate);
            let mut next = Instant::now();
            let mut n = 0usize;
            let mut creates = Vec::new();
            while next < until {
                tokio::time::sleep_until(next.into()).await;
                next += interval;
                n += 1;
                let name = format!("{}-{n}", self.prefix);
                let load = self.clone();
                let delete_after = self.after_create_ms.map(|ms| rng.random_range(0..=ms));
                creates.push(tokio::spawn(async move {
                    let body = claim_body(&name, json!({}), json!({}));
                    let created = create(&load.client, Kind::Claim, body).await;
                    if created.is_ok() {
                        *load.created.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                        if let Some(ms) = delete_after {
                            tokio::time::sleep(Duration::from_millis(ms)).await;
                            load.delete(name).await;
                        }
                    }
                }));
            }
            for create in creates {
                let _ = create.await;
            }
        }
        // The deleter goes on (bound claims keep being deleted) until the experiment stops
        // deleting; it ends when the harness's watches stop.
        drop(deleter);
    }
}

/// SIGKILLs a random controller every 5-7 s and starts a replacement.
async fn kill_storm(
    lab: &mut Lab,
    rng: &mut StdRng,
    until: Instant,
    outcome: &mut Outcome,
) -> Result<(), BenchError> {
    loop {
        let wait = Duration::from_millis(rng.random_range(5000..=7000));
        if Instant::now() + wait > until {
            tokio::time::sleep_until(until.into()).await;
            return Ok(());
        }
        tokio::time::sleep(wait).await;
        let kind = if rng.random_bool(0.5) {
            ControllerKind::Sandbox
        } else {
            ControllerKind::Extensions
        };
        if let Some(instance) = lab.instances(kind).first().cloned() {
            lab.kill_and_replace(&instance).await?;
            outcome.kills += 1;
        }
    }
}

/// The current holder of the extensions controller's Lease (its instance name).
async fn lease_holder(client: &kube::Client) -> Option<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let lease = api
        .get_opt(extensions_controller::args::LEASE_NAME)
        .await
        .ok()??;
    let holder = lease.spec?.holder_identity?;
    let instance = holder.rsplit_once('_').map_or(holder.as_str(), |(i, _)| i);
    (!instance.is_empty()).then(|| instance.to_owned())
}

/// Rounds of: SIGSTOP the extensions leader, wait until the standby holds its Lease, keep it
/// stopped past the Lease duration, SIGCONT it; it must exit (and write nothing, checked from
/// the audit log), and is replaced by a new standby.
async fn leader_pause(
    lab: &mut Lab,
    ctx: &Ctx<'_>,
    until: Instant,
    outcome: &mut Outcome,
) -> Result<(), BenchError> {
    // client-go's defaults, which the binaries use: the Lease lasts 15 s.
    const LEASE: Duration = Duration::from_secs(15);
    let client = lab.client().clone();
    loop {
        let Some(leader) = lease_holder(&client).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if Instant::now() > until {
                return Ok(());
            }
            continue;
        };
        let Some(controller) = lab.controller(&leader) else {
            return Err(BenchError::Unavailable(format!(
                "the Lease names {leader}, which is not one of the harness's processes"
            )));
        };
        controller.signal(rustix::process::Signal::STOP)?;
        let stopped = Instant::now();
        outcome.pauses += 1;
        let took_over = wait_for(
            "the standby to take the Lease",
            scaled(60.0, ctx.timeout_factor),
            || async {
                lease_holder(&client)
                    .await
                    .is_some_and(|holder| holder != leader)
            },
        )
        .await;
        if took_over.is_ok() {
            outcome.takeover_s.push(stopped.elapsed().as_secs_f64());
        }
        // Paused past the Lease duration, while the new leader works.
        tokio::time::sleep_until((stopped + LEASE + Duration::from_secs(5)).into()).await;
        let Some(controller) = lab.controller(&leader) else {
            return Ok(());
        };
        controller.signal(rustix::process::Signal::CONT)?;
        let resumed = Instant::now();
        let mut exited = None;
        while resumed.elapsed() < scaled(30.0, ctx.timeout_factor) {
            if let Some(status) = lab.controller(&leader).and_then(|c| c.exited()) {
                exited = Some(status);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        match exited {
            Some(status) if !status.success() => {}
            other => outcome.violations.push(Violation {
                invariant: "paused-leader-kept-running",
                detail: format!(
                    "{leader} was resumed after losing its Lease and {}",
                    match other {
                        Some(status) => format!("exited with {status}"),
                        None => "did not exit within 30 s".into(),
                    }
                ),
            }),
        }
        if let Some(old) = lab.remove(&leader) {
            old.kill().await;
        }
        // The kubelet restarts it: a new standby.
        lab.spawn(ControllerKind::Extensions).await?;
        if Instant::now() + LEASE + Duration::from_secs(10) > until {
            return Ok(());
        }
    }
}

/// A claim `name` with `spec` merged over a warm claim of the chaos pool.
fn claim_body(name: &str, spec: Value, annotations: Value) -> Value {
    let mut body = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": annotations},
        "spec": {"warmPoolRef": {"name": POOL}}});
    if let (Some(target), Some(extra)) = (body["spec"].as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            target.insert(k.clone(), v.clone());
        }
    }
    body
}

/// Creates `body` as a `kind`, retrying transient errors (see [`retry`]).
async fn create(client: &kube::Client, kind: Kind, body: Value) -> Result<(), BenchError> {
    let obj: DynamicObject = serde_json::from_value(body)?;
    retry("creating an object", || async {
        match kind.api(client).create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            // An earlier attempt's answer was lost (a dropped connection), not its create.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(BenchError::kube("creating an object", e)),
        }
    })
    .await
}

/// Bad input: each bad claim gets a condition saying why (no silent drop) and takes no
/// Sandbox; good claims created beside them are bound; no controller crashes; a template whose
/// NetworkPolicy cannot be made hands out no Sandbox without one (fail closed).
async fn bad_input(
    lab: &mut Lab,
    ctx: &Ctx<'_>,
    client: &kube::Client,
    outcome: &mut Outcome,
) -> Result<(), BenchError> {
    let huge = "x".repeat(1 << 20);
    let long_name: String = std::iter::repeat_n('a', 253).collect();
    let bad = [
        (
            "bad-missing-pool",
            claim_body(
                "bad-missing-pool",
                json!({"warmPoolRef": {"name": "no-such-pool"}}),
                json!({}),
            ),
        ),
        (
            "bad-huge-annotation",
            claim_body(
                "bad-huge-annotation",
                json!({"additionalPodMetadata": {"annotations": {"big": huge}}}),
                json!({}),
            ),
        ),
    ];
    let good = [
        (
            "good-malformed-trace-context",
            claim_body(
                "good-malformed-trace-context",
                json!({}),
                json!({"opentelemetry.io/trace-context": "{not json"}),
            ),
        ),
        (
            "good-long-name",
            claim_body(&long_name, json!({}), json!({})),
        ),
    ];
    for (_, body) in bad.iter().chain(&good) {
        create(client, Kind::Claim, body.clone()).await?;
        outcome.claims_created += 1;
    }
    // A template whose name is as long as the API allows, and a pool of it (issue 21 item 5).
    let long_template: String = std::iter::repeat_n('t', 253).collect();
    let template = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": long_template, "namespace": NAMESPACE},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    create(client, Kind::Template, template).await?;
    let pool = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": "long-template-pool", "namespace": NAMESPACE},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": long_template}}});
    create(client, Kind::Pool, pool).await?;

    // Let the controllers look at everything.
    let deadline = Instant::now() + scaled(30.0, ctx.timeout_factor);
    let claims = Kind::Claim.api(client);
    for (name, _) in &bad {
        let mut reason = None;
        while Instant::now() < deadline {
            if let Ok(Some(claim)) = claims.get_opt(name).await {
                reason = invariants::ready_reason(&claim).filter(|r| !r.is_empty());
                if reason.is_some() {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if reason.is_none() {
            outcome.violations.push(Violation {
                invariant: "bad-input-silently-ignored",
                detail: format!("claim {name} got no Ready condition with a reason"),
            });
        }
    }
    tokio::time::sleep_until(deadline.into()).await;
    lab.check_alive()?;
    let listing = listing(client).await?;
    for (name, _) in &bad {
        let uid = listing
            .claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .and_then(|c| c.metadata.uid.clone())
            .unwrap_or_default();
        for s in &listing.sandboxes {
            if invariants::controller_of(s).is_some_and(|(_, u, _)| u == uid) {
                outcome.violations.push(Violation {
                    invariant: "bad-claim-took-sandbox",
                    detail: format!(
                        "claim {name} took Sandbox {} although it cannot be satisfied",
                        s.metadata.name.clone().unwrap_or_default()
                    ),
                });
            }
        }
    }
    // Fail closed: a Ready member of the long template's pool needs its NetworkPolicy.
    let policies = Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(
        client.clone(),
        NAMESPACE,
    )
    .list(&ListParams::default())
    .await
    .map_err(|e| BenchError::kube("listing NetworkPolicies", e))?;
    let has_policy = policies.items.iter().any(|p| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.kind == "SandboxTemplate" && o.name == long_template)
    });
    let ready_members: Vec<String> = listing
        .sandboxes
        .iter()
        .filter(|s| {
            invariants::controller_of(s)
                .is_some_and(|(k, _, n)| k == invariants::POOL_KIND && n == "long-template-pool")
                && invariants::is_ready(s)
        })
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    if !has_policy && !ready_members.is_empty() {
        outcome.violations.push(Violation {
            invariant: "network-policy-fails-open",
            detail: format!(
                "pool long-template-pool has Ready members without its template's NetworkPolicy: {}",
                ready_members.join(", ")
            ),
        });
    }
    // The bad claims are not expected to be bound: take them out before the at-rest checks.
    for (name, _) in &bad {
        let _ = claims.delete(name, &DeleteParams::default()).await;
    }
    let _ = Kind::Pool
        .api(client)
        .delete("long-template-pool", &DeleteParams::default())
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy() -> Outcome {
        Outcome {
            claims_created: 10,
            claims_bound: 10,
            claims_deleted: 5,
            kills: 2,
            pauses: 1,
            faults_injected: 7,
            watches_opened: 12,
            watches_reopened: 6,
            lease_takeovers: 1,
            takeover_s: vec![15.2],
            convergence_s: Some(1.0),
            cleanup_s: Some(1.0),
            ..Outcome::default()
        }
    }

    #[test]
    fn an_experiment_that_did_its_disturbance_is_exercised() {
        for experiment in Experiment::ALL {
            assert_eq!(not_exercised(experiment, &busy()), vec![], "{experiment:?}");
        }
    }

    #[test]
    fn an_experiment_that_disturbed_nothing_is_a_failure() {
        type Change = fn(&mut Outcome);
        let cases: [(Experiment, Change); 8] = [
            (Experiment::KillStorm, |o| o.kills = 0),
            (Experiment::ApiFaults, |o| o.faults_injected = 0),
            (Experiment::ApiFaults, |o| o.watches_reopened = 0),
            (Experiment::ApiFaults, |o| {
                o.watches_never_reopened = vec!["extensions-controller (ext-1) watch pods".into()]
            }),
            (Experiment::LeaderPause, |o| o.pauses = 0),
            (Experiment::LeaderPause, |o| o.lease_takeovers = 0),
            (Experiment::LeaderPause, |o| o.takeover_s.clear()),
            (Experiment::ChurnFast, |o| o.claims_deleted = 0),
        ];
        for (experiment, change) in cases {
            let mut outcome = busy();
            change(&mut outcome);
            let found = not_exercised(experiment, &outcome);
            assert_eq!(found.len(), 1, "{experiment:?}: {found:?}");
            assert_eq!(found[0].invariant, "not-exercised");
        }
        let mut idle = busy();
        idle.claims_bound = 0;
        idle.convergence_s = None;
        assert_eq!(not_exercised(Experiment::BadInput, &idle).len(), 2);
    }
}
