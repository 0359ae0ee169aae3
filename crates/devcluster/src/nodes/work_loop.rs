//! The simulated nodes' work loop: first come, first served, one pass per object at a time.
//!
//! The agent's own, sized to its need (no metrics, no tracing spans, no leader election), so
//! that devcluster depends on no controller code. It keeps the order a kubelet's and a
//! scheduler's queues keep, which the agent needs under load (kube-runtime's runner served
//! waiting keys in hash order, so some pods waited many seconds to be bound or started):
//! - a key is queued once however often it is triggered while it waits;
//! - a key triggered while its pass runs is queued again when the pass ends, at the back, so
//!   an object is never worked on twice at once;
//! - at most `workers` passes run at once, taken from the front;
//! - a pass may ask to be run again after a delay (a timer per key; the earliest wins, and a
//!   pass that starts for any reason supersedes the key's timer).
//!
//! A pass gets the store's copy of its object when it starts (a key whose object is gone by
//! then is dropped). Nothing starts before the store has its first complete list. On shutdown
//! no pass starts, and running ones finish.

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt as _};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::time::{DelayQueue, delay_queue};

/// What a pass asks for next: nothing until its object changes, or another pass after a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Next(Option<Duration>);

impl Next {
    /// Run again after `after`, even if nothing changes.
    pub const fn after(after: Duration) -> Next {
        Next(Some(after))
    }

    /// Wait for the object to change.
    pub const fn change() -> Next {
        Next(None)
    }
}

/// How often the loop looks again whether its store has its first complete list (the store's
/// readiness signal wakes only its most recent waiter, and the sweeper waits on it too).
const READY_POLL: Duration = Duration::from_millis(50);

/// Retry delay after a pass that panicked.
const PANIC_RETRY: Duration = Duration::from_secs(5);

/// The keys waiting, in arrival order, and the keys being worked on.
struct Queue<K: Resource> {
    order: VecDeque<ObjectRef<K>>,
    waiting: HashSet<ObjectRef<K>>,
    processing: HashSet<ObjectRef<K>>,
    /// Keys triggered while their pass runs: queued again when it ends.
    again: HashSet<ObjectRef<K>>,
}

impl<K> Queue<K>
where
    K: Resource,
    K::DynamicType: Eq + Hash + Clone,
{
    fn new() -> Self {
        Queue {
            order: VecDeque::new(),
            waiting: HashSet::new(),
            processing: HashSet::new(),
            again: HashSet::new(),
        }
    }

    fn add(&mut self, key: ObjectRef<K>) {
        if self.processing.contains(&key) {
            self.again.insert(key);
        } else if self.waiting.insert(key.clone()) {
            self.order.push_back(key);
        }
    }

    /// The first waiting key, now being worked on.
    fn pop(&mut self) -> Option<ObjectRef<K>> {
        let key = self.order.pop_front()?;
        self.waiting.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    /// Its pass ended (or never started): queued again if it was triggered meanwhile.
    fn done(&mut self, key: &ObjectRef<K>) {
        self.processing.remove(key);
        if self.again.remove(key) {
            self.add(key.clone());
        }
    }
}

/// One timer per key; the earliest wins.
struct Timers<K: Resource> {
    queue: DelayQueue<ObjectRef<K>>,
    keys: HashMap<ObjectRef<K>, (delay_queue::Key, tokio::time::Instant)>,
}

impl<K> Timers<K>
where
    K: Resource,
    K::DynamicType: Eq + Hash + Clone,
{
    fn new() -> Self {
        Timers {
            queue: DelayQueue::new(),
            keys: HashMap::new(),
        }
    }

    fn schedule(&mut self, key: ObjectRef<K>, after: Duration) {
        let due = tokio::time::Instant::now() + after;
        if self.keys.get(&key).is_some_and(|(_, at)| *at <= due) {
            return;
        }
        self.cancel(&key);
        let timer = self.queue.insert_at(key.clone(), due);
        self.keys.insert(key, (timer, due));
    }

    fn cancel(&mut self, key: &ObjectRef<K>) {
        if let Some((timer, _)) = self.keys.remove(key) {
            self.queue.remove(&timer);
        }
    }

    /// The next key whose timer ran out (pending while none has, `None` while there are none).
    async fn expired(&mut self) -> Option<ObjectRef<K>> {
        let key = self.queue.next().await?.into_inner();
        self.keys.remove(&key);
        Some(key)
    }
}

/// Runs `pass` for the objects `triggers` names (see the module docs) until `shutdown`.
pub async fn run<K, Ctx, Fut>(
    workers: usize,
    store: Store<K>,
    triggers: impl Stream<Item = ObjectRef<K>> + Send,
    pass: impl Fn(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
    shutdown: CancellationToken,
) where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    Ctx: Send + Sync + 'static,
    Fut: Future<Output = Next> + Send + 'static,
{
    let workers = workers.max(1);
    let mut queue = Queue::<K>::new();
    let mut timers = Timers::<K>::new();
    let mut running = FuturesUnordered::new();
    let triggers = triggers.fuse();
    futures::pin_mut!(triggers);
    let ready = async {
        loop {
            if let Ok(listed) = tokio::time::timeout(READY_POLL, store.wait_until_ready()).await {
                return listed.is_ok();
            }
        }
    };
    futures::pin_mut!(ready);
    let mut is_ready = false;
    let mut stopping = false;
    loop {
        while is_ready && !stopping && running.len() < workers {
            let Some(key) = queue.pop() else {
                break;
            };
            timers.cancel(&key);
            let Some(obj) = store.get(&key) else {
                queue.done(&key);
                continue;
            };
            let job = tokio::spawn(pass(obj, ctx.clone()));
            running.push(async move { (key, job.await) });
        }
        if stopping && running.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            () = shutdown.cancelled(), if !stopping => stopping = true,
            done = running.next(), if !running.is_empty() => {
                let Some((key, result)) = done else { continue };
                let next = result.unwrap_or_else(|error| {
                    tracing::error!(object = %key, %error, "simulated node step panicked; retrying");
                    Next::after(PANIC_RETRY)
                });
                if let Some(after) = next.0 {
                    timers.schedule(key.clone(), after);
                }
                queue.done(&key);
            }
            key = triggers.next(), if !stopping => match key {
                Some(key) => queue.add(key),
                None => stopping = true,
            },
            Some(key) = timers.expired(), if !stopping => queue.add(key),
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
