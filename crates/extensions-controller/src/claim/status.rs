//! The claim's status as a pure function of what a pass observed: the bound Sandbox (if any),
//! the failure (if any) and whether the claim has expired. Every Ready reason of api.md §3.2,
//! plus `NetworkPolicyNotReady` (the template's policy is not in place: nothing is handed out).
//!
//! The Ready condition's `lastTransitionTime` is the claim's own: when the claim's Ready status
//! last changed, never the bound Sandbox's (a warm Sandbox became Ready before the claim
//! existed). Status, reason and message are the Sandbox's. The mirrored `Finished` condition
//! keeps the Sandbox's time: `ttlSecondsAfterFinished` counts from when the Pod finished.

use api_types::conditions::{
    FINISHED, READY, REASON_ADOPTION_CONFLICT, REASON_CLAIM_EXPIRED,
    REASON_ENV_VARS_INJECTION_REJECTED, REASON_INVALID_METADATA, REASON_NETWORK_POLICY_NOT_READY,
    REASON_RECONCILER_ERROR, REASON_SANDBOX_CREATE_PENDING, REASON_SANDBOX_EXPIRED,
    REASON_SANDBOX_MISSING, REASON_SANDBOX_NOT_READY, REASON_TEMPLATE_NOT_FOUND,
    REASON_VOLUME_CLAIM_TEMPLATES_ERROR, REASON_WARM_POOL_NOT_FOUND, STATUS_FALSE, find_condition,
    new_condition, remove_condition, set_condition,
};
use api_types::{ClaimSandboxStatus, Sandbox, SandboxClaim, SandboxClaimStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Why a pass could not bind or keep the claim's Sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    TemplateNotFound {
        template: String,
    },
    WarmPoolNotFound {
        pool: String,
    },
    AdoptionConflict(String),
    CreatePending,
    InvalidMetadata(String),
    EnvRejected(String),
    VolumeClaimTemplates(String),
    /// The expired claim's Sandbox belongs to someone else; nothing was deleted.
    ExpiredNotOwned(String),
    /// The template's NetworkPolicy is not in place (being made, or it cannot be made): no
    /// Sandbox of this template is handed out (fail closed).
    NetworkPolicy(String),
    Reconciler(String),
}

impl Failure {
    /// Failures that only the user can fix: no retry until the claim (or template) changes.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Failure::InvalidMetadata(_)
                | Failure::EnvRejected(_)
                | Failure::VolumeClaimTemplates(_)
                | Failure::ExpiredNotOwned(_)
        )
    }

    fn ready(&self) -> (&'static str, String) {
        match self {
            Failure::TemplateNotFound { template } => (
                REASON_TEMPLATE_NOT_FOUND,
                format!("SandboxTemplate {template:?} not found"),
            ),
            Failure::WarmPoolNotFound { pool } => (
                REASON_WARM_POOL_NOT_FOUND,
                format!("SandboxWarmPool {pool:?} not found"),
            ),
            Failure::AdoptionConflict(detail) => (
                REASON_ADOPTION_CONFLICT,
                format!("{detail}; the next pass retries from a converged view"),
            ),
            Failure::CreatePending => (
                REASON_SANDBOX_CREATE_PENDING,
                "Sandbox already created; waiting for cache to converge".into(),
            ),
            Failure::InvalidMetadata(e) => (
                REASON_INVALID_METADATA,
                format!("invalid additionalPodMetadata: {e}"),
            ),
            Failure::EnvRejected(e) => (
                REASON_ENV_VARS_INJECTION_REJECTED,
                format!("environment variable injection rejected: {e}"),
            ),
            Failure::VolumeClaimTemplates(e) => (REASON_VOLUME_CLAIM_TEMPLATES_ERROR, e.clone()),
            Failure::ExpiredNotOwned(e) => (
                REASON_CLAIM_EXPIRED,
                format!("Claim expired. {e}; deletion skipped."),
            ),
            Failure::NetworkPolicy(e) => (REASON_NETWORK_POLICY_NOT_READY, e.clone()),
            Failure::Reconciler(e) => (REASON_RECONCILER_ERROR, format!("Error seen: {e}")),
        }
    }
}

pub const CLAIM_EXPIRED_MESSAGE: &str = "Claim expired. Sandbox cleanup initiated.";

/// What one pass observed.
pub struct Observed<'a> {
    pub sandbox: Option<&'a Sandbox>,
    pub failure: Option<&'a Failure>,
    pub expired: bool,
    /// The claim's Sandbox, by name, is gone (deleted after the claim was bound).
    pub missing: Option<&'a str>,
}

/// The status to persist, given the current one; `now` is when a changed Ready condition
/// changed (the caller keeps it no earlier than the claim's creation).
pub fn compute_status(
    claim: &SandboxClaim,
    current: &SandboxClaimStatus,
    observed: &Observed<'_>,
    now: &Time,
) -> SandboxClaimStatus {
    let mut status = current.clone();
    if observed.sandbox.is_none()
        && observed.failure == Some(&Failure::CreatePending)
        && !status.sandbox.name.is_empty()
    {
        return status;
    }
    let generation = claim.metadata.generation;
    let sandbox_conditions = observed
        .sandbox
        .and_then(|sb| sb.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or(&[]);

    let ready = match (observed.failure, observed.expired, observed.sandbox) {
        (Some(failure), _, _) => {
            let (reason, message) = failure.ready();
            new_condition(
                READY,
                STATUS_FALSE,
                reason,
                message,
                generation,
                now.clone(),
            )
        }
        (None, true, _) => new_condition(
            READY,
            STATUS_FALSE,
            REASON_CLAIM_EXPIRED,
            CLAIM_EXPIRED_MESSAGE,
            generation,
            now.clone(),
        ),
        (None, false, None) => new_condition(
            READY,
            STATUS_FALSE,
            REASON_SANDBOX_MISSING,
            match observed.missing {
                Some(name) => format!(
                    "Sandbox {name:?} does not exist: it was deleted after the claim was bound, and a claim never takes another Sandbox; delete and recreate the claim to get a new one"
                ),
                None => "Sandbox does not exist".to_owned(),
            },
            generation,
            now.clone(),
        ),
        (None, false, Some(_)) => match find_condition(sandbox_conditions, READY) {
            Some(c) if c.reason == REASON_SANDBOX_EXPIRED => new_condition(
                READY,
                STATUS_FALSE,
                REASON_SANDBOX_EXPIRED,
                "Underlying Sandbox resource has expired independently of the Claim.",
                generation,
                now.clone(),
            ),
            Some(c) => {
                let mut copy = c.clone();
                copy.observed_generation = generation;
                copy
            }
            None => new_condition(
                READY,
                STATUS_FALSE,
                REASON_SANDBOX_NOT_READY,
                "Sandbox is not ready",
                generation,
                now.clone(),
            ),
        },
    };
    set_condition(&mut status.conditions, ready, now.clone());

    match observed.sandbox {
        Some(_) => match find_condition(sandbox_conditions, FINISHED) {
            Some(finished) => {
                let finished = finished.clone();
                let at = finished.last_transition_time.clone();
                set_condition(&mut status.conditions, finished, at);
            }
            None => {
                remove_condition(&mut status.conditions, FINISHED);
            }
        },
        None if !observed.expired => {
            remove_condition(&mut status.conditions, FINISHED);
        }
        None => {}
    }
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));

    match observed.sandbox {
        Some(sb) => {
            status.sandbox = ClaimSandboxStatus {
                name: sb.metadata.name.clone().unwrap_or_default(),
                pod_ips: sb
                    .status
                    .as_ref()
                    .map(|s| s.pod_ips.clone())
                    .unwrap_or_default(),
            };
        }
        // The lost Sandbox stays named: the claim was bound, and says to what.
        None if let (Some(name), None) = (observed.missing, observed.failure) => {
            status.sandbox = ClaimSandboxStatus {
                name: name.to_owned(),
                pod_ips: Vec::new(),
            };
        }
        None if observed.failure.is_none()
            || matches!(observed.failure, Some(Failure::ExpiredNotOwned(_))) =>
        {
            status.sandbox = ClaimSandboxStatus::default();
        }
        // A transient failure never wipes the binding (the next pass would cold-start).
        None => {}
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::conditions::{REASON_POD_SUCCEEDED, STATUS_TRUE};
    use api_types::{SandboxClaimSpec, SandboxStatus, WarmPoolRef};
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    fn claim() -> SandboxClaim {
        let mut c = SandboxClaim::new(
            "c",
            SandboxClaimSpec {
                warm_pool_ref: WarmPoolRef { name: "p".into() },
                ..Default::default()
            },
        );
        c.metadata.generation = Some(4);
        c
    }

    fn sandbox(
        conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    ) -> Sandbox {
        let mut sb = Sandbox::new("pool-x", Default::default());
        sb.status = Some(SandboxStatus {
            conditions,
            pod_ips: vec!["127.0.0.7".into()],
            ..Default::default()
        });
        sb
    }

    fn ready_of(s: &SandboxClaimStatus) -> (&str, &str, &str) {
        let c = find_condition(&s.conditions, READY).unwrap();
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    #[test]
    fn forwards_the_sandbox_ready_condition_with_the_claim_generation_and_its_own_time() {
        let sb = sandbox(vec![new_condition(
            READY,
            STATUS_TRUE,
            "DependenciesReady",
            "Pod is Ready",
            Some(2),
            at(100),
        )]);
        let s = compute_status(
            &claim(),
            &Default::default(),
            &Observed {
                sandbox: Some(&sb),
                failure: None,
                expired: false,
                missing: None,
            },
            &at(200),
        );
        let ready = find_condition(&s.conditions, READY).unwrap();
        assert_eq!(
            (
                ready.status.as_str(),
                ready.reason.as_str(),
                ready.observed_generation
            ),
            ("True", "DependenciesReady", Some(4))
        );
        assert_eq!(
            ready.last_transition_time,
            at(200),
            "the claim became Ready now, not when the Sandbox did"
        );
        assert_eq!(s.sandbox.name, "pool-x");
        assert_eq!(s.sandbox.pod_ips, ["127.0.0.7"]);
    }

    #[test]
    fn every_failure_has_its_reason_and_message() {
        let cases = [
            (
                Failure::TemplateNotFound {
                    template: "t".into(),
                },
                "TemplateNotFound",
                "SandboxTemplate \"t\" not found",
            ),
            (
                Failure::WarmPoolNotFound { pool: "p".into() },
                "WarmPoolNotFound",
                "SandboxWarmPool \"p\" not found",
            ),
            (
                Failure::InvalidMetadata("x".into()),
                "InvalidMetadata",
                "invalid additionalPodMetadata: x",
            ),
            (
                Failure::EnvRejected("y".into()),
                "EnvVarsInjectionRejected",
                "environment variable injection rejected: y",
            ),
            (
                Failure::VolumeClaimTemplates("z".into()),
                "VolumeClaimTemplatesError",
                "z",
            ),
            (
                Failure::Reconciler("boom".into()),
                "ReconcilerError",
                "Error seen: boom",
            ),
            (
                Failure::AdoptionConflict("lost".into()),
                "AdoptionConflict",
                "lost; the next pass retries from a converged view",
            ),
            (
                Failure::CreatePending,
                "SandboxCreatePending",
                "Sandbox already created; waiting for cache to converge",
            ),
        ];
        for (failure, reason, message) in cases {
            let s = compute_status(
                &claim(),
                &Default::default(),
                &Observed {
                    sandbox: None,
                    failure: Some(&failure),
                    expired: false,
                    missing: None,
                },
                &at(1),
            );
            assert_eq!(ready_of(&s), ("False", reason, message));
        }
    }

    #[test]
    fn missing_not_ready_and_independently_expired_sandboxes() {
        let none = compute_status(
            &claim(),
            &Default::default(),
            &Observed {
                sandbox: None,
                failure: None,
                expired: false,
                missing: None,
            },
            &at(1),
        );
        assert_eq!(
            ready_of(&none),
            ("False", "SandboxMissing", "Sandbox does not exist")
        );
        let bare = sandbox(vec![]);
        let s = compute_status(
            &claim(),
            &Default::default(),
            &Observed {
                sandbox: Some(&bare),
                failure: None,
                expired: false,
                missing: None,
            },
            &at(1),
        );
        assert_eq!(
            ready_of(&s),
            ("False", "SandboxNotReady", "Sandbox is not ready")
        );
        let expired = sandbox(vec![new_condition(
            READY,
            STATUS_FALSE,
            REASON_SANDBOX_EXPIRED,
            "Sandbox has expired",
            Some(1),
            at(1),
        )]);
        let s = compute_status(
            &claim(),
            &Default::default(),
            &Observed {
                sandbox: Some(&expired),
                failure: None,
                expired: false,
                missing: None,
            },
            &at(1),
        );
        assert_eq!(ready_of(&s).1, "SandboxExpired");
    }

    #[test]
    fn transient_failures_keep_the_binding_user_facing_ones_too() {
        let bound = SandboxClaimStatus {
            sandbox: ClaimSandboxStatus {
                name: "pool-x".into(),
                pod_ips: vec![],
            },
            ..Default::default()
        };
        let f = Failure::Reconciler("500".into());
        let s = compute_status(
            &claim(),
            &bound,
            &Observed {
                sandbox: None,
                failure: Some(&f),
                expired: false,
                missing: None,
            },
            &at(1),
        );
        assert_eq!(s.sandbox.name, "pool-x");
        let pending = compute_status(
            &claim(),
            &bound,
            &Observed {
                sandbox: None,
                failure: Some(&Failure::CreatePending),
                expired: false,
                missing: None,
            },
            &at(1),
        );
        assert_eq!(
            pending, bound,
            "create-pending with a binding changes nothing"
        );
        let not_owned = Failure::ExpiredNotOwned("sandbox is not owned".into());
        let s = compute_status(
            &claim(),
            &bound,
            &Observed {
                sandbox: None,
                failure: Some(&not_owned),
                expired: true,
                missing: None,
            },
            &at(1),
        );
        assert!(s.sandbox.name.is_empty());
        assert_eq!(
            ready_of(&s),
            (
                "False",
                "ClaimExpired",
                "Claim expired. sandbox is not owned; deletion skipped."
            )
        );
    }

    #[test]
    fn finished_is_mirrored_and_survives_expiry_without_a_sandbox() {
        let sb = sandbox(vec![new_condition(
            FINISHED,
            STATUS_TRUE,
            REASON_POD_SUCCEEDED,
            "done",
            Some(1),
            at(50),
        )]);
        let s = compute_status(
            &claim(),
            &Default::default(),
            &Observed {
                sandbox: Some(&sb),
                failure: None,
                expired: false,
                missing: None,
            },
            &at(60),
        );
        assert_eq!(
            s.conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            ["Finished", "Ready"]
        );
        let gone = compute_status(
            &claim(),
            &s,
            &Observed {
                sandbox: None,
                failure: None,
                expired: true,
                missing: None,
            },
            &at(70),
        );
        assert!(find_condition(&gone.conditions, FINISHED).is_some());
        assert_eq!(
            ready_of(&gone),
            ("False", "ClaimExpired", CLAIM_EXPIRED_MESSAGE)
        );
        let cleared = compute_status(
            &claim(),
            &s,
            &Observed {
                sandbox: None,
                failure: None,
                expired: false,
                missing: None,
            },
            &at(70),
        );
        assert!(find_condition(&cleared.conditions, FINISHED).is_none());
    }
}
