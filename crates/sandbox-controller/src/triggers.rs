//! Reconcile triggers that never run ahead of the reflector stores the reconciler reads.
//!
//! kube's `reflect` buffers a (re)list: `InitApply` objects go into a side buffer and the store
//! is swapped only at `InitDone`. A trigger taken from an `InitApply` event therefore starts a
//! reconcile that still reads the *old* store; once the swap happens nothing triggers again, so a
//! change that happened while the watch was down (a Pod turning Ready during a 410 Gone relist)
//! was never seen. [`SettledTriggers`] holds the (re)list's triggers back until `InitDone` and
//! then emits only what the relist changed: objects whose resourceVersion differs from the store
//! before the relist, new objects, and (optionally) objects that vanished.
//!
//! It can also hold every trigger until a gate opens (the other stores finished their first
//! list), so the first reconciles do not run against empty child stores.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

type Gate = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A stream of objects to reconcile (or to map to their owners), derived from a reflected
/// watch stream and the store that reflector writes.
pub struct SettledTriggers<S, K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    inner: Pin<Box<S>>,
    store: Store<K>,
    emit_deleted: bool,
    /// The store as it was when the current (re)list started.
    before_relist: Option<HashMap<ObjectRef<K>, Arc<K>>>,
    pending: VecDeque<Arc<K>>,
    gate: Option<Gate>,
    /// Something would have been emitted while the gate was closed.
    held: bool,
    inner_done: bool,
}

/// Triggers from `stream` (which must already be reflected into `store`): `Apply` (and, with
/// `emit_deleted`, `Delete`) objects at once; a (re)list's objects after `InitDone`, only those
/// it changed.
pub fn settled<S, K>(stream: S, store: Store<K>, emit_deleted: bool) -> SettledTriggers<S, K>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    SettledTriggers {
        inner: Box::pin(stream),
        store,
        emit_deleted,
        before_relist: None,
        pending: VecDeque::new(),
        gate: None,
        held: false,
        inner_done: false,
    }
}

impl<S, K> SettledTriggers<S, K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// Emits nothing until `gate` completes; then one trigger per object in the store if
    /// anything arrived meanwhile. The inner stream keeps being polled (its reflector keeps
    /// filling the store).
    pub fn gated(mut self, gate: impl Future<Output = ()> + Send + 'static) -> Self {
        self.gate = Some(Box::pin(gate));
        self
    }

    fn push(&mut self, obj: Arc<K>) {
        if self.gate.is_some() {
            self.held = true;
        } else {
            self.pending.push_back(obj);
        }
    }

    fn on_event(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(obj) => self.push(Arc::new(obj)),
            watcher::Event::Delete(obj) => {
                if self.emit_deleted {
                    self.push(Arc::new(obj));
                }
            }
            watcher::Event::Init => {
                // `reflect` has not touched the store yet: this is the state before the relist.
                let before = self
                    .store
                    .state()
                    .into_iter()
                    .map(|o| (ObjectRef::from_obj(o.as_ref()), o))
                    .collect();
                self.before_relist = Some(before);
            }
            watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                // The store now holds the relist's result.
                let mut before = self.before_relist.take().unwrap_or_default();
                for obj in self.store.state() {
                    let key = ObjectRef::from_obj(obj.as_ref());
                    let unchanged = before.remove(&key).is_some_and(|old| {
                        old.meta().resource_version.is_some()
                            && old.meta().resource_version == obj.meta().resource_version
                    });
                    if !unchanged {
                        self.push(obj);
                    }
                }
                if self.emit_deleted {
                    for (_, gone) in before {
                        self.push(gone);
                    }
                }
            }
        }
    }
}

// Nothing is structurally pinned: the inner stream and the gate are boxed.
impl<S, K> Unpin for SettledTriggers<S, K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
}

impl<S, K> Stream for SettledTriggers<S, K>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    type Item = Result<K, watcher::Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.gate.is_none()
                && let Some(obj) = this.pending.pop_front()
            {
                return Poll::Ready(Some(Ok(Arc::unwrap_or_clone(obj))));
            }
            if let Some(gate) = this.gate.as_mut()
                && gate.as_mut().poll(cx).is_ready()
            {
                this.gate = None;
                if std::mem::take(&mut this.held) {
                    this.pending.extend(this.store.state());
                }
                continue;
            }
            if this.inner_done {
                return if this.gate.is_some() {
                    Poll::Pending
                } else {
                    Poll::Ready(None)
                };
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(event))) => this.on_event(event),
                Poll::Ready(Some(Err(err))) => return Poll::Ready(Some(Err(err))),
                Poll::Ready(None) => this.inner_done = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{StreamExt, stream};
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::WatchStreamExt;
    use kube::runtime::reflector;

    fn pod(name: &str, rv: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.resource_version = Some(rv.into());
        p
    }

    type Events = Vec<Result<watcher::Event<Pod>, watcher::Error>>;

    /// Runs `events` through a reflector and the trigger adapter; returns, per trigger, the
    /// object's name and rv and what the store held for that name when the trigger came out.
    async fn run(events: Events, emit_deleted: bool) -> Vec<(String, String, Option<String>)> {
        let (store, writer) = reflector::store::<Pod>();
        let reflected = stream::iter(events).reflect(writer);
        let triggers = settled(reflected, store.clone(), emit_deleted);
        triggers
            .map(|t| {
                let p = t.expect("no errors in this input");
                let name = p.metadata.name.clone().unwrap_or_default();
                let in_store = store
                    .get(&ObjectRef::new(&name).within("ns"))
                    .and_then(|s| s.metadata.resource_version.clone());
                (
                    name,
                    p.metadata.resource_version.unwrap_or_default(),
                    in_store,
                )
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_relist_triggers_only_after_the_store_holds_its_result() {
        let events: Events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a", "1"))),
            Ok(watcher::Event::InitApply(pod("b", "2"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(pod("a", "3"))),
            // The watch fell behind (410) and relists: a changed, b unchanged, c new.
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pod("a", "5"))),
            Ok(watcher::Event::InitApply(pod("b", "2"))),
            Ok(watcher::Event::InitApply(pod("c", "4"))),
            Ok(watcher::Event::InitDone),
        ];
        let mut out = run(events, false).await;
        let (first_list, rest) = out.split_at_mut(2);
        first_list.sort();
        assert_eq!(
            first_list,
            [
                ("a".into(), "1".into(), Some("1".into())),
                ("b".into(), "2".into(), Some("2".into()))
            ]
        );
        let (watched, relist) = rest.split_at_mut(1);
        assert_eq!(watched, [("a".into(), "3".into(), Some("3".into()))]);
        relist.sort();
        // Each relist trigger sees the store already holding the relisted object.
        assert_eq!(
            relist,
            [
                ("a".into(), "5".into(), Some("5".into())),
                ("c".into(), "4".into(), Some("4".into()))
            ]
        );
    }

    #[tokio::test]
    async fn objects_gone_during_a_relist_trigger_when_deletions_are_wanted() {
        let events = || -> Events {
            vec![
                Ok(watcher::Event::Init),
                Ok(watcher::Event::InitApply(pod("a", "1"))),
                Ok(watcher::Event::InitDone),
                Ok(watcher::Event::Init),
                Ok(watcher::Event::InitDone),
                Ok(watcher::Event::Delete(pod("z", "9"))),
            ]
        };
        let with = run(events(), true).await;
        assert_eq!(
            with,
            [
                ("a".into(), "1".into(), Some("1".into())),
                ("a".into(), "1".into(), None),
                ("z".into(), "9".into(), None)
            ]
        );
        let without = run(events(), false).await;
        assert_eq!(without, [("a".into(), "1".into(), Some("1".into()))]);
    }

    #[tokio::test]
    async fn a_closed_gate_holds_triggers_then_releases_the_whole_store() {
        let (store, writer) = reflector::store::<Pod>();
        let (open, opened) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let reflected = rx.reflect(writer);
        let mut triggers = settled(reflected, store.clone(), false).gated(async {
            let _ = opened.await;
        });
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "1")),
            watcher::Event::InitDone,
            watcher::Event::Apply(pod("b", "2")),
        ] {
            tx.unbounded_send(Ok(ev)).expect("receiver alive");
        }
        let early = tokio::time::timeout(std::time::Duration::from_millis(50), triggers.next());
        assert!(early.await.is_err(), "nothing comes out while gated");
        assert_eq!(store.state().len(), 2, "the reflector kept running");
        open.send(()).expect("gate listening");
        let mut names = Vec::new();
        for _ in 0..2 {
            let p = triggers.next().await.expect("trigger").expect("ok");
            names.push(p.metadata.name.unwrap_or_default());
        }
        names.sort();
        assert_eq!(names, ["a", "b"]);
        tx.unbounded_send(Ok(watcher::Event::Apply(pod("a", "3"))))
            .expect("receiver alive");
        let next = triggers.next().await.expect("trigger").expect("ok");
        assert_eq!(next.metadata.resource_version.as_deref(), Some("3"));
    }
}
