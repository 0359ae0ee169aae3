//! Claim passes decided on hand-made observations: no API server, no clock, no runtime.

use std::sync::Arc;

use api_types::conditions::{FINISHED, READY, STATUS_FALSE, STATUS_TRUE, new_condition};
use api_types::keys::{
    ASSIGNED_SANDBOX_NAME_ANNOTATION, CLAIM_FIRST_READY_AT_ANNOTATION,
    CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION, TRACE_CONTEXT_ANNOTATION,
};
use api_types::{
    ClaimSandboxStatus, Sandbox, SandboxClaim, SandboxClaimSpec, SandboxClaimStatus, SandboxStatus,
    SandboxTemplate, SandboxTemplateRef, SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
    WarmPoolRef,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::*;
use crate::claim::metadata::TOTAL_ANNOTATION_SIZE_LIMIT;
use crate::claim::observe::{Observation, Policy, SandboxView};
use crate::warm_pool::blueprint::{TemplateFacts, blueprint_hash, build_member};

const CREATED: i64 = 1_800_000_000;

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(second).unwrap()
}

fn template() -> Arc<SandboxTemplate> {
    let mut t = SandboxTemplate::new("tmpl", SandboxTemplateSpec::default());
    t.metadata.namespace = Some("ns".into());
    t.metadata.uid = Some("tmpl-uid".into());
    Arc::new(t)
}

fn pool() -> Arc<SandboxWarmPool> {
    let mut p = SandboxWarmPool::new(
        "pool",
        SandboxWarmPoolSpec {
            replicas: Some(2),
            sandbox_template_ref: SandboxTemplateRef {
                name: "tmpl".into(),
            },
            update_strategy: None,
        },
    );
    p.metadata.namespace = Some("ns".into());
    p.metadata.uid = Some("pool-uid".into());
    Arc::new(p)
}

fn ready_condition(since: i64) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    new_condition(
        READY,
        STATUS_TRUE,
        "DependenciesReady",
        "Pod is Ready",
        Some(1),
        Time(at(since)),
    )
}

/// A Ready, networked pool member (Ready long before any claim).
fn member(name: &str) -> Arc<Sandbox> {
    let t = template();
    let facts = TemplateFacts {
        blueprint_hash: blueprint_hash(&t.spec.blueprint),
        template: t,
    };
    let mut sb = build_member(&pool(), &facts, true).unwrap();
    sb.metadata.name = Some(name.into());
    sb.metadata.uid = Some(format!("{name}-uid"));
    sb.metadata.resource_version = Some(format!("rv-{name}"));
    sb.status = Some(SandboxStatus {
        conditions: vec![ready_condition(CREATED - 600)],
        pod_ips: vec!["127.0.0.9".into()],
        ..SandboxStatus::default()
    });
    Arc::new(sb)
}

/// `member` after the claim took it.
fn taken(name: &str) -> Arc<Sandbox> {
    let mut sb = (*member(name)).clone();
    sb.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
        kind: "SandboxClaim".into(),
        name: "c".into(),
        uid: "claim-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    sb.metadata
        .labels
        .get_or_insert_default()
        .insert("agents.x-k8s.io/launch-type".into(), "warm".into());
    Arc::new(sb)
}

fn claim() -> SandboxClaim {
    let mut c = SandboxClaim::new(
        "c",
        SandboxClaimSpec {
            warm_pool_ref: WarmPoolRef {
                name: "pool".into(),
            },
            ..Default::default()
        },
    );
    c.metadata.namespace = Some("ns".into());
    c.metadata.uid = Some("claim-uid".into());
    c.metadata.resource_version = Some("7".into());
    c.metadata.generation = Some(1);
    c.metadata.creation_timestamp = Some(Time(at(CREATED)));
    c
}

/// An unbound claim, one second old, first seen by the watch 300 ms after its creation, with a
/// pool, its template and its policy in place, and no candidate.
fn observation(claim: SandboxClaim) -> Observation {
    Observation {
        namespace: "ns".into(),
        name: claim.metadata.name.clone().unwrap(),
        uid: claim.metadata.uid.clone().unwrap(),
        cached_version: claim.metadata.resource_version.clone(),
        claim: Arc::new(claim),
        now: at(CREATED + 1),
        first_seen: at(CREATED) + SignedDuration::from_millis(300),
        sandbox: SandboxView::Unbound,
        expired_target: None,
        pool: Some(pool()),
        template: Some(template()),
        policy: Policy::Ready,
        candidates: Vec::new(),
        pending_network: false,
        legacy_policy: None,
        bound_template: None,
        pass_trace: None,
        stamp_trace: None,
        ready_recorded: false,
    }
}

fn settings() -> ClaimSettings {
    ClaimSettings::default()
}

fn ready_of(status: &SandboxClaimStatus) -> (&str, &str, &str) {
    let c = find_condition(&status.conditions, READY).unwrap();
    (c.status.as_str(), c.reason.as_str(), c.message.as_str())
}

fn settled_outcome(plan: &Plan) -> &Outcome {
    match &plan.step {
        Step::Sandbox(SandboxStep::Settled(outcome)) => outcome,
        other => panic!(
            "expected a settled outcome, planned {other:?} ({})",
            plan.why
        ),
    }
}

fn adopted(name: &str) -> Outcome {
    Outcome::Bound {
        sandbox: taken(name),
        how: How::Adopted {
            pool: "pool".into(),
            was_ready: true,
        },
    }
}

#[test]
fn a_claim_being_deleted_plans_nothing_and_is_forgotten() {
    let mut c = claim();
    c.metadata.deletion_timestamp = Some(Time(at(CREATED + 1)));
    let mut o = observation(c);
    o.candidates = vec![member("pool-a")];
    let p = plan(&o, &settings());
    assert!(
        matches!(
            p.step,
            Step::Nothing {
                requeue: None,
                forget: true
            }
        ),
        "{p:?}"
    );
}

/// Issue 21 item 2: a take decided on a claim is sent only while the cache still holds that
/// claim, undeleted and unchanged (the versions the pass worked from).
#[test]
fn a_take_is_sent_only_while_the_cache_holds_the_claim_it_was_decided_on() {
    let mut o = observation(claim());
    o.candidates = vec![member("pool-a")];
    assert!(matches!(
        plan(&o, &settings()).step,
        Step::Sandbox(SandboxStep::Adopt(_))
    ));
    let same = claim();
    assert_eq!(take_check(&o, Some(&same)), TakeCheck::Send);

    assert_eq!(
        take_check(&o, None),
        TakeCheck::Deleted,
        "gone from the cache"
    );
    let mut deleting = claim();
    deleting.metadata.resource_version = Some("8".into());
    deleting.metadata.deletion_timestamp = Some(Time(at(CREATED + 1)));
    assert_eq!(take_check(&o, Some(&deleting)), TakeCheck::Deleted);
    let mut namesake = claim();
    namesake.metadata.uid = Some("another-uid".into());
    assert_eq!(
        take_check(&o, Some(&namesake)),
        TakeCheck::Deleted,
        "a namesake is another claim"
    );
    let mut changed = claim();
    changed.metadata.resource_version = Some("9".into());
    assert_eq!(take_check(&o, Some(&changed)), TakeCheck::Changed);

    // The pass worked from this process' last write (version 8) while the cache held 7: both
    // are the claim the take was decided on.
    let mut written = claim();
    written.metadata.resource_version = Some("8".into());
    let mut o = observation(written.clone());
    o.cached_version = Some("7".into());
    assert_eq!(take_check(&o, Some(&claim())), TakeCheck::Send);
    assert_eq!(take_check(&o, Some(&written)), TakeCheck::Send);
    assert_eq!(take_check(&o, Some(&changed)), TakeCheck::Changed);
}

#[test]
fn an_unbound_claim_takes_its_best_candidate_with_a_guarded_patch() {
    let mut o = observation(claim());
    o.candidates = vec![member("pool-a"), member("pool-b")];
    let p = plan(&o, &settings());
    let Step::Sandbox(SandboxStep::Adopt(adopt)) = &p.step else {
        panic!("{p:?}");
    };
    let names: Vec<_> = adopt
        .candidates
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["pool-a", "pool-b"]);
    assert_eq!(adopt.otherwise, Fallback::Cold);
    let patch = adopt.patch_for(&adopt.candidates[0]).unwrap().unwrap();
    assert_eq!(patch["metadata"]["resourceVersion"], "rv-pool-a");
    assert_eq!(patch["metadata"]["ownerReferences"][0]["uid"], "claim-uid");
}

/// Issue 21 item 2 and item 7: the stale-cache pass that made deleted claims take a second
/// warm Sandbox (the claim's Sandbox is garbage-collected, its deletion triggers a pass before
/// the claim's own deletion reached the cache, and the pass found "no Sandbox") and the
/// silent re-binding of a claim whose Sandbox was deleted are the same decision: a claim that
/// was bound never takes another.
#[test]
fn a_bound_claim_whose_sandbox_is_gone_never_takes_another() {
    for how_we_know in ["status", "annotation", "this process"] {
        let mut c = claim();
        match how_we_know {
            "status" => {
                c.status = Some(SandboxClaimStatus {
                    conditions: vec![ready_condition(CREATED)],
                    sandbox: ClaimSandboxStatus {
                        name: "pool-a".into(),
                        pod_ips: vec!["127.0.0.9".into()],
                    },
                })
            }
            "annotation" => {
                c.metadata.annotations = Some(
                    [(
                        ASSIGNED_SANDBOX_NAME_ANNOTATION.to_owned(),
                        "pool-a".to_owned(),
                    )]
                    .into(),
                )
            }
            _ => {}
        }
        let mut o = observation(c);
        o.sandbox = SandboxView::Gone {
            name: "pool-a".into(),
        };
        o.candidates = vec![member("pool-b")];
        let p = plan(&o, &settings());
        let outcome = settled_outcome(&p);
        assert!(
            matches!(outcome, Outcome::Missing { name: Some(n) } if n == "pool-a"),
            "{how_we_know}: {p:?}"
        );
        let r = report(&o, outcome, &settings(), o.now);
        let status = r.status.as_ref().unwrap();
        let (ready, reason, message) = ready_of(status);
        assert_eq!((ready, reason), (STATUS_FALSE, "SandboxMissing"));
        assert!(message.contains("\"pool-a\""), "{message}");
        assert_eq!(
            status.sandbox.name, "pool-a",
            "the lost Sandbox stays named"
        );
        assert!(status.sandbox.pod_ips.is_empty());
        assert_eq!(
            r.events
                .iter()
                .map(|e| (e.type_, e.reason))
                .collect::<Vec<_>>(),
            [(EventType::Warning, "SandboxMissing")]
        );
        assert!(r.stamp.is_empty());
    }
}

#[test]
fn the_sandbox_missing_event_is_sent_once() {
    let mut c = claim();
    c.status = Some(SandboxClaimStatus {
        conditions: vec![new_condition(
            READY,
            STATUS_FALSE,
            "SandboxMissing",
            "gone",
            Some(1),
            Time(at(CREATED)),
        )],
        sandbox: ClaimSandboxStatus {
            name: "pool-a".into(),
            pod_ips: vec![],
        },
    });
    let o = observation(c);
    let r = report(
        &o,
        &Outcome::Missing {
            name: Some("pool-a".into()),
        },
        &settings(),
        o.now,
    );
    assert!(r.events.is_empty(), "{:?}", r.events);
}

#[test]
fn a_binding_the_cache_has_not_shown_yet_is_waited_for() {
    let mut o = observation(claim());
    o.sandbox = SandboxView::Lagging {
        name: "pool-a".into(),
    };
    o.candidates = vec![member("pool-b")];
    let p = plan(&o, &settings());
    assert!(
        matches!(
            p.step,
            Step::Nothing {
                requeue: Some(STALE_RECHECK),
                forget: false
            }
        ),
        "{p:?}"
    );
}

#[test]
fn everything_a_claim_asks_for_is_checked_before_a_member_is_taken() {
    let with_annotation = |value: &str| {
        let mut c = claim();
        c.spec
            .additional_pod_metadata
            .annotations
            .insert("note".into(), value.into());
        c
    };
    // Over the API's limit on its own (the chaos runs' 1 MiB annotation).
    let mut o = observation(with_annotation(&"x".repeat(1 << 20)));
    o.candidates = vec![member("pool-a")];
    let p = plan(&o, &settings());
    let Outcome::Failed(Failure::InvalidMetadata(message)) = settled_outcome(&p) else {
        panic!("{p:?}");
    };
    assert!(message.contains("262144"), "{message}");

    // Under it alone, over it with the template's annotations.
    let half = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2);
    let mut t = (*template()).clone();
    t.spec
        .blueprint
        .pod_template
        .metadata
        .annotations
        .insert("template-note".into(), half.clone());
    let mut o = observation(with_annotation(&half));
    o.template = Some(Arc::new(t));
    o.candidates = vec![member("pool-a")];
    let p = plan(&o, &settings());
    assert!(
        matches!(
            settled_outcome(&p),
            Outcome::Failed(Failure::InvalidMetadata(_))
        ),
        "{p:?}"
    );

    // A label the template sets to something else: refused before adopting too.
    let mut t = (*template()).clone();
    t.spec
        .blueprint
        .pod_template
        .metadata
        .labels
        .insert("sandbox.users.io/team".into(), "a".into());
    let mut c = claim();
    c.spec
        .additional_pod_metadata
        .labels
        .insert("sandbox.users.io/team".into(), "b".into());
    let mut o = observation(c);
    o.template = Some(Arc::new(t));
    o.candidates = vec![member("pool-a")];
    let p = plan(&o, &settings());
    assert!(
        matches!(settled_outcome(&p), Outcome::Failed(Failure::Reconciler(m)) if m.contains("override conflict")),
        "{p:?}"
    );
}

#[test]
fn no_sandbox_is_handed_out_without_the_templates_network_policy() {
    let mut o = observation(claim());
    o.candidates = vec![member("pool-a")];
    o.policy = Policy::NotReady("NetworkPolicy \"tmpl-network-policy\" cannot be made".into());
    let p = plan(&o, &settings());
    let outcome = settled_outcome(&p);
    assert!(
        matches!(outcome, Outcome::Failed(Failure::NetworkPolicy(_))),
        "{p:?}"
    );
    let r = report(&o, outcome, &settings(), o.now);
    let status = r.status.unwrap();
    assert_eq!(
        ready_of(&status),
        (
            STATUS_FALSE,
            "NetworkPolicyNotReady",
            "NetworkPolicy \"tmpl-network-policy\" cannot be made"
        )
    );
    assert!(status.sandbox.name.is_empty());
    assert_eq!(r.requeue, Some(POLICY_RECHECK));

    // Without the template its policy is gone too: not even a warm member.
    let mut o = observation(claim());
    o.candidates = vec![member("pool-a")];
    o.template = None;
    let p = plan(&o, &settings());
    assert!(
        matches!(settled_outcome(&p), Outcome::Failed(Failure::TemplateNotFound { template }) if template == "tmpl"),
        "{p:?}"
    );
}

#[test]
fn cold_when_customized_or_nothing_to_take_and_a_young_claim_waits_for_networking_members() {
    let mut c = claim();
    c.spec.env = vec![api_types::claim::ClaimEnvVar {
        name: "A".into(),
        value: "1".into(),
        container_name: String::new(),
    }];
    let mut o = observation(c);
    o.candidates = vec![member("pool-a")];
    let p = plan(&o, &settings());
    assert!(
        matches!(
            p.step,
            Step::Sandbox(SandboxStep::Settled(Outcome::Failed(Failure::EnvRejected(
                _
            ))))
        ),
        "env forces cold; the template refuses it: {p:?}"
    );

    let o = observation(claim());
    let p = plan(&o, &settings());
    let Step::Sandbox(SandboxStep::Create { sandbox, pool }) = &p.step else {
        panic!("{p:?}");
    };
    assert_eq!(
        (sandbox.metadata.name.as_deref(), pool.as_str()),
        (Some("c"), "pool")
    );

    let mut o = observation(claim());
    o.pending_network = true;
    let p = plan(&o, &settings());
    assert!(
        matches!(
            p.step,
            Step::Nothing {
                requeue: Some(NETWORK_RECHECK),
                ..
            }
        ),
        "{p:?}"
    );
    o.now = at(CREATED + 3);
    let p = plan(&o, &settings());
    assert!(
        matches!(p.step, Step::Sandbox(SandboxStep::Create { .. })),
        "past the grace: {p:?}"
    );

    // With candidates, a young claim waits only once they are all lost.
    let mut o = observation(claim());
    o.pending_network = true;
    o.candidates = vec![member("pool-a")];
    let Step::Sandbox(SandboxStep::Adopt(adopt)) = plan(&o, &settings()).step else {
        panic!();
    };
    assert_eq!(adopt.otherwise, Fallback::Wait(NETWORK_RECHECK));
}

/// Issue 22 items 1-3 and issue 20 item 6: the write before Ready carries the annotations
/// (`sandbox-name`, when the watch first delivered the claim, the trace context, the first
/// Ready time); Ready's transition time is the claim's.
#[test]
fn ready_comes_after_a_stamp_that_carries_the_annotations() {
    let mut o = observation(claim());
    o.stamp_trace = Some("{\"traceparent\":\"00-t-s-01\"}".into());
    let now = at(CREATED + 2);
    let r = report(&o, &adopted("pool-a"), &settings(), now);
    let status = r.status.as_ref().unwrap();
    assert_eq!(ready_of(status).0, STATUS_TRUE);
    let ready = find_condition(&status.conditions, READY).unwrap();
    assert_eq!(
        ready.last_transition_time,
        Time(now),
        "when the claim became Ready, not when the member did"
    );
    assert_eq!(status.sandbox.name, "pool-a");
    let expected: BTreeMap<String, String> = [
        (ASSIGNED_SANDBOX_NAME_ANNOTATION, "pool-a".to_owned()),
        (CLAIM_FIRST_READY_AT_ANNOTATION, rfc3339_nano(now)),
        (
            CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION,
            "2027-01-15T08:00:00.3Z".to_owned(),
        ),
        (
            TRACE_CONTEXT_ANNOTATION,
            "{\"traceparent\":\"00-t-s-01\"}".to_owned(),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(r.stamp, expected);
    assert_eq!(r.first_ready, Some(FirstReady::Transition { at: now }));
    assert!(r.events.is_empty(), "SandboxAdopted is opt-in");

    // With the annotations off there is no stamp (and so no sandbox-name: nothing to ride on).
    let quiet = ClaimSettings {
        observability_annotations: false,
        ..settings()
    };
    let r = report(&o, &adopted("pool-a"), &quiet, now);
    assert!(r.stamp.is_empty());
    assert_eq!(r.first_ready, Some(FirstReady::Transition { at: now }));

    let loud = ClaimSettings {
        adoption_events: true,
        ..settings()
    };
    let r = report(&o, &adopted("pool-a"), &loud, now);
    assert_eq!(r.events[0].reason, "SandboxAdopted");
}

#[test]
fn a_claim_that_is_not_ready_yet_gets_no_stamp() {
    let o = observation(claim());
    let mut unready = (*taken("pool-a")).clone();
    unready.status = Some(SandboxStatus::default());
    let r = report(
        &o,
        &Outcome::Bound {
            sandbox: Arc::new(unready),
            how: How::Created {
                pool: "pool".into(),
            },
        },
        &settings(),
        o.now,
    );
    assert!(r.stamp.is_empty());
    assert_eq!(ready_of(r.status.as_ref().unwrap()).1, "SandboxNotReady");
    assert_eq!(r.events[0].reason, "SandboxProvisioned");
    assert_eq!(r.first_ready, None);
}

#[test]
fn ready_never_predates_the_claim_and_keeps_its_time_while_ready() {
    let o = observation(claim());
    // This controller's clock is behind the API server's.
    let r = report(&o, &adopted("pool-a"), &settings(), at(CREATED - 5));
    let status = r.status.unwrap();
    let ready = find_condition(&status.conditions, READY).unwrap();
    assert_eq!(ready.last_transition_time, Time(at(CREATED)));

    // Already Ready (and stamped): a later pass changes nothing, the time stays.
    let mut c = claim();
    c.status = Some(status.clone());
    c.metadata.annotations = Some(
        [
            (CLAIM_FIRST_READY_AT_ANNOTATION, "t"),
            (CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION, "t"),
            (ASSIGNED_SANDBOX_NAME_ANNOTATION, "pool-a"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect(),
    );
    let mut o = observation(c);
    o.sandbox = SandboxView::Bound(taken("pool-a"));
    o.ready_recorded = true;
    let r = report(
        &o,
        &Outcome::Bound {
            sandbox: taken("pool-a"),
            how: How::Kept,
        },
        &settings(),
        at(CREATED + 60),
    );
    assert!(r.status.is_none(), "{:?}", r.status);
    assert!(r.stamp.is_empty());
    assert_eq!(r.first_ready, None);
}

#[test]
fn a_claim_ready_before_this_process_is_backfilled_not_measured() {
    let mut c = claim();
    let mut ready = SandboxClaimStatus {
        conditions: vec![ready_condition(CREATED + 1)],
        sandbox: ClaimSandboxStatus {
            name: "pool-a".into(),
            pod_ips: vec!["127.0.0.9".into()],
        },
    };
    ready.conditions[0].observed_generation = Some(1);
    c.status = Some(ready);
    let o = observation(c);
    let r = report(
        &o,
        &Outcome::Bound {
            sandbox: taken("pool-a"),
            how: How::Kept,
        },
        &settings(),
        at(CREATED + 60),
    );
    assert_eq!(r.stamp[CLAIM_FIRST_READY_AT_ANNOTATION], "unknown");
    assert_eq!(r.stamp[ASSIGNED_SANDBOX_NAME_ANNOTATION], "pool-a");
    assert_eq!(
        r.first_ready,
        Some(FirstReady::Backfill {
            at: at(CREATED + 1)
        })
    );
}

#[test]
fn expiry_deletes_the_claim_or_its_sandbox_by_policy() {
    let expiring = |policy: api_types::ClaimShutdownPolicy| {
        let mut c = claim();
        c.spec.lifecycle = Some(api_types::ClaimLifecycle {
            shutdown_time: Some(Time(at(CREATED))),
            ttl_seconds_after_finished: None,
            shutdown_policy: policy,
        });
        observation(c)
    };
    let o = expiring(api_types::ClaimShutdownPolicy::DeleteForeground);
    assert!(matches!(
        plan(&o, &settings()).step,
        Step::DeleteClaim { foreground: true }
    ));
    let mut o = expiring(api_types::ClaimShutdownPolicy::Retain);
    o.expired_target = Some(taken("pool-a"));
    assert!(matches!(
        plan(&o, &settings()).step,
        Step::Sandbox(SandboxStep::DeleteExpired(_))
    ));
    o.expired_target = Some(member("pool-a"));
    let p = plan(&o, &settings());
    assert!(
        matches!(
            settled_outcome(&p),
            Outcome::Failed(Failure::ExpiredNotOwned(_))
        ),
        "a pool's member is not the claim's to delete: {p:?}"
    );
    o.expired_target = None;
    let p = plan(&o, &settings());
    let r = report(&o, settled_outcome(&p), &settings(), o.now);
    assert_eq!(
        ready_of(r.status.as_ref().unwrap()),
        (
            STATUS_FALSE,
            "ClaimExpired",
            "Claim expired. Sandbox cleanup initiated."
        )
    );
    assert_eq!(r.events[0].reason, "ClaimExpired");
    assert!(r.status.unwrap().sandbox.name.is_empty());
}

#[test]
fn a_finished_sandbox_with_ttl_zero_expires_the_claim_on_the_next_pass() {
    let mut c = claim();
    c.spec.lifecycle = Some(api_types::ClaimLifecycle {
        shutdown_time: None,
        ttl_seconds_after_finished: Some(0),
        shutdown_policy: api_types::ClaimShutdownPolicy::Retain,
    });
    let o = observation(c);
    let mut finished = (*taken("pool-a")).clone();
    finished
        .status
        .as_mut()
        .unwrap()
        .conditions
        .push(new_condition(
            FINISHED,
            STATUS_TRUE,
            "PodSucceeded",
            "",
            Some(1),
            Time(at(CREATED + 1)),
        ));
    let r = report(
        &o,
        &Outcome::Bound {
            sandbox: Arc::new(finished),
            how: How::Kept,
        },
        &settings(),
        o.now,
    );
    assert_eq!(r.requeue, Some(std::time::Duration::from_millis(1)));
}

#[test]
fn a_foreign_sandbox_with_the_claims_name_is_reported() {
    let mut o = observation(claim());
    o.sandbox = SandboxView::Foreign;
    let p = plan(&o, &settings());
    assert!(
        matches!(settled_outcome(&p), Outcome::Failed(Failure::Reconciler(m)) if m.contains("is not controlled by claim")),
        "{p:?}"
    );
}

#[test]
fn a_bound_sandbox_gets_the_claims_metadata_once() {
    let mut c = claim();
    c.spec
        .additional_pod_metadata
        .labels
        .insert("sandbox.users.io/user".into(), "u".into());
    let mut o = observation(c);
    let bound = taken("pool-a");
    o.sandbox = SandboxView::Bound(bound.clone());
    o.bound_template = Some(("tmpl".into(), template()));
    let p = plan(&o, &settings());
    let Step::Sandbox(SandboxStep::Sync { patch, .. }) = &p.step else {
        panic!("{p:?}");
    };
    assert_eq!(
        patch["spec"]["podTemplate"]["metadata"]["labels"]["sandbox.users.io/user"],
        json!("u")
    );
    // Once applied, nothing more to do.
    let mut synced = (*bound).clone();
    let mut value = serde_json::to_value(&synced).unwrap();
    json_patch::merge(&mut value, patch);
    synced = serde_json::from_value(value).unwrap();
    o.sandbox = SandboxView::Bound(Arc::new(synced));
    assert!(matches!(
        plan(&o, &settings()).step,
        Step::Sandbox(SandboxStep::Settled(Outcome::Bound { .. }))
    ));
}
