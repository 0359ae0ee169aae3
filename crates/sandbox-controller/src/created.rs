//! The children this process created that its cache does not show yet (what controller-runtime
//! calls expectations).
//!
//! A pass plans from the reflector stores. Under load a store lags the controller's own create
//! by seconds (kube-apiserver's watch falls behind), and a pass that runs meanwhile (the
//! `pod-name` annotation write of the pass that created the Pod starts one at once) would find
//! no Pod and create it again, to be refused with `409 AlreadyExists`: a wasted write. So each
//! created child is remembered by namespace and name, with the server's answer, and a pass that
//! misses it in the cache observes the remembered object instead (it is part of the pass's
//! observation, like the cache).
//!
//! An entry is dropped once the store answers for that name: any watch event of the created
//! object (its create, a change, its deletion) or an object of another UID stored under its
//! name, or a relist that began after the create (the listed state includes it or its
//! deletion). One whose event never comes is given up after [`ECHO_WAIT`]: a pass then
//! creates again, and the 409 is read back as before.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use controller_common::own_writes::ECHO_WAIT;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;

use crate::ownership::Ownership;

/// The Pods, Services and PVCs this process created and its stores do not show yet.
#[derive(Default)]
pub struct CreatedChildren {
    pub pods: Created<Pod>,
    pub services: Created<Service>,
    pub pvcs: Created<PersistentVolumeClaim>,
}

impl CreatedChildren {
    /// Drops entries older than `max_age` (see [`Created::prune`]).
    pub fn prune(&self, max_age: Duration) {
        self.pods.prune(max_age);
        self.services.prune(max_age);
        self.pvcs.prune(max_age);
    }

    /// Children remembered (tests, debugging).
    pub fn len(&self) -> usize {
        self.pods.len() + self.services.len() + self.pvcs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Objects of one kind this process created, by namespace and name, until the store shows them.
pub struct Created<K> {
    state: Mutex<State<K>>,
}

struct State<K> {
    entries: HashMap<(String, String), Entry<K>>,
    /// When the watch's current relist began (`Init`), until it is done (`InitDone`).
    relist_started: Option<Instant>,
}

struct Entry<K> {
    object: K,
    uid: String,
    at: Instant,
}

impl<K> Default for Created<K> {
    fn default() -> Self {
        Created {
            state: Mutex::new(State {
                entries: HashMap::new(),
                relist_started: None,
            }),
        }
    }
}

fn key(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

impl<K: Resource + Clone> Created<K> {
    /// Remembers `object`, the server's answer to this process's create (one without a name
    /// or UID is not remembered).
    pub fn record(&self, object: &K) {
        let meta = object.meta();
        let (Some(uid), Some(_)) = (meta.uid.clone(), meta.name.as_ref()) else {
            return;
        };
        self.lock().entries.insert(
            key(meta),
            Entry {
                object: object.clone(),
                uid,
                at: Instant::now(),
            },
        );
    }

    /// Replaces the remembered object with `object` when it is the same one (a later write of
    /// ours to it, e.g. a relabel, before the cache showed either).
    pub fn refresh(&self, object: &K) {
        let meta = object.meta();
        let mut state = self.lock();
        if let Some(entry) = state.entries.get_mut(&key(meta))
            && meta.uid.as_deref() == Some(entry.uid.as_str())
        {
            entry.object = object.clone();
        }
    }

    /// The object created as `namespace/name` for the Sandbox with UID `sandbox_uid` (its
    /// controller) that the store does not show yet. One created for another Sandbox of that
    /// name (deleted and created again since) is not this Sandbox's observation.
    pub fn get(&self, namespace: &str, name: &str, sandbox_uid: &str) -> Option<K> {
        let state = self.lock();
        let entry = state
            .entries
            .get(&(namespace.to_owned(), name.to_owned()))?;
        (entry.at.elapsed() < ECHO_WAIT
            && Ownership::of(entry.object.meta(), sandbox_uid).is_owned())
        .then(|| entry.object.clone())
    }

    /// Forgets `namespace/name` (this process deleted it).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.lock()
            .entries
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// A watch event of this kind that the store has applied: the entries it answers for are
    /// dropped.
    pub fn observe<T: Resource>(&self, event: &watcher::Event<T>) {
        let mut state = self.lock();
        match event {
            watcher::Event::Apply(obj) => {
                // The store holds this name now, ours or (ours gone) another object.
                if !state.entries.is_empty() {
                    state.entries.remove(&key(obj.meta()));
                }
            }
            // The store takes a relist's objects only at its end (`InitDone`, below).
            watcher::Event::InitApply(_) => {}
            watcher::Event::Delete(obj) => {
                let meta = obj.meta();
                let k = key(meta);
                if state
                    .entries
                    .get(&k)
                    .is_some_and(|e| meta.uid.as_deref() == Some(e.uid.as_str()))
                {
                    state.entries.remove(&k);
                }
            }
            watcher::Event::Init => state.relist_started = Some(Instant::now()),
            watcher::Event::InitDone => {
                if let Some(started) = state.relist_started.take() {
                    state.entries.retain(|_, e| e.at >= started);
                }
            }
        }
    }

    /// Drops entries recorded more than `max_age` ago (their event is not coming).
    pub fn prune(&self, max_age: Duration) {
        self.lock().entries.retain(|_, e| e.at.elapsed() < max_age);
    }

    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::controller_ref;

    /// A Pod of Sandbox `sb` (UID `sb-uid`).
    fn pod(name: &str, uid: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(uid.into()),
                resource_version: Some("1".into()),
                owner_references: Some(vec![controller_ref("sb", "sb-uid")]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_created_pod_is_observed_until_its_watch_event_arrives() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u1"));
        assert_eq!(created.get("ns", "a", "sb-uid"), Some(pod("a", "u1")));
        assert_eq!(created.get("ns", "b", "sb-uid"), None);
        assert_eq!(created.get("other", "a", "sb-uid"), None);
        created.observe(&watcher::Event::Apply(pod("b", "u2")));
        assert!(
            created.get("ns", "a", "sb-uid").is_some(),
            "another Pod's event"
        );
        created.observe(&watcher::Event::Apply(pod("a", "u1")));
        assert_eq!(created.get("ns", "a", "sb-uid"), None);
        assert!(created.is_empty());
    }

    #[test]
    fn its_deletion_settles_it_but_a_predecessors_does_not() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u2"));
        created.observe(&watcher::Event::Delete(pod("a", "u1")));
        assert!(
            created.get("ns", "a", "sb-uid").is_some(),
            "the Pod it replaced"
        );
        created.observe(&watcher::Event::Delete(pod("a", "u2")));
        assert_eq!(created.get("ns", "a", "sb-uid"), None);
    }

    #[test]
    fn another_object_stored_under_its_name_settles_it() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u1"));
        created.observe(&watcher::Event::Apply(pod("a", "u9")));
        assert_eq!(created.get("ns", "a", "sb-uid"), None);
    }

    #[test]
    fn a_relist_settles_the_creates_made_before_it_began_once_the_store_has_it() {
        let created = Created::<Pod>::default();
        created.record(&pod("before", "u1"));
        created.observe::<Pod>(&watcher::Event::Init);
        created.record(&pod("during", "u2"));
        created.observe(&watcher::Event::InitApply(pod("before", "u1")));
        assert!(
            created.get("ns", "before", "sb-uid").is_some(),
            "the store swaps in the relist at its end"
        );
        created.observe::<Pod>(&watcher::Event::InitDone);
        assert_eq!(created.get("ns", "before", "sb-uid"), None);
        assert!(created.get("ns", "during", "sb-uid").is_some());
    }

    #[test]
    fn a_refresh_replaces_only_the_same_object_and_forget_drops_it() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u1"));
        let mut relabelled = pod("a", "u1");
        relabelled.metadata.resource_version = Some("2".into());
        created.refresh(&relabelled);
        created.refresh(&pod("a", "u9"));
        assert_eq!(created.get("ns", "a", "sb-uid"), Some(relabelled));
        created.forget("ns", "a");
        assert!(created.is_empty());
    }

    #[test]
    fn old_entries_are_neither_observed_nor_kept() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u1"));
        created.prune(Duration::from_secs(60));
        assert_eq!(created.len(), 1, "a fresh entry is kept");
        created.prune(Duration::ZERO);
        assert!(created.is_empty());
        assert_eq!(created.get("ns", "a", "sb-uid"), None);
    }

    #[test]
    fn a_pod_of_another_sandbox_of_that_name_is_not_observed() {
        let created = Created::<Pod>::default();
        created.record(&pod("a", "u1"));
        assert_eq!(created.get("ns", "a", "new-sb-uid"), None);
        assert!(created.get("ns", "a", "sb-uid").is_some());
    }

    #[test]
    fn an_answer_without_uid_is_not_remembered() {
        let created = Created::<Pod>::default();
        let mut nameless = pod("a", "u1");
        nameless.metadata.uid = None;
        created.record(&nameless);
        assert!(created.is_empty());
    }
}
