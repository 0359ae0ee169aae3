//! Wiring: one shared watch per kind (so the three controllers read the same caches and the
//! API server serves one watch per kind; `controller_common::runner::shared_watch`), the hooks
//! that keep the indexes and the claim ledger in step with the caches, and the three
//! controllers' runners with their triggers.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use api_types::keys::{SANDBOX_ID_LABEL, SANDBOX_WARM_POOL_LABEL};
use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool, name_hash};
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::WatchStreamExt;
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

use controller_common::events::{EventRecorder, Reporter};
use controller_common::lean::{Lean, lean_events};
use controller_common::runner::shared_watch::{Triggers, shared_watch_observed};
use controller_common::runner::{Runner, owner_keys};
use controller_common::work_queue::WorkQueueMetrics;

use crate::claim;
use crate::claim::ledger::ClaimLedger;
use crate::claim::state::{ClaimSettings, ClaimState};
use crate::context::Context;
use crate::metrics::ClaimMetrics;
use crate::ownership::{WARM_POOL_KIND, controlling_pool, refers_to_kind};
use crate::stores::Stores;
use crate::stores::sandbox_index::SandboxIndex;
use crate::warm_pool::state::{PoolSettings, PoolState};
use crate::{template, warm_pool};

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub pool: PoolSettings,
    pub claim: ClaimSettings,
    pub claim_workers: u16,
    pub pool_workers: u16,
    pub template_workers: u16,
    /// Event reporter instance (pod name).
    pub instance: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            pool: PoolSettings::default(),
            claim: ClaimSettings::default(),
            claim_workers: 50,
            pool_workers: 1,
            template_workers: 1,
            instance: None,
        }
    }
}

/// Objects cached as the watch delivers them (every watch decodes without managedFields:
/// [`controller_common::lean`]).
fn keep_whole<K>(_: &mut K) {}

/// True when a Sandbox is the extensions controllers' business: a pool member (pool label),
/// or controlled or owned by a pool or a claim (warm-adopted, cold, or a deleted pool's
/// orphan).
fn is_ours(sb: &Sandbox) -> bool {
    let meta = &sb.metadata;
    meta.labels.as_ref().is_some_and(|l| {
        l.contains_key(SANDBOX_WARM_POOL_LABEL) || l.contains_key(SANDBOX_ID_LABEL)
    }) || meta.owner_references.iter().flatten().any(|o| {
        refers_to_kind(o, WARM_POOL_KIND) || refers_to_kind(o, crate::ownership::CLAIM_KIND)
    })
}

/// Sandboxes that are neither pool members nor claims' keep only their metadata in the cache:
/// the controllers only ever look at such a Sandbox to tell that a claim's name is taken by
/// someone else's, and at 10,000 bare Sandboxes their specs and statuses were most of this
/// process' memory. An event that makes a Sandbox ours carries it whole again.
///
/// Of a Sandbox without the pool label (a claim's: adopted or cold) the pod template's spec is
/// dropped too: only a pool vets a pod spec (`warm_pool::blueprint::is_stale`, on members
/// carrying its label); a claim reads its Sandbox's metadata, pod-template metadata and status.
/// Keeping it cost a deep copy into the store on every event of every claimed Sandbox. An
/// event that labels it again carries the spec again.
fn slim_sandbox(sb: &mut Sandbox) {
    if !is_ours(sb) {
        sb.spec = Default::default();
        sb.status = None;
    } else if !sb
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(SANDBOX_WARM_POOL_LABEL))
    {
        sb.spec.blueprint.pod_template.spec = PodSpec::default();
    }
}

/// Pods are only read for their scheduling state.
fn slim_pod(pod: &mut Pod) {
    pod.spec = Some(PodSpec {
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ..PodSpec::default()
    });
}

/// Passes an object only when `fingerprint` changed since the last time (status-only updates
/// of our own writes are dropped this way).
fn changed_only<K, S>(
    stream: S,
    fingerprint: fn(&K) -> u64,
    store: Store<K>,
) -> impl Stream<Item = Arc<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    S: Stream<Item = Arc<K>> + Send + 'static,
{
    let seen: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
    stream.filter(move |obj| {
        let uid = obj.meta().uid.clone().unwrap_or_default();
        let print = fingerprint(obj);
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        let changed = seen.insert(uid, print) != Some(print);
        // Forget deleted objects now and then (cheap: only when the map has clearly outgrown
        // the cache).
        if seen.len() > 2 * store.len() + 1024 {
            let live: HashSet<String> = store
                .state()
                .iter()
                .filter_map(|o| o.meta().uid.clone())
                .collect();
            seen.retain(|uid, _| live.contains(uid));
        }
        future::ready(changed)
    })
}

fn spec_fingerprint<K: Resource>(obj: &K) -> u64 {
    let mut h = DefaultHasher::new();
    let meta = obj.meta();
    meta.generation.hash(&mut h);
    meta.labels.hash(&mut h);
    meta.annotations.hash(&mut h);
    meta.deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .hash(&mut h);
    h.finish()
}

fn pool_fingerprint(pool: &SandboxWarmPool) -> u64 {
    spec_fingerprint(pool)
}

fn claim_fingerprint(claim: &SandboxClaim) -> u64 {
    spec_fingerprint(claim)
}

/// A shared watch: the store, the driver future and `subscribers` trigger streams, each handed
/// every event's object (deletions included, marked with a deletionTimestamp) after the store
/// applied it ([`controller_common::runner::shared_watch`]). `before` sees every event before
/// the store applies it, `after` once it has and before any subscriber is handed it.
fn shared<K>(
    client: &Client,
    config: watcher::Config,
    subscribers: usize,
    trim: fn(&mut K),
    before: impl Fn(&watcher::Event<K>) + Send + 'static,
    after: impl Fn(&watcher::Event<K>) + Send + 'static,
) -> (
    Store<K>,
    impl std::future::Future<Output = ()> + Send + 'static,
    Vec<Triggers<K>>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let events = lean_events(watcher(Api::<Lean<K>>::all(client.clone()), config))
        .default_backoff()
        .modify(trim)
        .inspect(move |event| {
            if let Ok(event) = event {
                before(event);
            }
        });
    shared_watch_observed(events, subscribers, after)
}

/// The pools a Sandbox event concerns: its controlling pool, any pool owner, the pool its label
/// names, and the pool it just left (a member a claim took: the pool must replace it, and the
/// event shows only the new owner; [`SandboxIndex::take_departed`]).
fn pools_for_sandbox(
    pools: &Store<SandboxWarmPool>,
    index: &SandboxIndex,
    sb: &Sandbox,
) -> Vec<ObjectRef<SandboxWarmPool>> {
    let Some(namespace) = sb.metadata.namespace.as_deref() else {
        return Vec::new();
    };
    let mut refs = HashSet::new();
    if let Some(name) = sb.metadata.name.as_deref()
        && let Some(pool) = index.take_departed(namespace, name)
    {
        refs.insert(ObjectRef::new(&pool).within(namespace));
    }
    if let Some(owner) = controlling_pool(&sb.metadata) {
        refs.insert(ObjectRef::new(&owner.name).within(namespace));
    }
    for owner in sb
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| refers_to_kind(o, WARM_POOL_KIND))
    {
        refs.insert(ObjectRef::new(&owner.name).within(namespace));
    }
    if let Some(hash) = sb
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SANDBOX_WARM_POOL_LABEL))
    {
        for pool in pools.state() {
            if pool.metadata.namespace.as_deref() == Some(namespace)
                && pool
                    .metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| name_hash(n) == *hash)
            {
                refs.insert(ObjectRef::from_obj(&*pool));
            }
        }
    }
    refs.into_iter().collect()
}

fn pools_for_template(
    pools: &Store<SandboxWarmPool>,
    template: &SandboxTemplate,
) -> Vec<ObjectRef<SandboxWarmPool>> {
    pools
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace == template.metadata.namespace
                && Some(p.spec.sandbox_template_ref.name.as_str())
                    == template.metadata.name.as_deref()
        })
        .map(|p| ObjectRef::from_obj(&*p))
        .collect()
}

fn is_unbound(claim: &SandboxClaim) -> bool {
    claim.metadata.deletion_timestamp.is_none()
        && claim
            .status
            .as_ref()
            .is_none_or(|s| s.sandbox.name.is_empty())
}

fn claims_for_pool(
    claims: &Store<SandboxClaim>,
    pool: &SandboxWarmPool,
) -> Vec<ObjectRef<SandboxClaim>> {
    claims
        .state()
        .into_iter()
        .filter(|c| {
            c.metadata.namespace == pool.metadata.namespace
                && Some(c.spec.warm_pool_ref.name.as_str()) == pool.metadata.name.as_deref()
                && is_unbound(c)
        })
        .map(|c| ObjectRef::from_obj(&*c))
        .collect()
}

/// The templates a NetworkPolicy event concerns: its owner, or the template whose policy name
/// it has (a foreign policy holding that name, deleted or not, decides whether the template's
/// can be made).
fn templates_for_policy(
    templates: &Store<SandboxTemplate>,
    np: &NetworkPolicy,
) -> Vec<ObjectRef<SandboxTemplate>> {
    let mut refs: HashSet<ObjectRef<SandboxTemplate>> =
        controller_common::runner::owners::<SandboxTemplate>(&np.metadata)
            .into_iter()
            .collect();
    let (Some(namespace), Some(name)) = (
        np.metadata.namespace.as_deref(),
        np.metadata.name.as_deref(),
    ) else {
        return refs.into_iter().collect();
    };
    if name.ends_with("-network-policy") {
        for t in templates.state() {
            if t.metadata.namespace.as_deref() == Some(namespace)
                && t.metadata
                    .name
                    .as_deref()
                    .is_some_and(|t| template::network_policy::policy_name(t) == name)
            {
                refs.insert(ObjectRef::from_obj(&*t));
            }
        }
    }
    refs.into_iter().collect()
}

fn claims_for_template(
    pools: &Store<SandboxWarmPool>,
    claims: &Store<SandboxClaim>,
    template: &SandboxTemplate,
) -> Vec<ObjectRef<SandboxClaim>> {
    pools_for_template(pools, template)
        .into_iter()
        .filter_map(|pool| pools.get(&pool))
        .flat_map(|pool| claims_for_pool(claims, &pool))
        .collect()
}

/// The three controllers, ready to run.
pub struct ExtensionsController {
    client: Client,
    options: Options,
    metrics: ClaimMetrics,
    reconcile_metrics: Option<controller_common::ControllerMetrics>,
}

impl ExtensionsController {
    pub fn new(
        client: Client,
        options: Options,
        metrics: ClaimMetrics,
        reconcile_metrics: Option<controller_common::ControllerMetrics>,
    ) -> Self {
        ExtensionsController {
            client,
            options,
            metrics,
            reconcile_metrics,
        }
    }

    /// Runs until `shutdown` is cancelled. `on_synced` is called once every cache is filled.
    pub async fn run(self, shutdown: CancellationToken, on_synced: impl FnOnce() + Send + 'static) {
        let ExtensionsController {
            client,
            options,
            metrics,
            reconcile_metrics,
        } = self;
        let sandbox_index = SandboxIndex::default();
        let index_writer = sandbox_index.clone();
        // The claim controller's memory follows its caches: when a claim first arrived, when
        // the caches show what it wrote (`claim::ledger`).
        let ledger = Arc::new(ClaimLedger::default());
        let (sandbox_ledger, arrivals, deliveries) =
            (ledger.clone(), ledger.clone(), ledger.clone());
        let (sandboxes, sb_driver, mut sb_subs) = shared::<Sandbox>(
            &client,
            watcher::Config::default(),
            2,
            slim_sandbox,
            move |event| index_writer.observe(event),
            move |event| match event {
                watcher::Event::Apply(sb)
                | watcher::Event::InitApply(sb)
                | watcher::Event::Delete(sb) => sandbox_ledger.sandbox_delivered(sb),
                watcher::Event::Init | watcher::Event::InitDone => {}
            },
        );
        let (pools, pool_driver, mut pool_subs) = shared::<SandboxWarmPool>(
            &client,
            watcher::Config::default(),
            2,
            keep_whole,
            |_| {},
            |_| {},
        );
        let (templates, tmpl_driver, mut tmpl_subs) = shared::<SandboxTemplate>(
            &client,
            watcher::Config::default(),
            3,
            keep_whole,
            |_| {},
            |_| {},
        );
        let (claims, claim_driver, mut claim_subs) = shared::<SandboxClaim>(
            &client,
            watcher::Config::default(),
            1,
            keep_whole,
            // `controller-first-observed-at` is when the watch delivered the claim, not when a
            // pass got to it.
            move |event| {
                if let watcher::Event::Apply(c) | watcher::Event::InitApply(c) = event {
                    arrivals.arrived(c, k8s_openapi::jiff::Timestamp::now());
                }
            },
            move |event| match event {
                watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                    deliveries.claim_delivered(c)
                }
                watcher::Event::Init => deliveries.relist_started(std::time::Instant::now()),
                watcher::Event::InitDone => deliveries.relisted(),
                watcher::Event::Delete(_) => {}
            },
        );
        let (policies, np_driver, mut np_subs) = shared::<NetworkPolicy>(
            &client,
            watcher::Config::default(),
            2,
            keep_whole,
            |_| {},
            |_| {},
        );
        let (pods, pod_writer) = reflector::store::<Pod>();
        // Only pool members' pods are read (for their scheduling state); they carry the pool
        // label from the member's pod template, and lose it when a claim takes the member.
        let pod_driver = lean_events(watcher(
            Api::<Lean<Pod>>::all(client.clone()),
            watcher::Config::default().labels(SANDBOX_WARM_POOL_LABEL),
        ))
        .default_backoff()
        .modify(slim_pod)
        .reflect(pod_writer)
        .for_each(|_| future::ready(()));

        let stores = Stores {
            sandboxes: sandboxes.clone(),
            sandbox_index,
            pools: pools.clone(),
            templates: templates.clone(),
            claims: claims.clone(),
            policies,
            pods,
        };
        let recorder = |name: &str| {
            EventRecorder::new(
                client.clone(),
                Reporter {
                    controller: name.to_owned(),
                    instance: options.instance.clone(),
                },
            )
        };
        let ctx = Arc::new(Context::new(
            client.clone(),
            stores.clone(),
            PoolState::new(options.pool.clone()),
            ClaimState::new(options.claim.clone(), metrics, ledger),
            [
                Some(recorder("sandboxwarmpool-controller")),
                Some(recorder("sandboxtemplate-controller")),
                options
                    .claim
                    .events
                    .then(|| recorder("sandboxclaim-controller")),
            ],
            reconcile_metrics.clone(),
        ));
        if let Some(m) = &reconcile_metrics {
            m.set_max_concurrent_reconciles(
                claim::reconcile::CONTROLLER_NAME,
                u32::from(options.claim_workers),
            );
            m.set_max_concurrent_reconciles(
                warm_pool::reconcile::CONTROLLER_NAME,
                u32::from(options.pool_workers),
            );
            m.set_max_concurrent_reconciles(
                template::reconcile::CONTROLLER_NAME,
                u32::from(options.template_workers),
            );
        }

        let (Some(sb_for_claims), Some(sb_for_pools)) = (sb_subs.pop(), sb_subs.pop()) else {
            return;
        };
        let (Some(pool_for_claims), Some(pool_for_pools)) = (pool_subs.pop(), pool_subs.pop())
        else {
            return;
        };
        let (Some(tmpl_for_claims), Some(tmpl_for_pools), Some(tmpl_for_templates)) =
            (tmpl_subs.pop(), tmpl_subs.pop(), tmpl_subs.pop())
        else {
            return;
        };
        let (Some(claim_events), Some(np_events), Some(np_for_claims)) =
            (claim_subs.pop(), np_subs.pop(), np_subs.pop())
        else {
            return;
        };
        // Each controller runs its own first come, first served work queue
        // (`controller_common::runner`), fed by its triggers' keys.
        let work_queue = |name: &str| match &reconcile_metrics {
            Some(m) => m.work_queue(name),
            // Not exported; the wiring stays the same.
            None => WorkQueueMetrics::register(&mut Default::default()).queue(name),
        };
        let template_queue = work_queue(template::reconcile::CONTROLLER_NAME);
        let pool_queue = work_queue(warm_pool::reconcile::CONTROLLER_NAME);
        let claim_queue = work_queue(claim::reconcile::CONTROLLER_NAME);
        // `/healthz` fails when a watch event waits too long for the controller it feeds.
        for backlog in [tmpl_for_templates.backlog(), np_events.backlog()] {
            template_queue.watch_triggers(backlog);
        }
        for backlog in [
            pool_for_pools.backlog(),
            sb_for_pools.backlog(),
            tmpl_for_pools.backlog(),
        ] {
            pool_queue.watch_triggers(backlog);
        }
        for backlog in [
            claim_events.backlog(),
            sb_for_claims.backlog(),
            pool_for_claims.backlog(),
            tmpl_for_claims.backlog(),
            np_for_claims.backlog(),
        ] {
            claim_queue.watch_triggers(backlog);
        }

        let templates_for_np = templates.clone();
        let template_triggers = futures::stream::select(
            tmpl_for_templates.map(|t| ObjectRef::from_obj(&*t)).boxed(),
            np_events
                .flat_map(move |np| {
                    futures::stream::iter(templates_for_policy(&templates_for_np, &np))
                })
                .boxed(),
        );
        let template_controller = Runner::new(options.template_workers, template_queue).run(
            templates.clone(),
            template_triggers,
            template::reconcile::reconcile,
            template::reconcile::error_policy,
            ctx.clone(),
            shutdown.clone(),
        );

        let (pools_for_sb, index_for_pools) = (pools.clone(), stores.sandbox_index.clone());
        let pools_for_tmpl = pools.clone();
        let pool_triggers = futures::stream::select_all([
            changed_only(pool_for_pools, pool_fingerprint, pools.clone())
                .map(|p| ObjectRef::from_obj(&*p))
                .boxed(),
            sb_for_pools
                .flat_map(move |sb| {
                    futures::stream::iter(pools_for_sandbox(&pools_for_sb, &index_for_pools, &sb))
                })
                .boxed(),
            tmpl_for_pools
                .flat_map(move |t| futures::stream::iter(pools_for_template(&pools_for_tmpl, &t)))
                .boxed(),
        ]);
        let pool_controller = Runner::new(options.pool_workers, pool_queue).run(
            pools.clone(),
            pool_triggers,
            warm_pool::reconcile::reconcile,
            warm_pool::reconcile::error_policy,
            ctx.clone(),
            shutdown.clone(),
        );

        let claims_for_pools = claims.clone();
        let (pools_c, claims_c) = (pools.clone(), claims.clone());
        let (pools_c2, claims_c2, templates_c2) =
            (pools.clone(), claims.clone(), templates.clone());
        // The echo of a claim pass's own write (`OwnWrites`) triggers no claim pass; the pools
        // still see every Sandbox event.
        let (echo_claims, echo_sandboxes) = (ctx.clone(), ctx.clone());
        let claim_triggers = futures::stream::select_all([
            changed_only(claim_events, claim_fingerprint, claims.clone())
                .filter(move |c| future::ready(!echo_claims.claim.own_writes.is_echo(c.meta())))
                .map(|c| ObjectRef::from_obj(&*c))
                .boxed(),
            owner_keys::<SandboxClaim, _>(sb_for_claims.filter(move |sb| {
                future::ready(!echo_sandboxes.claim.own_writes.is_echo(sb.meta()))
            })),
            // Only pool changes a waiting claim cares about (created, spec or labels changed,
            // deleted): a status write per adoption would otherwise requeue every unbound
            // claim of the pool, which under a burst means thousands of redundant passes.
            changed_only(pool_for_claims, pool_fingerprint, pools.clone())
                .flat_map(move |p| futures::stream::iter(claims_for_pool(&claims_for_pools, &p)))
                .boxed(),
            tmpl_for_claims
                .flat_map(move |t| {
                    futures::stream::iter(claims_for_template(&pools_c, &claims_c, &t))
                })
                .boxed(),
            // A NetworkPolicy a claim owns is an older release's per-claim policy: its claim
            // deletes it, also when the policy shows up in the cache after the claim's pass. A
            // template's policy coming or going decides whether its claims may be served.
            np_for_claims
                .flat_map(move |np| {
                    let mut keys = controller_common::runner::owners::<SandboxClaim>(&np.metadata);
                    for template in templates_for_policy(&templates_c2, &np) {
                        if let Some(t) = templates_c2.get(&template) {
                            keys.extend(claims_for_template(&pools_c2, &claims_c2, &t));
                        }
                    }
                    futures::stream::iter(keys)
                })
                .boxed(),
        ]);
        let claim_controller = Runner::new(options.claim_workers, claim_queue).run(
            claims.clone(),
            claim_triggers,
            claim::reconcile::reconcile,
            claim::reconcile::error_policy,
            ctx.clone(),
            shutdown.clone(),
        );

        let synced = {
            let stores = stores.clone();
            let ctx = ctx.clone();
            let stop = shutdown.clone();
            async move {
                tokio::select! {
                    ready = stores.wait_until_ready() => {
                        if ready {
                            ctx.set_synced();
                            on_synced();
                        }
                    }
                    _ = stop.cancelled() => {}
                }
            }
        };
        let drivers = async {
            tokio::join!(
                sb_driver,
                pool_driver,
                tmpl_driver,
                claim_driver,
                np_driver,
                pod_driver
            );
        };
        // On shutdown the controllers finish their in-flight reconciles and end; the reflector
        // drivers are dropped with them.
        tokio::select! {
            _ = async { tokio::join!(template_controller, pool_controller, claim_controller, synced) } => {}
            _ = drivers => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::{SandboxTemplateRef, SandboxWarmPoolSpec};

    fn pool(generation: i64, status_replicas: i32) -> Arc<SandboxWarmPool> {
        let mut p = SandboxWarmPool::new(
            "p",
            SandboxWarmPoolSpec {
                replicas: Some(1),
                sandbox_template_ref: SandboxTemplateRef { name: "t".into() },
                update_strategy: None,
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid".into());
        p.metadata.generation = Some(generation);
        p.status = Some(api_types::SandboxWarmPoolStatus {
            replicas: status_replicas,
            ..Default::default()
        });
        Arc::new(p)
    }

    #[tokio::test]
    async fn status_only_updates_do_not_trigger() {
        let (store, _writer) = reflector::store::<SandboxWarmPool>();
        let events = futures::stream::iter(vec![pool(1, 0), pool(1, 3), pool(2, 3), pool(2, 1)]);
        let passed: Vec<_> = changed_only(events, pool_fingerprint, store)
            .map(|p| p.metadata.generation)
            .collect()
            .await;
        assert_eq!(passed, [Some(1), Some(2)]);
    }

    /// The watches decode every kind through `Lean`: the same objects, minus managedFields.
    #[test]
    fn lean_decoding_keeps_everything_the_controllers_read() {
        let managed = serde_json::json!([{"manager": "kubectl", "operation": "Update",
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
        let sandbox = serde_json::json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": "m", "namespace": "ns", "uid": "u", "resourceVersion": "5",
                         "labels": {SANDBOX_WARM_POOL_LABEL: name_hash("p")},
                         "ownerReferences": [{"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                             "kind": "SandboxWarmPool", "name": "p", "uid": "pool-uid",
                             "controller": true}],
                         "managedFields": managed},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"podIPs": ["10.0.0.1"], "nodeName": "n1"}
        });
        let claim = serde_json::json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu", "managedFields": managed},
            "spec": {"warmPoolRef": {"name": "p"}}
        });
        let mut full: Sandbox = serde_json::from_value(sandbox.clone()).expect("valid");
        assert!(full.metadata.managed_fields.is_some());
        full.metadata.managed_fields = None;
        let lean: Lean<Sandbox> = serde_json::from_value(sandbox).expect("valid");
        assert_eq!(lean.0, full);
        let mut full: SandboxClaim = serde_json::from_value(claim.clone()).expect("valid");
        full.metadata.managed_fields = None;
        let lean: Lean<SandboxClaim> = serde_json::from_value(claim).expect("valid");
        assert_eq!(lean.0, full);
    }

    /// A pool vets its labelled members' pod specs; a claim's Sandbox (no pool label) keeps
    /// its metadata, pod-template metadata and status, and loses only the pod spec.
    #[test]
    fn slimming_keeps_a_members_pod_spec_and_what_a_claim_reads() {
        let mut member = Sandbox::new("m", Default::default());
        member.metadata.namespace = Some("ns".into());
        member.metadata.labels =
            Some([(SANDBOX_WARM_POOL_LABEL.to_owned(), name_hash("p"))].into());
        member.spec.blueprint.pod_template.spec.hostname = Some("h".into());
        member
            .spec
            .blueprint
            .pod_template
            .metadata
            .labels
            .insert("team".into(), "a".into());
        member.status = Some(api_types::SandboxStatus {
            node_name: "n1".into(),
            ..Default::default()
        });
        let mut slimmed = member.clone();
        slim_sandbox(&mut slimmed);
        assert_eq!(slimmed, member, "a pool member is cached whole");

        let mut claimed = member.clone();
        claimed.metadata.labels = Some([(SANDBOX_ID_LABEL.to_owned(), "claim-uid".into())].into());
        let mut slimmed = claimed.clone();
        slim_sandbox(&mut slimmed);
        assert_eq!(slimmed.spec.blueprint.pod_template.spec, PodSpec::default());
        assert_eq!(
            slimmed.spec.blueprint.pod_template.metadata,
            claimed.spec.blueprint.pod_template.metadata
        );
        assert_eq!(slimmed.metadata, claimed.metadata);
        assert_eq!(slimmed.status, claimed.status);
    }

    #[test]
    fn sandboxes_map_to_their_pool_by_owner_or_label() {
        let (store, mut writer) = reflector::store::<SandboxWarmPool>();
        writer.apply_watcher_event(&watcher::Event::Apply((*pool(1, 0)).clone()));
        let mut sb = Sandbox::new("m", Default::default());
        sb.metadata.namespace = Some("ns".into());
        sb.metadata.labels = Some([(SANDBOX_WARM_POOL_LABEL.to_owned(), name_hash("p"))].into());
        assert_eq!(
            pools_for_sandbox(&store, &SandboxIndex::default(), &sb),
            [ObjectRef::new("p").within("ns")]
        );
        sb.metadata.labels = None;
        assert!(
            pools_for_sandbox(&store, &SandboxIndex::default(), &sb).is_empty(),
            "claimed members wake no pool"
        );
    }
}
