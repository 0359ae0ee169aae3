//! The claim controller's memory of each claim, in one place: when the watch first delivered
//! it, what this process last wrote to it and whether the cache shows that yet, the Sandbox it
//! bound it to, whether its first Ready was reported, and its trace bookkeeping.
//!
//! **resourceVersion is opaque.** The API promises only that equal versions are the same
//! state, not an order, so whether a pass's copy of the claim (taken when the pass started) is
//! behind one of our writes is told by the watch: the write's
//! [`controller_common::write_echo::Echo`] learns when the cache applied that version and
//! which came after it ([`ClaimLedger::claim_delivered`], called after the store applied the
//! event), and a copy holds the write only if it is that version or a later one. Versions the
//! watch delivered while a write was in flight are handed to its echo when the response is read
//! (the controller runs on several threads). A relist delivers the current state of every claim
//! without replaying the versions in between, so it settles every write answered before it
//! began ([`ClaimLedger::relisted`]); a write whose echo never comes otherwise is given up after
//! [`ECHO_WAIT`], and a 409 on a status write guarded by our copy drops the copy at once
//! ([`ClaimLedger::stale`]).
//!
//! A binding (the Sandbox a claim was given) is settled once the Sandbox watch delivers an
//! event of that Sandbox naming the claim as its controller, or its deletion
//! ([`ClaimLedger::sandbox_delivered`]); until then a pass that does not find the Sandbox in
//! the cache knows the cache lags, instead of taking the Sandbox for lost.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use api_types::keys::CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION;
use api_types::{Sandbox, SandboxClaim};
use controller_common::own_writes::ECHO_WAIT;
use controller_common::write_echo::Echo;
use k8s_openapi::jiff::Timestamp;

use crate::ownership::controller_of;

/// Versions delivered during one write's flight that are remembered (a claim changes a few
/// times at most while one of our writes is on the wire).
const SEEN_WHILE_IN_FLIGHT: usize = 8;

/// What a pass knows about the Sandbox this process bound a claim to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub sandbox: String,
    /// The cache has shown the write (or it was long enough ago that it never will).
    pub settled: bool,
}

/// Per-claim trace bookkeeping until `claim-to-bound` is emitted (see [`super::trace`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub passes: u32,
    pub adoption_conflicts: u32,
    pub bound_at: Option<SystemTime>,
}

#[derive(Debug, Default)]
struct Entry {
    /// When the claim watch first delivered the claim to this process.
    first_seen: Option<Timestamp>,
    /// The claim as the response to our last write showed it, with that write's echo.
    latest: Option<(Echo, Arc<SandboxClaim>)>,
    /// Writes sent whose response has not been read.
    in_flight: u32,
    /// Versions the cache applied while a write was in flight, in order.
    seen: Vec<String>,
    binding: Option<(String, Instant, bool)>,
    ready_recorded: bool,
    progress: Progress,
}

impl Entry {
    fn is_empty(&self) -> bool {
        self.first_seen.is_none()
            && self.latest.is_none()
            && self.in_flight == 0
            && self.binding.is_none()
            && !self.ready_recorded
            && self.progress == Progress::default()
    }
}

/// The claim controller's per-claim memory, keyed by claim UID; cheap to share.
#[derive(Debug, Default)]
pub struct ClaimLedger {
    entries: Mutex<HashMap<String, Entry>>,
    /// When the running relist of the claim watch began.
    relisting: Mutex<Option<Instant>>,
}

fn uid_of(claim: &SandboxClaim) -> Option<&str> {
    claim.metadata.uid.as_deref().filter(|u| !u.is_empty())
}

impl ClaimLedger {
    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Entry) -> T) -> T {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        f(entries.entry(uid.to_owned()).or_default())
    }

    fn with_existing<T>(&self, uid: &str, f: impl FnOnce(&mut Entry) -> T) -> Option<T> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        entries.get_mut(uid).map(f)
    }

    // --- fed by the claim watch ---------------------------------------------------------------

    /// The watch delivered `claim` (before the store applies it): the first time, remember when
    /// (`controller-first-observed-at`), unless the claim already carries that annotation or is
    /// being deleted.
    pub fn arrived(&self, claim: &SandboxClaim, now: Timestamp) {
        let Some(uid) = uid_of(claim) else { return };
        let stamped = claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION));
        if stamped || claim.metadata.deletion_timestamp.is_some() {
            return;
        }
        self.with(uid, |e| {
            e.first_seen.get_or_insert(now);
        });
    }

    /// The store applied `claim` at its version: our last write's echo learns it.
    pub fn claim_delivered(&self, claim: &SandboxClaim) {
        let (Some(uid), Some(rv)) = (uid_of(claim), claim.metadata.resource_version.as_deref())
        else {
            return;
        };
        self.with_existing(uid, |e| {
            if let Some((echo, _)) = &mut e.latest {
                echo.delivered(rv);
            }
            if e.in_flight > 0 && e.seen.len() < SEEN_WHILE_IN_FLIGHT {
                e.seen.push(rv.to_owned());
            }
        });
    }

    /// The claim watch started a relist.
    pub fn relist_started(&self, now: Instant) {
        *self.relisting.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
    }

    /// The claim watch finished a relist: every write answered before it began is in the
    /// listed state (its own event will not come).
    pub fn relisted(&self) {
        let Some(began) = self
            .relisting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        for e in entries.values_mut() {
            if e.latest
                .as_ref()
                .is_some_and(|(echo, _)| echo.answered_before(began))
            {
                e.latest = None;
            }
        }
    }

    // --- fed by the Sandbox watch -------------------------------------------------------------

    /// The store applied an event of `sandbox` (a change or its deletion): a binding of its
    /// controlling claim to it is settled.
    pub fn sandbox_delivered(&self, sandbox: &Sandbox) {
        let Some(controller) = controller_of(&sandbox.metadata) else {
            return;
        };
        let Some(name) = sandbox.metadata.name.as_deref() else {
            return;
        };
        self.with_existing(&controller.uid, |e| {
            if let Some((bound, _, settled)) = &mut e.binding
                && bound == name
            {
                *settled = true;
            }
        });
    }

    // --- what a pass reads --------------------------------------------------------------------

    /// When the watch first delivered the claim, if this process remembers.
    pub fn first_seen(&self, uid: &str) -> Option<Timestamp> {
        self.with_existing(uid, |e| e.first_seen).flatten()
    }

    /// The claim a pass works from: `cached` (the pass's copy), or the response to our last
    /// write when that copy does not hold it yet.
    pub fn view(&self, cached: &Arc<SandboxClaim>, now: Instant) -> Arc<SandboxClaim> {
        let Some(uid) = uid_of(cached) else {
            return cached.clone();
        };
        let cached_rv = cached.metadata.resource_version.as_deref();
        self.with_existing(uid, |e| match &e.latest {
            Some((echo, latest))
                if !echo.held_by(cached_rv) && !echo.is_older_than(ECHO_WAIT, now) =>
            {
                latest.clone()
            }
            // The copy holds the write (it came from the cache, so the cache does too, and the
            // claim's next pass starts from a copy at least as new), or the echo is not coming.
            _ => {
                e.latest = None;
                cached.clone()
            }
        })
        .unwrap_or_else(|| cached.clone())
    }

    /// The Sandbox this process bound the claim to, if any.
    pub fn binding(&self, uid: &str, now: Instant) -> Option<Bound> {
        self.with_existing(uid, |e| {
            e.binding.as_ref().map(|(sandbox, at, settled)| Bound {
                sandbox: sandbox.clone(),
                settled: *settled || now.saturating_duration_since(*at) >= ECHO_WAIT,
            })
        })
        .flatten()
    }

    /// Whether this process already reported the claim's first Ready.
    pub fn ready_recorded(&self, uid: &str) -> bool {
        self.with_existing(uid, |e| e.ready_recorded)
            .unwrap_or(false)
    }

    // --- what apply records -------------------------------------------------------------------

    /// A write to the claim is about to be sent.
    pub fn sending(&self, uid: &str) {
        self.with(uid, |e| e.in_flight += 1);
    }

    /// The write [`ClaimLedger::sending`] announced was answered: with the stored claim, or
    /// `None` when it failed.
    pub fn sent(&self, uid: &str, stored: Option<Arc<SandboxClaim>>, now: Instant) {
        self.with(uid, |e| {
            e.in_flight = e.in_flight.saturating_sub(1);
            if let Some(stored) = stored
                && let Some(rv) = stored.metadata.resource_version.clone()
            {
                e.latest = Some((Echo::answered(rv, now, &e.seen), stored));
            }
            if e.in_flight == 0 {
                e.seen.clear();
            }
        });
    }

    /// A write guarded by the version a pass worked from was refused (409): that version is
    /// old, so our copy is no help; the next pass works from the cache.
    pub fn stale(&self, uid: &str) {
        self.with_existing(uid, |e| e.latest = None);
    }

    /// The claim was given `sandbox` now.
    pub fn bind(&self, uid: &str, sandbox: &str, now: Instant) {
        self.with(uid, |e| {
            e.binding = Some((sandbox.to_owned(), now, false));
            e.progress.bound_at.get_or_insert_with(SystemTime::now);
        });
    }

    /// Marks the claim's first Ready as reported; false if it already was.
    pub fn mark_ready_recorded(&self, uid: &str) -> bool {
        self.with(uid, |e| !std::mem::replace(&mut e.ready_recorded, true))
    }

    /// The first-observed time is written on the claim: no need to remember it.
    pub fn first_seen_stamped(&self, uid: &str) {
        self.with_existing(uid, |e| e.first_seen = None);
    }

    /// Counts one pass of an unbound claim.
    pub fn count_pass(&self, uid: &str) {
        self.with(uid, |e| {
            e.progress.passes = e.progress.passes.saturating_add(1)
        });
    }

    /// Counts one lost adoption race (conflict or vanished candidate).
    pub fn count_adoption_conflict(&self, uid: &str) {
        self.with(uid, |e| {
            e.progress.adoption_conflicts = e.progress.adoption_conflicts.saturating_add(1);
        });
    }

    /// The trace bookkeeping of the claim, handed to `claim-to-bound` once (then reset).
    pub fn take_progress(&self, uid: &str) -> Option<Progress> {
        self.with_existing(uid, |e| std::mem::take(&mut e.progress))
            .filter(|p| *p != Progress::default())
    }

    // --- housekeeping -------------------------------------------------------------------------

    /// Forgets a claim (it is being deleted).
    pub fn forget(&self, uid: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// Claims with memory.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops the memory of claims that no longer exist (their deletion is not always seen: a
    /// claim without finalizers can vanish between two watch events) and entries with nothing
    /// left in them.
    pub fn prune(&self, live: impl Fn(&str) -> bool) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid, e| live(uid) && !e.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::{SandboxClaimSpec, WarmPoolRef};
    use std::time::Duration;

    fn claim(rv: &str) -> Arc<SandboxClaim> {
        let mut c = SandboxClaim::new(
            "c",
            SandboxClaimSpec {
                warm_pool_ref: WarmPoolRef { name: "p".into() },
                ..Default::default()
            },
        );
        c.metadata.namespace = Some("ns".into());
        c.metadata.uid = Some("u".into());
        c.metadata.resource_version = Some(rv.into());
        Arc::new(c)
    }

    fn rv(c: &SandboxClaim) -> &str {
        c.metadata.resource_version.as_deref().unwrap()
    }

    #[test]
    fn a_pass_works_from_our_write_until_its_copy_holds_it() {
        let ledger = ClaimLedger::default();
        let t = Instant::now();
        let cached = claim("a");
        ledger.sending("u");
        ledger.sent("u", Some(claim("x")), t);
        // Versions are compared for equality only: "x" is not "after" "a", it is ours.
        assert_eq!(rv(&ledger.view(&cached, t)), "x");
        // The watch delivers someone else's version, then ours, then another: a pass whose copy
        // was taken before our version arrived still works from our write.
        ledger.claim_delivered(&claim("b"));
        ledger.claim_delivered(&claim("x"));
        ledger.claim_delivered(&claim("y"));
        assert_eq!(rv(&ledger.view(&claim("b"), t)), "x");
        // A copy at a version delivered after ours holds it: the cache wins, our copy is done.
        assert_eq!(rv(&ledger.view(&claim("y"), t)), "y");
        assert_eq!(rv(&ledger.view(&claim("b"), t)), "b");
    }

    #[test]
    fn an_echo_applied_before_the_response_is_read_is_known() {
        let ledger = ClaimLedger::default();
        let t = Instant::now();
        ledger.sending("u");
        ledger.claim_delivered(&claim("x"));
        ledger.claim_delivered(&claim("y"));
        ledger.sent("u", Some(claim("x")), t);
        assert_eq!(
            rv(&ledger.view(&claim("y"), t)),
            "y",
            "the cache is past our write"
        );
    }

    #[test]
    fn a_conflict_a_relist_or_the_echo_wait_gives_our_copy_up() {
        let t = Instant::now();
        let ledger = ClaimLedger::default();
        ledger.sending("u");
        ledger.sent("u", Some(claim("x")), t);
        ledger.stale("u");
        assert_eq!(rv(&ledger.view(&claim("a"), t)), "a", "409");

        ledger.sending("u");
        ledger.sent("u", Some(claim("x")), t);
        ledger.relist_started(t + Duration::from_millis(1));
        ledger.relisted();
        assert_eq!(rv(&ledger.view(&claim("z"), t)), "z", "relist");

        ledger.sending("u");
        ledger.sent("u", Some(claim("x")), t);
        assert_eq!(
            rv(&ledger.view(&claim("a"), t + ECHO_WAIT)),
            "a",
            "given up"
        );
    }

    #[test]
    fn first_seen_is_the_first_delivery_of_an_unstamped_claim() {
        let ledger = ClaimLedger::default();
        let (t1, t2) = (
            Timestamp::from_second(1).unwrap(),
            Timestamp::from_second(2).unwrap(),
        );
        ledger.arrived(&claim("a"), t1);
        ledger.arrived(&claim("b"), t2);
        assert_eq!(ledger.first_seen("u"), Some(t1));
        ledger.first_seen_stamped("u");
        assert_eq!(ledger.first_seen("u"), None);
        let mut stamped = (*claim("c")).clone();
        stamped.metadata.uid = Some("v".into());
        stamped.metadata.annotations = Some(
            [(
                CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION.to_owned(),
                "t".to_owned(),
            )]
            .into(),
        );
        ledger.arrived(&stamped, t1);
        assert_eq!(ledger.first_seen("v"), None, "already on the claim");
    }

    #[test]
    fn a_binding_settles_when_the_sandbox_watch_shows_it() {
        let ledger = ClaimLedger::default();
        let t = Instant::now();
        ledger.bind("u", "sb", t);
        assert_eq!(
            ledger.binding("u", t),
            Some(Bound {
                sandbox: "sb".into(),
                settled: false
            })
        );
        let mut sb = Sandbox::new("sb", Default::default());
        sb.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
                kind: "SandboxClaim".into(),
                name: "c".into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        ]);
        ledger.sandbox_delivered(&sb);
        assert!(ledger.binding("u", t).unwrap().settled);
        let other = ClaimLedger::default();
        other.bind("u", "sb", t);
        assert!(other.binding("u", t + ECHO_WAIT).unwrap().settled, "by age");
    }

    #[test]
    fn ready_is_recorded_once_and_progress_handed_over_once() {
        let ledger = ClaimLedger::default();
        ledger.count_pass("u");
        ledger.count_adoption_conflict("u");
        assert!(ledger.mark_ready_recorded("u"));
        assert!(!ledger.mark_ready_recorded("u"));
        let p = ledger.take_progress("u").unwrap();
        assert_eq!((p.passes, p.adoption_conflicts), (1, 1));
        assert_eq!(ledger.take_progress("u"), None);
        ledger.prune(|_| false);
        assert!(ledger.is_empty());
    }
}
