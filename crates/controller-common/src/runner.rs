//! The controllers' reconcile loop: a first come, first served work queue with client-go's
//! semantics, in place of kube-runtime's `Controller` runner.
//!
//! kube-runtime's runner was the wrong shape for a busy controller in two ways:
//! - **Unfair.** When every worker is busy it parks the keys that are due in a hash set, and
//!   a free worker takes whichever parked key the set yields first: hash order, not arrival
//!   order. A key triggered again while it runs (a warm pool whose members change all the
//!   time) could win every free worker while other keys waited indefinitely. The bench saw
//!   it: with one pool worker, one of four drained pools was refilled for a whole minute and
//!   the other three never, so three quarters of the claims went cold; claims waited up to a
//!   minute to be looked at while newer ones were served.
//! - **Quadratic when deep.** Each poll of its running set polls every member, so capping
//!   concurrency outside it (thousands of passes waiting on a semaphore) cost more CPU than
//!   the passes themselves.
//!
//! [`Runner`] keeps the queue client-go keeps:
//! - a key is queued once however often it is triggered while it waits (**dirty**);
//! - a key triggered while its pass runs is queued again when the pass ends, at the back
//!   (**processing**), so one key is never reconciled twice at once;
//! - at most `workers` passes run at once, taken from the front;
//! - a pass's [`Action`] requeue (or its error policy's) is a timer per key, the earliest
//!   winning; a pass that starts for any reason supersedes the key's timer (its own result
//!   sets the next one), as kube-runtime's scheduler does.
//!
//! A pass gets the store's copy of its object when it starts, so a key that waited never works
//! from a stale copy; a key whose object is gone by then is dropped. Nothing starts before the
//! store has its first complete list. On shutdown no new pass starts, running ones finish, and
//! queued keys are dropped (a restarted controller lists everything again).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};
use tracing::Instrument;

use crate::work_queue::WorkQueue;

/// What a pass asks for next: nothing until a trigger, or another pass after a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile again after `duration` even if nothing triggers the key.
    #[must_use]
    pub const fn requeue(duration: Duration) -> Action {
        Action {
            requeue_after: Some(duration),
        }
    }

    /// Wait for a trigger.
    #[must_use]
    pub const fn await_change() -> Action {
        Action {
            requeue_after: None,
        }
    }

    /// The requested delay before the next pass, if any.
    pub const fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// The `Owner` keys an owned object's event names: one per owner reference of that kind and
/// API group, in the object's namespace (as kube-runtime's `owns` maps them, except that the
/// version is not compared: an owner reference keeps the `apiVersion` it was written with, and
/// objects made by older installs still say `v1alpha1` of a kind now served as `v1beta1`).
pub fn owners<Owner>(meta: &ObjectMeta) -> Vec<ObjectRef<Owner>>
where
    Owner: Resource<DynamicType = ()>,
{
    let kind = Owner::kind(&());
    let group = Owner::group(&());
    let mut refs = Vec::new();
    for owner in meta.owner_references.iter().flatten() {
        let owner_group = owner.api_version.split_once('/').map_or("", |(g, _)| g);
        if owner.kind == kind && owner_group == group {
            let key = ObjectRef::new(&owner.name);
            refs.push(match meta.namespace.as_deref() {
                Some(ns) => key.within(ns),
                None => key,
            });
        }
    }
    refs
}

/// The `Owner` keys ([`owners`]) of every object `objects` delivers, as a trigger stream.
pub fn owner_keys<Owner, K>(
    objects: impl Stream<Item = Arc<K>> + Send + 'static,
) -> futures::stream::BoxStream<'static, ObjectRef<Owner>>
where
    Owner: Resource<DynamicType = ()> + 'static,
    K: Resource + 'static,
{
    objects
        .flat_map(|obj| futures::stream::iter(owners::<Owner>(obj.meta())))
        .boxed()
}

/// The keys triggers hand one controller, in arrival order, deduplicated (client-go's queue).
struct Queue<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    fifo: VecDeque<ObjectRef<K>>,
    /// Keys that need a pass: queued, or triggered while their pass runs.
    dirty: HashSet<ObjectRef<K>>,
    processing: HashSet<ObjectRef<K>>,
}

impl<K: Resource> Queue<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn new() -> Self {
        Queue {
            fifo: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
        }
    }

    fn add(&mut self, key: ObjectRef<K>) {
        if self.dirty.contains(&key) {
            return;
        }
        self.dirty.insert(key.clone());
        if !self.processing.contains(&key) {
            self.fifo.push_back(key);
        }
    }

    fn pop(&mut self) -> Option<ObjectRef<K>> {
        let key = self.fifo.pop_front()?;
        self.dirty.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    fn done(&mut self, key: &ObjectRef<K>) {
        self.processing.remove(key);
        if self.dirty.contains(key) {
            self.fifo.push_back(key.clone());
        }
    }
}

/// Per-key requeue timers, the earliest winning.
struct Timers<K: Resource>
where
    K::DynamicType: Eq + Hash,
{
    queue: DelayQueue<ObjectRef<K>>,
    keys: HashMap<ObjectRef<K>, (delay_queue::Key, tokio::time::Instant)>,
}

impl<K: Resource> Timers<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn new() -> Self {
        Timers {
            queue: DelayQueue::new(),
            keys: HashMap::new(),
        }
    }

    fn schedule(&mut self, key: ObjectRef<K>, after: Duration) {
        let now = tokio::time::Instant::now();
        // Past any representable deadline means never (kube-runtime caps it the same way).
        let at = now
            .checked_add(after)
            .unwrap_or_else(|| now + Duration::from_secs(60 * 60 * 24 * 365));
        match self.keys.get_mut(&key) {
            Some((_, current)) if *current <= at => {}
            Some((slot, current)) => {
                self.queue.reset_at(slot, at);
                *current = at;
            }
            None => {
                let slot = self.queue.insert_at(key.clone(), at);
                self.keys.insert(key, (slot, at));
            }
        }
    }

    fn cancel(&mut self, key: &ObjectRef<K>) {
        if let Some((slot, _)) = self.keys.remove(key) {
            self.queue.remove(&slot);
        }
    }

    /// The next key whose timer ran out (pending while none has, `None` while there are none).
    async fn expired(&mut self) -> Option<ObjectRef<K>> {
        let expired = self.queue.next().await?.into_inner();
        self.keys.remove(&expired);
        Some(expired)
    }
}

/// One controller's reconcile loop (see the module docs).
pub struct Runner<K: Resource> {
    workers: usize,
    queue: WorkQueue,
    _kind: std::marker::PhantomData<fn() -> K>,
}

impl<K> Runner<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    /// A loop running at most `workers` passes at once (at least one), counted in `queue`'s
    /// work-queue metrics.
    pub fn new(workers: u16, queue: WorkQueue) -> Runner<K> {
        Runner {
            workers: usize::from(workers.max(1)),
            queue,
            _kind: std::marker::PhantomData,
        }
    }

    /// Runs until `shutdown` is cancelled (then lets running passes finish) or `triggers` ends
    /// and nothing is left to do. `triggers` yields the keys to reconcile; `reconcile` gets the
    /// stored object; `error_policy` says when to retry a failed pass.
    pub async fn run<Ctx, E, Fut>(
        self,
        store: Store<K>,
        triggers: impl Stream<Item = ObjectRef<K>> + Send,
        reconcile: impl Fn(Arc<K>, Arc<Ctx>) -> Fut,
        error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action,
        ctx: Arc<Ctx>,
        shutdown: CancellationToken,
    ) where
        Ctx: Send + Sync + 'static,
        E: std::fmt::Display + Send + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
    {
        let mut queue = Queue::<K>::new();
        let mut timers = Timers::<K>::new();
        let mut running = FuturesUnordered::new();
        let triggers = triggers.fuse();
        futures::pin_mut!(triggers);
        // The store's readiness signal wakes only its most recent waiter, and other parts of a
        // controller wait on the same store: poll it with a short timeout.
        let ready = async {
            loop {
                if let Ok(listed) = tokio::time::timeout(READY_POLL, store.wait_until_ready()).await
                {
                    return listed.is_ok();
                }
            }
        };
        futures::pin_mut!(ready);
        let mut is_ready = false;
        let mut stopping = false;
        loop {
            while is_ready && !stopping && running.len() < self.workers {
                let Some(key) = queue.pop() else {
                    break;
                };
                timers.cancel(&key);
                let Some(obj) = store.get(&key) else {
                    self.queue.forget(key.namespace.as_deref(), &key.name);
                    queue.done(&key);
                    continue;
                };
                let mut in_flight = self.queue.start(key.namespace.as_deref(), &key.name);
                let span = tracing::info_span!("reconciling object", "object.ref" = %key);
                let pass = tokio::spawn(reconcile(obj.clone(), ctx.clone()).instrument(span));
                running.push(async move {
                    let result = pass.await;
                    if !matches!(result, Ok(Ok(_))) {
                        in_flight.will_retry();
                    }
                    drop(in_flight);
                    (key, obj, result)
                });
            }
            if stopping && running.is_empty() {
                break;
            }
            tokio::select! {
                biased;
                () = shutdown.cancelled(), if !stopping => stopping = true,
                done = running.next(), if !running.is_empty() => {
                    let Some((key, obj, result)) = done else { continue };
                    queue.done(&key);
                    let action = match result {
                        Ok(Ok(action)) => action,
                        Ok(Err(error)) => {
                            tracing::debug!(object = %key, %error, "reconcile failed");
                            error_policy(obj, &error, ctx.clone())
                        }
                        Err(join_error) => {
                            tracing::error!(object = %key, error = %join_error, "reconcile panicked; retrying");
                            Action::requeue(PANIC_RETRY)
                        }
                    };
                    if let Some(after) = action.requeue_after() {
                        timers.schedule(key, after);
                    }
                }
                key = triggers.next(), if !stopping => match key {
                    Some(key) => {
                        self.queue.add(key.namespace.as_deref(), &key.name);
                        queue.add(key);
                    }
                    // The trigger streams end only when the controller is being stopped.
                    None => stopping = true,
                },
                Some(key) = timers.expired(), if !stopping => {
                    self.queue.add(key.namespace.as_deref(), &key.name);
                    queue.add(key);
                }
                listed = &mut ready, if !is_ready => {
                    if listed {
                        is_ready = true;
                    } else {
                        stopping = true;
                    }
                }
            }
        }
    }
}

/// How often the loop looks again whether its store has its first complete list.
const READY_POLL: Duration = Duration::from_millis(50);

/// Retry delay after a pass that panicked (the panic is logged; the key is not lost).
const PANIC_RETRY: Duration = Duration::from_secs(5);

#[cfg(test)]
mod tests;
