//! Creates and deletes a pool has issued that its cache does not show yet.
//!
//! The pool decides from an informer cache that lags its own writes. Without bookkeeping, two
//! passes in a row would both see the deficit and both create it (the reference's #1215). Each
//! pool remembers the names it created until the cache shows them (or a timeout passes) and the
//! UIDs it deleted until the cache drops them; the plan counts the first as members and the
//! second as already gone. Unlike a bare counter lowered by watch events, a lost or reordered
//! event cannot leave a pool idle: the state is re-checked against the cache on every pass.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// After this long an unobserved write is assumed lost (the cache relists on watch errors, so
/// this is only a safety net).
pub const IN_FLIGHT_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Default, Clone)]
struct PoolInFlight {
    /// Names returned by create calls, not yet seen in the cache.
    created: HashMap<String, Instant>,
    /// UIDs of members we deleted that the cache still shows.
    deleted: HashMap<String, Instant>,
}

/// Per-pool in-flight writes, keyed by `namespace/name`.
#[derive(Debug, Default)]
pub struct InFlight {
    pools: std::sync::Mutex<HashMap<String, PoolInFlight>>,
}

/// What the cache shows for a pool, used to settle in-flight writes.
pub trait CacheView {
    /// True when an object with this name exists in the pool's namespace (any owner).
    fn has_name(&self, name: &str) -> bool;
    /// True when an object with this UID is still present and not being deleted.
    fn has_live_uid(&self, uid: &str) -> bool;
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Creates the cache has not shown yet: count them as members.
    pub creates: usize,
    /// UIDs deleted by us but still in the cache: treat as terminating.
    pub deleted_uids: Vec<String>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, PoolInFlight>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops what the cache now reflects (or what timed out) and returns what is left.
    pub fn settle(&self, pool: &str, cache: &impl CacheView, now: Instant) -> Pending {
        let mut pools = self.lock();
        let Some(state) = pools.get_mut(pool) else {
            return Pending::default();
        };
        state.created.retain(|name, at| {
            !cache.has_name(name) && now.duration_since(*at) < IN_FLIGHT_TIMEOUT
        });
        state.deleted.retain(|uid, at| {
            cache.has_live_uid(uid) && now.duration_since(*at) < IN_FLIGHT_TIMEOUT
        });
        let pending = Pending {
            creates: state.created.len(),
            deleted_uids: state.deleted.keys().cloned().collect(),
        };
        if state.created.is_empty() && state.deleted.is_empty() {
            pools.remove(pool);
        }
        pending
    }

    pub fn created(&self, pool: &str, name: String, now: Instant) {
        self.lock()
            .entry(pool.to_owned())
            .or_default()
            .created
            .insert(name, now);
    }

    /// Record before sending the DELETE; [`InFlight::delete_failed`] rolls it back.
    pub fn deleting(&self, pool: &str, uid: &str, now: Instant) {
        if uid.is_empty() {
            return;
        }
        self.lock()
            .entry(pool.to_owned())
            .or_default()
            .deleted
            .insert(uid.to_owned(), now);
    }

    pub fn delete_failed(&self, pool: &str, uid: &str) {
        let mut pools = self.lock();
        if let Some(state) = pools.get_mut(pool) {
            state.deleted.remove(uid);
        }
    }

    pub fn forget(&self, pool: &str) {
        self.lock().remove(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[derive(Default)]
    struct Cache {
        names: HashSet<String>,
        uids: HashSet<String>,
    }

    impl CacheView for Cache {
        fn has_name(&self, name: &str) -> bool {
            self.names.contains(name)
        }
        fn has_live_uid(&self, uid: &str) -> bool {
            self.uids.contains(uid)
        }
    }

    #[test]
    fn creates_count_until_the_cache_shows_them() {
        let t = Instant::now();
        let flight = InFlight::default();
        let mut cache = Cache::default();
        assert_eq!(flight.settle("ns/p", &cache, t).creates, 0);
        flight.created("ns/p", "p-a".into(), t);
        flight.created("ns/p", "p-b".into(), t);
        assert_eq!(flight.settle("ns/p", &cache, t).creates, 2);
        cache.names.insert("p-a".into());
        assert_eq!(flight.settle("ns/p", &cache, t).creates, 1);
        assert_eq!(
            flight.settle("ns/other", &cache, t).creates,
            0,
            "pools are separate"
        );
        cache.names.insert("p-b".into());
        assert_eq!(flight.settle("ns/p", &cache, t), Pending::default());
    }

    #[test]
    fn deletes_count_until_the_cache_drops_them_and_failures_roll_back() {
        let t = Instant::now();
        let flight = InFlight::default();
        let mut cache = Cache::default();
        cache.uids.insert("u1".into());
        cache.uids.insert("u2".into());
        flight.deleting("ns/p", "u1", t);
        flight.deleting("ns/p", "u2", t);
        flight.deleting("ns/p", "", t);
        let mut pending = flight.settle("ns/p", &cache, t).deleted_uids;
        pending.sort();
        assert_eq!(pending, ["u1", "u2"]);
        flight.delete_failed("ns/p", "u2");
        cache.uids.remove("u1");
        assert_eq!(flight.settle("ns/p", &cache, t), Pending::default());
    }

    #[test]
    fn lost_writes_expire() {
        let t = Instant::now();
        let flight = InFlight::default();
        flight.created("ns/p", "p-a".into(), t);
        let cache = Cache::default();
        assert_eq!(
            flight
                .settle(
                    "ns/p",
                    &cache,
                    t + IN_FLIGHT_TIMEOUT - Duration::from_secs(1)
                )
                .creates,
            1
        );
        assert_eq!(
            flight.settle("ns/p", &cache, t + IN_FLIGHT_TIMEOUT).creates,
            0
        );
    }

    #[test]
    fn forget_drops_one_pool() {
        let t = Instant::now();
        let flight = InFlight::default();
        flight.created("ns/a", "a-1".into(), t);
        flight.created("ns/b", "b-1".into(), t);
        flight.forget("ns/a");
        let cache = Cache::default();
        assert_eq!(flight.settle("ns/a", &cache, t).creates, 0);
        assert_eq!(flight.settle("ns/b", &cache, t).creates, 1);
    }
}
