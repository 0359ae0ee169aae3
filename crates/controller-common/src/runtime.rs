//! The process lifecycle both binaries share: setup, admin servers, leader election, start of
//! the controllers on the leader, graceful shutdown.
//!
//! ```text
//! Runtime::init            telemetry, kube client, SIGTERM/SIGINT handler
//!   registry_mut(), readiness().gate(..)     setup on every replica
//! Runtime::run(start)
//!   serve /metrics, /healthz, /readyz        every replica; a standby reports ready
//!   acquire the Lease (when --leader-elect)  standby until then
//!   start(Context)                           only on the leader
//!   signal   -> cancel Context::shutdown, wait for start's future (bounded), release Lease, Ok
//!               (a second signal exits with code 1 at once)
//!   lost     -> (renewal failed past its deadline, another holder, or the fence's deadline
//!               passed, e.g. after a pause) cancel Context::shutdown and stop the controllers
//!               at once, Err(LeadershipLost)  (exit non-zero); writes were refused from the
//!               deadline on by the client's fence (`leader_election::fence`)
//!   start's future returns -> release Lease, Ok / Err(Controllers)
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin::{Liveness, Readiness, serve_admin};
use crate::args::CommonArgs;
use crate::error::Error;
use crate::leader_election::fence::Fence;
use crate::leader_election::{
    LeaderElectionConfig, LeaderElector, LeaseTimings, RenewOutcome, default_identity,
};
use crate::metrics::ControllerMetrics;
use crate::rate_limit::RateLimit;
use crate::request_metrics::RequestMetrics;
use crate::telemetry::TelemetryGuard;

/// controller-runtime's default graceful-shutdown timeout.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// What distinguishes one binary from the other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    /// Default `service.name` of exported traces (`OTEL_SERVICE_NAME` wins) and tracer name,
    /// e.g. `sandbox-controller`.
    pub service_name: String,
    /// Name of the leader-election Lease, e.g. `a3317529.agent-sandbox.x-k8s.io`.
    pub lease_name: String,
    /// How long to wait for the controllers to stop after a signal or a lost Lease.
    pub shutdown_timeout: Duration,
    /// Leader-election durations (client-go defaults: 15 s / 10 s / 2 s).
    pub lease_timings: LeaseTimings,
}

impl RunSpec {
    /// A spec with the default shutdown timeout and lease timings.
    pub fn new(service_name: impl Into<String>, lease_name: impl Into<String>) -> Self {
        RunSpec {
            service_name: service_name.into(),
            lease_name: lease_name.into(),
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            lease_timings: LeaseTimings::default(),
        }
    }
}

/// What the controllers get when this replica starts leading.
#[derive(Clone)]
pub struct Context {
    /// The rate-limited kube client.
    pub client: Client,
    /// Readiness state (gates made before `run` are in it).
    pub readiness: Readiness,
    /// Cancelled on SIGTERM/SIGINT or when leadership is lost: stop taking new work, finish
    /// in-flight reconciles and return (as [`crate::runner::Runner::run`] does).
    pub shutdown: CancellationToken,
    /// `true` while this replica leads (always `true` without leader election). Turns `false`
    /// when leadership is lost, just before `shutdown` is cancelled.
    pub leader: watch::Receiver<bool>,
    /// This replica's leader-election identity (`<POD_NAME or host>_<uuid>`).
    pub identity: String,
    /// Where `/metrics` is served (None when disabled).
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Where `/healthz` and `/readyz` are served (None when disabled).
    pub probe_addr: Option<std::net::SocketAddr>,
}

/// Cancels the returned token on the first SIGTERM or SIGINT; a second signal exits the
/// process at once with code 1 (for an operator who does not want to wait for the graceful
/// shutdown). The handlers are registered before this function returns, so no signal that
/// arrives afterwards kills the process abruptly. Must be called inside a tokio runtime.
pub fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let trigger = token.clone();
    let mut signals = Signals::register();
    tokio::spawn(async move {
        let first = signals.next().await;
        tracing::info!(signal = %first, "shutdown signal received; stopping (send another to exit now)");
        trigger.cancel();
        let second = signals.next().await;
        tracing::warn!(signal = %second, "second shutdown signal; exiting without waiting");
        std::process::exit(1);
    });
    token
}

/// SIGTERM and SIGINT streams.
struct Signals {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    #[cfg(unix)]
    fn register() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        let listen = |kind: SignalKind, name: &str| match signal(kind) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for {name}");
                None
            }
        };
        Signals {
            term: listen(SignalKind::terminate(), "SIGTERM"),
            int: listen(SignalKind::interrupt(), "SIGINT"),
        }
    }

    #[cfg(unix)]
    async fn next(&mut self) -> &'static str {
        async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = recv(&mut self.term) => "SIGTERM",
            _ = recv(&mut self.int) => "SIGINT",
        }
    }

    #[cfg(not(unix))]
    fn register() -> Signals {
        Signals {}
    }

    #[cfg(not(unix))]
    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

/// The shared process runtime. See the module docs for the lifecycle.
pub struct Runtime {
    args: CommonArgs,
    spec: RunSpec,
    /// The controllers' client: writes pass only while `fence` allows them.
    client: Client,
    /// The elector's client (unfenced: it must write the Lease to lead again).
    lease_client: Client,
    fence: Fence,
    registry: Registry,
    readiness: Readiness,
    liveness: Liveness,
    shutdown: CancellationToken,
    identity: String,
    telemetry: Option<TelemetryGuard>,
    request_metrics: Option<RequestMetrics>,
}

impl Runtime {
    /// Production setup: telemetry ([`crate::telemetry::init`]), the kube client the flags
    /// describe ([`crate::client::load_config`], rate limited, requests counted in
    /// `rest_client_requests_total`, writes fenced by the Lease) and the signal handler. Call
    /// once, early in `main`, inside the tokio runtime.
    ///
    /// Leader election gets a second client from the same configuration with its own token
    /// bucket (as controller-runtime gives its resource lock its own client), so a busy
    /// controller exhausting `--kube-api-qps` cannot delay Lease renewals past the deadline.
    /// Requests carry the user agent `<service>/v<version> (<identity>)`, so an audit log
    /// tells the replicas apart.
    pub async fn init(args: &CommonArgs, spec: RunSpec) -> Result<Runtime, Error> {
        let telemetry = crate::telemetry::init(args, &spec.service_name)?;
        let identity = default_identity();
        let mut config = crate::client::load_config(args).await?;
        crate::client::set_user_agent(&mut config, &spec.service_name, Some(&identity));
        let limit = RateLimit::from_flags(args.kube_api_qps, args.kube_api_burst);
        let requests = RequestMetrics::new();
        let fence = new_fence(args);
        let client =
            crate::client::instrumented_client(config.clone(), limit, &requests, Some(&fence))?;
        let lease_client = crate::client::instrumented_client(config, limit, &requests, None)?;
        let shutdown = shutdown_on_signals();
        let mut runtime = Runtime::assemble(args, spec, client, lease_client, fence, shutdown);
        runtime.identity = identity;
        telemetry.register_metrics(&mut runtime.registry);
        runtime.telemetry = Some(telemetry);
        runtime.request_metrics = Some(requests);
        Ok(runtime)
    }

    /// Setup around an existing client and shutdown token, without touching global telemetry
    /// or signals (tests, embedding). The Lease is written with `client` itself; the
    /// controllers get it behind the fence ([`crate::client::fenced`]). No
    /// `rest_client_requests_total` unless the client was built with
    /// [`crate::client::instrumented_client`] and its family registered by the caller.
    pub fn with_client(
        args: &CommonArgs,
        spec: RunSpec,
        client: Client,
        shutdown: CancellationToken,
    ) -> Runtime {
        let fence = new_fence(args);
        let controllers = crate::client::fenced(client.clone(), fence.clone());
        Runtime::assemble(args, spec, controllers, client, fence, shutdown)
    }

    fn assemble(
        args: &CommonArgs,
        spec: RunSpec,
        client: Client,
        lease_client: Client,
        fence: Fence,
        shutdown: CancellationToken,
    ) -> Runtime {
        Runtime {
            args: args.clone(),
            spec,
            client,
            lease_client,
            fence,
            registry: Registry::default(),
            readiness: Readiness::new(),
            liveness: Liveness::new(args.health_stall_threshold),
            shutdown,
            identity: default_identity(),
            telemetry: None,
            request_metrics: None,
        }
    }

    /// A client whose writes the Lease does not fence, for the work every replica does whether
    /// or not it leads: the conversion webhook's certificate Secret and the caBundle of the
    /// CRDs (conversion is served by every replica, so a standby must be able to set them up).
    /// The controllers' reconciles use [`Runtime::client`].
    pub fn replica_client(&self) -> &Client {
        &self.lease_client
    }

    /// The fence the controllers' client checks before every write.
    pub fn fence(&self) -> &Fence {
        &self.fence
    }

    /// The kube client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The metrics registry, to register the binary's metrics before [`Runtime::run`] serves it.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// The readiness state behind `/readyz`; make gates here, before `run`.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The liveness state behind `/healthz`.
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// The controller-runtime style metrics, registered in the registry, with their work
    /// queues watched by `/healthz` (a controller that leaves its work undone for
    /// `--health-stall-threshold` fails the liveness probe). Call once.
    pub fn controller_metrics(&mut self) -> ControllerMetrics {
        let metrics = ControllerMetrics::register(&mut self.registry);
        self.liveness.watch(&metrics);
        metrics
    }

    /// The process shutdown token (cancelled by SIGTERM/SIGINT).
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// This replica's leader-election identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The flags.
    pub fn args(&self) -> &CommonArgs {
        &self.args
    }

    /// Serves the admin endpoints, waits for leadership (when `--leader-elect`), runs
    /// `start(context)` on the leader and handles shutdown (see the module docs).
    ///
    /// Returns `Ok(())` after a signal once the controllers stopped in time and the Lease was
    /// released, or when `start`'s future returned `Ok` by itself; `Err` (exit non-zero) on a
    /// lost Lease, a controller error, a shutdown that overran
    /// [`RunSpec::shutdown_timeout`], or an admin address that cannot be bound.
    pub async fn run<F, Fut, E>(mut self, start: F) -> Result<(), Error>
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    {
        let telemetry = self.telemetry.take();
        let result = self.run_inner(start).await;
        if let Err(e) = &result {
            tracing::error!(error = %e, "stopping with an error");
        }
        if let Some(telemetry) = telemetry {
            telemetry.shutdown().await;
        }
        result
    }

    async fn run_inner<F, Fut, E>(mut self, start: F) -> Result<(), Error>
    where
        F: FnOnce(Context) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
    {
        let leader_status = Family::<LeaseLabel, Gauge>::default();
        if self.args.leader_elect {
            self.registry.register(
                "leader_election_master_status",
                "1 while this replica holds the named leader-election Lease, 0 otherwise",
                leader_status.clone(),
            );
        }
        if let Some(requests) = &self.request_metrics {
            requests.register(&mut self.registry);
        }
        let lease_gauge = leader_status.get_or_create_owned(&LeaseLabel {
            name: self.spec.lease_name.clone(),
        });
        let registry = Arc::new(std::mem::take(&mut self.registry));

        let admin_token = CancellationToken::new();
        let admin = serve_admin(
            &self.args.metrics_bind_address,
            &self.args.health_probe_bind_address,
            registry,
            self.readiness.clone(),
            self.liveness.clone(),
            admin_token.clone(),
        )
        .await?;
        tracing::info!(
            metrics = ?admin.metrics_addr,
            probes = ?admin.probe_addr,
            identity = %self.identity,
            "admin endpoints serving"
        );
        // Stop the admin servers however this function returns.
        let _stop_admin = admin_token.drop_guard();

        let lease_namespace = self.args.leader_election_namespace();
        let mut elector = None;
        if self.args.leader_elect {
            let config = LeaderElectionConfig {
                namespace: lease_namespace.clone(),
                name: self.spec.lease_name.clone(),
                identity: self.identity.clone(),
                timings: self.spec.lease_timings,
            };
            tracing::info!(
                lease = %format!("{}/{}", config.namespace, config.name),
                "waiting to acquire the leader lease"
            );
            let mut candidate = LeaderElector::new(self.lease_client.clone(), config)
                .with_fence(self.fence.clone());
            self.readiness.set_standby(true);
            if !candidate.acquire(&self.shutdown).await {
                tracing::info!("shutdown before leading; nothing to stop");
                return Ok(());
            }
            self.readiness.set_standby(false);
            lease_gauge.set(1);
            elector = Some(candidate);
        }

        let (leader_tx, leader_rx) = watch::channel(true);
        let controllers_token = self.shutdown.child_token();
        let context = Context {
            client: self.client.clone(),
            readiness: self.readiness.clone(),
            shutdown: controllers_token.clone(),
            leader: leader_rx,
            identity: self.identity.clone(),
            metrics_addr: admin.metrics_addr,
            probe_addr: admin.probe_addr,
        };
        let mut controllers: JoinHandle<Result<(), E>> = tokio::spawn(start(context));

        let lease_token = CancellationToken::new();
        let mut renewal: Option<JoinHandle<(LeaderElector, RenewOutcome)>> =
            elector.map(|mut e| {
                let token = lease_token.clone();
                tokio::spawn(async move {
                    let outcome = e.renew(&token).await;
                    (e, outcome)
                })
            });

        enum End<T> {
            Returned(T),
            Lost(String),
            Signal,
        }
        let fence = self.fence.clone();
        let end = tokio::select! {
            biased;
            // Checked first: after a pause, every timer fires at once, and the loss must win.
            () = fence.closed() => End::Lost(fence_closed_reason(&fence)),
            lost = lease_lost(&mut renewal) => End::Lost(lost),
            r = &mut controllers => End::Returned(r),
            _ = self.shutdown.cancelled() => End::Signal,
        };

        let timeout = self.spec.shutdown_timeout;
        let lease_id = || (lease_namespace.clone(), self.spec.lease_name.clone());
        match end {
            End::Returned(result) => {
                controllers_token.cancel();
                release(renewal, &lease_token).await;
                lease_gauge.set(0);
                controllers_result(result)
            }
            End::Lost(message) => {
                // No drain: every write is refused from here on, so nothing a pass could still
                // do is worth waiting for. The process exits; a successor lists everything.
                self.fence.close();
                tracing::error!(reason = %message, "lost the leader lease; stopping the controllers now");
                lease_gauge.set(0);
                leader_tx.send_replace(false);
                controllers_token.cancel();
                controllers.abort();
                if let Some(task) = renewal.take() {
                    task.abort();
                }
                // Resolves as soon as the aborted task is dropped (no drain).
                let _ = controllers.await;
                let (namespace, name) = lease_id();
                Err(Error::LeadershipLost { namespace, name })
            }
            End::Signal => {
                // controllers_token is a child of the shutdown token: already cancelled. Keep
                // renewing while the controllers drain so no second leader starts meanwhile.
                let drained = tokio::select! {
                    biased;
                    () = fence.closed() => {
                        tracing::error!(reason = %fence_closed_reason(&fence), "lost the leader lease while stopping");
                        None
                    }
                    lost = lease_lost(&mut renewal) => {
                        tracing::error!(reason = %lost, "lost the leader lease while stopping");
                        None
                    }
                    r = tokio::time::timeout(timeout, &mut controllers) => Some(r),
                };
                match drained {
                    None => {
                        controllers.abort();
                        lease_gauge.set(0);
                        let (namespace, name) = lease_id();
                        Err(Error::LeadershipLost { namespace, name })
                    }
                    Some(Err(_elapsed)) => {
                        controllers.abort();
                        release(renewal, &lease_token).await;
                        lease_gauge.set(0);
                        Err(Error::ShutdownTimedOut(timeout))
                    }
                    Some(Ok(result)) => {
                        release(renewal, &lease_token).await;
                        lease_gauge.set(0);
                        controllers_result(result)
                    }
                }
            }
        }
    }
}

/// A fence for the flags: closed until this replica leads with `--leader-elect`, else open.
fn new_fence(args: &CommonArgs) -> Fence {
    if args.leader_elect {
        Fence::closed_until_leading()
    } else {
        Fence::open()
    }
}

/// Why the fence closed, for the log and the exit error.
fn fence_closed_reason(fence: &Fence) -> String {
    match fence.check() {
        Ok(()) => "the fence closed".to_owned(),
        Err(refused) => format!("the renew deadline passed without a renewal ({refused})"),
    }
}

/// Resolves with the loss message when the renewal task reports a loss; never resolves
/// without leader election or while renewing.
async fn lease_lost(renewal: &mut Option<JoinHandle<(LeaderElector, RenewOutcome)>>) -> String {
    let Some(task) = renewal.as_mut() else {
        return std::future::pending().await;
    };
    let message = match task.await {
        Ok((_, RenewOutcome::Lost(message))) => message,
        // Cancelled only happens after lease_token is cancelled, which this select never races.
        Ok((_, RenewOutcome::Cancelled)) => "lease renewal stopped".to_owned(),
        Err(e) => format!("lease renewal task failed: {e}"),
    };
    *renewal = None;
    message
}

/// Stops renewing and releases the Lease (logged, never fatal: it expires anyway).
async fn release(
    renewal: Option<JoinHandle<(LeaderElector, RenewOutcome)>>,
    lease_token: &CancellationToken,
) {
    let Some(task) = renewal else {
        return;
    };
    lease_token.cancel();
    match task.await {
        Ok((mut elector, RenewOutcome::Cancelled)) => {
            let bound = elector.config().timings.renew_deadline;
            match tokio::time::timeout(bound, elector.release()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "could not release the leader lease; it will expire");
                }
                Err(_) => tracing::warn!(
                    "no answer to the lease release within {bound:?}; the lease will expire"
                ),
            }
        }
        Ok((_, RenewOutcome::Lost(message))) => {
            tracing::warn!(reason = %message, "lease was lost while stopping; nothing to release");
        }
        Err(e) => tracing::warn!(error = %e, "lease renewal task failed"),
    }
}

fn controllers_result<E>(result: Result<Result<(), E>, tokio::task::JoinError>) -> Result<(), Error>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match result {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Controllers(e.into())),
        Err(join) => Err(Error::Controllers(Box::new(join))),
    }
}

#[cfg(test)]
#[path = "runtime/tests.rs"]
mod tests;
