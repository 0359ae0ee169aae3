//! Coalescing of pool status writes. A claim taking a member, the replacement being created and
//! the replacement turning Ready each move `replicas`/`readyReplicas`, usually within a second
//! and usually back to where they were. Writing every move costs a status patch (and a watch
//! event to every pool watcher) nobody acts on, so a count-only change is held for a short
//! window; what the pool shows when the window ends is written (or nothing, if it is back to
//! what is stored). Spec-driven changes are written at once.

use std::time::{Duration, Instant};

use api_types::SandboxWarmPoolStatus;

/// Default of `PoolSettings::status_window`.
pub const DEFAULT_POOL_STATUS_WINDOW: Duration = Duration::from_secs(1);

/// What a pool reconcile does with the status it computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusWrite {
    /// The stored status already says this: no write (and nothing is held any more).
    Nothing,
    /// Write it now.
    Now,
    /// Hold it: only the counts moved, and more moves are likely (claims take members, the
    /// replacements turn Ready). Reconcile again after this long; a status back to what is
    /// stored by then costs no write at all.
    Hold(Duration),
}

/// Decides the status write of one pass: a new `observedGeneration` or `selector` is written at
/// once; a change of the counts alone waits until `window` has passed since it was first held
/// (`held_since`, `None`: not held yet, the hold starts `now`), so the status is at most
/// `window` behind and exact once the pool is quiet.
pub fn status_write(
    stored: &SandboxWarmPoolStatus,
    desired: &SandboxWarmPoolStatus,
    held_since: Option<Instant>,
    window: Duration,
    now: Instant,
) -> StatusWrite {
    if stored == desired {
        return StatusWrite::Nothing;
    }
    if stored.observed_generation != desired.observed_generation
        || stored.selector != desired.selector
    {
        return StatusWrite::Now;
    }
    let since = held_since.unwrap_or(now);
    match window.saturating_sub(now.saturating_duration_since(since)) {
        left if left.is_zero() => StatusWrite::Now,
        left => StatusWrite::Hold(left),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(replicas: i32, ready: i32, generation: i64) -> SandboxWarmPoolStatus {
        SandboxWarmPoolStatus {
            replicas,
            ready_replicas: ready,
            selector: "agents.x-k8s.io/warm-pool-sandbox=abc".into(),
            observed_generation: generation,
        }
    }

    const WINDOW: Duration = Duration::from_secs(1);

    #[test]
    fn spec_changes_are_written_at_once_counts_are_held() {
        let now = Instant::now();
        let stored = status(3, 3, 1);
        assert_eq!(
            status_write(&stored, &status(3, 3, 1), None, WINDOW, now),
            StatusWrite::Nothing
        );
        assert_eq!(
            status_write(&stored, &status(5, 3, 2), None, WINDOW, now),
            StatusWrite::Now,
            "a new generation"
        );
        let mut reselected = status(3, 3, 1);
        reselected.selector = "other".into();
        assert_eq!(
            status_write(&stored, &reselected, Some(now), WINDOW, now),
            StatusWrite::Now,
            "a new selector, even while counts are held"
        );
        assert_eq!(
            status_write(
                &SandboxWarmPoolStatus::default(),
                &status(0, 0, 1),
                None,
                WINDOW,
                now
            ),
            StatusWrite::Now,
            "a pool's first status"
        );
        assert_eq!(
            status_write(&stored, &status(2, 2, 1), None, WINDOW, now),
            StatusWrite::Hold(WINDOW)
        );
        assert_eq!(
            status_write(&stored, &status(2, 2, 1), None, Duration::ZERO, now),
            StatusWrite::Now,
            "a zero window writes every change"
        );
    }

    #[test]
    fn a_hold_ends_one_window_after_it_began_however_often_counts_move() {
        let start = Instant::now();
        let stored = status(3, 3, 1);
        let at = |ms| start + Duration::from_millis(ms);
        // Passes keep coming (each claim and refill triggers one): the hold is not extended.
        assert_eq!(
            status_write(&stored, &status(2, 2, 1), Some(start), WINDOW, at(400)),
            StatusWrite::Hold(Duration::from_millis(600))
        );
        assert_eq!(
            status_write(&stored, &status(3, 2, 1), Some(start), WINDOW, at(999)),
            StatusWrite::Hold(Duration::from_millis(1))
        );
        assert_eq!(
            status_write(&stored, &status(3, 2, 1), Some(start), WINDOW, at(1000)),
            StatusWrite::Now
        );
        // Back where it was before the window ended: nothing to write.
        assert_eq!(
            status_write(&stored, &status(3, 3, 1), Some(start), WINDOW, at(500)),
            StatusWrite::Nothing
        );
    }
}
