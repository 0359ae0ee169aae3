//! Kubernetes Events (`events.k8s.io/v1`), published the way kube's
//! `kube::runtime::events::Recorder` publishes them, at a cost that does not grow with the
//! number of Events published.
//!
//! What an API user sees is the same as with kube's recorder: the first occurrence of an Event
//! (same type, action, reason, reporter and regarding/related object) creates an Event named
//! `<object name>.<nanoseconds, hex>`; a repeat within six minutes of the last occurrence
//! patches that Event with a `series` (count 2, 3, ... and the last observed time).
//!
//! What differs is the bookkeeping: kube's recorder sweeps its whole cache of recent Events on
//! every publish, so under a burst of claims (one Event per cold claim) each publish walked
//! thousands of entries. Here an expired entry is never matched (it is checked on lookup) and
//! the sweep runs at most once per [`SWEEP_EVERY`]. Responses are decoded without managedFields
//! ([`crate::lean`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};

use crate::lean::Lean;

/// How long after its last occurrence an Event is continued as a series (kube's value).
pub const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// How often expired entries are dropped from the cache.
pub const SWEEP_EVERY: SignedDuration = SignedDuration::from_secs(30);

/// Publishes Events as one reporter. Cheap to clone (the cache is shared).
#[derive(Clone)]
pub struct EventRecorder {
    client: Client,
    reporter: Reporter,
    cache: Arc<Mutex<RecentEvents>>,
}

impl EventRecorder {
    pub fn new(client: Client, reporter: Reporter) -> Self {
        EventRecorder {
            client,
            reporter,
            cache: Arc::default(),
        }
    }

    /// Publishes `event` about `regarding`: creates it, or continues its series when the same
    /// Event was published less than [`SERIES_WINDOW`] ago.
    pub async fn publish(
        &self,
        event: &Event,
        regarding: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = EventKey::new(event, &self.reporter, regarding);
        let to_send = self
            .lock()
            .next(&key, now)
            .unwrap_or_else(|| new_event(event, &self.reporter, regarding, now));
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api = Api::<Lean<K8sEvent>>::namespaced(self.client.clone(), namespace);
        if to_send.series.is_some() {
            let name = to_send.metadata.name.clone().unwrap_or_default();
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&to_send))
                .await?;
        } else {
            api.create(&PostParams::default(), &Lean(to_send.clone()))
                .await?;
        }
        self.lock().record(key, to_send);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecentEvents> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What makes two publishes the same Event (kube's key: the whole regarding and related
/// references, the reporter, type, action and reason).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct EventKey {
    type_: EventType,
    action: String,
    reason: String,
    controller: String,
    instance: Option<String>,
    regarding: ReferenceKey,
    related: Option<ReferenceKey>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ReferenceKey {
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    field_path: Option<String>,
}

impl ReferenceKey {
    fn of(r: &ObjectReference) -> Self {
        ReferenceKey {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            resource_version: r.resource_version.clone(),
            field_path: r.field_path.clone(),
        }
    }
}

impl EventKey {
    fn new(event: &Event, reporter: &Reporter, regarding: &ObjectReference) -> Self {
        EventKey {
            type_: event.type_,
            action: event.action.clone(),
            reason: event.reason.clone(),
            controller: reporter.controller.clone(),
            instance: reporter.instance.clone(),
            regarding: ReferenceKey::of(regarding),
            related: event.secondary.as_ref().map(ReferenceKey::of),
        }
    }
}

/// The first occurrence of `event`, as an `events.k8s.io/v1` Event.
fn new_event(
    event: &Event,
    reporter: &Reporter,
    regarding: &ObjectReference,
    now: Timestamp,
) -> K8sEvent {
    let object_name = regarding.name.as_deref().unwrap_or(&reporter.controller);
    K8sEvent {
        metadata: ObjectMeta {
            name: Some(format!("{object_name}.{:x}", now.as_nanosecond())),
            namespace: regarding.namespace.clone(),
            ..ObjectMeta::default()
        },
        action: Some(event.action.clone()),
        reason: Some(event.reason.clone()),
        note: event.note.clone(),
        type_: Some(
            match event.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .to_owned(),
        ),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding.clone()),
        related: event.secondary.clone(),
        reporting_controller: Some(reporter.controller.clone()),
        reporting_instance: Some(
            reporter
                .instance
                .clone()
                .unwrap_or_else(|| reporter.controller.clone()),
        ),
        series: None,
        deprecated_count: None,
        deprecated_first_timestamp: None,
        deprecated_last_timestamp: None,
        deprecated_source: None,
    }
}

/// Recently published Events, by key.
#[derive(Default)]
struct RecentEvents {
    events: HashMap<EventKey, K8sEvent>,
    swept: Option<Timestamp>,
}

/// When `event` last occurred.
fn last_seen(event: &K8sEvent) -> Option<Timestamp> {
    match &event.series {
        Some(series) => Some(series.last_observed_time.0),
        None => event.event_time.as_ref().map(|t| t.0),
    }
}

fn within_window(event: &K8sEvent, now: Timestamp) -> bool {
    // An Event without a time never expires in kube's recorder either.
    last_seen(event).is_none_or(|at| now.duration_since(at) < SERIES_WINDOW)
}

impl RecentEvents {
    /// The next occurrence of `key` when it continues a series, `None` when it is new.
    fn next(&mut self, key: &EventKey, now: Timestamp) -> Option<K8sEvent> {
        if self
            .swept
            .is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY)
        {
            self.events.retain(|_, event| within_window(event, now));
            self.swept = Some(now);
        }
        let last = self.events.get(key).filter(|e| within_window(e, now))?;
        let count = last.series.as_ref().map_or(2, |s| s.count + 1);
        let mut next = last.clone();
        next.series = Some(EventSeries {
            count,
            last_observed_time: MicroTime(now),
        });
        Some(next)
    }

    fn record(&mut self, key: EventKey, event: K8sEvent) {
        self.events.insert(key, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(name: &str, resource_version: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("extensions.agents.x-k8s.io/v1beta1".into()),
            kind: Some("SandboxClaim".into()),
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some(resource_version.into()),
            field_path: None,
        }
    }

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: Some("a note".into()),
            action: "Provisioning".into(),
            secondary: None,
        }
    }

    fn reporter() -> Reporter {
        Reporter {
            controller: "sandboxclaim-controller".into(),
            instance: None,
        }
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).expect("in range")
    }

    /// One publish against the cache, without the API: what would be sent.
    fn publish(
        cache: &mut RecentEvents,
        ev: &Event,
        r: &ObjectReference,
        now: Timestamp,
    ) -> K8sEvent {
        let key = EventKey::new(ev, &reporter(), r);
        let sent = cache
            .next(&key, now)
            .unwrap_or_else(|| new_event(ev, &reporter(), r, now));
        cache.record(key, sent.clone());
        sent
    }

    #[test]
    fn a_first_event_is_created_whole() {
        let mut cache = RecentEvents::default();
        let sent = publish(
            &mut cache,
            &event("SandboxProvisioned"),
            &reference("c", "1"),
            at(0),
        );
        assert_eq!(
            sent.metadata.name,
            Some(format!("c.{:x}", at(0).as_nanosecond()))
        );
        assert_eq!(sent.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(sent.type_.as_deref(), Some("Normal"));
        assert_eq!(sent.reason.as_deref(), Some("SandboxProvisioned"));
        assert_eq!(sent.action.as_deref(), Some("Provisioning"));
        assert_eq!(sent.note.as_deref(), Some("a note"));
        assert_eq!(
            sent.reporting_controller.as_deref(),
            Some("sandboxclaim-controller")
        );
        assert_eq!(
            sent.reporting_instance.as_deref(),
            Some("sandboxclaim-controller"),
            "the controller's name stands in for a missing instance"
        );
        assert_eq!(sent.regarding, Some(reference("c", "1")));
        assert_eq!(sent.series, None);
    }

    #[test]
    fn repeats_within_six_minutes_continue_a_series_and_later_ones_start_anew() {
        let mut cache = RecentEvents::default();
        let (ev, r) = (event("ClaimExpired"), reference("c", "1"));
        let first = publish(&mut cache, &ev, &r, at(0));
        let second = publish(&mut cache, &ev, &r, at(60));
        assert_eq!(
            second.metadata.name, first.metadata.name,
            "the same Event, patched"
        );
        assert_eq!(second.series.as_ref().map(|s| s.count), Some(2));
        assert_eq!(
            second.series.as_ref().map(|s| s.last_observed_time.0),
            Some(at(60))
        );
        // The window runs from the last occurrence, not the first.
        let third = publish(&mut cache, &ev, &r, at(60 + 359));
        assert_eq!(third.series.as_ref().map(|s| s.count), Some(3));
        let fourth = publish(&mut cache, &ev, &r, at(60 + 359 + 360));
        assert_eq!(fourth.series, None, "six minutes of silence: a new Event");
        assert_ne!(fourth.metadata.name, first.metadata.name);
    }

    #[test]
    fn different_reasons_objects_or_versions_are_different_events() {
        let mut cache = RecentEvents::default();
        publish(&mut cache, &event("A"), &reference("c", "1"), at(0));
        assert_eq!(
            publish(&mut cache, &event("B"), &reference("c", "1"), at(1)).series,
            None
        );
        assert_eq!(
            publish(&mut cache, &event("A"), &reference("d", "1"), at(2)).series,
            None
        );
        assert_eq!(
            publish(&mut cache, &event("A"), &reference("c", "2"), at(3)).series,
            None
        );
        assert!(
            publish(&mut cache, &event("A"), &reference("c", "1"), at(4))
                .series
                .is_some()
        );
    }

    #[test]
    fn expired_entries_are_swept_now_and_then_not_on_every_publish() {
        let mut cache = RecentEvents::default();
        for i in 0..100 {
            publish(
                &mut cache,
                &event("A"),
                &reference(&format!("c{i}"), "1"),
                at(0),
            );
        }
        // Past the window: the next publish sweeps them all (its own entry stays).
        publish(&mut cache, &event("A"), &reference("late", "1"), at(400));
        assert_eq!(cache.events.len(), 1);
        // Right after a sweep, publishes do not sweep again: entries accumulate until the next.
        for i in 0..10 {
            publish(
                &mut cache,
                &event("A"),
                &reference(&format!("d{i}"), "1"),
                at(401),
            );
        }
        assert_eq!(cache.events.len(), 11);
    }
}
