//! Condition types and reasons of Sandbox and SandboxClaim, and helpers to maintain a
//! `status.conditions` list the way Kubernetes does (`lastTransitionTime` moves only when the
//! status changes).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

// --- Condition status values ----------------------------------------------------------------

pub const STATUS_TRUE: &str = "True";
pub const STATUS_FALSE: &str = "False";
pub const STATUS_UNKNOWN: &str = "Unknown";

// --- Condition types ------------------------------------------------------------------------

/// Sandbox and SandboxClaim: the sandbox can serve.
pub const READY: &str = "Ready";
/// Sandbox: suspension state (always present once reconciled).
pub const SUSPENDED: &str = "Suspended";
/// Sandbox: mirror of the backing Pod's `PodScheduled` condition (only while a Pod exists).
pub const POD_SCHEDULED: &str = "PodScheduled";
/// Sandbox and SandboxClaim: the backing Pod reached a terminal phase (only ever True).
pub const FINISHED: &str = "Finished";

// --- Sandbox reasons ------------------------------------------------------------------------

/// `Ready=True`: Pod running and ready with an IP, Service present if required.
pub const REASON_DEPENDENCIES_READY: &str = "DependenciesReady";
/// `Ready=False`: Pod/Service missing or not ready yet (the default).
pub const REASON_DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
/// `Ready=False`: `operatingMode: Suspended`.
pub const REASON_SANDBOX_SUSPENDED: &str = "SandboxSuspended";
/// `Ready=False` and `Finished=True`: the Pod succeeded.
pub const REASON_POD_SUCCEEDED: &str = "PodSucceeded";
/// `Ready=False` and `Finished=True`: the Pod failed.
pub const REASON_POD_FAILED: &str = "PodFailed";
/// `Ready=False`: `shutdownTime` reached (also forwarded to claims).
pub const REASON_SANDBOX_EXPIRED: &str = "SandboxExpired";
/// `Ready=False`: more than one Pod is controlled by the Sandbox (also an Event reason).
pub const REASON_MULTIPLE_PODS: &str = "MultiplePods";
/// `Ready=False`: any other reconcile error (message `Error seen: <err>`); Sandbox and claim.
pub const REASON_RECONCILER_ERROR: &str = "ReconcilerError";
/// `Suspended=True`: suspended and the Pod is gone.
pub const REASON_POD_TERMINATED: &str = "PodTerminated";
/// `Suspended=False`: suspended, owned Pod still terminating.
pub const REASON_POD_TERMINATING: &str = "PodTerminating";
/// `Suspended=False`: a Pod with the Sandbox's name exists that the Sandbox does not own.
pub const REASON_POD_NOT_OWNED: &str = "PodNotOwned";
/// `Suspended=False`: `operatingMode` is Running.
pub const REASON_NOT_SUSPENDED: &str = "NotSuspended";
/// `Suspended=Unknown`: the Pod could not be reconciled.
pub const REASON_POD_STATE_UNKNOWN: &str = "PodStateUnknown";
/// Deprecated (replaced by [`REASON_POD_TERMINATING`]); never emitted.
pub const REASON_POD_NOT_TERMINATED: &str = "PodNotTerminated";
/// `PodScheduled=True` when the Pod's own condition has no reason.
pub const REASON_POD_SCHEDULED: &str = "PodScheduled";
/// `PodScheduled=Unknown`: no PodScheduled condition on the Pod yet, or reconcile failed; also
/// used for a non-True Pod condition without a reason.
pub const REASON_POD_SCHEDULING_UNKNOWN: &str = "PodSchedulingUnknown";

// --- SandboxClaim reasons (Ready=False) -----------------------------------------------------

/// The claim expired (Retain policy); also an Event reason.
pub const REASON_CLAIM_EXPIRED: &str = "ClaimExpired";
/// No Sandbox exists for the claim (also a Warning Event when a bound claim's Sandbox is gone).
pub const REASON_SANDBOX_MISSING: &str = "SandboxMissing";
/// The Sandbox exists but has no Ready condition yet.
pub const REASON_SANDBOX_NOT_READY: &str = "SandboxNotReady";
/// The pool's SandboxTemplate does not exist.
pub const REASON_TEMPLATE_NOT_FOUND: &str = "TemplateNotFound";
/// The `warmPoolRef` pool does not exist.
pub const REASON_WARM_POOL_NOT_FOUND: &str = "WarmPoolNotFound";
/// `additionalPodMetadata` failed validation.
pub const REASON_INVALID_METADATA: &str = "InvalidMetadata";
/// `env` rejected by the template's `envVarsInjectionPolicy`.
pub const REASON_ENV_VARS_INJECTION_REJECTED: &str = "EnvVarsInjectionRejected";
/// `volumeClaimTemplates` disallowed, forbidden override, or invalid names.
pub const REASON_VOLUME_CLAIM_TEMPLATES_ERROR: &str = "VolumeClaimTemplatesError";
/// Benign optimistic-lock contention while adopting a warm sandbox.
pub const REASON_ADOPTION_CONFLICT: &str = "AdoptionConflict";
/// Cold-start create returned AlreadyExists because of cache lag.
pub const REASON_SANDBOX_CREATE_PENDING: &str = "SandboxCreatePending";
/// The template's NetworkPolicy is not in place (being made, or it cannot be made), so no
/// Sandbox of that template is handed out; not in the reference (it hands them out without one).
pub const REASON_NETWORK_POLICY_NOT_READY: &str = "NetworkPolicyNotReady";

/// The `status` string of a boolean condition.
pub fn status_str(value: bool) -> &'static str {
    if value { STATUS_TRUE } else { STATUS_FALSE }
}

/// Builds a condition; `last_transition_time` is `now` (kept from an existing condition by
/// [`set_condition`] when the status did not change).
pub fn new_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// True when the condition of type `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    has_status(conditions, type_, STATUS_TRUE)
}

/// True when the condition of type `type_` is present with status `False`.
pub fn is_false(conditions: &[Condition], type_: &str) -> bool {
    has_status(conditions, type_, STATUS_FALSE)
}

/// True when the condition of type `type_` is present with exactly `status`.
pub fn has_status(conditions: &[Condition], type_: &str, status: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == status)
}

/// Inserts or updates the condition of `condition.type_`; returns whether anything changed.
///
/// When a condition of that type exists and its status is unchanged, its `lastTransitionTime`
/// is kept; when the status changes, `lastTransitionTime` becomes `now`. A new condition is
/// appended with `lastTransitionTime = now`. The incoming `last_transition_time` is ignored.
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition, now: Time) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            conditions.push(Condition {
                last_transition_time: now,
                ..condition
            });
            true
        }
        Some(existing) => {
            let last_transition_time = if existing.status == condition.status {
                existing.last_transition_time.clone()
            } else {
                now
            };
            let updated = Condition {
                last_transition_time,
                ..condition
            };
            if *existing == updated {
                false
            } else {
                *existing = updated;
                true
            }
        }
    }
}

/// Removes the condition of type `type_`; returns whether it was present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn ready(status: &str, reason: &str, message: &str, generation: i64) -> Condition {
        new_condition(READY, status, reason, message, Some(generation), at(0))
    }

    #[test]
    fn adding_a_condition_stamps_now_and_reports_a_change() {
        let mut conditions = Vec::new();
        let changed = set_condition(
            &mut conditions,
            ready(
                STATUS_FALSE,
                REASON_DEPENDENCIES_NOT_READY,
                "Pod does not exist",
                1,
            ),
            at(100),
        );
        assert!(changed);
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(100));
        assert!(is_false(&conditions, READY));
        assert!(!is_true(&conditions, READY));
    }

    #[test]
    fn same_status_keeps_transition_time_but_updates_reason_and_message() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            ready(
                STATUS_FALSE,
                REASON_DEPENDENCIES_NOT_READY,
                "Pod does not exist",
                1,
            ),
            at(100),
        );
        let changed = set_condition(
            &mut conditions,
            ready(
                STATUS_FALSE,
                REASON_DEPENDENCIES_NOT_READY,
                "Pod exists with phase: Pending",
                2,
            ),
            at(200),
        );
        assert!(changed);
        let c = find_condition(&conditions, READY).unwrap();
        assert_eq!(c.last_transition_time, at(100));
        assert_eq!(c.message, "Pod exists with phase: Pending");
        assert_eq!(c.observed_generation, Some(2));
    }

    #[test]
    fn identical_condition_is_not_a_change() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            ready(STATUS_TRUE, REASON_DEPENDENCIES_READY, "Pod is Ready", 1),
            at(100),
        );
        let changed = set_condition(
            &mut conditions,
            ready(STATUS_TRUE, REASON_DEPENDENCIES_READY, "Pod is Ready", 1),
            at(300),
        );
        assert!(!changed);
        assert_eq!(conditions[0].last_transition_time, at(100));
    }

    #[test]
    fn status_change_moves_transition_time() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            ready(STATUS_FALSE, REASON_DEPENDENCIES_NOT_READY, "", 1),
            at(100),
        );
        assert!(set_condition(
            &mut conditions,
            ready(STATUS_TRUE, REASON_DEPENDENCIES_READY, "Pod is Ready", 1),
            at(250),
        ));
        assert_eq!(conditions[0].last_transition_time, at(250));
        assert!(is_true(&conditions, READY));
    }

    #[test]
    fn conditions_of_other_types_are_untouched_and_removable() {
        let mut conditions = Vec::new();
        set_condition(
            &mut conditions,
            ready(STATUS_TRUE, REASON_DEPENDENCIES_READY, "", 1),
            at(1),
        );
        set_condition(
            &mut conditions,
            new_condition(
                FINISHED,
                STATUS_TRUE,
                REASON_POD_SUCCEEDED,
                "",
                Some(1),
                at(0),
            ),
            at(2),
        );
        assert_eq!(conditions.len(), 2);
        assert!(has_status(&conditions, FINISHED, STATUS_TRUE));
        assert!(remove_condition(&mut conditions, FINISHED));
        assert!(!remove_condition(&mut conditions, FINISHED));
        assert_eq!(conditions.len(), 1);
        assert!(find_condition(&conditions, FINISHED).is_none());
        assert!(is_true(&conditions, READY));
    }

    #[test]
    fn status_str_maps_booleans() {
        assert_eq!(status_str(true), "True");
        assert_eq!(status_str(false), "False");
    }
}
