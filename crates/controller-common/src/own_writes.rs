//! The watch events of a controller's own writes, recognised so that they do not trigger a pass.
//!
//! A pass that creates or patches an object reads the server's answer, and acts on it in the
//! same pass: the Pod it created, the Sandbox it adopted. When the watch then delivers that very
//! version, a pass triggered by it would find nothing new, and under load it waits behind every
//! other key for nothing. [`OwnWrites`] remembers the versions a pass wrote (object uid and the
//! resourceVersion the server answered with) and tells a trigger stream which events are their
//! echo.
//!
//! Only the echo itself is dropped: a change by anyone else, before or after the write, comes
//! with another resourceVersion and triggers as usual (the watch delivers every version in
//! order, so nothing that happened in between is hidden). The store is updated by the reflector
//! before triggers are taken, so the cache sees every event either way. A recorded write whose
//! echo never comes (the watch relisted past it, the object was deleted) is forgotten after
//! [`OwnWrites::prune`]'s age. An echo the watch delivers before the write's response has been
//! read is not recognised and triggers a pass as before (harmless, one pass more).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Versions written per object kept at most (a pass writes one object once or twice).
const PER_OBJECT: usize = 4;

/// How long a write's watch event is waited for before [`OwnWrites::prune`] forgets it (it was
/// lost to a relist, or the object is gone): the age controllers prune with.
pub const ECHO_WAIT: Duration = Duration::from_secs(60);

/// Versions of objects this process wrote whose watch event has not arrived yet.
#[derive(Debug, Default)]
pub struct OwnWrites {
    written: Mutex<HashMap<String, Vec<(String, Instant)>>>,
}

impl OwnWrites {
    pub fn new() -> Self {
        Self::default()
    }

    /// Remembers the version a write produced (`meta` of the server's response). Responses
    /// without uid or resourceVersion are ignored.
    pub fn record(&self, meta: &ObjectMeta) {
        let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref()) else {
            return;
        };
        let mut written = self.lock();
        let versions = written.entry(uid.to_owned()).or_default();
        if versions.len() == PER_OBJECT {
            versions.remove(0);
        }
        versions.push((rv.to_owned(), Instant::now()));
    }

    /// Whether `meta` is a version this process wrote; it is forgotten on the way (an event is
    /// its own write's echo once).
    pub fn is_echo(&self, meta: &ObjectMeta) -> bool {
        let (Some(uid), Some(rv)) = (meta.uid.as_deref(), meta.resource_version.as_deref()) else {
            return false;
        };
        let mut written = self.lock();
        let Some(versions) = written.get_mut(uid) else {
            return false;
        };
        let Some(at) = versions.iter().position(|(v, _)| v == rv) else {
            return false;
        };
        versions.remove(at);
        if versions.is_empty() {
            written.remove(uid);
        }
        true
    }

    /// Forgets writes recorded more than `max_age` ago (their echo is not coming).
    pub fn prune(&self, max_age: Duration) {
        let now = Instant::now();
        self.lock().retain(|_, versions| {
            versions.retain(|(_, at)| now.saturating_duration_since(*at) < max_age);
            !versions.is_empty()
        });
    }

    /// Objects with a write whose echo is still expected.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<(String, Instant)>>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(uid: &str, rv: &str) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        }
    }

    #[test]
    fn the_written_version_is_an_echo_once_and_other_versions_never() {
        let own = OwnWrites::new();
        own.record(&meta("a", "7"));
        assert!(
            !own.is_echo(&meta("a", "6")),
            "the version before our write"
        );
        assert!(!own.is_echo(&meta("b", "7")), "another object");
        assert!(own.is_echo(&meta("a", "7")));
        assert!(!own.is_echo(&meta("a", "7")), "an echo is consumed");
        assert!(
            !own.is_echo(&meta("a", "8")),
            "a later change by someone else"
        );
        assert!(own.is_empty());
    }

    #[test]
    fn two_writes_of_one_object_each_have_their_echo() {
        let own = OwnWrites::new();
        own.record(&meta("a", "7"));
        own.record(&meta("a", "9"));
        assert!(own.is_echo(&meta("a", "7")));
        assert!(!own.is_echo(&meta("a", "8")));
        assert!(own.is_echo(&meta("a", "9")));
        assert!(own.is_empty());
    }

    #[test]
    fn responses_without_uid_or_version_are_not_remembered() {
        let own = OwnWrites::new();
        own.record(&ObjectMeta {
            uid: Some("a".into()),
            ..Default::default()
        });
        own.record(&ObjectMeta {
            resource_version: Some("1".into()),
            ..Default::default()
        });
        assert!(own.is_empty());
        assert!(!own.is_echo(&ObjectMeta::default()));
    }

    #[test]
    fn writes_whose_echo_never_came_are_pruned_by_age() {
        let own = OwnWrites::new();
        own.record(&meta("a", "7"));
        own.prune(Duration::from_secs(60));
        assert_eq!(own.len(), 1, "a fresh write is kept");
        own.prune(Duration::ZERO);
        assert!(own.is_empty());
        assert!(!own.is_echo(&meta("a", "7")));
    }

    #[test]
    fn only_the_latest_versions_of_an_object_are_kept() {
        let own = OwnWrites::new();
        for rv in 1..=(PER_OBJECT + 1) {
            own.record(&meta("a", &rv.to_string()));
        }
        assert!(!own.is_echo(&meta("a", "1")), "the oldest was dropped");
        assert!(own.is_echo(&meta("a", &(PER_OBJECT + 1).to_string())));
    }
}
