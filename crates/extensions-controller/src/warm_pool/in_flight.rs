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
    /// UIDs of members we deleted that the cache still shows → (name, when).
    deleted: HashMap<String, (String, Instant)>,
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
    /// True when the pool member `name` is still present with this UID and not being deleted.
    fn has_live_member(&self, name: &str, uid: &str) -> bool;
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pending {
    /// Creates the cache has not shown yet: count them as members.
    pub creates: usize,
    /// UIDs deleted by us but still in the cache: treat as terminating.
    pub deleted_uids: Vec<String>,
    /// The names of those members (same order as `deleted_uids`).
    pub deleted_names: Vec<String>,
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
        state.deleted.retain(|uid, (name, at)| {
            cache.has_live_member(name, uid) && now.duration_since(*at) < IN_FLIGHT_TIMEOUT
        });
        let pending = Pending {
            creates: state.created.len(),
            deleted_uids: state.deleted.keys().cloned().collect(),
            deleted_names: state
                .deleted
                .values()
                .map(|(name, _)| name.clone())
                .collect(),
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
    pub fn deleting(&self, pool: &str, name: &str, uid: &str, now: Instant) {
        if uid.is_empty() {
            return;
        }
        self.lock()
            .entry(pool.to_owned())
            .or_default()
            .deleted
            .insert(uid.to_owned(), (name.to_owned(), now));
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
        /// `(name, uid)` of live members.
        members: HashSet<(String, String)>,
    }

    impl CacheView for Cache {
        fn has_name(&self, name: &str) -> bool {
            self.names.contains(name)
        }
        fn has_live_member(&self, name: &str, uid: &str) -> bool {
            self.members.contains(&(name.to_owned(), uid.to_owned()))
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
        cache.members.insert(("m1".into(), "u1".into()));
        cache.members.insert(("m2".into(), "u2".into()));
        flight.deleting("ns/p", "m1", "u1", t);
        flight.deleting("ns/p", "m2", "u2", t);
        flight.deleting("ns/p", "m3", "", t);
        let pending = flight.settle("ns/p", &cache, t);
        let mut deleted: Vec<_> = pending
            .deleted_uids
            .iter()
            .zip(&pending.deleted_names)
            .map(|(uid, name)| (uid.as_str(), name.as_str()))
            .collect();
        deleted.sort();
        assert_eq!(deleted, [("u1", "m1"), ("u2", "m2")]);
        flight.delete_failed("ns/p", "u2");
        cache.members.remove(&("m1".to_owned(), "u1".to_owned()));
        assert_eq!(flight.settle("ns/p", &cache, t), Pending::default());
    }

    #[test]
    fn a_namesake_with_another_uid_is_not_the_deleted_member() {
        let t = Instant::now();
        let flight = InFlight::default();
        let mut cache = Cache::default();
        cache.members.insert(("m1".into(), "u1".into()));
        flight.deleting("ns/p", "m1", "u1", t);
        assert_eq!(flight.settle("ns/p", &cache, t).deleted_uids, ["u1"]);
        cache.members.clear();
        cache.members.insert(("m1".into(), "u1-new".into()));
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
