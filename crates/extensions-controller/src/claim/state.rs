//! The claim controller's settings and in-memory state.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api_types::{SandboxClaimStatus, SandboxWarmPool};
use controller_common::own_writes::OwnWrites;
use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use crate::metrics::ClaimMetrics;

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
