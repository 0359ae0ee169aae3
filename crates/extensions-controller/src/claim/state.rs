//! The claim controller's settings and in-memory state: the per-claim memory
//! ([`ClaimLedger`]), the candidates workers are taking ([`Reservations`]), and the versions a
//! pass wrote whose watch events must not start another pass ([`OwnWrites`]). All of it is
//! rebuilt from the caches after a restart; none of it is process-global.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use controller_common::first_seen::FirstSeen;
use controller_common::own_writes::OwnWrites;

use super::ledger::ClaimLedger;
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

/// Claims whose malformed trace-context annotation was reported, kept per process before the
/// set starts over (bounds memory).
const TRACE_WARNINGS_KEPT: usize = 20_000;

/// Candidates taken or being taken by a claim worker: two workers never patch the same member
/// at once (the guarded patch would make one of them lose anyway, at the price of a request).
#[derive(Debug, Default)]
pub struct Reservations {
    inner: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// `namespace/name` → since.
    held: HashMap<String, Instant>,
    /// When expired entries were last swept.
    swept: Option<Instant>,
}

impl Reservations {
    /// Reserves a candidate for this worker; false when another worker holds it.
    pub fn reserve(&self, key: &str, now: Instant) -> bool {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        // Expired reservations are swept at most once per TTL/8 (a sweep per call made every
        // reservation O(reservations held), which at 1,000 claims/s is 30,000).
        if inner
            .swept
            .is_none_or(|at| now.duration_since(at) >= RESERVATION_TTL / 8)
        {
            inner
                .held
                .retain(|_, at| now.duration_since(*at) < RESERVATION_TTL);
            inner.swept = Some(now);
        }
        if inner
            .held
            .get(key)
            .is_some_and(|at| now.duration_since(*at) < RESERVATION_TTL)
        {
            return false;
        }
        inner.held.insert(key.to_owned(), now);
        true
    }

    /// True when `namespace/name` is reserved at `now`.
    pub fn is_reserved(&self, namespace: &str, name: &str, now: Instant) -> bool {
        let key = format!("{namespace}/{name}");
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .held
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < RESERVATION_TTL)
    }

    pub fn release(&self, key: &str) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .held
            .remove(key);
    }
}

/// In-memory state of the claim controller.
pub struct ClaimState {
    pub settings: ClaimSettings,
    pub metrics: ClaimMetrics,
    /// Each claim's memory (first seen, own writes, binding, trace progress), shared with the
    /// watch hooks that feed it.
    pub ledger: Arc<ClaimLedger>,
    pub reservations: Reservations,
    /// Sandboxes and claims a claim pass wrote (adoption, cold create, metadata sync, the
    /// annotation stamp), until their watch event arrives: that event does not trigger the
    /// claim again (the pass that wrote acted on the server's answer).
    pub own_writes: OwnWrites,
    /// Claims whose malformed trace-context annotation was already logged.
    pub trace_warned: FirstSeen,
}

impl ClaimState {
    pub fn new(settings: ClaimSettings, metrics: ClaimMetrics, ledger: Arc<ClaimLedger>) -> Self {
        ClaimState {
            settings,
            metrics,
            ledger,
            reservations: Reservations::default(),
            own_writes: OwnWrites::new(),
            trace_warned: FirstSeen::new(TRACE_WARNINGS_KEPT),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let state = Reservations::default();
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
