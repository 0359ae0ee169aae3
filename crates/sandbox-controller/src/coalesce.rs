//! Coalescing of status writes while a Sandbox is on its way to Ready.
//!
//! A new Pod passes through several observable states in a fraction of a second (created,
//! scheduled, running, ready). Writing each one costs a status patch (and a watch event to every
//! Sandbox watcher) that nobody acts on. A status whose only news is such *progress* is held for
//! a short window: if the Pod becomes Ready meanwhile, one write carries everything; otherwise
//! the latest progress is written when the window ends (the reconcile is requeued for it).
//! Ready, errors, suspension, expiry and any loss of readiness are always written at once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api_types::{Sandbox, SandboxStatus};
use kube::runtime::reflector::ObjectRef;

use crate::status::{ready_condition_of, reason};

/// Default window during which progress-only status changes are held back.
pub const DEFAULT_PROGRESS_WINDOW: Duration = Duration::from_secs(1);

/// Whether going from `current` to `desired` is only progress towards Ready: the Sandbox was
/// not Ready (or had no status yet) and still waits for its dependencies, with no error.
pub fn is_progress_only(current: &SandboxStatus, desired: &SandboxStatus) -> bool {
    let waiting = |s: &SandboxStatus| {
        ready_condition_of(s)
            .is_some_and(|c| c.status == "False" && c.reason == reason::DEPENDENCIES_NOT_READY)
    };
    waiting(desired) && (ready_condition_of(current).is_none() || waiting(current))
}

/// Per Sandbox: since when a progress write has been held back.
#[derive(Default)]
pub struct ProgressHolds {
    since: Mutex<HashMap<ObjectRef<Sandbox>, Instant>>,
}

impl ProgressHolds {
    /// For a progress-only change: `Some(wait)` if the write should still be held (reconcile
    /// again after `wait`), `None` once the window has passed (write now).
    pub fn hold(
        &self,
        key: ObjectRef<Sandbox>,
        window: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let first = *since.entry(key).or_insert(now);
        let remaining = window.saturating_sub(now.saturating_duration_since(first));
        (!remaining.is_zero()).then_some(remaining)
    }

    /// Nothing is held for this Sandbox any more (written, or nothing left to write).
    pub fn release(&self, key: &ObjectRef<Sandbox>) {
        self.since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Keeps only the Sandboxes `keep` says are still there.
    pub fn retain(&self, keep: impl Fn(&ObjectRef<Sandbox>) -> bool) {
        self.since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.since.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;

    fn with_ready(status: &str, reason: &str, message: &str) -> SandboxStatus {
        SandboxStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: status.into(),
                reason: reason.into(),
                message: message.into(),
                observed_generation: Some(1),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn only_steps_towards_ready_are_progress() {
        let none = SandboxStatus::default();
        let pending = with_ready(
            "False",
            reason::DEPENDENCIES_NOT_READY,
            "Pod exists with phase: Pending",
        );
        let running = with_ready(
            "False",
            reason::DEPENDENCIES_NOT_READY,
            "Pod is Running but not Ready",
        );
        let ready = with_ready("True", reason::DEPENDENCIES_READY, "Pod is Ready");
        let error = with_ready("False", reason::RECONCILER_ERROR, "Error seen: boom");
        assert!(
            is_progress_only(&none, &pending),
            "first status of a new Sandbox"
        );
        assert!(is_progress_only(&pending, &running));
        assert!(
            !is_progress_only(&running, &ready),
            "Ready is written at once"
        );
        assert!(
            !is_progress_only(&ready, &running),
            "losing Ready is written at once"
        );
        assert!(
            !is_progress_only(&pending, &error),
            "errors are written at once"
        );
        assert!(
            !is_progress_only(&error, &running),
            "recovery from an error is written at once"
        );
    }

    #[test]
    fn a_hold_lasts_one_window_from_the_first_held_change() {
        let holds = ProgressHolds::default();
        let key = ObjectRef::<Sandbox>::new("sb").within("ns");
        let window = Duration::from_secs(1);
        let t0 = Instant::now();
        assert_eq!(holds.hold(key.clone(), window, t0), Some(window));
        assert_eq!(
            holds.hold(key.clone(), window, t0 + Duration::from_millis(400)),
            Some(Duration::from_millis(600)),
            "a later change does not extend the window"
        );
        assert_eq!(holds.hold(key.clone(), window, t0 + window), None);
        holds.release(&key);
        assert!(holds.is_empty());
        assert_eq!(
            holds.hold(key, window, t0 + Duration::from_secs(5)),
            Some(window),
            "a new episode starts a new window"
        );
    }
}
