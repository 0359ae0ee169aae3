//! Warm candidate choice: which pool members a claim may take, in which order.
//!
//! Ready, networked members first, draining the node that holds the most warm members first
//! (node spread), oldest first within a node; then networked members that are not Ready yet.
//! Members without pod IPs are not candidates but are counted, so a young claim can wait
//! briefly for them instead of cold-starting.

use std::collections::HashMap;
use std::sync::Arc;

use api_types::conditions::{READY, is_true};
use api_types::keys::{SANDBOX_TEMPLATE_REF_HASH_LABEL, SANDBOX_WARM_POOL_LABEL};
use api_types::{Sandbox, name_hash};

use crate::ownership::controlling_pool;

/// The pool a claim draws from.
pub struct PoolRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// When known, members must be owned by exactly this pool object (not a deleted namesake).
    pub uid: Option<&'a str>,
}

#[derive(Debug, Default)]
pub struct Ranking {
    /// Candidates to try, best first.
    pub ordered: Vec<Arc<Sandbox>>,
    /// Eligible members still waiting for pod IPs.
    pub pending_network: usize,
}

/// True when `sb` is an adoptable member of `pool`: not being deleted, carrying the pool and
/// template-ref labels, and controlled by that pool.
pub fn is_member(sb: &Sandbox, pool: &PoolRef<'_>) -> bool {
    is_member_labelled(sb, pool, &name_hash(pool.name))
}

/// [`is_member`] with the pool's label value (`name_hash(pool.name)`) computed once by the
/// caller: ranking checks every member of the pool on every pass.
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

fn is_ready(sb: &Sandbox) -> bool {
    sb.status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, READY))
}

fn is_networked(sb: &Sandbox) -> bool {
    sb.status.as_ref().is_some_and(|s| !s.pod_ips.is_empty())
}

fn node(sb: &Sandbox) -> &str {
    sb.status
        .as_ref()
        .map(|s| s.node_name.as_str())
        .unwrap_or("")
}

fn created_millis(sb: &Sandbox) -> i64 {
    sb.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or(i64::MAX)
}

/// Ranks the eligible members among `sandboxes`. `skip` filters members this worker must not
/// try (reserved by another worker, or stale under a Recreate pool).
pub fn rank(
    sandboxes: &[Arc<Sandbox>],
    pool: &PoolRef<'_>,
    skip: &dyn Fn(&Sandbox) -> bool,
) -> Ranking {
    let mut ranking = Ranking::default();
    let pool_label = name_hash(pool.name);
    let mut eligible: Vec<&Arc<Sandbox>> = Vec::new();
    for sb in sandboxes {
        if !is_member_labelled(sb, pool, &pool_label) || skip(sb) {
            continue;
        }
        if is_networked(sb) {
            eligible.push(sb);
        } else {
            ranking.pending_network += 1;
        }
    }
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for sb in &eligible {
        if !node(sb).is_empty() && is_ready(sb) {
            *per_node.entry(node(sb)).or_default() += 1;
        }
    }
    // Keys borrow from the members: no clone per member per pass.
    let mut keyed: Vec<_> = eligible
        .into_iter()
        .map(|sb| {
            let count = per_node.get(node(sb)).copied().unwrap_or(0);
            (
                (
                    !is_ready(sb),
                    std::cmp::Reverse(count),
                    created_millis(sb),
                    sb.metadata.name.as_deref().unwrap_or_default(),
                ),
                sb,
            )
        })
        .collect();
    keyed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    ranking.ordered = keyed.into_iter().map(|(_, sb)| sb.clone()).collect();
    ranking
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::SandboxStatus;
    use api_types::conditions::new_condition;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
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

    fn sb(name: &str, age: i64, ready: bool, ips: bool, node: &str) -> Arc<Sandbox> {
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
        Arc::new(s)
    }

    fn pool() -> PoolRef<'static> {
        PoolRef {
            namespace: "ns",
            name: "pool",
            uid: Some("pool-uid"),
        }
    }

    fn order(r: &Ranking) -> Vec<&str> {
        r.ordered
            .iter()
            .map(|s| s.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn ready_first_then_oldest() {
        let r = rank(
            &[
                sb("old-unready", 30, false, true, ""),
                sb("middle-ready", 20, true, true, ""),
                sb("young-ready", 10, true, true, ""),
            ],
            &pool(),
            &|_| false,
        );
        assert_eq!(order(&r), ["middle-ready", "young-ready", "old-unready"]);
    }

    #[test]
    fn drains_the_fullest_node_first() {
        let r = rank(
            &[
                sb("old-n2", 30, true, true, "n2"),
                sb("young-n1", 10, true, true, "n1"),
                sb("mid-n1", 20, true, true, "n1"),
            ],
            &pool(),
            &|_| false,
        );
        assert_eq!(order(&r), ["mid-n1", "young-n1", "old-n2"]);
    }

    #[test]
    fn members_without_ips_are_pending_not_candidates() {
        let r = rank(
            &[
                sb("rotating", 30, false, false, ""),
                sb("networked", 10, false, true, ""),
            ],
            &pool(),
            &|_| false,
        );
        assert_eq!(order(&r), ["networked"]);
        assert_eq!(r.pending_network, 1);
    }

    #[test]
    fn only_live_members_of_this_pool_are_eligible() {
        let mut deleting = (*sb("deleting", 1, true, true, "")).clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let mut foreign = (*sb("foreign", 1, true, true, "")).clone();
        foreign.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            ..owner("x", "pool", "rs")
        }]);
        let mut claimed = (*sb("claimed", 1, true, true, "")).clone();
        claimed.metadata.owner_references = Some(vec![owner("SandboxClaim", "c", "claim-uid")]);
        let mut unowned = (*sb("unowned", 1, true, true, "")).clone();
        unowned.metadata.owner_references = None;
        let mut namesake = (*sb("namesake", 1, true, true, "")).clone();
        namesake.metadata.owner_references =
            Some(vec![owner("SandboxWarmPool", "pool", "old-pool-uid")]);
        let mut other_ns = (*sb("other-ns", 1, true, true, "")).clone();
        other_ns.metadata.namespace = Some("elsewhere".into());
        let all: Vec<_> = [deleting, foreign, claimed, unowned, namesake, other_ns]
            .into_iter()
            .map(Arc::new)
            .chain([sb("good", 1, true, true, "")])
            .collect();
        let r = rank(&all, &pool(), &|_| false);
        assert_eq!(order(&r), ["good"]);
        let skipped = rank(&all, &pool(), &|s| {
            s.metadata.name.as_deref() == Some("good")
        });
        assert!(skipped.ordered.is_empty());
    }
}
