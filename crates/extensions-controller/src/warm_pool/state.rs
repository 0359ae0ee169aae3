//! The pool controller's settings and in-memory state (rebuilt from the caches after a
//! restart): in-flight writes, refill pacing, held status writes, blueprint hashes.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api_types::{SandboxTemplate, SandboxWarmPoolStatus};

use super::in_flight::InFlight;
use super::refill::{RefillLimiter, ReplenishHold};
use super::status::{DEFAULT_POOL_STATUS_WINDOW, StatusWrite, status_write};

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
