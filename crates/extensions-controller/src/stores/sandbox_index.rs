//! Secondary indexes over the shared Sandbox cache: members by pool label (quiet ones counted
//! by class, [`crate::warm_pool::census`]), Sandboxes by controlling owner UID, and each pool's warm
//! candidates in order ([`crate::claim::candidate_queue`]).
//! Without them every claim pass and every pool pass scanned the whole cache (tens of
//! thousands of Sandboxes at scale) to find a handful of objects, and every claim pass ranked
//! every member of its pool.
//!
//! The index is fed from the same watcher events as the reflector store, one step before the
//! store applies them, so it can briefly name an object the store does not show yet (or no
//! longer shows). Readers therefore always resolve names through the store and re-check what
//! they need ([`crate::claim::candidate::is_member`], `is_controlled_by`): the index only
//! narrows the search, it never decides.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use api_types::conditions::{READY, is_true};
use api_types::keys::{SANDBOX_TEMPLATE_REF_HASH_LABEL, SANDBOX_WARM_POOL_LABEL};
use api_types::{Sandbox, name_hash};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::claim::candidate_queue::{PoolKey, PoolQueue, Slot};
use crate::warm_pool::census::{LabelGroup, QuietClass};

/// A Sandbox's store key, built once when the Sandbox is filed and shared by every map that
/// names it: resolving a member through the store then allocates nothing (a pool pass resolves
/// each of its members).
type Key = Arc<ObjectRef<Sandbox>>;

fn key_of(namespace: &str, name: &str) -> ObjectRef<Sandbox> {
    ObjectRef::new(name).within(namespace)
}

#[derive(Debug, Default)]
struct Maps {
    /// `(namespace, pool-label value)` → Sandboxes carrying that label.
    by_pool_label: HashMap<(String, String), LabelGroup<Key>>,
    /// Controlling owner UID → Sandboxes it controls.
    by_controller: HashMap<String, HashSet<Key>>,
    /// Each pool's adoptable members, in warm-path order.
    queues: HashMap<PoolKey, PoolQueue>,
    /// What each Sandbox was filed under, to unfile it on change or delete.
    filed: HashMap<Key, Filed>,
    /// Members that just left their pool (taken by a claim, or relabelled), by key → the pool's
    /// name, until the pool trigger of that event takes it ([`SandboxIndex::take_departed`]).
    departed: HashMap<ObjectRef<Sandbox>, String>,
}

/// Departures kept at most: each is taken by the pool trigger of its own event, so this only
/// bounds what a stopped trigger stream would leave behind.
const MAX_DEPARTED: usize = 10_000;

#[derive(Debug, Clone, PartialEq, Default)]
struct Filed {
    pool_label: Option<String>,
    /// Set for a quiet Sandbox (only looked at under a pool label).
    quiet: Option<QuietClass>,
    controller: Option<String>,
    /// Set for an adoptable pool member.
    slot: Option<Slot>,
}

/// The queue slot of an adoptable pool member: not being deleted, controlled by a pool, and
/// carrying that pool's label and a template-ref label (what `claim::candidate::is_member`
/// checks, which readers still apply to the stored object).
fn slot_of(sb: &Sandbox) -> Option<Slot> {
    let meta = &sb.metadata;
    if meta.deletion_timestamp.is_some() {
        return None;
    }
    let owner = crate::ownership::controlling_pool(meta)?;
    let labels = meta.labels.as_ref()?;
    if labels.get(SANDBOX_WARM_POOL_LABEL) != Some(&name_hash(&owner.name))
        || !labels.contains_key(SANDBOX_TEMPLATE_REF_HASH_LABEL)
    {
        return None;
    }
    let status = sb.status.as_ref();
    Some(Slot {
        pool: PoolKey {
            namespace: meta.namespace.clone()?,
            name: owner.name.clone(),
            uid: owner.uid.clone(),
        },
        ready: status.is_some_and(|s| is_true(&s.conditions, READY)),
        networked: status.is_some_and(|s| !s.pod_ips.is_empty()),
        node: status.map(|s| s.node_name.clone()).unwrap_or_default(),
        created: meta
            .creation_timestamp
            .as_ref()
            .map_or(i64::MAX, |t| t.0.as_millisecond()),
    })
}

impl Maps {
    fn remove(&mut self, key: &ObjectRef<Sandbox>) {
        let Some(old) = self.filed.remove(key) else {
            return;
        };
        if let Some(label) = old.pool_label {
            let slot = (key.namespace.clone().unwrap_or_default(), label);
            if let Some(group) = self.by_pool_label.get_mut(&slot) {
                group.remove(key, old.quiet.as_ref());
                if group.is_empty() {
                    self.by_pool_label.remove(&slot);
                }
            }
        }
        if let Some(uid) = old.controller
            && let Some(set) = self.by_controller.get_mut(&uid)
        {
            set.remove(key);
            if set.is_empty() {
                self.by_controller.remove(&uid);
            }
        }
        if let Some(slot) = old.slot
            && let Some(queue) = self.queues.get_mut(&slot.pool)
        {
            queue.remove(&key.name, &slot);
            if queue.is_empty() {
                self.queues.remove(&slot.pool);
            }
        }
    }

    fn apply(&mut self, sb: &Sandbox) {
        let (Some(namespace), Some(name)) = (&sb.metadata.namespace, &sb.metadata.name) else {
            return;
        };
        let key = key_of(namespace, name);
        let pool_label = sb
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SANDBOX_WARM_POOL_LABEL))
            .cloned();
        let filed = Filed {
            quiet: pool_label.as_ref().and_then(|_| QuietClass::of(sb)),
            pool_label,
            controller: crate::ownership::controller_of(&sb.metadata).map(|o| o.uid.clone()),
            slot: slot_of(sb),
        };
        let old = self.filed.get(&key);
        if old == Some(&filed) {
            return;
        }
        if let Some(left) = old.and_then(|o| o.slot.as_ref()).filter(|before| {
            filed
                .slot
                .as_ref()
                .is_none_or(|now| now.pool != before.pool)
        }) {
            if self.departed.len() >= MAX_DEPARTED {
                self.departed.clear();
            }
            self.departed.insert(key.clone(), left.pool.name.clone());
        }
        self.remove(&key);
        let key = Arc::new(key);
        if let Some(label) = &filed.pool_label {
            self.by_pool_label
                .entry((namespace.clone(), label.clone()))
                .or_default()
                .insert(key.clone(), filed.quiet.as_ref());
        }
        if let Some(uid) = &filed.controller {
            self.by_controller
                .entry(uid.clone())
                .or_default()
                .insert(key.clone());
        }
        if let Some(slot) = &filed.slot {
            self.queues
                .entry(slot.pool.clone())
                .or_default()
                .insert(name, slot);
        }
        self.filed.insert(key, filed);
    }
}

/// The indexes; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct SandboxIndex {
    live: Arc<RwLock<Maps>>,
    /// Built during a (re)list, swapped in when the list is complete, so a relist drops the
    /// Sandboxes deleted while the watch was down.
    relisting: Arc<RwLock<Option<Maps>>>,
}

impl SandboxIndex {
    /// Feeds one watcher event (call it before the store applies the same event).
    pub fn observe(&self, event: &watcher::Event<Sandbox>) {
        match event {
            watcher::Event::Apply(sb) => self.write_live().apply(sb),
            watcher::Event::Delete(sb) => {
                if let (Some(ns), Some(name)) = (&sb.metadata.namespace, &sb.metadata.name) {
                    self.write_live().remove(&key_of(ns, name));
                }
            }
            watcher::Event::Init => *self.write_relisting() = Some(Maps::default()),
            watcher::Event::InitApply(sb) => {
                self.write_relisting()
                    .get_or_insert_with(Maps::default)
                    .apply(sb);
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = self.write_relisting().take() {
                    *self.write_live() = fresh;
                }
            }
        }
    }

    fn write_live(&self) -> std::sync::RwLockWriteGuard<'_, Maps> {
        self.live.write().unwrap_or_else(|e| e.into_inner())
    }

    fn write_relisting(&self) -> std::sync::RwLockWriteGuard<'_, Option<Maps>> {
        self.relisting.write().unwrap_or_else(|e| e.into_inner())
    }

    fn resolve<'a>(
        store: &Store<Sandbox>,
        keys: impl Iterator<Item = &'a Key>,
    ) -> Vec<Arc<Sandbox>> {
        keys.filter_map(|key| store.get(key)).collect()
    }

    /// Cached Sandboxes in `namespace` labelled as members of the pool whose name hash is
    /// `pool_label`.
    pub fn with_pool_label(
        &self,
        store: &Store<Sandbox>,
        namespace: &str,
        pool_label: &str,
    ) -> Vec<Arc<Sandbox>> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        live.by_pool_label
            .get(&(namespace.to_owned(), pool_label.to_owned()))
            .map(|group| Self::resolve(store, group.all()))
            .unwrap_or_default()
    }

    /// A pool pass's view of the Sandboxes in `namespace` labelled `pool_label`: how many quiet
    /// members of the classes `countable` accepts there are (not resolved), and every other
    /// one, resolved through the store. The members named in `must_look` are always resolved.
    pub fn pool_census(
        &self,
        store: &Store<Sandbox>,
        namespace: &str,
        pool_label: &str,
        countable: impl Fn(&QuietClass) -> bool,
        must_look: &[String],
    ) -> (usize, Vec<Arc<Sandbox>>) {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        let Some(group) = live
            .by_pool_label
            .get(&(namespace.to_owned(), pool_label.to_owned()))
        else {
            return (0, Vec::new());
        };
        let must_look: Vec<Key> = must_look
            .iter()
            .map(|name| Arc::new(key_of(namespace, name)))
            .collect();
        let must_look: Vec<&Key> = must_look.iter().collect();
        let census = group.census(countable, &must_look);
        (census.quiet, Self::resolve(store, census.look.into_iter()))
    }

    /// The queues of the pool `namespace/name` (with `uid`, only that pool object's).
    fn queues<'m>(
        maps: &'m Maps,
        namespace: &'m str,
        name: &'m str,
        uid: Option<&'m str>,
    ) -> impl Iterator<Item = &'m PoolQueue> + 'm {
        maps.queues.iter().filter_map(move |(key, queue)| {
            (key.namespace == namespace && key.name == name && uid.is_none_or(|uid| key.uid == uid))
                .then_some(queue)
        })
    }

    /// Up to `want` of the pool's networked members that `accept` takes, best first (see
    /// [`crate::claim::candidate_queue`]). `accept` runs under the index's read lock: it may read the
    /// store and other locks, but must not feed the index.
    pub fn candidates<T>(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        want: usize,
        mut accept: impl FnMut(&str) -> Option<T>,
    ) -> Vec<T> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        Self::queues(&live, namespace, name, uid)
            .flat_map(PoolQueue::ordered)
            .filter_map(&mut accept)
            .take(want)
            .collect()
    }

    /// Whether `accept` takes any of the pool's members without pod IPs (stops at the first).
    pub fn any_pending_network(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        mut accept: impl FnMut(&str) -> bool,
    ) -> bool {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        Self::queues(&live, namespace, name, uid)
            .flat_map(PoolQueue::pending_network)
            .any(&mut accept)
    }

    /// The pool `namespace/name` just left, if its last event took it out of one (see
    /// `controller::pools_for_sandbox`); forgotten on the way.
    pub fn take_departed(&self, namespace: &str, name: &str) -> Option<String> {
        self.write_live().departed.remove(&key_of(namespace, name))
    }

    /// Cached Sandboxes whose controlling owner has UID `uid`.
    pub fn controlled_by(&self, store: &Store<Sandbox>, uid: &str) -> Vec<Arc<Sandbox>> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        live.by_controller
            .get(uid)
            .map(|set| Self::resolve(store, set.iter()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::reflector;

    fn sandbox(name: &str, pool_label: Option<&str>, controller: Option<&str>) -> Sandbox {
        let mut sb = Sandbox::new(name, Default::default());
        sb.metadata.namespace = Some("ns".into());
        sb.metadata.labels =
            pool_label.map(|l| [(SANDBOX_WARM_POOL_LABEL.to_owned(), l.to_owned())].into());
        sb.metadata.owner_references = controller.map(|uid| {
            vec![OwnerReference {
                api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
                kind: "SandboxWarmPool".into(),
                name: "p".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]
        });
        sb
    }

    fn names(found: Vec<Arc<Sandbox>>) -> Vec<String> {
        let mut names: Vec<String> = found
            .iter()
            .filter_map(|s| s.metadata.name.clone())
            .collect();
        names.sort();
        names
    }

    /// Feeds `event` to the index and the store, in the driver's order.
    fn feed(
        index: &SandboxIndex,
        writer: &mut reflector::store::Writer<Sandbox>,
        event: watcher::Event<Sandbox>,
    ) {
        index.observe(&event);
        writer.apply_watcher_event(&event);
    }

    #[test]
    fn finds_members_and_owned_sandboxes_and_follows_changes() {
        let (store, mut writer) = reflector::store::<Sandbox>();
        let index = SandboxIndex::default();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(sandbox("a", Some("h1"), Some("pool-uid"))),
            watcher::Event::InitApply(sandbox("b", Some("h1"), Some("pool-uid"))),
            watcher::Event::InitApply(sandbox("c", None, None)),
            watcher::Event::InitDone,
        ] {
            feed(&index, &mut writer, event);
        }
        assert_eq!(names(index.with_pool_label(&store, "ns", "h1")), ["a", "b"]);
        assert_eq!(names(index.controlled_by(&store, "pool-uid")), ["a", "b"]);
        assert!(index.with_pool_label(&store, "other", "h1").is_empty());

        // Adoption: label gone, controller is now the claim.
        assert_eq!(index.take_departed("ns", "a"), None);
        feed(
            &index,
            &mut writer,
            watcher::Event::Apply(sandbox("a", None, Some("claim-uid"))),
        );
        assert_eq!(names(index.with_pool_label(&store, "ns", "h1")), ["b"]);
        assert_eq!(names(index.controlled_by(&store, "claim-uid")), ["a"]);
        assert_eq!(names(index.controlled_by(&store, "pool-uid")), ["b"]);

        feed(
            &index,
            &mut writer,
            watcher::Event::Delete(sandbox("b", Some("h1"), Some("pool-uid"))),
        );
        assert!(index.with_pool_label(&store, "ns", "h1").is_empty());
        assert!(index.controlled_by(&store, "pool-uid").is_empty());
    }

    #[test]
    fn a_member_that_leaves_its_pool_is_reported_to_the_pool_once() {
        let (_store, mut writer) = reflector::store::<Sandbox>();
        let index = SandboxIndex::default();
        let mut member = sandbox("m", Some(&name_hash("p")), Some("pool-uid"));
        member
            .metadata
            .labels
            .get_or_insert_default()
            .insert(SANDBOX_TEMPLATE_REF_HASH_LABEL.to_owned(), "t".to_owned());
        feed(&index, &mut writer, watcher::Event::Apply(member.clone()));
        feed(&index, &mut writer, watcher::Event::Apply(member));
        assert_eq!(index.take_departed("ns", "m"), None, "still a member");
        // A claim took it: no pool label, no pool controller.
        feed(
            &index,
            &mut writer,
            watcher::Event::Apply(sandbox("m", None, None)),
        );
        assert_eq!(index.take_departed("ns", "m").as_deref(), Some("p"));
        assert_eq!(index.take_departed("ns", "m"), None, "taken once");
    }

    #[test]
    fn a_relist_forgets_sandboxes_deleted_while_the_watch_was_down() {
        let (store, mut writer) = reflector::store::<Sandbox>();
        let index = SandboxIndex::default();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(sandbox("gone", Some("h1"), Some("pool-uid"))),
            watcher::Event::InitDone,
            watcher::Event::Init,
            watcher::Event::InitApply(sandbox("kept", Some("h1"), Some("pool-uid"))),
        ] {
            feed(&index, &mut writer, event);
        }
        // Until the relist completes, the old view stands.
        assert_eq!(names(index.controlled_by(&store, "pool-uid")), ["gone"]);
        feed(&index, &mut writer, watcher::Event::InitDone);
        assert_eq!(names(index.controlled_by(&store, "pool-uid")), ["kept"]);
        assert_eq!(names(index.with_pool_label(&store, "ns", "h1")), ["kept"]);
    }
}
