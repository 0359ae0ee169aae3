//! Per-pool candidate queues, kept up to date from the Sandbox watch, so a claim pass reads its
//! best few warm candidates in O(k log n) instead of ranking every member of the pool.
//!
//! The order is the warm path's: Ready, networked members first, draining the node that holds
//! the most of them first, oldest first within a node (nodes with equal counts: the one whose
//! oldest member is older first; Ready members without a node last); then networked members
//! that are not Ready yet, oldest first. Members without pod IPs are only counted. A node's
//! count is every Ready, networked member on it, including those a worker has reserved but the
//! cache still shows (a spread heuristic, not a guarantee).
//!
//! A queue only narrows the search: the claim pass re-checks every name it takes from here
//! against the store (see `claim::candidate::choose`).

use std::cmp::Reverse;
use std::collections::{BTreeSet, HashMap};

/// Identifies a pool object: namespace, name and UID (so members of a deleted namesake are not
/// offered to claims of its successor).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// What decides a member's place in its pool's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    pub pool: PoolKey,
    pub ready: bool,
    pub networked: bool,
    /// Node name; empty when not scheduled.
    pub node: String,
    /// Creation time in milliseconds (`i64::MAX` when unknown, so it sorts last).
    pub created: i64,
}

/// `(creation millis, name)`: oldest first, name as the tie-break.
type Aged = (i64, String);

/// One pool's members, ordered for the warm path.
#[derive(Debug, Default)]
pub struct PoolQueue {
    /// Ready, networked members by node.
    ready_by_node: HashMap<String, BTreeSet<Aged>>,
    /// Nodes in draining order: most Ready members first (the unscheduled "node" `""` counts
    /// as 0), then the one whose oldest member is older, then by name.
    node_order: BTreeSet<(Reverse<usize>, i64, String)>,
    /// Networked members that are not Ready.
    unready: BTreeSet<Aged>,
    /// Members without pod IPs.
    pending_network: BTreeSet<String>,
}

impl PoolQueue {
    fn node_key(&self, node: &str) -> Option<(Reverse<usize>, i64, String)> {
        let members = self.ready_by_node.get(node)?;
        let oldest = members.first()?.0;
        let count = if node.is_empty() { 0 } else { members.len() };
        Some((Reverse(count), oldest, node.to_owned()))
    }

    /// Files `name` under `slot` (which must belong to this queue's pool).
    pub fn insert(&mut self, name: &str, slot: &Slot) {
        let aged = (slot.created, name.to_owned());
        match (slot.networked, slot.ready) {
            (false, _) => {
                self.pending_network.insert(name.to_owned());
            }
            (true, false) => {
                self.unready.insert(aged);
            }
            (true, true) => {
                if let Some(key) = self.node_key(&slot.node) {
                    self.node_order.remove(&key);
                }
                self.ready_by_node
                    .entry(slot.node.clone())
                    .or_default()
                    .insert(aged);
                if let Some(key) = self.node_key(&slot.node) {
                    self.node_order.insert(key);
                }
            }
        }
    }

    /// Unfiles `name`, which was filed under `slot`.
    pub fn remove(&mut self, name: &str, slot: &Slot) {
        let aged = (slot.created, name.to_owned());
        match (slot.networked, slot.ready) {
            (false, _) => {
                self.pending_network.remove(name);
            }
            (true, false) => {
                self.unready.remove(&aged);
            }
            (true, true) => {
                if let Some(key) = self.node_key(&slot.node) {
                    self.node_order.remove(&key);
                }
                if let Some(members) = self.ready_by_node.get_mut(&slot.node) {
                    members.remove(&aged);
                    if members.is_empty() {
                        self.ready_by_node.remove(&slot.node);
                    }
                }
                if let Some(key) = self.node_key(&slot.node) {
                    self.node_order.insert(key);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ready_by_node.is_empty() && self.unready.is_empty() && self.pending_network.is_empty()
    }

    /// Networked members in warm-path order, best first.
    pub fn ordered(&self) -> impl Iterator<Item = &str> + '_ {
        self.node_order
            .iter()
            .filter_map(|(_, _, node)| self.ready_by_node.get(node))
            .flat_map(|members| members.iter())
            .chain(self.unready.iter())
            .map(|(_, name)| name.as_str())
    }

    /// Members still waiting for pod IPs.
    pub fn pending_network(&self) -> impl Iterator<Item = &str> + '_ {
        self.pending_network.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(ready: bool, networked: bool, node: &str, created: i64) -> Slot {
        Slot {
            pool: PoolKey {
                namespace: "ns".into(),
                name: "pool".into(),
                uid: "uid".into(),
            },
            ready,
            networked,
            node: node.into(),
            created,
        }
    }

    fn order(q: &PoolQueue) -> Vec<&str> {
        q.ordered().collect()
    }

    #[test]
    fn ready_first_then_oldest() {
        let mut q = PoolQueue::default();
        q.insert("old-unready", &slot(false, true, "", 1));
        q.insert("young-ready", &slot(true, true, "", 3));
        q.insert("middle-ready", &slot(true, true, "", 2));
        assert_eq!(order(&q), ["middle-ready", "young-ready", "old-unready"]);
    }

    #[test]
    fn drains_the_fullest_node_first_and_follows_the_counts() {
        let mut q = PoolQueue::default();
        q.insert("old-n2", &slot(true, true, "n2", 1));
        q.insert("young-n1", &slot(true, true, "n1", 3));
        q.insert("mid-n1", &slot(true, true, "n1", 2));
        q.insert("unscheduled", &slot(true, true, "", 0));
        assert_eq!(order(&q), ["mid-n1", "young-n1", "old-n2", "unscheduled"]);
        // n1 now holds one, like n2, whose member is older.
        q.remove("mid-n1", &slot(true, true, "n1", 2));
        assert_eq!(order(&q), ["old-n2", "young-n1", "unscheduled"]);
    }

    #[test]
    fn a_member_moves_when_it_becomes_ready_and_leaves_when_removed() {
        let mut q = PoolQueue::default();
        q.insert("m", &slot(false, false, "", 1));
        assert!(order(&q).is_empty());
        assert_eq!(q.pending_network().collect::<Vec<_>>(), ["m"]);
        q.remove("m", &slot(false, false, "", 1));
        q.insert("m", &slot(false, true, "n1", 1));
        assert_eq!(order(&q), ["m"]);
        assert_eq!(q.pending_network().count(), 0);
        q.remove("m", &slot(false, true, "n1", 1));
        q.insert("m", &slot(true, true, "n1", 1));
        assert_eq!(order(&q), ["m"]);
        q.remove("m", &slot(true, true, "n1", 1));
        assert!(q.is_empty());
    }
}
