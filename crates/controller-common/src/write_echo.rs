//! Whether a cached copy of an object already holds a write this process made, with
//! `resourceVersion` compared for equality only.
//!
//! A controller that writes an object and is reconciled again before its watch delivers that
//! write must work from what it wrote, not from the older cached copy (or it repeats the write,
//! or sends one doomed to a 409). Comparing resourceVersions as numbers tells "older" from
//! "newer", but the API promises only that equal versions are the same state: on another API
//! server, or a future one, the numbers mean nothing. The watch itself gives the order: it
//! delivers every version of an object in sequence. So an [`Echo`] remembers the version a
//! write produced, learns from the watch when that version reached the cache
//! ([`Echo::delivered`]) and which versions came after it, and says of any copy (a pass's
//! snapshot, taken when the pass started, possibly before the delivery) whether it already
//! holds the write ([`Echo::held_by`]): it does if it is that version or one delivered after
//! it. A copy whose version it does not know is older.
//!
//! An echo can reach the cache before the write's response is read (a controller on several
//! threads): [`Echo::answered`] takes the versions the watch delivered while the write was in
//! flight, so a write whose echo already passed is known to be delivered.

use std::time::{Duration, Instant};

/// Versions delivered after the written one that are remembered; a copy older than that many
/// later changes is taken for older than the write (its pass then works from the write, which
/// is what it would have done before the echo anyway).
const LATER_KEPT: usize = 16;

/// One write's version and what the watch has delivered since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Echo {
    rv: String,
    at: Instant,
    delivered: bool,
    later: Vec<String>,
}

impl Echo {
    /// The write that produced `rv`, answered at `at`.
    pub fn new(rv: String, at: Instant) -> Echo {
        Echo {
            rv,
            at,
            delivered: false,
            later: Vec::new(),
        }
    }

    /// The write that produced `rv`, answered at `at`, given the versions the watch delivered
    /// (in order) while the write was in flight: if `rv` is among them, the echo has passed and
    /// the versions after it are later ones.
    pub fn answered(rv: String, at: Instant, delivered_in_flight: &[String]) -> Echo {
        let mut echo = Echo::new(rv, at);
        if let Some(i) = delivered_in_flight.iter().position(|v| *v == echo.rv) {
            echo.delivered = true;
            echo.later = delivered_in_flight[i + 1..]
                .iter()
                .take(LATER_KEPT)
                .cloned()
                .collect();
        }
        echo
    }

    /// The version the write produced.
    pub fn version(&self) -> &str {
        &self.rv
    }

    /// The watch applied version `rv` of the object to the cache.
    pub fn delivered(&mut self, rv: &str) {
        if rv == self.rv {
            self.delivered = true;
        } else if self.delivered && self.later.len() < LATER_KEPT {
            self.later.push(rv.to_owned());
        }
    }

    /// Whether the cache has applied the write.
    pub fn is_delivered(&self) -> bool {
        self.delivered
    }

    /// Whether a copy of the object at version `rv` holds the write: it is that version, or
    /// one the watch delivered after it.
    pub fn held_by(&self, rv: Option<&str>) -> bool {
        rv.is_some_and(|rv| rv == self.rv || self.later.iter().any(|v| v == rv))
    }

    /// Whether the write was answered `max_age` or longer before `now` (its echo is not coming:
    /// the watch relisted past it, or the object is gone).
    pub fn is_older_than(&self, max_age: Duration, now: Instant) -> bool {
        now.saturating_duration_since(self.at) >= max_age
    }

    /// Whether the write was answered before `instant`.
    pub fn answered_before(&self, instant: Instant) -> bool {
        self.at < instant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_holds_the_write_once_at_or_after_its_version() {
        let t = Instant::now();
        let mut echo = Echo::new("x".into(), t);
        // Versions are strings compared for equality: "a" is neither before nor after "x".
        assert!(
            !echo.held_by(Some("a")),
            "a snapshot from before the delivery"
        );
        assert!(!echo.held_by(None));
        assert!(echo.held_by(Some("x")));
        echo.delivered("a");
        assert!(!echo.is_delivered(), "an older version reached the cache");
        echo.delivered("x");
        echo.delivered("y");
        assert!(echo.is_delivered());
        assert!(echo.held_by(Some("y")), "delivered after ours");
        assert!(
            !echo.held_by(Some("a")),
            "a pass that started before the delivery"
        );
    }

    #[test]
    fn an_echo_delivered_while_the_write_was_in_flight_counts() {
        let t = Instant::now();
        let echo = Echo::answered("x".into(), t, &["w".into(), "x".into(), "y".into()]);
        assert!(echo.is_delivered());
        assert!(echo.held_by(Some("y")));
        assert!(!echo.held_by(Some("w")));
        let not_yet = Echo::answered("x".into(), t, &["w".into()]);
        assert!(!not_yet.is_delivered());
    }

    #[test]
    fn age() {
        let t = Instant::now();
        let echo = Echo::new("x".into(), t);
        assert!(!echo.is_older_than(Duration::from_secs(1), t));
        assert!(echo.is_older_than(Duration::from_secs(1), t + Duration::from_secs(1)));
        assert!(echo.answered_before(t + Duration::from_millis(1)));
    }
}
