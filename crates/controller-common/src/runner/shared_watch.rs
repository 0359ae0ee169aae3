//! One watch, one cache, several controllers' triggers: the reflector's store plus a fan-out of
//! every event's object to each subscriber, none of which can be lost.
//!
//! This replaces kube-runtime's shared reflector (`reflect_shared` and `Writer::subscribe`,
//! behind its `unstable-runtime-subscribe` feature), which lost triggers in two ways:
//! - **A subscriber could stop for good.** Its broadcast channel carries object references, and
//!   the subscriber's stream looks each one up in the store when it is read. When the object
//!   was deleted in between (a claim deleted a few milliseconds after its creation), the
//!   lookup fails and the stream answers `Pending` *without* arranging to be woken: its
//!   channel had a message, so it registered no waker. A stream merged with others through
//!   `select_all` (one `FuturesUnordered` slot per stream, polled only when its own waker
//!   fires) is then never polled again; under `select` it waits for the other stream's next
//!   item. The events behind it stay unread, the broadcast buffer fills, and once full it
//!   stops the reflector itself: the controller's queues show nothing to do while the cluster
//!   changes (issue 21 items 1 and 9).
//! - **Deletions were not dispatched**, neither from watch events nor when a relist (after a
//!   `410 Gone`) found an object gone.
//!
//! Here each subscriber gets the event's object itself (an `Arc`, no lookup), in watch order,
//! after the store has applied the event, through an unbounded queue that always wakes its
//! reader. Deleted objects are handed over too, marked with a `deletionTimestamp` (set to now
//! when the object went without one), so fingerprint filters let them through. A relist hands
//! over what it changed once the store holds its result: new objects, objects whose
//! resourceVersion differs from the cached one, and objects that are gone (marked deleted).
//! The first list hands over everything.
//!
//! Each subscriber's queue reports how long its oldest undelivered object has waited
//! ([`TriggerBacklog`]), so a consumer that stopped polling shows on the liveness probe
//! ([`crate::admin::Liveness`]) instead of going unnoticed.
//!
//! Why not a bounded channel: a slow subscriber would hold back the watch and with it the
//! store every other controller reads (the failure above). Memory per waiting event is one
//! `Arc` per subscriber; a subscriber that stops consuming fails the liveness probe long before
//! that matters.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::time::Instant;

/// Objects handed to one subscriber and not read yet, with the time each was handed over.
struct Shared<K> {
    queue: Mutex<VecDeque<(Arc<K>, Instant)>>,
    waker: AtomicWaker,
    closed: AtomicBool,
}

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, VecDeque<(Arc<K>, Instant)>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The objects one subscriber is handed, in watch order (a `Stream` of `Arc<K>`). Ends when the
/// watch's driver ends and everything handed over was read.
pub struct Triggers<K> {
    shared: Arc<Shared<K>>,
}

impl<K: Send + Sync + 'static> Triggers<K> {
    /// A handle on this subscriber's undelivered objects, for the liveness probe.
    pub fn backlog(&self) -> TriggerBacklog {
        TriggerBacklog {
            oldest: Arc::new({
                let shared = Arc::clone(&self.shared);
                move || shared.lock().front().map(|(_, at)| *at)
            }),
        }
    }
}

impl<K> Stream for Triggers<K> {
    type Item = Arc<K>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Arc<K>>> {
        let shared = &self.shared;
        if let Some((obj, _)) = shared.lock().pop_front() {
            return Poll::Ready(Some(obj));
        }
        // Register before looking again, so an object handed over in between wakes us.
        shared.waker.register(cx.waker());
        if let Some((obj, _)) = shared.lock().pop_front() {
            return Poll::Ready(Some(obj));
        }
        if shared.closed.load(Ordering::Acquire) {
            // Handed over before the close: read it; else the stream is over.
            return Poll::Ready(shared.lock().pop_front().map(|(obj, _)| obj));
        }
        Poll::Pending
    }
}

/// How long the oldest object handed to one subscriber has waited to be read.
#[derive(Clone)]
pub struct TriggerBacklog {
    oldest: Arc<dyn Fn() -> Option<Instant> + Send + Sync>,
}

impl TriggerBacklog {
    /// When the oldest unread object was handed over (`None` when everything was read).
    pub fn oldest(&self) -> Option<Instant> {
        (self.oldest)()
    }
}

impl std::fmt::Debug for TriggerBacklog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggerBacklog")
            .field("oldest", &self.oldest())
            .finish()
    }
}

/// The sending side: hands each object to every subscriber.
struct FanOut<K> {
    subscribers: Vec<Arc<Shared<K>>>,
}

impl<K> FanOut<K> {
    fn send(&self, obj: &Arc<K>) {
        let now = Instant::now();
        for sub in &self.subscribers {
            sub.lock().push_back((Arc::clone(obj), now));
            sub.waker.wake();
        }
    }

    fn close(&self) {
        for sub in &self.subscribers {
            sub.closed.store(true, Ordering::Release);
            sub.waker.wake();
        }
    }
}

impl<K> Drop for FanOut<K> {
    fn drop(&mut self) {
        self.close();
    }
}

/// `obj` as handed over for a deletion: with a `deletionTimestamp` (now, when it had none).
fn as_deleted<K: Resource + Clone>(obj: &K) -> Arc<K> {
    let mut obj = obj.clone();
    if obj.meta().deletion_timestamp.is_none() {
        obj.meta_mut().deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    }
    Arc::new(obj)
}

/// Caches `events` (a watcher's stream, after any backoff and trimming) in the returned store
/// and hands every event's object to each of `subscribers` trigger streams (see the module
/// docs). Nothing happens until the returned driver future is polled; it ends when `events`
/// does. Watch errors are logged (the watcher retries them itself).
pub fn shared_watch<K, S>(
    events: S,
    subscribers: usize,
) -> (
    Store<K>,
    impl Future<Output = ()> + Send + 'static,
    Vec<Triggers<K>>,
)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    shared_watch_observed(events, subscribers, |_| {})
}

/// [`shared_watch`], with `applied` called for every event once the store has applied it and
/// before any subscriber is handed its object (bookkeeping that must follow the cache, such as
/// which of a controller's own writes the cache now shows, is in step by the time a pass runs).
pub fn shared_watch_observed<K, S>(
    events: S,
    subscribers: usize,
    mut applied: impl FnMut(&watcher::Event<K>) + Send + 'static,
) -> (
    Store<K>,
    impl Future<Output = ()> + Send + 'static,
    Vec<Triggers<K>>,
)
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut writer = reflector::store::Writer::<K>::default();
    let store = writer.as_reader();
    let shared: Vec<Arc<Shared<K>>> = (0..subscribers)
        .map(|_| {
            Arc::new(Shared {
                queue: Mutex::new(VecDeque::new()),
                waker: AtomicWaker::new(),
                closed: AtomicBool::new(false),
            })
        })
        .collect();
    let triggers = shared
        .iter()
        .map(|shared| Triggers {
            shared: Arc::clone(shared),
        })
        .collect();
    let fan_out = FanOut {
        subscribers: shared,
    };
    let reader = store.clone();
    let driver = async move {
        let mut events = std::pin::pin!(events);
        // The store as it was when the current (re)list started.
        let mut before_relist: Option<HashMap<ObjectRef<K>, Arc<K>>> = None;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(error) => {
                    tracing::warn!(
                        %error,
                        kind = %K::kind(&K::DynamicType::default()),
                        "watch error; retrying"
                    );
                    continue;
                }
            };
            if matches!(event, watcher::Event::Init) {
                before_relist = Some(
                    reader
                        .state()
                        .into_iter()
                        .map(|obj| (ObjectRef::from_obj(obj.as_ref()), obj))
                        .collect(),
                );
            }
            writer.apply_watcher_event(&event);
            applied(&event);
            match event {
                watcher::Event::Apply(obj) => fan_out.send(&Arc::new(obj)),
                watcher::Event::Delete(obj) => fan_out.send(&as_deleted(&obj)),
                watcher::Event::Init | watcher::Event::InitApply(_) => {}
                watcher::Event::InitDone => {
                    let mut before = before_relist.take().unwrap_or_default();
                    for obj in reader.state() {
                        let unchanged = before
                            .remove(&ObjectRef::from_obj(obj.as_ref()))
                            .is_some_and(|old| {
                                old.meta().resource_version.is_some()
                                    && old.meta().resource_version == obj.meta().resource_version
                            });
                        if !unchanged {
                            fan_out.send(&obj);
                        }
                    }
                    for gone in before.into_values() {
                        fan_out.send(&as_deleted(gone.as_ref()));
                    }
                }
            }
        }
        drop(fan_out);
    };
    (store, driver, triggers)
}

#[cfg(test)]
mod tests;
