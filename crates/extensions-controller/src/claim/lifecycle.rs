//! Claim expiry: the earlier of `lifecycle.shutdownTime` and the mirrored `Finished`
//! condition's transition time plus `ttlSecondsAfterFinished`.

use api_types::conditions::{FINISHED, STATUS_TRUE, find_condition};
use api_types::{ClaimShutdownPolicy, SandboxClaim, SandboxClaimStatus};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// When the claim expires, if ever.
pub fn expires_at(claim: &SandboxClaim, status: &SandboxClaimStatus) -> Option<Timestamp> {
    let lifecycle = claim.spec.lifecycle.as_ref()?;
    let by_time = lifecycle.shutdown_time.as_ref().map(|t| t.0);
    let by_ttl = lifecycle.ttl_seconds_after_finished.and_then(|ttl| {
        let finished =
            find_condition(&status.conditions, FINISHED).filter(|c| c.status == STATUS_TRUE)?;
        finished
            .last_transition_time
            .0
            .checked_add(SignedDuration::from_secs(i64::from(ttl.max(0))))
            .ok()
    });
    match (by_time, by_ttl) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The claim's shutdown policy (Retain when no lifecycle is set).
pub fn shutdown_policy(claim: &SandboxClaim) -> ClaimShutdownPolicy {
    claim
        .spec
        .lifecycle
        .as_ref()
        .map(|l| l.shutdown_policy)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::conditions::new_condition;
    use api_types::{ClaimLifecycle, SandboxClaimSpec, WarmPoolRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn claim(lifecycle: Option<ClaimLifecycle>) -> SandboxClaim {
        SandboxClaim::new(
            "c",
            SandboxClaimSpec {
                warm_pool_ref: WarmPoolRef { name: "p".into() },
                lifecycle,
                ..Default::default()
            },
        )
    }

    fn finished_at(s: i64) -> SandboxClaimStatus {
        SandboxClaimStatus {
            conditions: vec![new_condition(
                FINISHED,
                STATUS_TRUE,
                "PodSucceeded",
                "",
                None,
                Time(at(s)),
            )],
            ..Default::default()
        }
    }

    #[test]
    fn no_lifecycle_never_expires() {
        assert_eq!(expires_at(&claim(None), &finished_at(1)), None);
        assert_eq!(shutdown_policy(&claim(None)), ClaimShutdownPolicy::Retain);
    }

    #[test]
    fn earliest_of_shutdown_time_and_ttl() {
        let both = claim(Some(ClaimLifecycle {
            shutdown_time: Some(Time(at(1000))),
            ttl_seconds_after_finished: Some(120),
            shutdown_policy: ClaimShutdownPolicy::Delete,
        }));
        assert_eq!(
            expires_at(&both, &Default::default()),
            Some(at(1000)),
            "TTL needs Finished"
        );
        assert_eq!(expires_at(&both, &finished_at(100)), Some(at(220)));
        assert_eq!(expires_at(&both, &finished_at(990)), Some(at(1000)));
        let zero = claim(Some(ClaimLifecycle {
            shutdown_time: None,
            ttl_seconds_after_finished: Some(0),
            shutdown_policy: ClaimShutdownPolicy::Retain,
        }));
        assert_eq!(expires_at(&zero, &finished_at(5)), Some(at(5)));
        assert_eq!(shutdown_policy(&both), ClaimShutdownPolicy::Delete);
    }
}
