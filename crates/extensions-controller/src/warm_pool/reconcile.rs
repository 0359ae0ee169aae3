//! SandboxWarmPool reconcile: observe the pool's members in the cache, run the [`plan`], write
//! the difference (adoptions, deletes with preconditions, batched creates) and the status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use api_types::conditions::{POD_SCHEDULED, STATUS_FALSE};
use api_types::keys::{
    SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM, SANDBOX_POD_NAME_ANNOTATION,
};
use api_types::{Sandbox, SandboxWarmPool, SandboxWarmPoolStatus, UpdateStrategyType, name_hash};
use controller_common::runner::Action;
use futures::future::join_all;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};
use tracing::Instrument;

use controller_common::lean::Lean;

use super::blueprint::{TemplateFacts, build_member, random_suffix, with_name};
use super::in_flight::CacheView;
use super::plan::{PlanInput, countable, plan};
use super::status::StatusWrite;
use crate::context::{Context, FIELD_MANAGER};
use crate::error::{Error, is_already_exists, is_conflict, is_not_found};
use crate::ownership::controller_ref;

pub const CONTROLLER_NAME: &str = "sandboxwarmpool";

/// Re-check interval while in-flight writes make counts uncertain.
pub const IN_FLIGHT_RECHECK: Duration = Duration::from_secs(5);

fn key_of(pool: &SandboxWarmPool) -> String {
    format!(
        "{}/{}",
        pool.metadata.namespace.as_deref().unwrap_or_default(),
        pool.metadata.name.as_deref().unwrap_or_default()
    )
}

pub async fn reconcile(pool: Arc<SandboxWarmPool>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.is_synced() {
        return Ok(Action::requeue(crate::context::SYNC_RECHECK));
    }
    let started = Instant::now();
    let span = tracing::info_span!("ReconcileSandboxWarmPool", pool = %key_of(&pool));
    // Boxed: the runtime moves a few words instead of the whole pass (see the claim pass).
    let result = Box::pin(reconcile_inner(&pool, &ctx))
        .instrument(span)
        .await;
    ctx.observe(CONTROLLER_NAME, started, &result);
    if result.is_ok() {
        ctx.succeeded(&key_of(&pool));
    }
    result
}

pub fn error_policy(pool: Arc<SandboxWarmPool>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(pool = %key_of(&pool), error = %error, "SandboxWarmPool reconcile failed");
    Action::requeue(ctx.backoff(&key_of(&pool)))
}

struct NamespaceView<'a> {
    ctx: &'a Context,
    namespace: &'a str,
    /// The pool's label value (its name hash).
    pool_label: &'a str,
}

impl CacheView for NamespaceView<'_> {
    fn has_name(&self, name: &str) -> bool {
        self.ctx.stores.sandbox(self.namespace, name).is_some()
    }

    fn has_live_member(&self, name: &str, uid: &str) -> bool {
        self.ctx
            .stores
            .sandbox(self.namespace, name)
            .is_some_and(|s| {
                s.metadata.uid.as_deref() == Some(uid)
                    && s.metadata.deletion_timestamp.is_none()
                    && s.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(api_types::keys::SANDBOX_WARM_POOL_LABEL))
                        .is_some_and(|l| l == self.pool_label)
            })
    }
}

fn pod_unschedulable(ctx: &Context, sb: &Sandbox) -> bool {
    let Some(namespace) = sb.metadata.namespace.as_deref() else {
        return false;
    };
    let pod_name = sb
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SANDBOX_POD_NAME_ANNOTATION))
        .or(sb.metadata.name.as_ref());
    let Some(pod_name) = pod_name else {
        return false;
    };
    let Some(pod) = ctx
        .stores
        .pods
        .get(&ObjectRef::new(pod_name).within(namespace))
    else {
        return false;
    };
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions.iter().any(|c| {
                    c.type_ == POD_SCHEDULED
                        && c.status == STATUS_FALSE
                        && c.reason.as_deref() == Some("Unschedulable")
                })
            })
}

fn min_requeue(current: Option<Duration>, candidate: Duration) -> Option<Duration> {
    if candidate.is_zero() {
        return current;
    }
    Some(current.map_or(candidate, |c| c.min(candidate)))
}

/// The status patch: every field always present. The counts are written as numbers, zero
/// included, so `kubectl get` shows `READY 0` rather than a blank; the other zero values as
/// `null` so a merge patch clears them.
fn status_patch(status: &SandboxWarmPoolStatus) -> Value {
    let or_null = |v: i64| if v == 0 { Value::Null } else { json!(v) };
    json!({"status": {
        "replicas": status.replicas,
        "readyReplicas": status.ready_replicas,
        "selector": if status.selector.is_empty() { Value::Null } else { json!(status.selector) },
        "observedGeneration": or_null(status.observed_generation),
    }})
}

async fn reconcile_inner(pool: &SandboxWarmPool, ctx: &Context) -> Result<Action, Error> {
    let missing = |field| Error::MissingMetadata {
        kind: "SandboxWarmPool",
        field,
    };
    let name = pool.metadata.name.as_deref().ok_or(missing("name"))?;
    let namespace = pool
        .metadata
        .namespace
        .as_deref()
        .ok_or(missing("namespace"))?;
    let uid = pool.metadata.uid.as_deref().ok_or(missing("uid"))?;
    let key = format!("{namespace}/{name}");
    let state = &ctx.pool;
    if pool.metadata.deletion_timestamp.is_some() {
        state.forget(&key);
        return Ok(Action::await_change());
    }

    let template_name = pool.spec.sandbox_template_ref.name.as_str();
    let facts = ctx
        .stores
        .template(namespace, template_name)
        .map(|template| TemplateFacts {
            blueprint_hash: state.blueprint_hash(&template),
            template,
        });
    if facts.is_none() {
        template_missing(ctx, pool, &key, template_name).await;
    }
    let pool_hash = name_hash(name);
    let now = Instant::now();
    let pending = state.in_flight.settle(
        &key,
        &NamespaceView {
            ctx,
            namespace,
            pool_label: &pool_hash,
        },
        now,
    );
    let recreate = pool.spec.effective_update_strategy() == UpdateStrategyType::Recreate;
    // Quiet members (live, Ready, warm-labelled) of this pool are counted, not looked at
    // (`plan::countable` says which).
    let template = facts.as_ref().map(|f| (template_name, f));
    let (quiet, mut listed) = ctx.stores.pool_census(
        namespace,
        &pool_hash,
        |class| countable(class, uid, recreate, template),
        &pending.deleted_names,
    );
    let desired = usize::try_from(pool.spec.desired_replicas().max(0)).unwrap_or(0);
    let unschedulable = |sb: &Sandbox| pod_unschedulable(ctx, sb);
    let settings = &state.settings;
    let planned_now = Timestamp::now();
    let plan_with = |listed: &[Arc<Sandbox>], quiet: usize| {
        plan(&PlanInput {
            pool_uid: uid,
            desired,
            recreate,
            template,
            listed,
            quiet,
            pending: &pending,
            now: planned_now,
            grace: settings.readiness_grace_period,
            max_batch: usize::try_from(settings.max_batch_size).unwrap_or(usize::MAX),
            unschedulable: &unschedulable,
        })
    };
    let mut decided = plan_with(&listed, quiet);
    if decided.needs_full_listing {
        // A surplus: which members go is chosen among all of them.
        listed = ctx.stores.sandboxes_with_pool_label(namespace, &pool_hash);
        decided = plan_with(&listed, 0);
    }

    let api = Api::<Lean<Sandbox>>::namespaced(ctx.client.clone(), namespace);
    let mut errors: Vec<Error> = Vec::new();
    let mut requeue: Option<Duration> = None;

    // Orphans carrying our label with a current blueprint: take them over (guarded).
    if let Some(owner) = controller_ref(pool) {
        for sb in &decided.adopt {
            let Some(sb_name) = sb.metadata.name.as_deref() else {
                continue;
            };
            let patch = json!({"metadata": {
                "resourceVersion": sb.metadata.resource_version,
                "ownerReferences": [owner],
                "labels": {SANDBOX_LAUNCH_TYPE_LABEL: SANDBOX_LAUNCH_TYPE_WARM},
            }});
            if let Err(e) = api
                .patch(sb_name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                && !is_conflict(&e)
                && !is_not_found(&e)
            {
                errors.push(Error::kube(
                    format!("adopt orphan Sandbox {namespace}/{sb_name}"),
                    e,
                ));
            }
        }
    }
    for sb in &decided.relabel {
        let Some(sb_name) = sb.metadata.name.as_deref() else {
            continue;
        };
        let patch =
            json!({"metadata": {"labels": {SANDBOX_LAUNCH_TYPE_LABEL: SANDBOX_LAUNCH_TYPE_WARM}}});
        if let Err(e) = api
            .patch(sb_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            && !is_not_found(&e)
        {
            errors.push(Error::kube(
                format!("label Sandbox {namespace}/{sb_name}"),
                e,
            ));
        }
    }

    // Deletes carry UID and resourceVersion preconditions: a member a claim took since our
    // cache read is never deleted out from under it.
    let deletions: Vec<&Arc<Sandbox>> = decided
        .delete_stale
        .iter()
        .chain(&decided.delete_stuck)
        .chain(&decided.delete_excess)
        .collect();
    for sb in deletions {
        let (Some(sb_name), Some(sb_uid)) =
            (sb.metadata.name.as_deref(), sb.metadata.uid.as_deref())
        else {
            continue;
        };
        state.in_flight.deleting(&key, sb_name, sb_uid, now);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(sb_uid.to_owned()),
                resource_version: sb.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match api.delete(sb_name, &params).await {
            Ok(_) => {
                tracing::debug!(sandbox = %format!("{namespace}/{sb_name}"), "deleted pool member")
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) if is_conflict(&e) => {
                state.in_flight.delete_failed(&key, sb_uid);
                requeue = min_requeue(requeue, Duration::from_millis(200));
            }
            Err(e) => {
                state.in_flight.delete_failed(&key, sb_uid);
                errors.push(Error::kube(
                    format!("delete Sandbox {namespace}/{sb_name}"),
                    e,
                ));
            }
        }
    }
    if decided.excess_deferred || pending.creates > 0 || !pending.deleted_uids.is_empty() {
        requeue = min_requeue(requeue, IN_FLIGHT_RECHECK);
    }

    // Creates: replenish hold, then the refill rate, then slow-start batches.
    let hold = state
        .hold
        .observe(&key, listed_members(&decided), desired, now);
    if decided.create > 0 && !hold.is_zero() {
        requeue = min_requeue(requeue, hold);
        decided.create = 0;
    }
    if decided.create > 0
        && let Some(facts) = &facts
    {
        let want = u32::try_from(decided.create).unwrap_or(u32::MAX);
        let (granted, wait) = state.limiter.take(&key, want, now);
        if granted == 0
            && let Some(wait) = wait
        {
            requeue = min_requeue(requeue, wait);
        }
        if granted > 0
            && let Some(member) = build_member(pool, facts, settings.enable_eviction)
        {
            let created = create_in_batches(&api, &member, granted as usize, |created_name| {
                state.in_flight.created(&key, created_name, Instant::now());
            })
            .await;
            state.hold.note_creates(&key, created.successes);
            if let Some(e) = created.error {
                errors.push(Error::kube(format!("create Sandbox for pool {key}"), e));
            }
        }
    }

    // Unschedulable members: hold them and say so once per transition.
    let was_flagged = {
        let mut flagged = state
            .not_progressing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if decided.unschedulable > 0 {
            !flagged.insert(key.clone())
        } else {
            flagged.remove(&key)
        }
    };
    if decided.unschedulable > 0 {
        requeue = min_requeue(requeue, settings.unschedulable_recheck_interval);
        if !was_flagged {
            let message = format!(
                "{}/{} sandboxes are unschedulable past the {} readiness grace period; holding them instead of replacing (replacements would be equally unschedulable)",
                decided.unschedulable,
                desired,
                go_duration(settings.readiness_grace_period)
            );
            Context::event(
                ctx.pool_recorder.as_ref(),
                pool,
                EventType::Warning,
                "WarmPoolNotProgressing",
                "Reconciling",
                message,
            )
            .await;
        }
    } else if was_flagged {
        Context::event(
            ctx.pool_recorder.as_ref(),
            pool,
            EventType::Normal,
            "WarmPoolProgressing",
            "Reconciling",
            "Warm pool is progressing again".into(),
        )
        .await;
    }
    if let Some(check) = decided.next_grace_check {
        requeue = min_requeue(requeue, check);
    }

    // Status is written even when some writes failed, so it is never stale when it matters;
    // count-only changes are coalesced (`super::status`).
    let mut status = decided.status.clone();
    status.selector = api_types::keys::warm_pool_selector(name);
    status.observed_generation = pool.metadata.generation.unwrap_or(0);
    let current = pool.status.clone().unwrap_or_default();
    let mut decision = state.status_write(&key, &current, &status, now);
    if !errors.is_empty() && matches!(decision, StatusWrite::Hold(_)) {
        // The error backoff, not the window, decides when this pool is looked at again.
        state.release_status_hold(&key);
        decision = StatusWrite::Now;
    }
    if let StatusWrite::Hold(left) = decision {
        requeue = min_requeue(requeue, left);
    } else if decision == StatusWrite::Now {
        let pools = Api::<Lean<SandboxWarmPool>>::namespaced(ctx.client.clone(), namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match pools
            .patch_status(name, &params, &Patch::Merge(&status_patch(&status)))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => errors.push(Error::kube(
                format!("patch status of SandboxWarmPool {key}"),
                e,
            )),
        }
    }

    if let Some(first) = errors.into_iter().next() {
        return Err(first);
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Says that the pool's template does not exist (it cannot create members until it does): a
/// log line and a Warning Event on the pool each pass that finds it missing (the event recorder
/// folds repeats into one Event's count).
async fn template_missing(ctx: &Context, pool: &SandboxWarmPool, key: &str, template: &str) {
    let namespace = pool.metadata.namespace.as_deref().unwrap_or_default();
    tracing::warn!(
        pool = %key,
        template = %format!("{namespace}/{template}"),
        "SandboxWarmPool's SandboxTemplate not found; no sandboxes are created until it exists"
    );
    Context::event(
        ctx.pool_recorder.as_ref(),
        pool,
        EventType::Warning,
        "TemplateNotFound",
        "Reconciling",
        format!(
            "SandboxTemplate \"{template}\" not found in namespace \"{namespace}\"; the pool creates no sandboxes until it exists (spec.sandboxTemplateRef.name)"
        ),
    )
    .await;
}

/// Members the hold compares against: what the cache shows as active plus what it will show.
fn listed_members(decided: &super::plan::Plan) -> usize {
    usize::try_from(decided.status.replicas.max(0)).unwrap_or(0)
}

pub struct BatchOutcome {
    pub successes: usize,
    pub error: Option<kube::Error>,
}

/// How many names one create tries before it gives up on `AlreadyExists` (a collision of two
/// random 5-character suffixes is rare; three in a row means something else holds the names).
const NAME_ATTEMPTS: usize = 3;

/// Creates one copy of `member` under a fresh name ([`with_name`]), trying another name if the
/// chosen one is taken.
async fn create_named(
    api: &Api<Lean<Sandbox>>,
    params: &PostParams,
    member: &Sandbox,
) -> Result<Lean<Sandbox>, kube::Error> {
    let mut attempt = 1;
    loop {
        match api
            .create(params, &Lean(with_name(member, &random_suffix())))
            .await
        {
            Err(e) if is_already_exists(&e) && attempt < NAME_ATTEMPTS => attempt += 1,
            result => return result,
        }
    }
}

/// Creates `count` copies of `member` in slow-start batches (1, 2, 4, ...), stopping after the
/// first batch with a failure. `on_created` gets each created name.
pub async fn create_in_batches(
    api: &Api<Lean<Sandbox>>,
    member: &Sandbox,
    count: usize,
    on_created: impl Fn(String),
) -> BatchOutcome {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let mut outcome = BatchOutcome {
        successes: 0,
        error: None,
    };
    let mut batch = 1usize;
    let mut remaining = count;
    while remaining > 0 {
        let size = batch.min(remaining);
        let results = join_all((0..size).map(|_| create_named(api, &params, member))).await;
        for result in results {
            match result {
                Ok(created) => {
                    outcome.successes += 1;
                    if let Some(created_name) = created.0.metadata.name {
                        on_created(created_name);
                    }
                }
                Err(e) => {
                    outcome.error.get_or_insert(e);
                }
            }
        }
        if outcome.error.is_some() {
            break;
        }
        remaining -= size;
        batch = batch.saturating_mul(2);
    }
    outcome
}

/// Formats like Go's `time.Duration.String()` for whole seconds (`5m0s`, `1h0m0s`, `45s`).
pub fn go_duration(d: Duration) -> String {
    let total = d.as_secs();
    let (h, m, s) = (total / 3600, (total % 3600) / 60, total % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m{s}s"),
        _ => format!("{h}h{m}m{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_duration_format() {
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(45)), "45s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    }

    #[test]
    fn status_patch_writes_zero_counts_and_clears_other_zeros() {
        let patch = status_patch(&SandboxWarmPoolStatus {
            replicas: 0,
            ready_replicas: 0,
            selector: "s".into(),
            observed_generation: 2,
        });
        assert_eq!(
            patch,
            json!({"status": {"replicas": 0, "readyReplicas": 0, "selector": "s", "observedGeneration": 2}})
        );
    }
}
