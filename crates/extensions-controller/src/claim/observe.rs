//! Step 1 of a claim pass: read everything the pass decides on into one immutable
//! [`Observation`]. Only caches and this process' own memory are read here, never the API
//! server, and nothing is written: [`super::plan`] decides from the observation alone.

use std::sync::Arc;
use std::time::Instant;

use api_types::keys::{
    ASSIGNED_SANDBOX_NAME_ANNOTATION, SANDBOX_TEMPLATE_REF_ANNOTATION, TRACE_CONTEXT_ANNOTATION,
};
use api_types::{
    NetworkPolicyManagement, Sandbox, SandboxClaim, SandboxClaimStatus, SandboxTemplate,
    SandboxWarmPool, UpdateStrategyType,
};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::ObjectRef;

use super::candidate::{PoolRef, choose, has_pending_network};
use super::lifecycle::expires_at;
use crate::context::Context;
use crate::ownership::{
    CLAIM_KIND, controller_of, controlling_pool, is_controlled_by, refers_to_kind,
};
use crate::template::network_policy::{desired_spec, policy_name};
use crate::warm_pool::blueprint::{TemplateFacts, is_stale};

/// How many candidates one pass tries before giving up on the warm path.
pub const MAX_ADOPTION_ATTEMPTS: usize = 8;

/// The claim's Sandbox, as far as the caches and this process' memory tell.
#[derive(Debug, Clone)]
pub enum SandboxView {
    /// The Sandbox the claim controls.
    Bound(Arc<Sandbox>),
    /// This process just gave the claim `name`; the cache has not shown that yet.
    Lagging { name: String },
    /// The claim was bound to `name` (its status, its `sandbox-name` annotation or this
    /// process says so), and no Sandbox of that name is the claim's any more.
    Gone { name: String },
    /// A Sandbox named after the claim that someone else controls.
    Foreign,
    /// The claim has never had a Sandbox.
    Unbound,
}

/// The template's NetworkPolicy, which every Sandbox of the template needs before it is handed
/// out (see `template::reconcile`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Policy {
    /// In place (or the template manages none: `networkPolicyManagement: Unmanaged`).
    Ready,
    /// Not in place; why, for the claim's condition.
    NotReady(String),
}

/// Everything one pass decides on.
#[derive(Debug, Clone)]
pub struct Observation {
    /// The claim as the pass sees it: the cached object, or the response to this process' last
    /// write when the cache has not caught up with it (`claim::ledger`).
    pub claim: Arc<SandboxClaim>,
    /// The claim's resourceVersion in the cache when the pass started (`claim` may be newer):
    /// with `claim`'s, the versions a take may still be sent on (see [`super::plan::take_check`]).
    pub cached_version: Option<String>,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// When the pass started.
    pub now: Timestamp,
    /// When the watch first delivered the claim to this process (`now` if not remembered).
    pub first_seen: Timestamp,
    pub sandbox: SandboxView,
    /// For an expired claim with the Retain policy: the Sandbox named in its status (or after
    /// it), whoever controls it.
    pub expired_target: Option<Arc<Sandbox>>,
    pub pool: Option<Arc<SandboxWarmPool>>,
    pub template: Option<Arc<SandboxTemplate>>,
    /// The template's policy (`NotReady` without a template: nothing says it is in place).
    pub policy: Policy,
    /// The pool's best warm candidates, best first, that no other worker is taking (and under a
    /// Recreate pool, that match the template); read only for an unbound claim that may be
    /// served warm.
    pub candidates: Vec<Arc<Sandbox>>,
    /// A member without pod IPs yet could be a candidate soon.
    pub pending_network: bool,
    /// An older release's per-claim NetworkPolicy this claim owns (name).
    pub legacy_policy: Option<String>,
    /// For a bound claim: the template its Sandbox was made from (named by the Sandbox's
    /// `sandbox-template-ref` annotation, else the pool's), to keep its metadata in line.
    pub bound_template: Option<(String, Arc<SandboxTemplate>)>,
    /// This pass's trace context (the Sandbox it binds carries it).
    pub pass_trace: Option<String>,
    /// The trace context to record on a claim that came without one (`claim-to-bound`'s).
    pub stamp_trace: Option<String>,
    /// This process already reported the claim's first Ready.
    pub ready_recorded: bool,
}

impl Observation {
    /// The claim's status as the pass sees it.
    pub fn status(&self) -> SandboxClaimStatus {
        self.claim.status.clone().unwrap_or_default()
    }

    /// Whether the claim has expired by its lifecycle, as of its current status.
    pub fn expired(&self) -> bool {
        expires_at(&self.claim, &self.status()).is_some_and(|at| self.now >= at)
    }

    /// Whether the claim asks for what only a cold Sandbox can give (env, volume claims).
    pub fn customized(&self) -> bool {
        !self.claim.spec.env.is_empty() || !self.claim.spec.volume_claim_templates.is_empty()
    }

    /// The claim as its Sandbox should see it: with this pass's trace context when the claim
    /// carries none (the core controller's spans then join the claim's trace).
    pub fn claim_for_sandbox(&self) -> Arc<SandboxClaim> {
        match &self.pass_trace {
            Some(trace) => {
                let mut with_trace = (*self.claim).clone();
                with_trace
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default)
                    .insert(TRACE_CONTEXT_ANNOTATION.to_owned(), trace.clone());
                Arc::new(with_trace)
            }
            None => self.claim.clone(),
        }
    }
}

/// The pass's trace contexts (see [`super::trace`]).
#[derive(Debug, Clone, Default)]
pub struct PassTrace {
    /// This pass's own context, carried by the Sandbox it binds.
    pub pass: Option<String>,
    /// What to record on a claim without a trace-context annotation.
    pub stamp: Option<String>,
}

/// Reads the observation for `cached` (the store's copy of the claim the pass was started for).
pub fn observe(
    ctx: &Context,
    cached: &Arc<SandboxClaim>,
    trace: PassTrace,
    now: Timestamp,
) -> Observation {
    let clock = Instant::now();
    let state = &ctx.claim;
    let claim = state.ledger.view(cached, clock);
    let meta = &claim.metadata;
    let namespace = meta.namespace.clone().unwrap_or_default();
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let stores = &ctx.stores;

    let pool = stores.pool(&namespace, &claim.spec.warm_pool_ref.name);
    let template = pool
        .as_ref()
        .and_then(|p| stores.template(&namespace, &p.spec.sandbox_template_ref.name));
    let mut observation = Observation {
        sandbox: SandboxView::Unbound,
        expired_target: None,
        policy: policy_of(ctx, template.as_deref()),
        candidates: Vec::new(),
        pending_network: false,
        legacy_policy: legacy_policy(ctx, &namespace, &name, &uid),
        first_seen: state.ledger.first_seen(&uid).unwrap_or(now),
        ready_recorded: state.ledger.ready_recorded(&uid),
        bound_template: None,
        pass_trace: trace.pass,
        stamp_trace: trace.stamp,
        pool,
        template,
        now,
        claim: claim.clone(),
        cached_version: cached.metadata.resource_version.clone(),
        namespace,
        name,
        uid,
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return observation;
    }
    if observation.expired() {
        observation.expired_target = expired_target(ctx, &observation);
        return observation;
    }
    observation.sandbox = sandbox_view(ctx, &observation, clock);
    if let SandboxView::Bound(sb) = &observation.sandbox {
        observation.bound_template = bound_template(ctx, &observation, sb);
    }
    let wants_warm = matches!(observation.sandbox, SandboxView::Unbound)
        && !observation.customized()
        && observation.template.is_some()
        && observation.policy == Policy::Ready;
    if wants_warm && let Some(pool) = observation.pool.clone() {
        let (candidates, pending) = candidates(ctx, &observation, &pool, clock);
        observation.candidates = candidates;
        observation.pending_network = pending;
    }
    observation
}

/// Finds the claim's Sandbox: the one named by this process' binding, the claim's status or its
/// `sandbox-name` annotation, any Sandbox the claim controls, or one named after the claim.
fn sandbox_view(ctx: &Context, o: &Observation, now: Instant) -> SandboxView {
    let stores = &ctx.stores;
    let binding = ctx.claim.ledger.binding(&o.uid, now);
    let status_name = o
        .claim
        .status
        .as_ref()
        .map(|s| s.sandbox.name.clone())
        .filter(|n| !n.is_empty());
    let annotated = o
        .claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ASSIGNED_SANDBOX_NAME_ANNOTATION))
        .filter(|n| !n.is_empty())
        .cloned();
    let named: Vec<&String> = binding
        .iter()
        .map(|b| &b.sandbox)
        .chain(status_name.iter())
        .chain(annotated.iter())
        .collect();
    for name in &named {
        if let Some(sb) = stores.sandbox(&o.namespace, name)
            && is_controlled_by(&sb.metadata, &o.uid)
        {
            return SandboxView::Bound(sb);
        }
    }
    let mut owned = stores.sandboxes_controlled_by(&o.namespace, &o.uid);
    owned.sort_by_key(|sb| sb.metadata.deletion_timestamp.is_some());
    if let Some(sb) = owned.into_iter().next() {
        return SandboxView::Bound(sb);
    }
    if let Some(b) = &binding
        && !b.settled
    {
        return SandboxView::Lagging {
            name: b.sandbox.clone(),
        };
    }
    if let Some(name) = named.first() {
        return SandboxView::Gone {
            name: (*name).clone(),
        };
    }
    if let Some(sb) = stores.sandbox(&o.namespace, &o.name)
        && controlling_pool(&sb.metadata).is_none()
    {
        return SandboxView::Foreign;
    }
    SandboxView::Unbound
}

fn bound_template(
    ctx: &Context,
    o: &Observation,
    sb: &Sandbox,
) -> Option<(String, Arc<SandboxTemplate>)> {
    let name = sb
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
        .cloned()
        .or_else(|| {
            o.pool
                .as_ref()
                .map(|p| p.spec.sandbox_template_ref.name.clone())
        })?;
    let template = ctx.stores.template(&o.namespace, &name)?;
    Some((name, template))
}

/// For a Retain expiry: the Sandbox in the claim's status, or named after it.
fn expired_target(ctx: &Context, o: &Observation) -> Option<Arc<Sandbox>> {
    let name = o
        .claim
        .status
        .as_ref()
        .map(|s| s.sandbox.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| o.name.clone());
    ctx.stores.sandbox(&o.namespace, &name).or_else(|| {
        ctx.stores
            .sandboxes_controlled_by(&o.namespace, &o.uid)
            .into_iter()
            .next()
    })
}

/// The template's NetworkPolicy: in place when the template manages none, or when the policy
/// named after the template exists, is the template's, and carries the template's current
/// rules (fail closed: while a change of rules is not applied, or cannot be, the rules in force
/// may be looser than the ones the template asks for).
fn policy_of(ctx: &Context, template: Option<&SandboxTemplate>) -> Policy {
    let Some(template) = template else {
        return Policy::NotReady(
            "the pool's SandboxTemplate does not exist, so its NetworkPolicy cannot be in place"
                .into(),
        );
    };
    if template.spec.network_policy_management == NetworkPolicyManagement::Unmanaged {
        return Policy::Ready;
    }
    let namespace = template.metadata.namespace.as_deref().unwrap_or_default();
    let template_name = template.metadata.name.as_deref().unwrap_or_default();
    let template_uid = template.metadata.uid.as_deref().unwrap_or_default();
    let np_name = policy_name(template_name);
    let np = ctx
        .stores
        .policies
        .get(&ObjectRef::new(&np_name).within(namespace));
    let failure = || ctx.template.failure(namespace, template_name);
    match np {
        Some(np) if is_controlled_by(&np.metadata, template_uid) => {
            let desired = desired_spec(template_name, &template.spec);
            if ctx
                .template
                .in_place(&format!("{namespace}/{np_name}"), &np, &desired)
            {
                return Policy::Ready;
            }
            Policy::NotReady(match failure() {
                Some(why) => format!(
                    "NetworkPolicy {np_name:?} does not carry the rules of SandboxTemplate {template_name:?}: {why}. No Sandbox of this template is handed out until it does"
                ),
                None => format!(
                    "waiting for NetworkPolicy {np_name:?} to carry the current rules of SandboxTemplate {template_name:?}; no Sandbox of this template is handed out until it does"
                ),
            })
        }
        Some(_) => Policy::NotReady(format!(
            "NetworkPolicy {np_name:?} of SandboxTemplate {template_name:?} cannot be made: another NetworkPolicy of that name exists; rename or delete it, or set networkPolicyManagement: Unmanaged on the template. No Sandbox of this template is handed out without its policy"
        )),
        None => Policy::NotReady(match failure() {
            Some(why) => format!(
                "NetworkPolicy {np_name:?} of SandboxTemplate {template_name:?} cannot be made: {why}. No Sandbox of this template is handed out without its policy"
            ),
            None => format!(
                "waiting for NetworkPolicy {np_name:?} of SandboxTemplate {template_name:?}; no Sandbox of this template is handed out without its policy"
            ),
        }),
    }
}

/// An older release's per-claim NetworkPolicy (`<claim>-network-policy`, controlled by the
/// claim), read from the cache so a pass costs no request when there is none.
fn legacy_policy(ctx: &Context, namespace: &str, name: &str, uid: &str) -> Option<String> {
    let np_name = format!("{name}-network-policy");
    let np = ctx
        .stores
        .policies
        .get(&ObjectRef::new(&np_name).within(namespace))?;
    controller_of(&np.metadata)
        .is_some_and(|o| o.uid == uid && refers_to_kind(o, CLAIM_KIND))
        .then_some(np_name)
}

/// The pool's best candidates no other worker holds, and whether one without pod IPs is coming.
fn candidates(
    ctx: &Context,
    o: &Observation,
    pool: &SandboxWarmPool,
    now: Instant,
) -> (Vec<Arc<Sandbox>>, bool) {
    let recreate = pool.spec.effective_update_strategy() == UpdateStrategyType::Recreate;
    let template_name = pool.spec.sandbox_template_ref.name.as_str();
    // Under Recreate a member must be vetted against the template.
    let facts = o
        .template
        .as_ref()
        .filter(|_| recreate)
        .map(|template| TemplateFacts {
            blueprint_hash: ctx.pool.blueprint_hash(template),
            template: template.clone(),
        });
    let reservations = &ctx.claim.reservations;
    let skip = |sb: &Sandbox| {
        reservations.is_reserved(
            &o.namespace,
            sb.metadata.name.as_deref().unwrap_or_default(),
            now,
        ) || facts
            .as_ref()
            .is_some_and(|f| is_stale(template_name, f, sb, true))
    };
    let pool_ref = PoolRef {
        namespace: &o.namespace,
        name: pool.metadata.name.as_deref().unwrap_or_default(),
        uid: pool.metadata.uid.as_deref(),
    };
    let stores = &ctx.stores;
    let chosen = choose(
        &stores.sandboxes,
        &stores.sandbox_index,
        &pool_ref,
        2 * MAX_ADOPTION_ATTEMPTS,
        &skip,
    );
    let pending = has_pending_network(&stores.sandboxes, &stores.sandbox_index, &pool_ref, &skip);
    (chosen, pending)
}
