//! The in-memory object store: one lock, one global resourceVersion, a bounded event history and
//! broadcast channels (one per resource for watchers, one for every event) that feed watchers
//! without holding the lock while they write to sockets.
//!
//! Request handlers compute updates and patches outside the lock ([`Store::write_optimistic`]):
//! the lock is held only to look an object up and to commit, and a commit happens only onto the
//! version the computation started from.
//!
//! Objects are kept as shared [`Version`]s in a `BTreeMap` per resource, keyed by (namespace,
//! name), so lookups are O(log n) and lists come out sorted like a real server's. A version is a
//! `serde_json::Value` tree while it is among the newest [`FRAMES_KEPT`] events' objects and its
//! JSON after that (see [`version`]); readers get an `Arc<Value>` either way.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::broadcast;

pub mod notes;
mod version;
pub use version::Version;

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object, as stored in the history and sent to watchers.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub group_resource: Arc<str>,
    pub event_type: EventType,
    /// The object as this change left it.
    object: Arc<Version>,
    /// The object before this change (for watchers with selectors).
    previous: Option<Arc<Version>>,
    /// The watch frame of this event (`{"type":…,"object":…}` and a newline) with the object
    /// as stored, built once by whoever needs it first. Every watcher that sends the object as
    /// stored shares it, and the write's response shares the object's JSON inside it.
    frame: Mutex<FrameCache>,
}

/// An event's frame while it is fresh: kept until [`FRAMES_KEPT`] newer events exist, after
/// which the history holds only the object's JSON (in its [`Version`]), and a watch that far
/// behind has its frame copied from that.
#[derive(Debug, Default)]
enum FrameCache {
    #[default]
    Empty,
    Built(bytes::Bytes),
    Released,
}

/// How many of the newest events keep their frame and their object's tree (at a few thousand
/// writes a second, the last second or so: live watchers send an event within milliseconds,
/// and writers patch the objects they just wrote). Older versions are kept as JSON.
pub const FRAMES_KEPT: usize = 4096;

/// Bytes of a frame before the object: `{"type":"<TYPE>","object":`.
fn frame_prefix(frame_type: EventType) -> &'static str {
    match frame_type {
        EventType::Added => "{\"type\":\"ADDED\",\"object\":",
        EventType::Modified => "{\"type\":\"MODIFIED\",\"object\":",
        EventType::Deleted => "{\"type\":\"DELETED\",\"object\":",
    }
}

/// Bytes of a frame after the object.
const FRAME_SUFFIX: &[u8] = b"}\n";

impl Event {
    fn new(
        rv: u64,
        group_resource: Arc<str>,
        event_type: EventType,
        object: Arc<Version>,
        previous: Option<Arc<Version>>,
    ) -> Self {
        Event {
            rv,
            group_resource,
            event_type,
            object,
            previous,
            frame: Mutex::new(FrameCache::Empty),
        }
    }

    /// The object as this change left it (parsed again from its JSON when the event is old).
    pub fn object(&self) -> Arc<Value> {
        self.object.tree()
    }

    /// The object before this change, if there was one.
    pub fn previous(&self) -> Option<Arc<Value>> {
        self.previous.as_ref().map(|p| p.tree())
    }

    /// Whether the object's `apiVersion` and `kind` are these (without parsing an old event's
    /// object again).
    pub fn has_type(&self, api_version: &str, kind: &str) -> bool {
        self.object.has_type(api_version, kind)
    }

    /// Whether `obj` is this event's object (the same allocation, not an equal copy).
    pub fn holds(&self, obj: &Arc<Value>) -> bool {
        self.object.holds(obj)
    }

    fn build_frame(&self, frame_type: EventType) -> bytes::Bytes {
        let mut out = frame_prefix(frame_type).as_bytes().to_vec();
        match self.object.encoded() {
            Some(json) => out.extend_from_slice(&json),
            // Serializing a Value into a Vec cannot fail.
            None => {
                let _ = serde_json::to_writer(&mut out, &*self.object.tree());
            }
        }
        out.extend_from_slice(FRAME_SUFFIX);
        bytes::Bytes::from(out)
    }

    fn own_frame(&self) -> bytes::Bytes {
        let mut cache = self.frame.lock().unwrap_or_else(|e| e.into_inner());
        match &*cache {
            FrameCache::Built(frame) => frame.clone(),
            FrameCache::Released => {
                drop(cache);
                self.build_frame(self.event_type)
            }
            FrameCache::Empty => {
                let frame = self.build_frame(self.event_type);
                *cache = FrameCache::Built(frame.clone());
                frame
            }
        }
    }

    /// The object's JSON inside a frame of this event's type.
    fn body_of(&self, frame: &bytes::Bytes) -> bytes::Bytes {
        let start = frame_prefix(self.event_type).len();
        let end = frame.len().saturating_sub(FRAME_SUFFIX.len()).max(start);
        frame.slice(start..end)
    }

    /// Frees the kept frame and keeps the object as JSON (the frame's, when it was built);
    /// returns the object's tree so that the caller frees it outside the store lock. Later
    /// requests for the frame copy the JSON.
    fn release(&self) -> Option<Arc<Value>> {
        let cache = std::mem::replace(
            &mut *self.frame.lock().unwrap_or_else(|e| e.into_inner()),
            FrameCache::Released,
        );
        let json = match cache {
            FrameCache::Built(frame) => self.body_of(&frame),
            FrameCache::Empty | FrameCache::Released => version::encode(&*self.object.kept_tree()?),
        };
        self.object.encode_with(json)
    }

    /// Whether the frame is kept (for tests).
    #[cfg(test)]
    fn frame_is_kept(&self) -> bool {
        matches!(
            *self.frame.lock().unwrap_or_else(|e| e.into_inner()),
            FrameCache::Built(_)
        )
    }

    /// Whether the object is kept as JSON only (for tests).
    #[cfg(test)]
    fn object_is_encoded(&self) -> bool {
        self.object.is_encoded()
    }

    /// The object as JSON (the stored form): a view into the event's frame, serialized once.
    pub fn encoded(&self) -> bytes::Bytes {
        if let FrameCache::Built(frame) = &*self.frame.lock().unwrap_or_else(|e| e.into_inner()) {
            return self.body_of(frame);
        }
        if let Some(json) = self.object.encoded() {
            return json;
        }
        let frame = self.own_frame();
        self.body_of(&frame)
    }

    /// The watch frame (`{"type":…,"object":…}` and a newline) of this event's object as
    /// stored, sent as a `frame_type` event: the shared frame when that is the event's own type,
    /// else a copy with the other type (a watcher with selectors sees an object move into or
    /// out of its selection).
    pub fn frame(&self, frame_type: EventType) -> bytes::Bytes {
        if frame_type == self.event_type {
            return self.own_frame();
        }
        let body = self.encoded();
        let mut out = frame_prefix(frame_type).as_bytes().to_vec();
        out.extend_from_slice(&body);
        out.extend_from_slice(FRAME_SUFFIX);
        bytes::Bytes::from(out)
    }
}

/// Identifies one stored object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group_resource: String,
    pub namespace: String,
    pub name: String,
}

/// What a write closure decided.
pub enum WriteOp {
    Put(Value),
    Delete,
    /// Delete, reporting this final state of the object (an update that let a terminating
    /// object go: watchers see the update's result in the DELETED event).
    DeleteWith(Value),
    /// Leave the object as it is (no-op writes emit nothing).
    Unchanged,
}

/// What a write did.
#[derive(Debug, Clone)]
pub enum WriteOutcome {
    Created(Arc<Value>),
    Updated(Arc<Value>),
    Deleted(Arc<Value>),
    Unchanged(Option<Arc<Value>>),
}

impl WriteOutcome {
    pub fn object(&self) -> Option<&Arc<Value>> {
        match self {
            WriteOutcome::Created(o) | WriteOutcome::Updated(o) | WriteOutcome::Deleted(o) => {
                Some(o)
            }
            WriteOutcome::Unchanged(o) => o.as_ref(),
        }
    }
}

/// A write's outcome with the event it emitted (none when nothing changed or the write was a
/// dry run), so that the response can share the event's serialization of the object.
#[derive(Debug)]
pub struct Committed {
    pub outcome: WriteOutcome,
    pub event: Option<Arc<Event>>,
}

/// Where a watch starts.
pub enum WatchStart {
    /// Replay the current objects (as ADDED) and then follow changes.
    Replay(Vec<Arc<Value>>, u64),
    /// Events after the requested resourceVersion, from the history.
    History(Vec<Arc<Event>>),
    /// The requested resourceVersion is older than the retained history.
    Expired { oldest: u64 },
}

struct Inner {
    rv: u64,
    objects: HashMap<String, BTreeMap<(String, String), Arc<Version>>>,
    /// The name of each resource that has had a write, shared by its events.
    resource_names: HashMap<String, Arc<str>>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Events with rv <= this are gone from the history.
    compacted_rv: u64,
    /// owner uid -> objects that name it in ownerReferences.
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    /// uid -> object
    uids: HashMap<String, ObjectKey>,
    /// Owner UIDs in `dependents` that no stored object has (kept with both indexes, so the
    /// garbage collector's sweep does not scan every owner).
    missing_owners: BTreeSet<String>,
    /// Events just dropped from the history: freed after the lock is released, since freeing
    /// an object is as costly as copying it.
    evicted: Vec<Arc<Event>>,
    /// Events that just became older than the newest [`FRAMES_KEPT`]: their frames are dropped
    /// and their objects kept as JSON after the lock is released.
    aged: Vec<Arc<Event>>,
    /// Terminating objects whose deletion the garbage collector finishes ([`gc_finishes`]).
    terminating: BTreeSet<ObjectKey>,
    /// One channel per resource for its watchers, so that a write wakes only the watchers of
    /// its resource (created by the first watch of a resource).
    resource_channels: HashMap<String, broadcast::Sender<Arc<Event>>>,
    watch_buffer: usize,
}

/// The resourceVersion a fresh server starts from: microseconds since the Unix epoch. A run
/// would have to write more than a million objects a second to reach the next run's start, so
/// versions grow across restarts; the value stays below 2^53, so clients that read versions
/// as JSON numbers (JavaScript) keep them exact.
pub fn clock_resource_version() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| {
            u64::try_from(d.as_micros()).unwrap_or(u64::MAX >> 11)
        })
}

pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
}

impl Store {
    /// A store starting at resourceVersion 1 (tests; a server seeds it from the clock).
    #[cfg(test)]
    pub fn new(history_limit: usize, watch_buffer: usize) -> Self {
        Self::starting_at(1, history_limit, watch_buffer)
    }

    /// A store whose first write gets `first_rv + 1`; watches from any older resourceVersion
    /// get 410 `Expired`, as after a compaction. A server seeds it from the clock
    /// ([`clock_resource_version`]) so that a restarted devcluster never hands out a
    /// resourceVersion its previous run already used: clients still watching from the old run
    /// relist instead of waiting, silently, for the new run to catch up with their version.
    pub fn starting_at(first_rv: u64, history_limit: usize, watch_buffer: usize) -> Self {
        let first_rv = first_rv.max(1);
        let (tx, _) = broadcast::channel(watch_buffer.max(16));
        Store {
            inner: Mutex::new(Inner {
                rv: first_rv,
                objects: HashMap::new(),
                resource_names: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                compacted_rv: first_rv,
                dependents: HashMap::new(),
                uids: HashMap::new(),
                missing_owners: BTreeSet::new(),
                evicted: Vec::new(),
                aged: Vec::new(),
                terminating: BTreeSet::new(),
                resource_channels: HashMap::new(),
                watch_buffer: watch_buffer.max(16),
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, group_resource: &str, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let version = lookup(&self.lock(), group_resource, namespace, name)?;
        Some(version.tree())
    }

    /// Whether the object exists (`None` when it does not) and is terminating (it has a
    /// `deletionTimestamp`), without parsing it when it is kept as JSON.
    pub fn terminating(&self, group_resource: &str, namespace: &str, name: &str) -> Option<bool> {
        let version = lookup(&self.lock(), group_resource, namespace, name)?;
        Some(version.is_terminating())
    }

    /// Objects of a resource (in one namespace, or all when `None`), sorted by namespace and
    /// name, with the current resourceVersion.
    pub fn list(&self, group_resource: &str, namespace: Option<&str>) -> (Vec<Arc<Value>>, u64) {
        let inner = self.lock();
        let versions = list_locked(&inner, group_resource, namespace);
        let rv = inner.rv;
        drop(inner);
        (trees(versions), rv)
    }

    /// The stored versions of a resource's objects after `after` (namespace, name), in list
    /// order, not yet parsed: a page of a list parses only the objects it reads
    /// ([`Version::tree`]), not every object of the resource.
    pub fn list_versions_after(
        &self,
        group_resource: &str,
        namespace: Option<&str>,
        after: Option<&(String, String)>,
    ) -> (Vec<Arc<Version>>, u64) {
        let inner = self.lock();
        let Some(m) = inner.objects.get(group_resource) else {
            return (Vec::new(), inner.rv);
        };
        use std::ops::Bound;
        let start = (namespace.unwrap_or("").to_string(), String::new());
        let lower = match after {
            Some(a) if *a >= start => Bound::Excluded(a.clone()),
            _ => Bound::Included(start),
        };
        let versions = m
            .range((lower, Bound::Unbounded))
            .take_while(|((n, _), _)| namespace.is_none_or(|ns| n == ns))
            .map(|(_, v)| v.clone())
            .collect();
        (versions, inner.rv)
    }

    /// Waits until the store has reached resourceVersion `rv`, for at most `within`; whether it
    /// did.
    pub async fn wait_for_rv(&self, rv: u64, within: std::time::Duration) -> bool {
        // Subscribe before looking, so a write in between is not missed.
        let mut rx = self.tx.subscribe();
        if self.current_rv() >= rv {
            return true;
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(e)) if e.rv >= rv => return true,
                Ok(Ok(_)) => {}
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                    if self.current_rv() >= rv {
                        return true;
                    }
                }
                Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => {
                    return self.current_rv() >= rv;
                }
            }
        }
    }

    /// Subscribe to changes of one resource. Consistent with `start`: no event is lost or
    /// repeated between the snapshot/history and the live channel, which carries only this
    /// resource's events. Every event up to [`Store::current_rv`] is in the channel by the time
    /// that returns (events are sent under the store lock).
    pub fn watch(
        &self,
        group_resource: &str,
        namespace: Option<&str>,
        from_rv: Option<u64>,
    ) -> (WatchStart, broadcast::Receiver<Arc<Event>>) {
        let mut inner = self.lock();
        let capacity = inner.watch_buffer;
        let rx = inner
            .resource_channels
            .entry(group_resource.to_string())
            .or_insert_with(|| broadcast::channel(capacity).0)
            .subscribe();
        let start = match from_rv {
            None => {
                let versions = list_locked(&inner, group_resource, namespace);
                let rv = inner.rv;
                drop(inner);
                return (WatchStart::Replay(trees(versions), rv), rx);
            }
            Some(rv) if rv < inner.compacted_rv => WatchStart::Expired {
                oldest: inner.compacted_rv,
            },
            Some(rv) => {
                let skip = inner.history.partition_point(|e| e.rv <= rv);
                WatchStart::History(
                    inner
                        .history
                        .iter()
                        .skip(skip)
                        .filter(|e| &*e.group_resource == group_resource)
                        .cloned()
                        .collect(),
                )
            }
        };
        (start, rx)
    }

    /// Read-modify-write of one object under the store lock. The closure sees the current object
    /// and the resourceVersion the write will get; the store stamps `metadata.resourceVersion`,
    /// keeps indexes, appends history and notifies watchers. A `Put` equal to the current object
    /// (ignoring resourceVersion) is a no-op; a change of `managedFields` alone (a manager taking
    /// a share of fields it applies with the values they have) is a write, as on a real server.
    pub fn write<E>(
        &self,
        group_resource: &str,
        namespace: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>, u64) -> Result<WriteOp, E>,
    ) -> Result<WriteOutcome, E> {
        self.write_committed(group_resource, namespace, name, f)
            .map(|c| c.outcome)
    }

    /// [`Store::write`], also returning the event the write emitted.
    pub fn write_committed<E>(
        &self,
        group_resource: &str,
        namespace: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>, u64) -> Result<WriteOp, E>,
    ) -> Result<Committed, E> {
        let inner = self.lock();
        let current = lookup(&inner, group_resource, namespace, name).map(Current::of);
        let next_rv = inner.rv + 1;
        let op = f(current.as_ref().map(|c| &c.tree), next_rv)?;
        Ok(self.commit_and_unlock(inner, group_resource, namespace, name, current, op))
    }

    /// [`Store::write`] with the closure run outside the lock: it sees the object as it is when
    /// the write starts, and its result is committed only if the object is still that one (the
    /// same stored version, or still absent); otherwise the closure runs again on the newer
    /// object. Writes to different objects compute in parallel and hold the lock only to commit.
    /// An error the closure returns ends the write (it was right for the version it saw). Returns
    /// the event the write emitted with its outcome.
    pub fn write_optimistic<E>(
        &self,
        group_resource: &str,
        namespace: &str,
        name: &str,
        mut f: impl FnMut(Option<&Arc<Value>>) -> Result<WriteOp, E>,
    ) -> Result<Committed, E> {
        loop {
            let seen = lookup(&self.lock(), group_resource, namespace, name);
            // Parsed (if kept as JSON) outside the lock.
            let seen = seen.map(Current::of);
            let op = f(seen.as_ref().map(|c| &c.tree))?;
            let inner = self.lock();
            let current = lookup(&inner, group_resource, namespace, name);
            let still = match (&seen, &current) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(&a.version, b),
                _ => false,
            };
            if still {
                return Ok(self.commit_and_unlock(
                    inner,
                    group_resource,
                    namespace,
                    name,
                    seen,
                    op,
                ));
            }
        }
    }

    /// [`Store::commit`], then release the lock, and only then free the history events the
    /// commit evicted (freeing them is not work for the lock).
    fn commit_and_unlock(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        group_resource: &str,
        namespace: &str,
        name: &str,
        current: Option<Current>,
        op: WriteOp,
    ) -> Committed {
        let committed = self.commit(&mut inner, group_resource, namespace, name, current, op);
        let evicted = std::mem::take(&mut inner.evicted);
        let aged = std::mem::take(&mut inner.aged);
        drop(inner);
        drop(evicted);
        settle(aged);
        committed
    }

    /// Apply a write's decision to the object `current` (as found under the lock).
    fn commit(
        &self,
        inner: &mut Inner,
        group_resource: &str,
        namespace: &str,
        name: &str,
        current: Option<Current>,
        op: WriteOp,
    ) -> Committed {
        let unchanged = |current: Option<Current>| Committed {
            outcome: WriteOutcome::Unchanged(current.map(|c| c.tree)),
            event: None,
        };
        let next_rv = inner.rv + 1;
        let okey = || ObjectKey {
            group_resource: group_resource.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        match op {
            WriteOp::Unchanged => unchanged(current),
            WriteOp::Put(mut obj) => {
                if let Some(cur) = &current
                    && same_object(&cur.tree, &obj)
                {
                    return unchanged(current);
                }
                inner.rv = next_rv;
                set_rv(&mut obj, next_rv);
                let obj = Arc::new(obj);
                // Most writes change nothing the indexes hold (owners, uid, whether the
                // garbage collector finishes the object): they are left as they are then.
                let reindex = current
                    .as_ref()
                    .is_none_or(|cur| index_facts(&cur.tree) != index_facts(&obj));
                if reindex {
                    let okey = okey();
                    if let Some(cur) = &current {
                        unindex(inner, &okey, &cur.tree);
                    }
                    index(inner, &okey, &obj);
                }
                let version = Arc::new(Version::new(obj.clone()));
                let objects = match inner.objects.get_mut(group_resource) {
                    Some(objects) => objects,
                    None => inner.objects.entry(group_resource.to_string()).or_default(),
                };
                match objects.get_mut(&(namespace, name) as &dyn NameKey) {
                    Some(stored) => *stored = version.clone(),
                    None => {
                        objects.insert((namespace.to_string(), name.to_string()), version.clone());
                    }
                }
                let event_type = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                let existed = current.is_some();
                let event = self.emit(
                    inner,
                    group_resource,
                    event_type,
                    version,
                    current.map(|c| c.version),
                );
                let outcome = if existed {
                    WriteOutcome::Updated(obj)
                } else {
                    WriteOutcome::Created(obj)
                };
                Committed {
                    outcome,
                    event: Some(event),
                }
            }
            op @ (WriteOp::Delete | WriteOp::DeleteWith(_)) => {
                let Some(cur) = current else {
                    return unchanged(None);
                };
                inner.rv = next_rv;
                let mut last = match op {
                    WriteOp::DeleteWith(last) => last,
                    _ => (*cur.tree).clone(),
                };
                set_rv(&mut last, next_rv);
                let last = Arc::new(last);
                unindex(inner, &okey(), &cur.tree);
                if let Some(m) = inner.objects.get_mut(group_resource) {
                    m.remove(&(namespace, name) as &dyn NameKey);
                }
                let event = self.emit(
                    inner,
                    group_resource,
                    EventType::Deleted,
                    Arc::new(Version::new(last.clone())),
                    Some(cur.version),
                );
                Committed {
                    outcome: WriteOutcome::Deleted(last),
                    event: Some(event),
                }
            }
        }
    }

    fn emit(
        &self,
        inner: &mut Inner,
        group_resource: &str,
        event_type: EventType,
        obj: Arc<Version>,
        previous: Option<Arc<Version>>,
    ) -> Arc<Event> {
        let name = match inner.resource_names.get(group_resource) {
            Some(name) => name.clone(),
            None => {
                let name: Arc<str> = Arc::from(group_resource);
                inner
                    .resource_names
                    .insert(group_resource.to_string(), name.clone());
                name
            }
        };
        let event = Arc::new(Event::new(inner.rv, name, event_type, obj, previous));
        inner.history.push_back(event.clone());
        // With a history shorter than FRAMES_KEPT, an event ages as it leaves the history.
        let kept = FRAMES_KEPT.min(inner.history_limit);
        if let Some(older) = inner
            .history
            .len()
            .checked_sub(kept + 1)
            .and_then(|i| inner.history.get(i))
            .cloned()
        {
            inner.aged.push(older);
        }
        while inner.history.len() > inner.history_limit {
            if let Some(old) = inner.history.pop_front() {
                inner.compacted_rv = old.rv;
                inner.evicted.push(old);
            }
        }
        // No receivers is fine.
        if let Some(tx) = inner.resource_channels.get(group_resource) {
            let _ = tx.send(event.clone());
        }
        let _ = self.tx.send(event.clone());
        event
    }

    /// Drop the whole event history: every watch from an older resourceVersion gets 410.
    pub fn compact(&self) {
        let mut inner = self.lock();
        let history = std::mem::take(&mut inner.history);
        inner.compacted_rv = inner.rv;
        drop(inner);
        // The versions the dropped events wrote that are still stored are kept as JSON, as
        // they would have been had the events aged in the history.
        settle(history.into_iter().rev().take(FRAMES_KEPT).collect());
    }

    /// Objects whose ownerReferences name `owner_uid`.
    pub fn dependents_of(&self, owner_uid: &str) -> Vec<ObjectKey> {
        self.lock()
            .dependents
            .get(owner_uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub fn uid_exists(&self, uid: &str) -> bool {
        self.lock().uids.contains_key(uid)
    }

    /// Every stored object of every resource in `namespace`.
    pub fn keys_in_namespace(&self, namespace: &str) -> Vec<ObjectKey> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (gr, m) in &inner.objects {
            for (ns, name) in m.keys() {
                if ns == namespace {
                    out.push(ObjectKey {
                        group_resource: gr.clone(),
                        namespace: ns.clone(),
                        name: name.clone(),
                    });
                }
            }
        }
        out
    }

    /// Objects naming at least one owner UID that no stored object has (for the garbage
    /// collector's sweep), sorted. One pass over the owner index under the lock: the sweep runs
    /// twice a second, and cloning and sorting every owned object there held the lock (and every
    /// write) for the length of a scan of the whole cluster.
    pub fn with_missing_owner(&self) -> Vec<ObjectKey> {
        let inner = self.lock();
        let mut out: Vec<ObjectKey> = inner
            .missing_owners
            .iter()
            .filter_map(|owner| inner.dependents.get(owner))
            .flat_map(|keys| keys.iter().cloned())
            .collect();
        drop(inner);
        out.sort();
        out.dedup();
        out
    }

    /// Terminating objects whose deletion the garbage collector finishes: those waiting on its
    /// `orphan` or `foregroundDeletion` finalizer, namespaces, CRDs being cleaned up.
    pub fn terminating_objects(&self) -> Vec<(ObjectKey, Arc<Value>)> {
        let inner = self.lock();
        let versions: Vec<(ObjectKey, Arc<Version>)> = inner
            .terminating
            .iter()
            .filter_map(|k| {
                lookup(&inner, &k.group_resource, &k.namespace, &k.name).map(|o| (k.clone(), o))
            })
            .collect();
        drop(inner);
        versions
            .into_iter()
            .map(|(k, version)| (k, version.tree()))
            .collect()
    }

    /// Number of objects of a resource (all namespaces).
    pub fn count(&self, group_resource: &str) -> usize {
        self.lock()
            .objects
            .get(group_resource)
            .map_or(0, BTreeMap::len)
    }

    /// A receiver of every future event (used by in-process controllers like the GC).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.tx.subscribe()
    }
}

/// The stored version of an object with its tree, as a write found it.
struct Current {
    version: Arc<Version>,
    tree: Arc<Value>,
}

impl Current {
    fn of(version: Arc<Version>) -> Self {
        Current {
            tree: version.tree(),
            version,
        }
    }
}

fn lookup(
    inner: &Inner,
    group_resource: &str,
    namespace: &str,
    name: &str,
) -> Option<Arc<Version>> {
    inner
        .objects
        .get(group_resource)?
        .get(&(namespace, name) as &dyn NameKey)
        .cloned()
}

/// A stored object's (namespace, name), owned (the object maps' keys) or borrowed (a lookup),
/// so that a lookup does not copy the names it looks for. Ordered as the owned tuple is.
trait NameKey {
    fn parts(&self) -> (&str, &str);
}

impl NameKey for (String, String) {
    fn parts(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl NameKey for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> std::borrow::Borrow<dyn NameKey + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn NameKey + 'a) {
        self
    }
}

impl PartialEq for dyn NameKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn NameKey + '_ {}

impl PartialOrd for dyn NameKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn NameKey + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// What the store's indexes keep of an object: its owners' uids, its uid, and whether the
/// garbage collector finishes its deletion. A write that changes none of them leaves the
/// indexes alone.
#[derive(PartialEq)]
struct IndexFacts<'a> {
    owners: Vec<&'a str>,
    uid: Option<&'a str>,
    deletion: Option<&'a Value>,
    finalizers: Option<&'a Value>,
}

fn index_facts(obj: &Value) -> IndexFacts<'_> {
    let meta = obj.get("metadata");
    IndexFacts {
        owners: meta
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .map(|refs| {
                refs.iter()
                    .filter_map(|r| r.get("uid").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default(),
        uid: meta.and_then(|m| m.get("uid")).and_then(Value::as_str),
        deletion: meta.and_then(|m| m.get("deletionTimestamp")),
        finalizers: meta.and_then(|m| m.get("finalizers")),
    }
}

/// The objects of stored versions (those kept as JSON parsed again), outside the store lock.
fn trees(versions: Vec<Arc<Version>>) -> Vec<Arc<Value>> {
    versions.iter().map(|v| v.tree()).collect()
}

/// Drops the frames of events that aged out of the newest [`FRAMES_KEPT`] and keeps their
/// objects as JSON; the trees are freed here, outside the store lock.
fn settle(aged: Vec<Arc<Event>>) {
    for event in aged {
        drop(event.release());
    }
}

fn list_locked(inner: &Inner, group_resource: &str, namespace: Option<&str>) -> Vec<Arc<Version>> {
    let Some(m) = inner.objects.get(group_resource) else {
        return Vec::new();
    };
    match namespace {
        None => m.values().cloned().collect(),
        Some(ns) => m
            .range((ns.to_string(), String::new())..)
            .take_while(|((n, _), _)| n == ns)
            .map(|(_, v)| v.clone())
            .collect(),
    }
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

/// Equal ignoring `metadata.resourceVersion`.
fn same_object(a: &Value, b: &Value) -> bool {
    crate::patch::equal_ignoring_metadata(a, b, &["resourceVersion"])
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn uid_of(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .map(String::from)
}

fn index(inner: &mut Inner, key: &ObjectKey, obj: &Value) {
    for uid in owner_uids(obj) {
        if !inner.uids.contains_key(&uid) {
            inner.missing_owners.insert(uid.clone());
        }
        inner.dependents.entry(uid).or_default().insert(key.clone());
    }
    if let Some(uid) = uid_of(obj) {
        inner.missing_owners.remove(&uid);
        inner.uids.insert(uid, key.clone());
    }
    if gc_finishes(key, obj) {
        inner.terminating.insert(key.clone());
    }
}

/// Whether the garbage collector has to finish this object's deletion: it is terminating and
/// waits on one of the collector's finalizers (`orphan`, `foregroundDeletion`), or it is a
/// namespace, or a CRD waiting for its objects to be cleaned up. Other terminating objects (a
/// Pod in its grace period, an object waiting on a controller's finalizer) are finished by
/// someone else, so the collector does not look at them on every pass.
fn gc_finishes(key: &ObjectKey, obj: &Value) -> bool {
    if obj.pointer("/metadata/deletionTimestamp").is_none() {
        return false;
    }
    if key.group_resource == "namespaces" {
        return true;
    }
    let Some(finalizers) = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
    else {
        return false;
    };
    let crd = key.group_resource == "customresourcedefinitions.apiextensions.k8s.io";
    finalizers.iter().filter_map(Value::as_str).any(|f| {
        f == crate::gc::ORPHAN_FINALIZER
            || f == crate::gc::FOREGROUND_FINALIZER
            || (crd && f == crate::crd::CLEANUP_FINALIZER)
    })
}

fn unindex(inner: &mut Inner, key: &ObjectKey, obj: &Value) {
    for uid in owner_uids(obj) {
        if let Some(set) = inner.dependents.get_mut(&uid) {
            set.remove(key);
            if set.is_empty() {
                inner.dependents.remove(&uid);
                inner.missing_owners.remove(&uid);
            }
        }
    }
    if let Some(uid) = uid_of(obj) {
        inner.uids.remove(&uid);
        if inner.dependents.contains_key(&uid) {
            inner.missing_owners.insert(uid);
        }
    }
    inner.terminating.remove(key);
}

#[cfg(test)]
mod aging_tests;
#[cfg(test)]
mod tests;
