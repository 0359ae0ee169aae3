//! Refill shaping per pool: the token bucket behind `--sandbox-warm-pool-max-refill-rate`
//! (creates per second) and the hold behind `--sandbox-warm-pool-replenish-delay`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets, one per pool; capacity `max(1, rate)`, a new bucket starts full.
#[derive(Debug)]
pub struct RefillLimiter {
    rate: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RefillLimiter {
    pub fn new(rate: f64) -> Self {
        RefillLimiter {
            rate: if rate.is_finite() && rate > 0.0 {
                rate
            } else {
                0.0
            },
            buckets: Mutex::default(),
        }
    }

    fn capacity(&self) -> f64 {
        self.rate.max(1.0)
    }

    /// Grants up to `want` creates now; when short, also how long until the next token.
    /// Rate 0 grants everything and keeps no state.
    pub fn take(&self, pool: &str, want: u32, now: Instant) -> (u32, Option<Duration>) {
        if self.rate == 0.0 || want == 0 {
            return (want, None);
        }
        let capacity = self.capacity();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = buckets.entry(pool.to_owned()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(capacity);
        bucket.at = now;
        let granted = bucket.tokens.floor().min(f64::from(want)).max(0.0);
        bucket.tokens -= granted;
        // `granted` is an integer in [0, want], so the cast is exact.
        let granted = granted as u32;
        let wait = (granted < want)
            .then(|| Duration::from_secs_f64(((1.0 - bucket.tokens) / self.rate).max(0.0)));
        (granted, wait)
    }

    /// Returns unused tokens (capped at capacity).
    pub fn refund(&self, pool: &str, tokens: u32) {
        if self.rate == 0.0 {
            return;
        }
        let capacity = self.capacity();
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = buckets.get_mut(pool) {
            bucket.tokens = (bucket.tokens + f64::from(tokens)).min(capacity);
        }
    }

    pub fn forget(&self, pool: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pool);
    }
}

#[derive(Debug, Clone, Copy)]
struct HoldState {
    last_members: usize,
    defer_until: Option<Instant>,
}

/// The replenish-delay hold: after the member count drops, wait `delay` before refilling.
/// Unlike the reference the hold is not re-armed by every further drop once armed, so a pool
/// under sustained claims still refills once per `delay` instead of draining to zero.
#[derive(Debug)]
pub struct ReplenishHold {
    delay: Duration,
    state: Mutex<HashMap<String, HoldState>>,
}

impl ReplenishHold {
    pub fn new(delay: Duration) -> Self {
        ReplenishHold {
            delay,
            state: Mutex::default(),
        }
    }

    /// Observes the member count; returns how long creation must still wait (zero = none).
    pub fn observe(&self, pool: &str, members: usize, desired: usize, now: Instant) -> Duration {
        if self.delay.is_zero() {
            return Duration::ZERO;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = state.get_mut(pool) else {
            state.insert(
                pool.to_owned(),
                HoldState {
                    last_members: members,
                    defer_until: None,
                },
            );
            return Duration::ZERO;
        };
        let dropped = members < entry.last_members;
        entry.last_members = members;
        if members >= desired {
            entry.defer_until = None;
            return Duration::ZERO;
        }
        if dropped && entry.defer_until.is_none_or(|until| until <= now) {
            entry.defer_until = Some(now + self.delay);
        }
        entry
            .defer_until
            .map(|until| until.saturating_duration_since(now))
            .unwrap_or(Duration::ZERO)
    }

    /// Successful creates raise the baseline, so a cache that does not show them yet does not
    /// read as a drop.
    pub fn note_creates(&self, pool: &str, created: usize) {
        if let Some(entry) = self
            .state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(pool)
        {
            entry.last_members += created;
        }
    }

    pub fn forget(&self, pool: &str) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_rate_grants_everything() {
        let limiter = RefillLimiter::new(0.0);
        assert_eq!(limiter.take("p", 300, Instant::now()), (300, None));
    }

    #[test]
    fn rate_paces_creates() {
        let t = Instant::now();
        let limiter = RefillLimiter::new(2.0);
        assert_eq!(
            limiter.take("p", 5, t),
            (2, Some(Duration::from_millis(500)))
        );
        assert_eq!(
            limiter.take("p", 3, t),
            (0, Some(Duration::from_millis(500)))
        );
        assert_eq!(limiter.take("p", 3, t + Duration::from_millis(500)).0, 1);
        assert_eq!(
            limiter.take("p", 9, t + Duration::from_secs(3600)).0,
            2,
            "capped at capacity"
        );
        limiter.refund("p", 10);
        assert_eq!(
            limiter.take("p", 9, t + Duration::from_secs(3600)).0,
            2,
            "refund capped"
        );
        limiter.forget("p");
        assert_eq!(
            limiter.take("p", 9, t).0,
            2,
            "a forgotten bucket starts full"
        );
    }

    #[test]
    fn slow_rates_still_grant_one_and_huge_rates_do_not_overflow() {
        let t = Instant::now();
        let slow = RefillLimiter::new(0.5);
        assert_eq!(slow.take("p", 4, t), (1, Some(Duration::from_secs(2))));
        let huge = RefillLimiter::new(1e18);
        assert_eq!(huge.take("p", 300, t), (300, None));
        assert_eq!(huge.take("p", 250, t), (250, None));
    }

    #[test]
    fn hold_defers_after_a_drop_and_clears_when_full() {
        let t = Instant::now();
        let hold = ReplenishHold::new(Duration::from_secs(5));
        assert_eq!(
            hold.observe("p", 3, 3, t),
            Duration::ZERO,
            "first observation"
        );
        assert_eq!(hold.observe("p", 1, 3, t), Duration::from_secs(5));
        assert_eq!(
            hold.observe("p", 1, 3, t + Duration::from_secs(2)),
            Duration::from_secs(3)
        );
        assert_eq!(
            hold.observe("p", 1, 3, t + Duration::from_secs(6)),
            Duration::ZERO
        );
        hold.note_creates("p", 2);
        assert_eq!(
            hold.observe("p", 3, 3, t + Duration::from_secs(7)),
            Duration::ZERO
        );
        assert_eq!(
            ReplenishHold::new(Duration::ZERO).observe("p", 0, 3, t),
            Duration::ZERO
        );
    }
}
