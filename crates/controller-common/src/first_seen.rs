//! A bounded "have we seen this key before" set, for warnings logged once per object and
//! process (a malformed annotation, say) without letting the bookkeeping grow without bound.

use std::collections::HashSet;
use std::sync::Mutex;

/// Keys seen so far; forgets all of them once `capacity` is reached, so a key may be reported
/// again after that many others.
#[derive(Debug)]
pub struct FirstSeen {
    seen: Mutex<Option<HashSet<String>>>,
    capacity: usize,
}

impl FirstSeen {
    /// An empty set (usable in a `static`).
    pub const fn new(capacity: usize) -> Self {
        FirstSeen {
            seen: Mutex::new(None),
            capacity,
        }
    }

    /// Whether `key` is seen for the first time (and remembers it).
    pub fn first(&self, key: &str) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let seen = seen.get_or_insert_default();
        if seen.contains(key) {
            return false;
        }
        if seen.len() >= self.capacity {
            seen.clear();
        }
        seen.insert(key.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_first_once_until_the_set_is_full() {
        let seen = FirstSeen::new(2);
        assert!(seen.first("a"));
        assert!(!seen.first("a"));
        assert!(seen.first("b"));
        // Full: the set starts over, and old keys count as new again.
        assert!(seen.first("c"));
        assert!(seen.first("a"));
        assert!(!seen.first("c"));
    }
}
