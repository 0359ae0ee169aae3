//! Step 2 of a claim pass: what to do, decided from an [`Observation`] alone: no I/O, no clock,
//! no shared state. Two pure functions:
//!
//! - [`plan`]: the claim's Sandbox step (keep it, sync its metadata, adopt a warm member,
//!   create a cold one, delete it at a Retain expiry, or none), or deleting the claim, or
//!   nothing, each with the reason;
//! - [`report`]: from the outcome of that step, the claim's own writes: the annotation stamp
//!   (before the claim is Ready, so a client never reads Ready without `sandbox-name` and the
//!   observability annotations), the status, the Events, and the first-Ready bookkeeping.
//!
//! [`super::apply`] performs both, in that order; tests drive them with hand-made observations
//! (`plan/tests.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use api_types::conditions::{
    READY, REASON_CLAIM_EXPIRED, REASON_SANDBOX_MISSING, STATUS_TRUE, find_condition,
};
use api_types::keys::{
    ASSIGNED_SANDBOX_NAME_ANNOTATION, CLAIM_FIRST_READY_AT_ANNOTATION,
    CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION, SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM,
    SANDBOX_TEMPLATE_REF_ANNOTATION, SANDBOX_TEMPLATE_REF_HASH_LABEL, TRACE_CONTEXT_ANNOTATION,
};
use api_types::{
    ClaimShutdownPolicy, Sandbox, SandboxClaim, SandboxClaimStatus, SandboxTemplate,
    SandboxWarmPool, name_hash,
};
use controller_common::events::EventType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::adoption::{adoption_patch, map_diff};
use super::cold::{ColdError, build_cold_sandbox};
use super::injection::EnvError;
use super::lifecycle::{expires_at, shutdown_policy};
use super::metadata::{MetadataError, validate};
use super::observe::{Observation, Policy, SandboxView};
use super::pod_metadata::desired_pod_metadata;
use super::state::ClaimSettings;
use super::status::{Failure, Observed, compute_status};
use crate::ownership::is_controlled_by;

/// How long a new claim waits for warm members that have no pod IPs yet before cold-starting.
pub const NETWORK_GRACE: Duration = Duration::from_secs(2);
/// Re-check interval while waiting for such members.
pub const NETWORK_RECHECK: Duration = Duration::from_millis(500);
/// Re-check delay after a `ReconcilerError`.
pub const RECONCILER_ERROR_RECHECK: Duration = Duration::from_secs(5);
/// Re-check delay after a status write lost to a newer version of the claim, and while the
/// cache has not shown a binding this process just made.
pub const STALE_RECHECK: Duration = Duration::from_millis(100);
/// Re-check delay while a template's NetworkPolicy is not in place (its events wake the claim
/// sooner).
pub const POLICY_RECHECK: Duration = Duration::from_secs(5);

/// What a pass does, and why.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The decision in a few words (logged with the pass and recorded on its span).
    pub why: &'static str,
    /// An older release's per-claim NetworkPolicy to delete first (its errors only logged).
    pub legacy_policy: Option<String>,
    pub step: Step,
}

#[derive(Debug, Clone)]
pub enum Step {
    /// Nothing to write: wait for a trigger, or look again after `requeue`. `forget` drops
    /// this process' memory of the claim (it is being deleted).
    Nothing {
        requeue: Option<Duration>,
        forget: bool,
    },
    /// Expired with `Delete` or `DeleteForeground`: an Event, then delete the claim.
    DeleteClaim { foreground: bool },
    /// A step on the claim's Sandbox, then [`report`] on its outcome.
    Sandbox(SandboxStep),
}

#[derive(Debug, Clone)]
pub enum SandboxStep {
    /// No Sandbox write: the outcome is known.
    Settled(Outcome),
    /// Bring the bound Sandbox's metadata in line with the template and the claim (a merge
    /// patch of the difference, no lock).
    Sync { sandbox: Arc<Sandbox>, patch: Value },
    /// Take a warm member (see [`Adopt`]).
    Adopt(Box<Adopt>),
    /// Create the cold Sandbox, named after the claim.
    Create { sandbox: Box<Sandbox>, pool: String },
    /// Retain expiry: delete the claim's Sandbox (UID precondition); it is reported until gone.
    DeleteExpired(Arc<Sandbox>),
}

/// The warm path: each candidate in turn gets the ownership transfer, one merge patch guarded
/// by the member's `resourceVersion` (of two claims racing for a member exactly one wins; a
/// 409 costs one fresh read of that member and one more try). If none is taken, `otherwise`.
#[derive(Debug, Clone)]
pub struct Adopt {
    pub pool: Arc<SandboxWarmPool>,
    pub candidates: Vec<Arc<Sandbox>>,
    /// The claim as its Sandbox sees it (with the pass's trace context).
    pub claim: Arc<SandboxClaim>,
    pub template: Arc<SandboxTemplate>,
    pub template_name: String,
    pub domains: Vec<String>,
    pub otherwise: Fallback,
}

impl Adopt {
    /// The guarded adoption patch for `candidate` (also for a fresh copy read after a 409).
    pub fn patch_for(&self, candidate: &Sandbox) -> Result<Option<Value>, MetadataError> {
        adoption_patch(
            candidate,
            &self.claim,
            Some(&self.template),
            &self.template_name,
            &self.domains,
        )
    }
}

/// What the warm path does when no candidate was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fallback {
    /// A young claim waits this long for members that are getting their pod IPs.
    Wait(Duration),
    /// Cold start ([`cold`]).
    Cold,
}

/// The outcome of the Sandbox step.
#[derive(Debug, Clone)]
pub enum Outcome {
    Bound {
        sandbox: Arc<Sandbox>,
        how: How,
    },
    /// No Sandbox: `name` is the one the claim lost (`None`: it never had one, e.g. after a
    /// Retain expiry cleaned up).
    Missing {
        name: Option<String>,
    },
    Failed(Failure),
    /// Look again after this long without touching the status.
    Wait(Duration),
}

/// How the claim got the Sandbox it has after this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum How {
    /// It had it.
    Kept,
    /// Adopted now from `pool`; `was_ready` said the member's Ready condition.
    Adopted { pool: String, was_ready: bool },
    /// Created now (cold) for `pool`.
    Created { pool: String },
}

/// Whether a take planned from an observation (a warm member's adoption patch, a cold
/// Sandbox's create) may still be sent, from the claim as the cache holds it right before the
/// request leaves (see [`take_check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeCheck {
    /// The claim is as the pass saw it: send.
    Send,
    /// The claim is gone from the cache (or a namesake with another UID took its place), or its
    /// deletion has begun: take nothing; its deletion's pass forgets it.
    Deleted,
    /// The claim changed since the pass read it: take nothing now, plan again from the new
    /// version ([`STALE_RECHECK`]).
    Changed,
}

impl TakeCheck {
    /// For the log.
    pub fn reason(self) -> &'static str {
        match self {
            TakeCheck::Send => "send",
            TakeCheck::Deleted => "the claim was deleted",
            TakeCheck::Changed => "the claim changed",
        }
    }
}

/// Re-checks a take decided on `o` against `current`, the claim as the cache holds it now:
/// called right before each adoption patch and each cold create, so a deletion (or any change)
/// the watch delivered while the pass was deciding, or while it waited on a request (the legacy
/// policy's delete, a fresh read after a 409, an earlier candidate), stops the take. Issue 21
/// item 2: a claim deleted 0-60 ms after its creation had a warm member adopted on the version
/// from before its deletion, and garbage collection then deleted that member.
///
/// The API server cannot make the Sandbox's patch conditional on the claim (no request spans two
/// objects), so a delete that reaches the server after this check and before the patch, or one
/// the claim watch has not delivered yet, still wins the race (docs/reliability.md).
pub fn take_check(o: &Observation, current: Option<&SandboxClaim>) -> TakeCheck {
    let Some(current) = current else {
        return TakeCheck::Deleted;
    };
    let meta = &current.metadata;
    if meta.uid.as_deref() != Some(o.uid.as_str()) || meta.deletion_timestamp.is_some() {
        return TakeCheck::Deleted;
    }
    let version = meta.resource_version.as_deref();
    if version == o.claim.metadata.resource_version.as_deref()
        || version == o.cached_version.as_deref()
    {
        TakeCheck::Send
    } else {
        TakeCheck::Changed
    }
}

fn plan_of(why: &'static str, o: &Observation, step: Step) -> Plan {
    Plan {
        why,
        legacy_policy: o.legacy_policy.clone(),
        step,
    }
}

fn settled(why: &'static str, o: &Observation, outcome: Outcome) -> Plan {
    plan_of(why, o, Step::Sandbox(SandboxStep::Settled(outcome)))
}

/// The `Failure` a metadata error is reported as.
pub fn metadata_failure(e: MetadataError) -> Failure {
    match e {
        MetadataError::Invalid { .. } | MetadataError::TooLarge { .. } => {
            Failure::InvalidMetadata(e.to_string())
        }
        MetadataError::Conflict { .. } => Failure::Reconciler(e.to_string()),
    }
}

/// The Sandbox step (or none) for the observed claim.
pub fn plan(o: &Observation, settings: &ClaimSettings) -> Plan {
    if o.claim.metadata.deletion_timestamp.is_some() {
        return Plan {
            why: "the claim is being deleted",
            legacy_policy: None,
            step: Step::Nothing {
                requeue: None,
                forget: true,
            },
        };
    }
    if o.expired() {
        return expired(o);
    }
    let domains = &settings.allowed_label_domains;
    if let Err(e) = validate(&o.claim.spec.additional_pod_metadata, domains) {
        return settled(
            "the claim asks for metadata that is refused",
            o,
            Outcome::Failed(metadata_failure(e)),
        );
    }
    match &o.sandbox {
        SandboxView::Bound(sb) => sync(o, sb, domains),
        SandboxView::Lagging { .. } => plan_of(
            "this process just bound the claim; the cache does not show it yet",
            o,
            Step::Nothing {
                requeue: Some(STALE_RECHECK),
                forget: false,
            },
        ),
        // Never another: the claim's agent had files and an identity there. The user is told
        // (condition and Event) and decides.
        SandboxView::Gone { name } => settled(
            "the claim was bound and its Sandbox is gone",
            o,
            Outcome::Missing {
                name: Some(name.clone()),
            },
        ),
        SandboxView::Foreign => settled(
            "a Sandbox named after the claim is someone else's",
            o,
            Outcome::Failed(Failure::Reconciler(format!(
                "sandbox {:?} is not controlled by claim {:?}. Please use a different claim name or delete the sandbox manually",
                o.name, o.name
            ))),
        ),
        SandboxView::Unbound => acquire(o, settings),
    }
}

fn expired(o: &Observation) -> Plan {
    match shutdown_policy(&o.claim) {
        ClaimShutdownPolicy::Delete => plan_of(
            "expired (Delete): delete the claim",
            o,
            Step::DeleteClaim { foreground: false },
        ),
        ClaimShutdownPolicy::DeleteForeground => plan_of(
            "expired (DeleteForeground): delete the claim",
            o,
            Step::DeleteClaim { foreground: true },
        ),
        ClaimShutdownPolicy::Retain => match &o.expired_target {
            None => settled(
                "expired (Retain): no Sandbox left",
                o,
                Outcome::Missing { name: None },
            ),
            Some(sb) if !is_controlled_by(&sb.metadata, &o.uid) => settled(
                "expired (Retain): the Sandbox is not the claim's",
                o,
                Outcome::Failed(Failure::ExpiredNotOwned(format!(
                    "sandbox {:?} is not controlled by claim {:?}",
                    sb.metadata.name.as_deref().unwrap_or_default(),
                    o.name
                ))),
            ),
            Some(sb) if sb.metadata.deletion_timestamp.is_some() => settled(
                "expired (Retain): the Sandbox is being deleted",
                o,
                Outcome::Bound {
                    sandbox: sb.clone(),
                    how: How::Kept,
                },
            ),
            Some(sb) => plan_of(
                "expired (Retain): delete the Sandbox, keep the claim",
                o,
                Step::Sandbox(SandboxStep::DeleteExpired(sb.clone())),
            ),
        },
    }
}

/// A bound claim: keep its Sandbox's metadata in line with the template and the claim.
fn sync(o: &Observation, sb: &Arc<Sandbox>, domains: &[String]) -> Plan {
    let kept = || Outcome::Bound {
        sandbox: sb.clone(),
        how: How::Kept,
    };
    if sb.metadata.deletion_timestamp.is_some() {
        return settled("bound; the Sandbox is being deleted", o, kept());
    }
    let Some((template_name, template)) = &o.bound_template else {
        return settled("bound; no template to sync from", o, kept());
    };
    let desired = match desired_pod_metadata(
        &template.spec.blueprint.pod_template.metadata,
        &o.claim,
        &o.uid,
        Some(template_name),
        domains,
    ) {
        Ok(meta) => meta,
        Err(e) => {
            return settled(
                "bound; the claim's metadata cannot be merged",
                o,
                Outcome::Failed(metadata_failure(e)),
            );
        }
    };
    let current = &sb.spec.blueprint.pod_template.metadata;
    let have_labels = sb.metadata.labels.clone().unwrap_or_default();
    let mut want_labels = have_labels.clone();
    want_labels.insert(
        SANDBOX_TEMPLATE_REF_HASH_LABEL.into(),
        name_hash(template_name),
    );
    want_labels
        .entry(SANDBOX_LAUNCH_TYPE_LABEL.into())
        .or_insert_with(|| {
            if sb.metadata.name.as_deref() == Some(o.name.as_str()) {
                "cold".into()
            } else {
                SANDBOX_LAUNCH_TYPE_WARM.into()
            }
        });
    let label_diff = map_diff(&have_labels, &want_labels);
    let pod_labels = map_diff(&current.labels, &desired.labels);
    let pod_annotations = map_diff(&current.annotations, &desired.annotations);
    if label_diff.is_empty() && pod_labels.is_empty() && pod_annotations.is_empty() {
        return settled("bound; nothing to change", o, kept());
    }
    let mut top = Map::new();
    if !label_diff.is_empty() {
        top.insert("labels".into(), Value::Object(label_diff));
    }
    let mut patch = json!({"metadata": top});
    if !pod_labels.is_empty() || !pod_annotations.is_empty() {
        patch["spec"] = json!({"podTemplate": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}}});
    }
    plan_of(
        "bound; sync the Sandbox's metadata",
        o,
        Step::Sandbox(SandboxStep::Sync {
            sandbox: sb.clone(),
            patch,
        }),
    )
}

/// The claim is young enough to wait for members getting their pod IPs.
fn is_young(o: &Observation) -> bool {
    o.claim
        .metadata
        .creation_timestamp
        .as_ref()
        .is_some_and(|created| {
            let age = o
                .now
                .as_millisecond()
                .saturating_sub(created.0.as_millisecond());
            age < i64::try_from(NETWORK_GRACE.as_millis()).unwrap_or(i64::MAX)
        })
}

/// An unbound claim: a warm member if it can be served warm and one is there, a cold Sandbox
/// otherwise. Nothing is handed out without the template's NetworkPolicy in place.
fn acquire(o: &Observation, settings: &ClaimSettings) -> Plan {
    let pool_name = &o.claim.spec.warm_pool_ref.name;
    let Some(pool) = &o.pool else {
        return settled(
            "the pool does not exist",
            o,
            Outcome::Failed(Failure::WarmPoolNotFound {
                pool: pool_name.clone(),
            }),
        );
    };
    let template_name = pool.spec.sandbox_template_ref.name.clone();
    // Without the template its NetworkPolicy is gone too (it is the template's), so not even
    // a warm member is handed out.
    let Some(template) = &o.template else {
        return settled(
            "the pool's template does not exist",
            o,
            Outcome::Failed(Failure::TemplateNotFound {
                template: template_name,
            }),
        );
    };
    if let Policy::NotReady(why) = &o.policy {
        return settled(
            "the template's NetworkPolicy is not in place",
            o,
            Outcome::Failed(Failure::NetworkPolicy(why.clone())),
        );
    }
    if o.customized() {
        return plan_of(
            "the claim asks for env or volume claims: cold",
            o,
            Step::Sandbox(cold(o, settings)),
        );
    }
    // Everything the claim asks for is checked before a member is taken: the pod metadata a
    // member gets does not depend on the member.
    if let Err(e) = desired_pod_metadata(
        &template.spec.blueprint.pod_template.metadata,
        &o.claim,
        &o.uid,
        Some(&template_name),
        &settings.allowed_label_domains,
    ) {
        return settled(
            "the claim's metadata cannot be merged with the template's",
            o,
            Outcome::Failed(metadata_failure(e)),
        );
    }
    let otherwise = if o.pending_network && is_young(o) {
        Fallback::Wait(NETWORK_RECHECK)
    } else {
        Fallback::Cold
    };
    if o.candidates.is_empty() {
        return match otherwise {
            Fallback::Wait(after) => plan_of(
                "no warm member has pod IPs yet; a young claim waits for one",
                o,
                Step::Nothing {
                    requeue: Some(after),
                    forget: false,
                },
            ),
            Fallback::Cold => plan_of(
                "no warm member to take: cold",
                o,
                Step::Sandbox(cold(o, settings)),
            ),
        };
    }
    plan_of(
        "take a warm member",
        o,
        Step::Sandbox(SandboxStep::Adopt(Box::new(Adopt {
            pool: pool.clone(),
            candidates: o.candidates.clone(),
            claim: o.claim_for_sandbox(),
            template: template.clone(),
            template_name,
            domains: settings.allowed_label_domains.clone(),
            otherwise,
        }))),
    )
}

/// The cold path: the Sandbox named after the claim, from the pool's template, or why not.
pub fn cold(o: &Observation, settings: &ClaimSettings) -> SandboxStep {
    let pool = o.claim.spec.warm_pool_ref.name.clone();
    let failed = |f| SandboxStep::Settled(Outcome::Failed(f));
    let Some(template) = &o.template else {
        let template = o
            .pool
            .as_ref()
            .map(|p| p.spec.sandbox_template_ref.name.clone())
            .unwrap_or_default();
        return failed(Failure::TemplateNotFound { template });
    };
    let template_name = template.metadata.name.clone().unwrap_or_default();
    match build_cold_sandbox(
        &o.claim_for_sandbox(),
        template,
        &template_name,
        &settings.allowed_label_domains,
    ) {
        Ok(sandbox) => SandboxStep::Create {
            sandbox: Box::new(sandbox),
            pool,
        },
        Err(ColdError::VolumeClaimTemplates(e)) => failed(Failure::VolumeClaimTemplates(e)),
        Err(ColdError::Metadata(e)) => failed(metadata_failure(e)),
        Err(ColdError::Env(EnvError::Rejected(e))) => failed(Failure::EnvRejected(e)),
        Err(ColdError::Env(EnvError::Invalid(e))) => failed(Failure::Reconciler(e)),
        Err(e @ ColdError::Incomplete) => failed(Failure::Reconciler(e.to_string())),
    }
}

/// An Event about the claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// At the claim's first Ready: what this process reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirstReady {
    /// This pass makes the claim Ready at `at` (its `claim-first-ready-at`): latency metrics
    /// (until the status is stored) and `claim-to-bound` (ending `at`).
    Transition { at: Timestamp },
    /// The claim was Ready before this process saw it become so (an older release, or a
    /// restart) and carries no `claim-first-ready-at`: `claim-to-bound` ends `at` (the stored
    /// transition time), no metrics (the latency is unknown).
    Backfill { at: Timestamp },
}

/// The claim's writes after the Sandbox step, in the order they are sent.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Annotations to add to the claim (one merge patch), before the status.
    pub stamp: BTreeMap<String, String>,
    /// The status to write (guarded by the claim's resourceVersion); `None`: unchanged.
    pub status: Option<SandboxClaimStatus>,
    /// Events, after the status.
    pub events: Vec<ClaimEvent>,
    pub first_ready: Option<FirstReady>,
    pub requeue: Option<Duration>,
}

fn is_ready(status: &SandboxClaimStatus) -> bool {
    find_condition(&status.conditions, READY).is_some_and(|c| c.status == STATUS_TRUE)
}

fn ready_reason(status: &SandboxClaimStatus) -> Option<&str> {
    find_condition(&status.conditions, READY).map(|c| c.reason.as_str())
}

/// The claim's writes for `outcome`, at `now` (when the pass reports).
pub fn report(
    o: &Observation,
    outcome: &Outcome,
    settings: &ClaimSettings,
    now: Timestamp,
) -> Report {
    // A condition changed now never predates the claim (clock skew between this controller
    // and the API server that stamped the creation).
    let now = match o.claim.metadata.creation_timestamp.as_ref() {
        Some(created) if created.0 > now => created.0,
        _ => now,
    };
    let current = o.status();
    let expired = o.expired();
    let (sandbox, failure, missing) = match outcome {
        Outcome::Bound { sandbox, .. } => (Some(sandbox.as_ref()), None, None),
        Outcome::Missing { name } => (None, None, name.as_deref()),
        Outcome::Failed(f) => (None, Some(f), None),
        Outcome::Wait(after) => {
            return Report {
                requeue: Some(*after),
                ..Report::default()
            };
        }
    };
    let next = compute_status(
        &o.claim,
        &current,
        &Observed {
            sandbox,
            failure,
            expired,
            missing,
        },
        &Time(now),
    );
    let mut report = Report::default();

    // When to look again.
    let mut requeue: Option<Duration> = None;
    let expire_after = expires_at(&o.claim, &next);
    // The Finished condition just mirrored can make the claim expire now (TTL 0).
    if !expired && expire_after.is_some_and(|at| now >= at) {
        requeue = Some(Duration::from_millis(1));
    }
    if let Some(f) = failure {
        let after = match f {
            Failure::TemplateNotFound { .. } | Failure::WarmPoolNotFound { .. } => {
                Some(Duration::from_secs(60))
            }
            Failure::CreatePending => Some(Duration::from_millis(200)),
            Failure::AdoptionConflict(_) => Some(Duration::from_millis(100)),
            Failure::NetworkPolicy(_) => Some(POLICY_RECHECK),
            // Transient API failures, or a condition fixed elsewhere (a foreign Sandbox with
            // the claim's name deleted): look again without hammering the API.
            Failure::Reconciler(_) => Some(RECONCILER_ERROR_RECHECK),
            _ => None,
        };
        requeue = requeue.or(after);
    }
    if let Some(at) = expire_after.filter(|at| *at > now) {
        let left = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::from_secs(1));
        requeue = Some(requeue.map_or(left, |r| r.min(left)));
    }
    report.requeue = requeue;

    // Events.
    if expired && ready_reason(&current) != Some(REASON_CLAIM_EXPIRED) {
        report.events.push(ClaimEvent {
            type_: EventType::Normal,
            reason: REASON_CLAIM_EXPIRED,
            action: "Claim Expired",
            note: "Claim expired".into(),
        });
    }
    if let Some(name) = missing
        && ready_reason(&current) != Some(REASON_SANDBOX_MISSING)
    {
        report.events.push(ClaimEvent {
            type_: EventType::Warning,
            reason: REASON_SANDBOX_MISSING,
            action: "Binding",
            note: format!(
                "Sandbox {name:?} of this claim was deleted; the claim is not given another. Delete and recreate the claim for a new Sandbox"
            ),
        });
    }
    if let Outcome::Bound { sandbox, how } = outcome {
        let sandbox_name = sandbox.metadata.name.as_deref().unwrap_or_default();
        match how {
            How::Created { .. } => report.events.push(ClaimEvent {
                type_: EventType::Normal,
                reason: "SandboxProvisioned",
                action: "Provisioning",
                note: format!("Created Sandbox {sandbox_name:?}"),
            }),
            // One API write per warm claim for news the status already carries: opt-in.
            How::Adopted { .. } if settings.publishes_adoption_event() => {
                report.events.push(ClaimEvent {
                    type_: EventType::Normal,
                    reason: "SandboxAdopted",
                    action: "Adoption",
                    note: format!("Adopted warm pool Sandbox {sandbox_name:?}"),
                });
            }
            _ => {}
        }
    }

    // First Ready: the annotations go first (or the claim would be Ready without them).
    let becomes_ready = is_ready(&next);
    let annotations = o.claim.metadata.annotations.clone().unwrap_or_default();
    let first_time = becomes_ready && !is_ready(&current);
    if becomes_ready && settings.observability_annotations {
        if !annotations.contains_key(CLAIM_FIRST_READY_AT_ANNOTATION) {
            report.stamp.insert(
                CLAIM_FIRST_READY_AT_ANNOTATION.to_owned(),
                if first_time {
                    rfc3339_nano(now)
                } else {
                    "unknown".to_owned()
                },
            );
        }
        if !annotations.contains_key(CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION) {
            report.stamp.insert(
                CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION.to_owned(),
                rfc3339_nano(o.first_seen),
            );
        }
        if !annotations.contains_key(TRACE_CONTEXT_ANNOTATION)
            && let Some(trace) = &o.stamp_trace
        {
            report
                .stamp
                .insert(TRACE_CONTEXT_ANNOTATION.to_owned(), trace.clone());
        }
        if !next.sandbox.name.is_empty()
            && annotations.get(ASSIGNED_SANDBOX_NAME_ANNOTATION) != Some(&next.sandbox.name)
        {
            report.stamp.insert(
                ASSIGNED_SANDBOX_NAME_ANNOTATION.to_owned(),
                next.sandbox.name.clone(),
            );
        }
    }
    report.first_ready = if first_time && !o.ready_recorded {
        Some(FirstReady::Transition { at: now })
    } else if becomes_ready
        && settings.observability_annotations
        && !annotations.contains_key(CLAIM_FIRST_READY_AT_ANNOTATION)
        && !o.ready_recorded
    {
        find_condition(&next.conditions, READY).map(|c| FirstReady::Backfill {
            at: c.last_transition_time.0,
        })
    } else {
        None
    };
    report.status = (next != current).then_some(next);
    report
}

/// `warm` when the Sandbox carries `launch-type=warm`, `cold` otherwise, `unknown` without one.
pub fn launch_type_of(sandbox: Option<&Sandbox>) -> &'static str {
    match sandbox {
        None => "unknown",
        Some(sb)
            if sb
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SANDBOX_LAUNCH_TYPE_LABEL))
                .map(String::as_str)
                == Some(SANDBOX_LAUNCH_TYPE_WARM) =>
        {
            "warm"
        }
        Some(_) => "cold",
    }
}

/// The template a Sandbox was made from (its `sandbox-template-ref` annotation).
pub fn template_of(sandbox: Option<&Sandbox>) -> Option<&str> {
    sandbox
        .and_then(|sb| sb.metadata.annotations.as_ref())
        .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
        .map(String::as_str)
}

/// RFC 3339 with nanoseconds, trailing zeros trimmed (Go's `RFC3339Nano`).
pub fn rfc3339_nano(ts: Timestamp) -> String {
    ts.to_string()
}

#[cfg(test)]
mod tests;
