//! The cached Pods by controlling owner UID and by tracking label value, so a reconcile finds
//! the Pods a Sandbox controls, and the Pods its Service would select, without scanning the
//! whole Pod store (10,000 Pods × 10,000 Sandboxes on a full resync).
//!
//! The index is fed the same watch events as the Pod store, right after the reflector applied
//! them (`.reflect(writer).inspect(..)`), and mirrors the store's (re)list handling: a relist's
//! `InitApply` objects are collected aside and replace the index at `InitDone`, so an object
//! that vanished while the watch was down leaves the index together with the store.
//!
//! The index only narrows the search: [`owned_pods`] reads each candidate from the store and
//! checks namespace, tracking label and ownership on what the store holds.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, RwLock};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::cached_pod::CachedPod;
use crate::keys::NAME_HASH_LABEL;
use crate::ownership::Ownership;

/// Where a Pod lives.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl PodKey {
    fn of(pod: &CachedPod) -> Option<Self> {
        Some(PodKey {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone()?,
        })
    }

    fn object_ref(&self) -> ObjectRef<CachedPod> {
        ObjectRef::new(&self.name).within(&self.namespace)
    }
}

/// UIDs are kept as a 64-bit hash (a collision only adds a candidate, which the ownership check
/// on the stored Pod then rejects).
type UidHash = u64;

fn uid_hash(uid: &str) -> UidHash {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
}

/// Pod keys grouped by a 64-bit hash of one of their values, with the value each key was last
/// grouped under (so a change moves the key).
#[derive(Debug, Default)]
struct Grouped {
    by_value: HashMap<u64, Vec<Arc<PodKey>>>,
    value_of: HashMap<Arc<PodKey>, u64>,
}

impl Grouped {
    fn remove(&mut self, key: &PodKey) {
        let Some(old) = self.value_of.remove(key) else {
            return;
        };
        if let Some(keys) = self.by_value.get_mut(&old) {
            keys.retain(|k| **k != *key);
            if keys.is_empty() {
                self.by_value.remove(&old);
            }
        }
    }

    /// Groups `key` under `value` (`None`: in no group).
    fn set(&mut self, key: &Arc<PodKey>, value: Option<u64>) {
        if value.is_some() && self.value_of.get(&**key).copied() == value {
            return;
        }
        self.remove(key);
        if let Some(value) = value {
            self.by_value.entry(value).or_default().push(key.clone());
            self.value_of.insert(key.clone(), value);
        }
    }

    fn get(&self, value: u64) -> Vec<PodKey> {
        let mut keys: Vec<PodKey> = self
            .by_value
            .get(&value)
            .map(|keys| keys.iter().map(|k| PodKey::clone(k)).collect())
            .unwrap_or_default();
        keys.sort();
        keys
    }
}

/// Each Pod's key is held once, shared by all maps (a second copy of every namespace and name
/// cost about 64 bytes per Pod, over half a megabyte at 10,000 Pods).
#[derive(Debug, Default)]
struct Index {
    /// By controlling owner UID.
    owners: Grouped,
    /// By namespace and tracking label value: what a Sandbox's Service selects.
    labels: Grouped,
}

impl Index {
    fn remove(&mut self, key: &PodKey) {
        self.owners.remove(key);
        self.labels.remove(key);
    }

    fn apply(&mut self, pod: &CachedPod) {
        let Some(key) = PodKey::of(pod) else {
            return;
        };
        // Reuse the key a map already holds, so both maps share one copy.
        let key = self
            .owners
            .value_of
            .get_key_value(&key)
            .or_else(|| self.labels.value_of.get_key_value(&key))
            .map_or_else(|| Arc::new(key), |(held, _)| held.clone());
        self.owners.set(&key, controller_uid(pod).map(uid_hash));
        let label = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(NAME_HASH_LABEL));
        self.labels
            .set(&key, label.map(|v| label_hash(&key.namespace, v)));
    }
}

fn label_hash(namespace: &str, value: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (namespace, value).hash(&mut h);
    h.finish()
}

fn controller_uid(pod: &CachedPod) -> Option<&str> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

#[derive(Debug, Default)]
struct State {
    live: Index,
    /// A relist in progress: what it listed so far.
    relist: Option<Index>,
}

/// The Pod store's objects by controlling owner UID. Cheap to clone (shared).
#[derive(Clone, Debug, Default)]
pub struct PodIndex {
    state: Arc<RwLock<State>>,
}

impl PodIndex {
    /// Applies one watch event, the way the reflector applies it to the store.
    pub fn apply_watcher_event(&self, event: &watcher::Event<CachedPod>) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Apply(pod) => state.live.apply(pod),
            watcher::Event::Delete(pod) => {
                if let Some(key) = PodKey::of(pod) {
                    state.live.remove(&key);
                }
            }
            watcher::Event::Init => state.relist = Some(Index::default()),
            watcher::Event::InitApply(pod) => state.relist.get_or_insert_default().apply(pod),
            watcher::Event::InitDone => {
                if let Some(listed) = state.relist.take() {
                    state.live = listed;
                }
            }
        }
    }

    /// The Pods whose controller owner reference carries `uid` (as last applied; sorted).
    pub fn controlled_by(&self, uid: &str) -> Vec<PodKey> {
        if uid.is_empty() {
            return Vec::new();
        }
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live.owners.get(uid_hash(uid))
    }

    /// The Pods of `namespace` carrying the tracking label value `name_hash` (as last applied;
    /// sorted), whoever owns them.
    pub fn labelled(&self, namespace: &str, name_hash: &str) -> Vec<PodKey> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        state.live.labels.get(label_hash(namespace, name_hash))
    }

    /// Number of Pods indexed by owner (tests, debugging).
    pub fn len(&self) -> usize {
        self.state
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .live
            .owners
            .value_of
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cached Pods in `namespace` controlled by the Sandbox `uid`; with `name_hash`, only those
/// that also carry that tracking label value.
pub fn owned_pods(
    index: &PodIndex,
    store: &Store<CachedPod>,
    namespace: &str,
    uid: &str,
    name_hash: Option<&str>,
) -> Vec<Arc<CachedPod>> {
    index
        .controlled_by(uid)
        .into_iter()
        .filter(|k| k.namespace == namespace)
        .filter_map(|k| store.get(&k.object_ref()))
        .filter(|p| {
            name_hash.is_none_or(|hash| {
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(NAME_HASH_LABEL))
                    .map(String::as_str)
                    == Some(hash)
            }) && Ownership::of(&p.metadata, uid).is_owned()
        })
        .collect()
}

/// The cached Pods in `namespace` that carry the tracking label value `name_hash` but are not
/// controlled by the Sandbox `uid`, and are not terminating: Pods a Service selecting that label
/// would send the Sandbox's traffic to although the Sandbox never created them.
pub fn foreign_labelled_pods(
    index: &PodIndex,
    store: &Store<CachedPod>,
    namespace: &str,
    uid: &str,
    name_hash: &str,
) -> Vec<Arc<CachedPod>> {
    index
        .labelled(namespace, name_hash)
        .into_iter()
        .filter(|k| k.namespace == namespace)
        .filter_map(|k| store.get(&k.object_ref()))
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(NAME_HASH_LABEL))
                    .map(String::as_str)
                    == Some(name_hash)
                && !Ownership::of(&p.metadata, uid).is_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{StreamExt, stream};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector;

    fn pod(ns: &str, name: &str, owner: Option<&str>, hash: Option<&str>) -> CachedPod {
        let mut p = CachedPod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some(ns.into());
        p.metadata.owner_references = owner.map(|uid| {
            vec![OwnerReference {
                uid: uid.into(),
                controller: Some(true),
                kind: "Sandbox".into(),
                name: name.into(),
                api_version: "agents.x-k8s.io/v1beta1".into(),
                ..Default::default()
            }]
        });
        p.metadata.labels = hash.map(|h| [(NAME_HASH_LABEL.to_string(), h.to_string())].into());
        p
    }

    /// Feeds `events` through a reflector with the index attached exactly as the controller
    /// attaches it; returns the store and the index.
    async fn feed(events: Vec<watcher::Event<CachedPod>>) -> (Store<CachedPod>, PodIndex) {
        let (store, writer) = reflector::store::<CachedPod>();
        let index = PodIndex::default();
        let attached = index.clone();
        stream::iter(events.into_iter().map(Ok::<_, watcher::Error>))
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    attached.apply_watcher_event(ev);
                }
            })
            .for_each(|_| async {})
            .await;
        (store, index)
    }

    fn names(pods: &[Arc<CachedPod>]) -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        n.sort();
        n
    }

    fn listed(pods: Vec<CachedPod>) -> Vec<watcher::Event<CachedPod>> {
        let mut events = vec![watcher::Event::Init];
        events.extend(pods.into_iter().map(watcher::Event::InitApply));
        events.push(watcher::Event::InitDone);
        events
    }

    #[tokio::test]
    async fn finds_the_pods_a_sandbox_controls_in_its_namespace_only() {
        let mut non_controller = pod("ns", "ref-only", None, Some("h"));
        non_controller.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u1".into(),
            controller: Some(false),
            ..Default::default()
        }]);
        let mut events = listed(vec![pod("ns", "a", Some("u1"), Some("h"))]);
        events.extend([
            watcher::Event::Apply(pod("ns", "b", Some("u1"), Some("h"))),
            watcher::Event::Apply(pod("other", "c", Some("u1"), Some("h"))),
            watcher::Event::Apply(pod("ns", "d", Some("u2"), Some("h"))),
            watcher::Event::Apply(pod("ns", "unowned", None, Some("h"))),
            watcher::Event::Apply(non_controller),
        ]);
        let (store, index) = feed(events).await;
        assert_eq!(
            names(&owned_pods(&index, &store, "ns", "u1", Some("h"))),
            ["a", "b"]
        );
        assert_eq!(
            names(&owned_pods(&index, &store, "other", "u1", None)),
            ["c"]
        );
        assert_eq!(names(&owned_pods(&index, &store, "ns", "u2", None)), ["d"]);
        assert!(owned_pods(&index, &store, "ns", "", None).is_empty());
        assert_eq!(index.len(), 4, "unowned Pods are not indexed");
    }

    #[tokio::test]
    async fn pods_carrying_a_tracking_label_they_do_not_own_are_foreign() {
        let mut terminating = pod("ns", "going", None, Some("h"));
        terminating.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let mut events = listed(vec![pod("ns", "mine", Some("u1"), Some("h"))]);
        events.extend([
            watcher::Event::Apply(pod("ns", "planted", None, Some("h"))),
            watcher::Event::Apply(pod("ns", "other-owner", Some("u2"), Some("h"))),
            watcher::Event::Apply(pod("other", "elsewhere", None, Some("h"))),
            watcher::Event::Apply(pod("ns", "other-label", None, Some("x"))),
            watcher::Event::Apply(terminating),
        ]);
        let (store, index) = feed(events.clone()).await;
        assert_eq!(
            names(&foreign_labelled_pods(&index, &store, "ns", "u1", "h")),
            ["other-owner", "planted"]
        );
        // Relabelled or deleted, a Pod leaves the label's group.
        events.extend([
            watcher::Event::Apply(pod("ns", "planted", None, Some("y"))),
            watcher::Event::Delete(pod("ns", "other-owner", Some("u2"), Some("h"))),
        ]);
        let (store, index) = feed(events).await;
        assert!(foreign_labelled_pods(&index, &store, "ns", "u1", "h").is_empty());
        assert_eq!(
            index.labelled("ns", "h").len(),
            2,
            "mine and the terminating one"
        );
    }

    #[tokio::test]
    async fn a_relabelled_pod_matches_by_its_current_label() {
        let mut events = listed(vec![pod("ns", "a", Some("u1"), Some("h"))]);
        events.push(watcher::Event::Apply(pod(
            "ns",
            "a",
            Some("u1"),
            Some("other"),
        )));
        let (store, index) = feed(events).await;
        assert!(owned_pods(&index, &store, "ns", "u1", Some("h")).is_empty());
        assert_eq!(names(&owned_pods(&index, &store, "ns", "u1", None)), ["a"]);
    }

    #[tokio::test]
    async fn an_owner_change_moves_the_pod() {
        let mut events = listed(vec![pod("ns", "a", Some("u1"), Some("h"))]);
        events.push(watcher::Event::Apply(pod("ns", "a", Some("u2"), Some("h"))));
        let (store, index) = feed(events.clone()).await;
        assert!(owned_pods(&index, &store, "ns", "u1", None).is_empty());
        assert!(index.controlled_by("u1").is_empty(), "no stale entry left");
        assert_eq!(names(&owned_pods(&index, &store, "ns", "u2", None)), ["a"]);
        // Released (owner reference removed): indexed nowhere.
        events.push(watcher::Event::Apply(pod("ns", "a", None, Some("h"))));
        let (_, index) = feed(events).await;
        assert!(index.controlled_by("u2").is_empty());
        assert!(index.is_empty());
    }

    #[tokio::test]
    async fn a_deleted_pod_leaves_the_index() {
        let mut events = listed(vec![
            pod("ns", "a", Some("u1"), Some("h")),
            pod("ns", "b", Some("u1"), Some("h")),
        ]);
        events.push(watcher::Event::Delete(pod(
            "ns",
            "a",
            Some("u1"),
            Some("h"),
        )));
        let (store, index) = feed(events).await;
        assert_eq!(names(&owned_pods(&index, &store, "ns", "u1", None)), ["b"]);
        assert_eq!(
            index.controlled_by("u1"),
            [PodKey {
                namespace: "ns".into(),
                name: "b".into()
            }]
        );
    }

    #[tokio::test]
    async fn a_relist_replaces_the_index_when_the_store_is_swapped() {
        let mut events = listed(vec![
            pod("ns", "a", Some("u1"), Some("h")),
            pod("ns", "gone", Some("u1"), Some("h")),
            pod("ns", "moved", Some("u1"), Some("h")),
        ]);
        // The watch fell behind and relists: "gone" was deleted and "moved" changed owner while
        // it was down, "new" appeared.
        events.extend([
            watcher::Event::Init,
            watcher::Event::InitApply(pod("ns", "a", Some("u1"), Some("h"))),
            watcher::Event::InitApply(pod("ns", "moved", Some("u3"), Some("h"))),
        ]);
        let (store, index) = feed(events.clone()).await;
        assert_eq!(
            names(&owned_pods(&index, &store, "ns", "u1", None)),
            ["a", "gone", "moved"],
            "until InitDone the index agrees with the store, which still holds the old list"
        );
        events.extend([
            watcher::Event::InitApply(pod("ns", "new", Some("u1"), Some("h"))),
            watcher::Event::InitDone,
        ]);
        let (store, index) = feed(events).await;
        assert_eq!(
            names(&owned_pods(&index, &store, "ns", "u1", None)),
            ["a", "new"]
        );
        assert_eq!(
            names(&owned_pods(&index, &store, "ns", "u3", None)),
            ["moved"]
        );
        assert_eq!(index.len(), 3, "the dropped Pod is gone from the index too");
    }
}
