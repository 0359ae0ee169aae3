//! Warm candidate choice: which pool members a claim may take, in which order.
//!
//! Ready, networked members first, draining the node that holds the most warm members first
//! (node spread), oldest first within a node; then networked members that are not Ready yet.
//! Members without pod IPs are not candidates but are counted, so a young claim can wait
//! briefly for them instead of cold-starting.
//!
//! The order is kept by the Sandbox index's per-pool queues ([`crate::claim::candidate_queue`]), fed
//! from the watch: a pass reads its first few candidates instead of ranking the whole pool
//! (which made every pass O(pool size)). Every name read from a queue is re-checked here
//! against the stored object.

use std::sync::Arc;

use api_types::keys::{SANDBOX_TEMPLATE_REF_HASH_LABEL, SANDBOX_WARM_POOL_LABEL};
use api_types::{Sandbox, name_hash};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::ownership::controlling_pool;
use crate::stores::sandbox_index::SandboxIndex;

/// The pool a claim draws from.
pub struct PoolRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// When known, members must be owned by exactly this pool object (not a deleted namesake).
    pub uid: Option<&'a str>,
}

/// True when `sb` is an adoptable member of `pool`: not being deleted, carrying the pool and
/// template-ref labels, and controlled by that pool.
pub fn is_member(sb: &Sandbox, pool: &PoolRef<'_>) -> bool {
    is_member_labelled(sb, pool, &name_hash(pool.name))
}

/// [`is_member`] with the pool's label value (`name_hash(pool.name)`) computed once by the
/// caller.
fn is_member_labelled(sb: &Sandbox, pool: &PoolRef<'_>, pool_label: &str) -> bool {
    let meta = &sb.metadata;
    if meta.deletion_timestamp.is_some() || meta.namespace.as_deref() != Some(pool.namespace) {
        return false;
    }
    let labels = meta.labels.as_ref();
    let has = |k: &str| labels.is_some_and(|l| l.contains_key(k));
    if labels
        .and_then(|l| l.get(SANDBOX_WARM_POOL_LABEL))
        .map(String::as_str)
        != Some(pool_label)
        || !has(SANDBOX_TEMPLATE_REF_HASH_LABEL)
    {
        return false;
    }
    controlling_pool(meta)
        .is_some_and(|owner| owner.name == pool.name && pool.uid.is_none_or(|uid| owner.uid == uid))
}

fn is_networked(sb: &Sandbox) -> bool {
    sb.status.as_ref().is_some_and(|s| !s.pod_ips.is_empty())
}

/// The pool's best `want` candidates, best first: stored members of `pool` with pod IPs that
/// `skip` does not filter out (reserved by another worker, or stale under a Recreate pool).
pub fn choose(
    store: &Store<Sandbox>,
    index: &SandboxIndex,
    pool: &PoolRef<'_>,
    want: usize,
    skip: &dyn Fn(&Sandbox) -> bool,
) -> Vec<Arc<Sandbox>> {
    let pool_label = name_hash(pool.name);
    index.candidates(pool.namespace, pool.name, pool.uid, want, |name| {
        store
            .get(&ObjectRef::new(name).within(pool.namespace))
            .filter(|sb| is_member_labelled(sb, pool, &pool_label) && is_networked(sb) && !skip(sb))
    })
}

/// Whether a stored member of `pool` that `skip` does not filter out is still waiting for pod
/// IPs (a young claim waits for it rather than cold-starting).
pub fn has_pending_network(
    store: &Store<Sandbox>,
    index: &SandboxIndex,
    pool: &PoolRef<'_>,
    skip: &dyn Fn(&Sandbox) -> bool,
) -> bool {
    let pool_label = name_hash(pool.name);
    index.any_pending_network(pool.namespace, pool.name, pool.uid, |name| {
        store
            .get(&ObjectRef::new(name).within(pool.namespace))
            .is_some_and(|sb| {
                is_member_labelled(&sb, pool, &pool_label) && !is_networked(&sb) && !skip(&sb)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::SandboxStatus;
    use api_types::conditions::{READY, new_condition};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::{reflector, watcher};
    use std::collections::BTreeMap;

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn sb(name: &str, age: i64, ready: bool, ips: bool, node: &str) -> Sandbox {
        let mut s = Sandbox::new(name, Default::default());
        s.metadata.namespace = Some("ns".into());
        s.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(1_800_000_000 - age).unwrap()));
        s.metadata.labels = Some(BTreeMap::from([
            (SANDBOX_WARM_POOL_LABEL.to_owned(), name_hash("pool")),
            (
                SANDBOX_TEMPLATE_REF_HASH_LABEL.to_owned(),
                name_hash("tmpl"),
            ),
        ]));
        s.metadata.owner_references = Some(vec![owner("SandboxWarmPool", "pool", "pool-uid")]);
        s.status = Some(SandboxStatus {
            conditions: vec![new_condition(
                READY,
                if ready { "True" } else { "False" },
                "R",
                "",
                None,
                Time(Timestamp::UNIX_EPOCH),
            )],
            pod_ips: if ips {
                vec!["127.0.0.9".into()]
            } else {
                vec![]
            },
            node_name: node.into(),
            ..SandboxStatus::default()
        });
        s
    }

    fn pool() -> PoolRef<'static> {
        PoolRef {
            namespace: "ns",
            name: "pool",
            uid: Some("pool-uid"),
        }
    }

    /// A cache fed the way the controller's watch driver feeds it: index first, then store.
    struct Cache {
        store: Store<Sandbox>,
        writer: reflector::store::Writer<Sandbox>,
        index: SandboxIndex,
    }

    impl Cache {
        fn of(members: impl IntoIterator<Item = Sandbox>) -> Cache {
            let (store, writer) = reflector::store::<Sandbox>();
            let mut cache = Cache {
                store,
                writer,
                index: SandboxIndex::default(),
            };
            for m in members {
                cache.apply(m);
            }
            cache
        }

        fn apply(&mut self, sb: Sandbox) {
            let event = watcher::Event::Apply(sb);
            self.index.observe(&event);
            self.writer.apply_watcher_event(&event);
        }

        fn order(&self, skip: &dyn Fn(&Sandbox) -> bool) -> Vec<String> {
            choose(&self.store, &self.index, &pool(), 100, skip)
                .iter()
                .filter_map(|s| s.metadata.name.clone())
                .collect()
        }

        fn pending(&self) -> bool {
            has_pending_network(&self.store, &self.index, &pool(), &|_| false)
        }
    }

    #[test]
    fn ready_first_then_oldest() {
        let cache = Cache::of([
            sb("old-unready", 30, false, true, ""),
            sb("middle-ready", 20, true, true, ""),
            sb("young-ready", 10, true, true, ""),
        ]);
        assert_eq!(
            cache.order(&|_| false),
            ["middle-ready", "young-ready", "old-unready"]
        );
    }

    #[test]
    fn drains_the_fullest_node_first() {
        let mut cache = Cache::of([
            sb("old-n2", 30, true, true, "n2"),
            sb("young-n1", 10, true, true, "n1"),
            sb("mid-n1", 20, true, true, "n1"),
        ]);
        assert_eq!(cache.order(&|_| false), ["mid-n1", "young-n1", "old-n2"]);
        // A member leaves n1 (adopted: no longer the pool's); n2's is now the older of equals.
        let mut adopted = sb("mid-n1", 20, true, true, "n1");
        adopted.metadata.owner_references = Some(vec![owner("SandboxClaim", "c", "claim-uid")]);
        cache.apply(adopted);
        assert_eq!(cache.order(&|_| false), ["old-n2", "young-n1"]);
    }

    #[test]
    fn members_without_ips_are_pending_not_candidates() {
        let mut cache = Cache::of([
            sb("rotating", 30, false, false, ""),
            sb("networked", 10, false, true, ""),
        ]);
        assert_eq!(cache.order(&|_| false), ["networked"]);
        assert!(cache.pending());
        cache.apply(sb("rotating", 30, true, true, "n1"));
        assert_eq!(cache.order(&|_| false), ["rotating", "networked"]);
        assert!(!cache.pending());
    }

    #[test]
    fn only_live_members_of_this_pool_are_eligible() {
        let mut deleting = sb("deleting", 1, true, true, "");
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let mut foreign = sb("foreign", 1, true, true, "");
        foreign.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            ..owner("x", "pool", "rs")
        }]);
        let mut claimed = sb("claimed", 1, true, true, "");
        claimed.metadata.owner_references = Some(vec![owner("SandboxClaim", "c", "claim-uid")]);
        let mut unowned = sb("unowned", 1, true, true, "");
        unowned.metadata.owner_references = None;
        let mut namesake = sb("namesake", 1, true, true, "");
        namesake.metadata.owner_references =
            Some(vec![owner("SandboxWarmPool", "pool", "old-pool-uid")]);
        let mut other_ns = sb("other-ns", 1, true, true, "");
        other_ns.metadata.namespace = Some("elsewhere".into());
        let cache = Cache::of([
            deleting,
            foreign,
            claimed,
            unowned,
            namesake,
            other_ns,
            sb("good", 1, true, true, ""),
        ]);
        assert_eq!(cache.order(&|_| false), ["good"]);
        assert!(
            cache
                .order(&|s| s.metadata.name.as_deref() == Some("good"))
                .is_empty()
        );
    }

    #[test]
    fn the_stored_object_decides_when_the_index_runs_ahead() {
        let cache = Cache::of([sb("a", 2, true, true, "n1"), sb("b", 1, true, true, "n1")]);
        // The index has seen `a` lose its IPs; the store has not applied it yet.
        cache
            .index
            .observe(&watcher::Event::Apply(sb("a", 2, false, false, "")));
        assert_eq!(cache.order(&|_| false), ["b"]);
        // And the other way round: the index files `c`, the store does not hold it yet.
        cache
            .index
            .observe(&watcher::Event::Apply(sb("c", 3, true, true, "n1")));
        assert_eq!(cache.order(&|_| false), ["b"]);
    }

    #[test]
    fn returns_at_most_the_wanted_number() {
        let cache = Cache::of((0..20).map(|i| sb(&format!("m{i:02}"), 100 - i, true, true, "n")));
        let first = choose(&cache.store, &cache.index, &pool(), 3, &|_| false);
        let names: Vec<_> = first
            .iter()
            .filter_map(|s| s.metadata.name.as_deref())
            .collect();
        assert_eq!(names, ["m00", "m01", "m02"]);
    }
}
