//! Wiring: one reflector per kind (Sandboxes, Pods, Services, PVCs, kube-runtime's watchers and
//! stores), owner-reference triggers for the children, the Sandbox watch filtered so the
//! controller's own status writes do not trigger it again, and the reconcile loop
//! (`controller_common::runner`) those triggers feed.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::api::Api;

use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use kube::runtime::utils::{PredicateConfig, WatchStreamExt};
use kube::runtime::watcher;
use kube::{Client, Resource};

use controller_common::events::{EventRecorder, Reporter};
use controller_common::lean::{Lean, lean_events};
use controller_common::runner::{Runner, owners};
use controller_common::work_queue::{WorkQueue, WorkQueueMetrics};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::cached_pod::CachedPod;
use crate::cached_sandbox::CachedSandbox;
use crate::context::{Context, Settings, Stores};
use crate::created::{Created, CreatedChildren};
use crate::error::Error;
use crate::keys::{NAME_HASH_LABEL, name_hash};
use crate::metrics::Metrics;
use crate::pod_index::PodIndex;
use crate::reconcile::{error_policy, reconcile};
use crate::sandbox_counts::SandboxCounts;
use crate::triggers::settled;

/// How to run the Sandbox controller.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    pub settings: Settings,
    /// Sandboxes reconciled concurrently (a Sandbox is never reconciled twice at once).
    pub workers: u16,
    /// Watch only Pods and Services that carry the tracking label (less memory on busy
    /// clusters).
    pub label_scoped_cache: bool,
    /// Identity of this replica in published events.
    pub instance: Option<String>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            settings: Settings::default(),
            workers: 100,
            label_scoped_cache: false,
            instance: None,
        }
    }
}

/// Objects per page of a watcher's (re)list. kube's default is 500: a page of Pods is then a
/// response body of megabytes, parsed and freed once per page at every start. At 10,000
/// Sandboxes, 250 took the RSS right after a restart from ~102 to 92-97 MiB with restart →
/// ready at 3.3-4.1 s (two runs); 100 went further on memory but took 5.7 s to be ready (one run).
const LIST_PAGE_SIZE: u32 = 250;

/// A built, not yet running, Sandbox controller.
pub struct SandboxController {
    client: Client,
    options: ControllerOptions,
    stores: Stores,
    writers: (
        Writer<CachedSandbox>,
        Writer<CachedPod>,
        Writer<Service>,
        Writer<PersistentVolumeClaim>,
    ),
    metrics: Metrics,
    /// `agent_sandboxes`' counts, fed from the Sandbox watch after the store.
    sandbox_counts: SandboxCounts,
    queue: WorkQueue,
}

/// What a Sandbox change must touch to trigger a reconcile: spec (generation), labels,
/// annotations, owner references, deletion. Status-only updates (our own writes) do not.
fn sandbox_trigger(sb: &CachedSandbox) -> Option<u64> {
    let mut h = DefaultHasher::new();
    sb.metadata.generation.hash(&mut h);
    sb.metadata.labels.hash(&mut h);
    sb.metadata.annotations.hash(&mut h);
    sb.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    if let Some(refs) = &sb.metadata.owner_references {
        for r in refs {
            (&r.uid, &r.kind, &r.api_version, r.controller).hash(&mut h);
        }
    }
    Some(h.finish())
}

impl SandboxController {
    /// The Sandbox work queue (for the liveness probe: `controller_common::admin::Liveness`).
    pub fn work_queue(&self) -> WorkQueue {
        self.queue.clone()
    }

    /// Builds the stores and registers the metrics (including `agent_sandboxes`, counted from
    /// the Sandbox watch) in `registry`.
    pub fn new(client: Client, options: ControllerOptions, registry: &mut Registry) -> Self {
        let (sandboxes, sb_w) = reflector::store::<CachedSandbox>();
        let (pods, pod_w) = reflector::store::<CachedPod>();
        let (services, svc_w) = reflector::store::<Service>();
        let (pvcs, pvc_w) = reflector::store::<PersistentVolumeClaim>();
        let sandbox_counts = SandboxCounts::default();
        let metrics = Metrics::register(registry, Some(sandbox_counts.clone()));
        metrics.set_max_concurrent(options.workers);
        let queue = WorkQueueMetrics::register(registry).queue(crate::metrics::CONTROLLER);
        SandboxController {
            client,
            options,
            stores: Stores {
                sandboxes,
                pods,
                pod_index: PodIndex::default(),
                services,
                pvcs,
            },
            writers: (sb_w, pod_w, svc_w, pvc_w),
            metrics,
            sandbox_counts,
            queue,
        }
    }

    /// The reflector stores (read-only views), e.g. to wait until they are synced.
    pub fn stores(&self) -> Stores {
        self.stores.clone()
    }

    /// Runs until `shutdown` is cancelled; in-flight reconciles finish first.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let SandboxController {
            client,
            options,
            stores,
            writers: (sb_w, pod_w, svc_w, pvc_w),
            metrics,
            sandbox_counts,
            queue,
        } = self;
        let child_config = if options.label_scoped_cache {
            watcher::Config::default()
                .page_size(LIST_PAGE_SIZE)
                .labels(NAME_HASH_LABEL)
        } else {
            watcher::Config::default().page_size(LIST_PAGE_SIZE)
        };

        let recorder = options.settings.events.then(|| {
            EventRecorder::new(
                client.clone(),
                Reporter {
                    controller: crate::context::FIELD_MANAGER.to_string(),
                    instance: options.instance.clone(),
                },
            )
        });
        let ctx = Arc::new(Context::new(
            client.clone(),
            stores.clone(),
            options.settings.clone(),
            metrics,
            recorder,
        ));

        // Every trigger is emitted only once the store it came from reflects it (a relist's
        // triggers wait for the relist to complete), and no Sandbox is reconciled before the
        // child stores finished their first list: see `triggers`.
        let children = stores.clone();
        let sandbox_stream = settled(
            watcher(
                Api::<CachedSandbox>::all(client.clone()),
                watcher::Config::default().page_size(LIST_PAGE_SIZE),
            )
            .default_backoff()
            .modify(CachedSandbox::slim)
            .reflect(sb_w)
            .inspect({
                // After the store: the remembered writes whose version it now holds are done.
                let ctx = ctx.clone();
                move |event| {
                    if let Ok(event) = event {
                        sandbox_counts.observe(event);
                        if let watcher::Event::Apply(sb) | watcher::Event::InitApply(sb) = event {
                            ctx.delivered(sb);
                        }
                    }
                }
            }),
            stores.sandboxes.clone(),
            false,
        )
        .gated(async move {
            children.wait_until_children_ready().await;
        })
        .predicate_filter(sandbox_trigger, PredicateConfig::default());
        let pod_stream = settled(
            watcher(Api::<CachedPod>::all(client.clone()), child_config.clone())
                .default_backoff()
                .modify(CachedPod::slim)
                .reflect(pod_w)
                .inspect({
                    // After the store, before the triggers: a reconcile a Pod event triggers
                    // finds that Pod through the index.
                    let index = stores.pod_index.clone();
                    let ctx = ctx.clone();
                    move |event| {
                        if let Ok(event) = event {
                            index.apply_watcher_event(event);
                            ctx.created.pods.observe(event);
                        }
                    }
                }),
            stores.pods.clone(),
            true,
        );
        let svc_stream = settled(
            lean_events(watcher(
                Api::<Lean<Service>>::all(client.clone()),
                child_config,
            ))
            .default_backoff()
            .reflect(svc_w)
            .inspect(settle_creates(ctx.clone(), |c| &c.services)),
            stores.services.clone(),
            true,
        );
        let pvc_stream = settled(
            lean_events(watcher(
                Api::<Lean<PersistentVolumeClaim>>::all(client.clone()),
                watcher::Config::default().page_size(LIST_PAGE_SIZE),
            ))
            .default_backoff()
            .reflect(pvc_w)
            .inspect(settle_creates(ctx.clone(), |c| &c.pvcs)),
            stores.pvcs.clone(),
            true,
        );

        // Every second, forget remembered writes the cache has caught up with (a pass over
        // those entries only); every 10 s, also forget per-Sandbox memory of deleted
        // Sandboxes (one pass over the Sandbox store).
        let janitor = {
            let ctx = ctx.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                let mut ticks = 0u64;
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tick.tick() => {
                            ticks += 1;
                            if ticks.is_multiple_of(10) {
                                ctx.prune_departed();
                            } else {
                                ctx.forget_caught_up_writes();
                            }
                        }
                    }
                }
            })
        };

        // The controller's own first come, first served work queue
        // (`controller_common::runner`), fed by its triggers' keys.
        let triggers = futures::stream::select_all([
            keys(sandbox_stream, |sb: CachedSandbox| {
                vec![ObjectRef::from_obj(&sb)]
            }),
            // The echo of a pass's own Pod create or relabel triggers nothing (`OwnWrites`).
            keys(
                pod_stream.filter({
                    let ctx = ctx.clone();
                    move |event| {
                        let echo = matches!(event, Ok(p) if ctx.own_pod_writes.is_echo(p.meta()));
                        std::future::ready(!echo)
                    }
                }),
                {
                    let sandboxes = stores.sandboxes.clone();
                    move |p: CachedPod| {
                        let mut keys = owners::<CachedSandbox>(p.meta());
                        keys.extend(labelled_sandboxes(&p, &sandboxes));
                        keys
                    }
                },
            ),
            keys(svc_stream, |s: Service| owners::<CachedSandbox>(s.meta())),
            keys(pvc_stream, |p: PersistentVolumeClaim| {
                owners::<CachedSandbox>(p.meta())
            }),
        ]);
        Runner::new(options.workers, queue)
            .run(
                stores.sandboxes.clone(),
                triggers,
                reconcile,
                error_policy,
                ctx,
                shutdown,
            )
            .await;
        janitor.abort();
        Ok(())
    }
}

/// A step of a child watch stream after its store: the events it applied settle the creates
/// this process remembers (`crate::created`).
fn settle_creates<K: Resource, C: Resource + Clone>(
    ctx: Arc<Context>,
    created: fn(&CreatedChildren) -> &Created<C>,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |event| {
        if let Ok(event) = event {
            created(&ctx.created).observe(event);
        }
    }
}

/// The Sandbox keys a watch stream's objects name (`to_keys`); watch errors are logged (the
/// watcher retries with backoff and relists after a 410, and the relist's changes trigger
/// reconciles once the store holds them).
fn keys<T, S>(
    stream: S,
    to_keys: impl Fn(T) -> Vec<ObjectRef<CachedSandbox>> + Send + 'static,
) -> futures::stream::BoxStream<'static, ObjectRef<CachedSandbox>>
where
    S: futures::Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    T: Send + 'static,
{
    stream
        .flat_map(move |event| {
            futures::stream::iter(match event {
                Ok(obj) => to_keys(obj),
                Err(err) => {
                    tracing::warn!(error = %err, "watch failed; retrying");
                    Vec::new()
                }
            })
        })
        .boxed()
}

/// The Sandboxes whose tracking label `pod` carries without being controlled by them: a Pod
/// someone else made (or a leftover) that their Service would select, so they must look at it
/// (`reconcile::foreign_pods_selected`), also when it goes away. Our own Pods are controlled by
/// the Sandbox their label names, so the common case costs no lookup; otherwise the namespace's
/// Sandboxes are scanned, which only such Pods pay for.
fn labelled_sandboxes(
    pod: &CachedPod,
    sandboxes: &reflector::Store<CachedSandbox>,
) -> Vec<ObjectRef<CachedSandbox>> {
    let Some(label) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(NAME_HASH_LABEL))
    else {
        return Vec::new();
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let controlled_by_its_sandbox = pod.metadata.owner_references.iter().flatten().any(|r| {
        r.controller == Some(true)
            && r.kind == crate::keys::SANDBOX_KIND
            && name_hash(&r.name) == *label
    });
    if controlled_by_its_sandbox {
        return Vec::new();
    }
    sandboxes
        .state()
        .iter()
        .filter(|sb| {
            sb.metadata.namespace.as_deref() == Some(namespace)
                && sb
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| name_hash(n) == *label)
        })
        .map(|sb| ObjectRef::from_obj(&**sb))
        .collect()
}

/// Waits for one store's initial list. kube's readiness signal wakes only the most recent waiter
/// (the controller itself waits on the same store), so poll with a short timeout: each new poll
/// sees the readiness once any waiter has observed it.
async fn wait_store<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(
            std::time::Duration::from_millis(200),
            store.wait_until_ready(),
        )
        .await
        {
            Ok(res) => return res.is_ok(),
            Err(_elapsed) => continue,
        }
    }
}

/// Stores are synced when every reflector has completed its initial list.
impl Stores {
    pub async fn wait_until_ready(&self) -> bool {
        wait_store(&self.sandboxes).await && self.wait_until_children_ready().await
    }

    /// The Pod, Service and PVC stores completed their first list.
    pub async fn wait_until_children_ready(&self) -> bool {
        wait_store(&self.pods).await
            && wait_store(&self.services).await
            && wait_store(&self.pvcs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::SandboxStatus;

    #[test]
    fn status_only_changes_do_not_trigger_but_spec_and_metadata_do() {
        let mut sb = CachedSandbox::default();
        sb.metadata.name = Some("sb".into());
        sb.metadata.generation = Some(1);
        let base = sandbox_trigger(&sb);
        let mut status_only = sb.clone();
        status_only.status = Some(SandboxStatus {
            node_name: "node-1".into(),
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("42".into());
        assert_eq!(sandbox_trigger(&status_only), base);
        let mut spec = sb.clone();
        spec.metadata.generation = Some(2);
        assert_ne!(sandbox_trigger(&spec), base);
        let mut annotated = sb.clone();
        annotated.metadata.annotations = Some([("k".to_string(), "v".to_string())].into());
        assert_ne!(sandbox_trigger(&annotated), base);
    }
}
