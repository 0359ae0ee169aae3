//! What every reconcile shares: the client, the reflector stores it reads from, event
//! recorders, settings and the in-memory bookkeeping of the pool and claim controllers.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api_types::{
    Sandbox, SandboxClaim, SandboxClaimStatus, SandboxTemplate, SandboxWarmPool,
    SandboxWarmPoolStatus,
};
use controller_common::events::{Event, EventRecorder, EventType};
use controller_common::own_writes::OwnWrites;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Client;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};

use controller_common::{ControllerMetrics, ReconcileResult};
use k8s_openapi::api::networking::v1::NetworkPolicySpec;

use crate::metrics::ClaimMetrics;
use crate::warm_pool::in_flight::InFlight;
use crate::warm_pool::refill::{RefillLimiter, ReplenishHold};
use crate::warm_pool::status::{DEFAULT_POOL_STATUS_WINDOW, StatusWrite, status_write};

/// Field manager / event reporter name of this binary.
pub const FIELD_MANAGER: &str = "extensions-controller";

#[derive(Clone)]
pub struct Stores {
    pub sandboxes: Store<Sandbox>,
    /// Members by pool label and Sandboxes by controller UID, over `sandboxes`.
    pub sandbox_index: crate::sandbox_index::SandboxIndex,
    pub pools: Store<SandboxWarmPool>,
    pub templates: Store<SandboxTemplate>,
    pub claims: Store<SandboxClaim>,
    pub policies: Store<NetworkPolicy>,
    pub pods: Store<Pod>,
}

impl Stores {
    pub async fn wait_until_ready(&self) -> bool {
        self.sandboxes.wait_until_ready().await.is_ok()
            && self.pools.wait_until_ready().await.is_ok()
            && self.templates.wait_until_ready().await.is_ok()
            && self.claims.wait_until_ready().await.is_ok()
            && self.policies.wait_until_ready().await.is_ok()
            && self.pods.wait_until_ready().await.is_ok()
    }

    pub fn template(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<SandboxTemplate>> {
        self.templates.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn pool(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<SandboxWarmPool>> {
        self.pools.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn sandbox(&self, namespace: &str, name: &str) -> Option<std::sync::Arc<Sandbox>> {
        self.sandboxes.get(&ObjectRef::new(name).within(namespace))
    }

    /// Cached Sandboxes in `namespace` carrying the pool label `pool_label` (a pool name hash).
    pub fn sandboxes_with_pool_label(
        &self,
        namespace: &str,
        pool_label: &str,
    ) -> Vec<std::sync::Arc<Sandbox>> {
        let mut found = self
            .sandbox_index
            .with_pool_label(&self.sandboxes, namespace, pool_label);
        // The index runs one event ahead of the store: keep what the store shows labelled.
        found.retain(|sb| has_pool_label(sb, pool_label));
        found
    }

    /// A pool pass's view of the Sandboxes in `namespace` labelled `pool_label`: the number
    /// of quiet members in the classes `countable` accepts (counted, not looked at), and every
    /// other labelled Sandbox, including the members named in `must_look`
    /// ([`crate::sandbox_index::SandboxIndex::pool_census`]). The count is the index's, which
    /// may run one watch event ahead of the store; the listed ones are what the store shows
    /// with the label.
    pub fn pool_census(
        &self,
        namespace: &str,
        pool_label: &str,
        countable: impl Fn(&crate::pool_census::QuietClass) -> bool,
        must_look: &[String],
    ) -> (usize, Vec<std::sync::Arc<Sandbox>>) {
        let (quiet, mut found) = self.sandbox_index.pool_census(
            &self.sandboxes,
            namespace,
            pool_label,
            countable,
            must_look,
        );
        found.retain(|sb| has_pool_label(sb, pool_label));
        (quiet, found)
    }

    /// Cached Sandboxes in `namespace` whose controlling owner has UID `uid`.
    pub fn sandboxes_controlled_by(
        &self,
        namespace: &str,
        uid: &str,
    ) -> Vec<std::sync::Arc<Sandbox>> {
        let mut found = self.sandbox_index.controlled_by(&self.sandboxes, uid);
        found.retain(|sb| {
            sb.metadata.namespace.as_deref() == Some(namespace)
                && crate::ownership::is_controlled_by(&sb.metadata, uid)
        });
        found
    }
}

fn has_pool_label(sb: &Sandbox, pool_label: &str) -> bool {
    sb.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(api_types::keys::SANDBOX_WARM_POOL_LABEL))
        .map(String::as_str)
        == Some(pool_label)
}

#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    pub max_batch_size: u32,
    pub replenish_delay: Duration,
    pub max_refill_rate: f64,
    pub readiness_grace_period: Duration,
    pub unschedulable_recheck_interval: Duration,
    pub enable_eviction: bool,
    /// How long a count-only pool status change (`replicas`, `readyReplicas`) may be held back
    /// so that one write carries a burst of claims and refills ([`DEFAULT_POOL_STATUS_WINDOW`]).
    pub status_window: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_batch_size: 300,
            replenish_delay: Duration::ZERO,
            max_refill_rate: 0.0,
            readiness_grace_period: Duration::from_secs(300),
            unschedulable_recheck_interval: Duration::from_secs(60),
            enable_eviction: true,
            status_window: DEFAULT_POOL_STATUS_WINDOW,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ClaimSettings {
    /// Label domains claims may use in `additionalPodMetadata.labels`.
    pub allowed_label_domains: Vec<String>,
    /// Claim Events at all (`--disable-claim-events` turns them off).
    pub events: bool,
    /// The Normal Event `SandboxAdopted` on the warm path (`--claim-adoption-events`).
    pub adoption_events: bool,
    pub observability_annotations: bool,
}

impl ClaimSettings {
    /// Whether a successful warm adoption publishes `SandboxAdopted`: only when asked for
    /// (`--claim-adoption-events`) and claim Events are not disabled altogether.
    pub fn publishes_adoption_event(&self) -> bool {
        self.events && self.adoption_events
    }
}

impl Default for ClaimSettings {
    fn default() -> Self {
        ClaimSettings {
            allowed_label_domains: vec![crate::claim::metadata::DEFAULT_LABEL_DOMAIN.to_owned()],
            events: true,
            adoption_events: false,
            observability_annotations: true,
        }
    }
}

/// In-memory state of the pool controller (rebuilt from the caches after a restart).
pub struct PoolState {
    pub settings: PoolSettings,
    pub in_flight: InFlight,
    pub limiter: RefillLimiter,
    pub hold: ReplenishHold,
    /// Pools currently holding unschedulable members (for transition events).
    pub not_progressing: Mutex<HashSet<String>>,
    /// Per pool: since when a count-only status change has been held back.
    status_held: Mutex<HashMap<String, Instant>>,
    /// Template `namespace/name` → (UID, resourceVersion, blueprint hash): the hash serializes
    /// the whole blueprint, so it is computed once per template version, not once per pass.
    blueprint_hashes: Mutex<HashMap<String, HashedBlueprint>>,
}

/// A template version's blueprint hash: (UID, resourceVersion, hash).
type HashedBlueprint = (Option<String>, Option<String>, String);

impl PoolState {
    pub fn new(settings: PoolSettings) -> Self {
        PoolState {
            in_flight: InFlight::default(),
            limiter: RefillLimiter::new(settings.max_refill_rate),
            hold: ReplenishHold::new(settings.replenish_delay),
            not_progressing: Mutex::default(),
            status_held: Mutex::default(),
            blueprint_hashes: Mutex::default(),
            settings,
        }
    }

    /// [`blueprint_hash`](crate::warm_pool::blueprint::blueprint_hash) of `template`'s
    /// blueprint, remembered per template version (UID and resourceVersion; a template
    /// without a resourceVersion is hashed every time).
    pub fn blueprint_hash(&self, template: &SandboxTemplate) -> String {
        let meta = &template.metadata;
        let compute = || crate::warm_pool::blueprint::blueprint_hash(&template.spec.blueprint);
        if meta.resource_version.is_none() {
            return compute();
        }
        let key = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        );
        let mut hashes = self
            .blueprint_hashes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some((uid, rv, hash)) = hashes.get(&key)
            && *uid == meta.uid
            && *rv == meta.resource_version
        {
            return hash.clone();
        }
        let hash = compute();
        hashes.insert(
            key,
            (
                meta.uid.clone(),
                meta.resource_version.clone(),
                hash.clone(),
            ),
        );
        hash
    }

    /// [`status_write`] for pool `key`, remembering when a hold started and forgetting it
    /// once the status is written or back to what is stored.
    pub fn status_write(
        &self,
        key: &str,
        stored: &SandboxWarmPoolStatus,
        desired: &SandboxWarmPoolStatus,
        now: Instant,
    ) -> StatusWrite {
        let mut held = self.status_held.lock().unwrap_or_else(|e| e.into_inner());
        let decision = status_write(
            stored,
            desired,
            held.get(key).copied(),
            self.settings.status_window,
            now,
        );
        match decision {
            StatusWrite::Hold(_) => {
                held.entry(key.to_owned()).or_insert(now);
            }
            StatusWrite::Now | StatusWrite::Nothing => {
                held.remove(key);
            }
        }
        decision
    }

    /// Drops the hold of pool `key` (its status is written now).
    pub fn release_status_hold(&self, key: &str) {
        self.status_held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    pub fn forget(&self, key: &str) {
        self.in_flight.forget(key);
        self.limiter.forget(key);
        self.hold.forget(key);
        self.status_held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        self.not_progressing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

/// How long a candidate stays reserved by a claim worker after a successful adoption, until
/// the cache shows its new owner.
pub const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// Candidates reserved by claim workers.
#[derive(Default)]
struct Reservations {
    /// `namespace/name` → since.
    held: HashMap<String, Instant>,
    /// When expired entries were last swept.
    swept: Option<Instant>,
}

/// In-memory state of the claim controller.
pub struct ClaimState {
    pub settings: ClaimSettings,
    pub metrics: ClaimMetrics,
    /// Candidates taken or being taken by a claim worker (`namespace/name` → since).
    reservations: Mutex<Reservations>,
    /// Claim UID → name of the Sandbox this process bound it to (write-through, so a pass on
    /// a cache that has not caught up with the binding never looks for another sandbox).
    bindings: Mutex<HashMap<String, String>>,
    /// Claim UID → first time this process saw the claim.
    first_seen: Mutex<HashMap<String, k8s_openapi::jiff::Timestamp>>,
    /// Claim UIDs whose first-Ready metrics were recorded by this process.
    recorded: Mutex<HashSet<String>>,
    /// Claim UID → (resourceVersion, status) of our last status write (write-through, so a
    /// pass on a cache that lags our own write neither repeats it nor sends a doomed 409).
    written: Mutex<HashMap<String, (u64, SandboxClaimStatus)>>,
    /// Wakes a pool after one of its members was taken (its owner reference is gone, so no
    /// owner-based watch would).
    pub pool_wake: Option<UnboundedSender<ObjectRef<SandboxWarmPool>>>,
    /// Sandboxes and claims a claim pass wrote (adoption, cold create, metadata sync, the
    /// first-ready stamp), until their watch event arrives: that event does not trigger the
    /// claim again (the pass that wrote acted on the server's answer).
    pub own_writes: OwnWrites,
}

impl ClaimState {
    pub fn new(
        settings: ClaimSettings,
        metrics: ClaimMetrics,
        pool_wake: Option<UnboundedSender<ObjectRef<SandboxWarmPool>>>,
    ) -> Self {
        ClaimState {
            settings,
            metrics,
            reservations: Mutex::default(),
            bindings: Mutex::default(),
            first_seen: Mutex::default(),
            recorded: Mutex::default(),
            written: Mutex::default(),
            pool_wake,
            own_writes: OwnWrites::new(),
        }
    }

    /// Reserves a candidate for this worker; false when another worker holds it.
    pub fn reserve(&self, key: &str, now: Instant) -> bool {
        let mut reservations = self.reservations.lock().unwrap_or_else(|e| e.into_inner());
        // Expired reservations are swept at most once per TTL/8 (a sweep per call made every
        // reservation O(reservations held), which at 1,000 claims/s is 30,000).
        if reservations
            .swept
            .is_none_or(|at| now.duration_since(at) >= RESERVATION_TTL / 8)
        {
            reservations
                .held
                .retain(|_, at| now.duration_since(*at) < RESERVATION_TTL);
            reservations.swept = Some(now);
        }
        if reservations
            .held
            .get(key)
            .is_some_and(|at| now.duration_since(*at) < RESERVATION_TTL)
        {
            return false;
        }
        reservations.held.insert(key.to_owned(), now);
        true
    }

    /// True when `namespace/name` is reserved at `now`.
    pub fn is_reserved(&self, namespace: &str, name: &str, now: Instant) -> bool {
        let key = format!("{namespace}/{name}");
        self.reservations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .held
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < RESERVATION_TTL)
    }

    pub fn release(&self, key: &str) {
        self.reservations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .held
            .remove(key);
    }

    pub fn bind(&self, claim_uid: &str, sandbox: &str) {
        self.bindings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(claim_uid.to_owned(), sandbox.to_owned());
    }

    pub fn binding(&self, claim_uid: &str) -> Option<String> {
        self.bindings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(claim_uid)
            .cloned()
    }

    pub fn first_seen(
        &self,
        claim_uid: &str,
        now: k8s_openapi::jiff::Timestamp,
    ) -> k8s_openapi::jiff::Timestamp {
        *self
            .first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(claim_uid.to_owned())
            .or_insert(now)
    }

    /// Marks the claim's first Ready as recorded; false if it already was.
    pub fn mark_recorded(&self, claim_uid: &str) -> bool {
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(claim_uid.to_owned())
    }

    /// The claim's status and resourceVersion to work from: ours if the cache is older than
    /// our last write, else the cache's.
    pub fn latest_status(
        &self,
        claim_uid: &str,
        cached_rv: Option<&str>,
        cached: SandboxClaimStatus,
    ) -> (SandboxClaimStatus, Option<String>) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        let cached_number = cached_rv.and_then(|rv| rv.parse::<u64>().ok());
        if let (Some((rv, status)), Some(cached_number)) = (written.get(claim_uid), cached_number)
            && cached_number < *rv
        {
            return (status.clone(), Some(rv.to_string()));
        }
        written.remove(claim_uid);
        (cached, cached_rv.map(str::to_owned))
    }

    pub fn status_written(&self, claim_uid: &str, rv: Option<&str>, status: &SandboxClaimStatus) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match rv.and_then(|rv| rv.parse::<u64>().ok()) {
            // Writes answered out of order (a background stamp): the newest version wins.
            Some(rv) if written.get(claim_uid).is_some_and(|(known, _)| *known > rv) => {}
            Some(rv) => {
                written.insert(claim_uid.to_owned(), (rv, status.clone()));
            }
            None => {
                written.remove(claim_uid);
            }
        }
    }

    /// Number of claims with in-memory state.
    pub fn tracked(&self) -> usize {
        self.first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Drops the state of claims that no longer exist (their delete events are not always
    /// seen: a claim without finalizers can vanish between two watch events).
    pub fn prune(&self, live: impl Fn(&str) -> bool) {
        self.bindings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| live(uid));
        self.first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, _| live(uid));
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid| live(uid));
        self.own_writes
            .prune(controller_common::own_writes::ECHO_WAIT);
    }

    pub fn forget(&self, claim_uid: &str) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(claim_uid);
        self.bindings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(claim_uid);
        self.first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(claim_uid);
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(claim_uid);
    }
}

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub pool: PoolState,
    pub claim: ClaimState,
    /// Recorders for pool and template events (reporters `sandboxwarmpool-controller`,
    /// `sandboxtemplate-controller`, as the reference).
    pub pool_recorder: Option<EventRecorder>,
    pub template_recorder: Option<EventRecorder>,
    /// EventRecorder for claim events (`None` with `--disable-claim-events`).
    pub claim_recorder: Option<EventRecorder>,
    /// controller-runtime style reconcile metrics.
    pub reconcile_metrics: Option<ControllerMetrics>,
    /// NetworkPolicy `namespace/name` → (resourceVersion we wrote, the spec we asked for), so a
    /// server-defaulted field does not make us rewrite the policy forever.
    pub policy_writes: Mutex<HashMap<String, (String, NetworkPolicySpec)>>,
    /// Consecutive failures per object key, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// True once every cache has its initial list: decisions on a partial cache would
    /// over-create pool members or cold-start claims that are already bound.
    synced: std::sync::atomic::AtomicBool,
}

/// How long a reconcile waits for the caches' initial lists before looking again.
pub const SYNC_RECHECK: Duration = Duration::from_millis(100);

/// Longest error backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(120);
const BASE_BACKOFF: Duration = Duration::from_millis(200);

impl Context {
    pub fn new(
        client: Client,
        stores: Stores,
        pool: PoolState,
        claim: ClaimState,
        recorders: [Option<EventRecorder>; 3],
        reconcile_metrics: Option<ControllerMetrics>,
    ) -> Self {
        Context {
            client,
            stores,
            pool,
            claim,
            pool_recorder: recorders[0].clone(),
            template_recorder: recorders[1].clone(),
            claim_recorder: recorders[2].clone(),
            reconcile_metrics,
            policy_writes: Mutex::default(),
            failures: Mutex::default(),
            synced: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn set_synced(&self) {
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The next retry delay for `key` after a failure (exponential, capped).
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        BASE_BACKOFF
            .saturating_mul(2u32.saturating_pow((*n - 1).min(12)))
            .min(MAX_BACKOFF)
    }

    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Records one reconcile in the controller-runtime style metrics.
    pub fn observe(
        &self,
        controller: &str,
        started: Instant,
        result: &Result<controller_common::runner::Action, crate::Error>,
    ) {
        let Some(metrics) = &self.reconcile_metrics else {
            return;
        };
        let outcome = match result {
            Err(_) => ReconcileResult::Error,
            Ok(action) if *action == controller_common::runner::Action::await_change() => {
                ReconcileResult::Success
            }
            Ok(_) => ReconcileResult::RequeueAfter,
        };
        metrics.observe_reconcile(controller, outcome, started.elapsed());
    }

    fn event_of(type_: EventType, reason: &str, action: &str, note: String) -> Event {
        Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        }
    }

    /// Publishes an Event in the background, off the caller's critical path (the claim's Ready
    /// does not wait for its Event); failures are logged, never fatal.
    pub fn event_detached<K: Resource<DynamicType = ()>>(
        recorder: Option<&EventRecorder>,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(recorder) = recorder.cloned() else {
            return;
        };
        let event = Self::event_of(type_, reason, action, note);
        let reference = object.object_ref(&());
        tokio::spawn(async move {
            if let Err(err) = recorder.publish(&event, &reference).await {
                tracing::warn!(error = %err, reason = %event.reason, "failed to publish event");
            }
        });
    }

    /// Publishes an Event; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        recorder: Option<&EventRecorder>,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(recorder) = recorder else {
            return;
        };
        let event = Self::event_of(type_, reason, action, note);
        if let Err(err) = recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %err, reason, "failed to publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim_state() -> ClaimState {
        let mut registry = prometheus_client::registry::Registry::default();
        ClaimState::new(
            ClaimSettings::default(),
            ClaimMetrics::register(&mut registry),
            None,
        )
    }

    #[test]
    fn adoption_event_is_opt_in_and_off_without_claim_events() {
        let settings = |events, adoption_events| ClaimSettings {
            events,
            adoption_events,
            ..ClaimSettings::default()
        };
        assert!(!ClaimSettings::default().publishes_adoption_event());
        assert!(settings(true, true).publishes_adoption_event());
        assert!(!settings(true, false).publishes_adoption_event());
        assert!(
            !settings(false, true).publishes_adoption_event(),
            "--disable-claim-events wins"
        );
    }

    #[test]
    fn reserved_names_are_per_namespace_and_expire() {
        let state = claim_state();
        let start = Instant::now();
        assert!(state.reserve("ns/a", start));
        assert!(!state.reserve("ns/a", start), "held by the first worker");
        assert!(state.reserve("ns-2/b", start));
        assert!(state.is_reserved("ns", "a", start));
        assert!(!state.is_reserved("ns", "b", start));
        assert!(state.is_reserved("ns-2", "b", start));
        let later = start + RESERVATION_TTL;
        assert!(!state.is_reserved("ns", "a", later));
        assert!(
            state.reserve("ns/a", later),
            "an expired reservation can be taken"
        );
        state.release("ns/a");
        assert!(!state.is_reserved("ns", "a", later));
        assert!(state.reserve("ns/a", later), "a released one too");
    }
}
