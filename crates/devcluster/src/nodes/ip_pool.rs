//! Pod IP allocation from loopback space (`127.2.0.1` upward), unique among live pods.
//!
//! Simulated pod IPs are only strings in status; nothing connects to them. They stay inside
//! `127.0.0.0/8` by design (never a private or public range), above the node addresses
//! (`127.0.x.y`).

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

const FIRST: u32 = u32::from_be_bytes([127, 2, 0, 1]);
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);

/// Hands out pod IPs; remembers which pod holds which.
#[derive(Debug)]
pub struct IpPool {
    next: u32,
    in_use: HashSet<u32>,
    by_pod: HashMap<String, u32>,
}

impl Default for IpPool {
    fn default() -> Self {
        Self {
            next: FIRST,
            in_use: HashSet::new(),
            by_pod: HashMap::new(),
        }
    }
}

impl IpPool {
    /// Records an address a pod already has (after a restart, or written by someone else).
    /// Addresses outside the pool's range are ignored.
    pub fn observe(&mut self, pod_uid: &str, ip: &str) {
        if let Ok(addr) = ip.parse::<Ipv4Addr>() {
            let n = u32::from(addr);
            if (FIRST..=LAST).contains(&n) {
                self.in_use.insert(n);
                self.by_pod.insert(pod_uid.to_string(), n);
            }
        }
    }

    /// The pod's address: the one it holds, or the next free one.
    pub fn allocate(&mut self, pod_uid: &str) -> Option<Ipv4Addr> {
        if let Some(n) = self.by_pod.get(pod_uid) {
            return Some(Ipv4Addr::from(*n));
        }
        let span = LAST - FIRST + 1;
        for _ in 0..span {
            let candidate = self.next;
            self.next = if self.next >= LAST {
                FIRST
            } else {
                self.next + 1
            };
            if self.in_use.insert(candidate) {
                self.by_pod.insert(pod_uid.to_string(), candidate);
                return Some(Ipv4Addr::from(candidate));
            }
        }
        None
    }

    /// Frees the pod's address (the pod is gone).
    pub fn release(&mut self, pod_uid: &str) {
        if let Some(n) = self.by_pod.remove(pod_uid) {
            self.in_use.remove(&n);
        }
    }

    /// Keeps only the addresses of pods for which `keep(uid)` holds.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        let in_use = &mut self.in_use;
        self.by_pod.retain(|uid, n| {
            let kept = keep(uid);
            if !kept {
                in_use.remove(n);
            }
            kept
        });
    }

    /// Addresses held.
    pub fn len(&self) -> usize {
        self.in_use.len()
    }

    pub fn is_empty(&self) -> bool {
        self.in_use.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_unique_loopback_and_stable_per_pod() {
        let mut pool = IpPool::default();
        let a = pool.allocate("a").unwrap();
        let b = pool.allocate("b").unwrap();
        assert_eq!(a, Ipv4Addr::new(127, 2, 0, 1));
        assert_eq!(b, Ipv4Addr::new(127, 2, 0, 2));
        assert_eq!(pool.allocate("a").unwrap(), a, "same pod, same address");
        let many: HashSet<_> = (0..70_000)
            .map(|i| pool.allocate(&format!("p{i}")).unwrap())
            .collect();
        assert_eq!(many.len(), 70_000);
        assert!(
            many.iter()
                .all(|ip| ip.is_loopback() && ip.octets()[1] >= 2)
        );
    }

    #[test]
    fn observed_addresses_are_not_handed_out_again() {
        let mut pool = IpPool::default();
        pool.observe("old", "127.2.0.1");
        pool.observe("foreign", "10.0.0.5");
        assert_eq!(pool.allocate("new").unwrap(), Ipv4Addr::new(127, 2, 0, 2));
        assert_eq!(pool.allocate("old").unwrap(), Ipv4Addr::new(127, 2, 0, 1));
        assert_eq!(pool.len(), 2);
    }

    #[test]
    fn released_addresses_come_back_after_a_wrap() {
        let mut pool = IpPool {
            next: LAST,
            ..IpPool::default()
        };
        assert_eq!(u32::from(pool.allocate("x").unwrap()), LAST);
        pool.observe("y", "127.2.0.1");
        assert_eq!(
            pool.allocate("z").unwrap(),
            Ipv4Addr::new(127, 2, 0, 2),
            "wraps, skipping used"
        );
        pool.release("y");
        pool.release("z");
        assert_eq!(pool.len(), 1);
        assert!(!pool.is_empty());
        pool.retain(|uid| uid != "x");
        assert!(pool.is_empty());
        assert_eq!(pool.allocate("w").unwrap(), Ipv4Addr::new(127, 2, 0, 3));
    }
}
