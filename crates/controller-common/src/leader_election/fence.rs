//! Fencing: no write leaves a replica once it cannot be sure it still holds the Lease.
//!
//! A leader that is paused (SIGSTOP, a stalled VM, a long GC-like hiccup of the node) keeps its
//! in-memory belief that it leads. When it resumes, the standby may have taken the Lease long
//! ago, and every write the old leader makes before it notices races the new leader's (issue 21
//! item 3: cold Sandboxes created for claims the new leader had already bound). The renewal
//! loop notices a loss only when it runs again, which after a pause is not before the writes
//! that were waiting.
//!
//! A [`Fence`] holds the instant, on the monotonic clock, until which this replica may write:
//! the start of its last successful acquire or renewal plus the renew deadline. A standby's
//! Lease cannot be taken over before the leader's last renewal plus the lease duration as the
//! standby measures it from when it saw that renewal, which is later than the renewal's start
//! and at least `lease duration - renew deadline` (5 s with the defaults) after the fence
//! closes. The client's fence layer ([`crate::client::FenceLayer`]) checks the fence right
//! before every mutating request goes out, after the rate limiter, so no write path can forget
//! it, and the runtime stops the controllers the moment it closes ([`Fence::closed`]).
//!
//! What it cannot close: a request that passed the check and is stopped before its bytes reach
//! the socket (a window of microseconds), and a request already sent (the server handles it
//! before the takeover could happen, since it was sent within the renew deadline).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Until when writes may leave this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// No leader election: always.
    Open,
    /// Leading: until this instant.
    Until(Instant),
    /// Not leading (before the first acquire, after a loss or a release).
    Closed,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changed: Notify,
}

/// Whether this replica may write now. Cheap to clone; clones share the state.
#[derive(Debug, Clone)]
pub struct Fence {
    inner: Arc<Inner>,
}

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fenced {
    #[error("write refused: this replica does not hold the leader lease")]
    NotLeading,
    #[error(
        "write refused: the leader lease was not renewed within the renew deadline ({overdue_ms} ms ago); it may be held by another replica"
    )]
    DeadlinePassed { overdue_ms: u128 },
}

impl Fence {
    fn with(state: State) -> Fence {
        Fence {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                changed: Notify::new(),
            }),
        }
    }

    /// A fence that never refuses (no leader election: the replica always writes).
    pub fn open() -> Fence {
        Fence::with(State::Open)
    }

    /// A fence that refuses every write until [`Fence::extend`] (a candidate before it leads).
    pub fn closed_until_leading() -> Fence {
        Fence::with(State::Closed)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allows writes until `until` (a successful acquire or renewal). Never shortens the time
    /// already granted, and does nothing to an open fence.
    pub fn extend(&self, until: Instant) {
        let mut state = self.lock();
        match *state {
            State::Open => return,
            State::Until(current) if current >= until => return,
            State::Until(_) | State::Closed => *state = State::Until(until),
        }
        drop(state);
        self.inner.changed.notify_waiters();
    }

    /// Refuses every write from now on (leadership lost or released). Does nothing to an open
    /// fence (no Lease to lose).
    pub fn close(&self) {
        let mut state = self.lock();
        if matches!(*state, State::Closed | State::Open) {
            return;
        }
        *state = State::Closed;
        drop(state);
        self.inner.changed.notify_waiters();
    }

    /// `Ok` when a write may leave now.
    pub fn check(&self) -> Result<(), Fenced> {
        match *self.lock() {
            State::Open => Ok(()),
            State::Closed => Err(Fenced::NotLeading),
            State::Until(until) => {
                let now = Instant::now();
                if now < until {
                    Ok(())
                } else {
                    Err(Fenced::DeadlinePassed {
                        overdue_ms: now.duration_since(until).as_millis(),
                    })
                }
            }
        }
    }

    /// Until when writes are allowed (`None` for an open or closed fence).
    pub fn valid_until(&self) -> Option<Instant> {
        match *self.lock() {
            State::Until(until) => Some(until),
            State::Open | State::Closed => None,
        }
    }

    /// Resolves once writes are refused after having been allowed: the deadline passed without
    /// an extension, or [`Fence::close`]. Never resolves for an open fence.
    pub async fn closed(&self) {
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            // Registered before reading the state, so a change in between is not missed.
            changed.as_mut().enable();
            let state = *self.lock();
            match state {
                State::Closed => return,
                State::Open => {}
                State::Until(until) => {
                    if Instant::now() >= until {
                        return;
                    }
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => continue,
                        () = &mut changed => continue,
                    }
                }
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn writes_are_allowed_until_the_deadline_and_refused_after() {
        let fence = Fence::closed_until_leading();
        assert_eq!(fence.check(), Err(Fenced::NotLeading));
        let t0 = Instant::now();
        fence.extend(t0 + Duration::from_secs(10));
        assert_eq!(fence.check(), Ok(()));
        fence.extend(t0 + Duration::from_secs(5));
        assert_eq!(
            fence.valid_until(),
            Some(t0 + Duration::from_secs(10)),
            "an older renewal does not shorten it"
        );
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(fence.check(), Err(Fenced::DeadlinePassed { overdue_ms: 0 }));
        fence.extend(Instant::now() + Duration::from_secs(10));
        assert_eq!(fence.check(), Ok(()));
        fence.close();
        assert_eq!(fence.check(), Err(Fenced::NotLeading));
    }

    #[tokio::test(start_paused = true)]
    async fn closed_resolves_at_the_deadline_unless_extended_and_at_a_close() {
        let fence = Fence::closed_until_leading();
        let t0 = Instant::now();
        fence.extend(t0 + Duration::from_secs(10));
        let watcher = fence.clone();
        let closed_at = tokio::spawn(async move {
            watcher.closed().await;
            Instant::now()
        });
        tokio::time::sleep(Duration::from_secs(8)).await;
        fence.extend(t0 + Duration::from_secs(20));
        assert_eq!(closed_at.await.unwrap(), t0 + Duration::from_secs(20));

        fence.extend(Instant::now() + Duration::from_secs(10));
        let watcher = fence.clone();
        let closed = tokio::spawn(async move { watcher.closed().await });
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!closed.is_finished());
        fence.close();
        closed.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_fence_never_refuses_nor_closes() {
        let fence = Fence::open();
        fence.extend(Instant::now());
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(fence.check(), Ok(()));
        fence.close();
        assert_eq!(fence.check(), Ok(()), "no Lease to lose");
        let watcher = fence.clone();
        let closed = tokio::spawn(async move { watcher.closed().await });
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!closed.is_finished());
    }
}
