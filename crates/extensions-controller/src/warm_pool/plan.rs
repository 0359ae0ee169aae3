//! One pool pass as a pure function: classify the listed Sandboxes, decide what to create,
//! delete and adopt, and compute the status.

use std::sync::Arc;
use std::time::Duration;

use api_types::conditions::{READY, is_true};
use api_types::keys::{SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM};
use api_types::{Sandbox, SandboxWarmPoolStatus, name_hash};
use k8s_openapi::jiff::Timestamp;

use super::blueprint::{TemplateFacts, is_stale};
use super::in_flight::Pending;
use crate::ownership::{controller_of, is_controlled_by};
use crate::warm_pool::census::QuietClass;

/// Everything one pass decides from.
pub struct PlanInput<'a> {
    pub pool_uid: &'a str,
    pub desired: usize,
    pub recreate: bool,
    /// The template's name and facts, when it exists.
    pub template: Option<(&'a str, &'a TemplateFacts)>,
    /// Sandboxes in the pool's namespace carrying the pool label, except the `quiet` ones.
    pub listed: &'a [Arc<Sandbox>],
    /// Members counted without a look ([`crate::warm_pool::census`]): controlled by this pool, live,
    /// Ready, labelled `launch-type: warm`, not stale (or not vetted: no Recreate, no
    /// template) and not being deleted by us. They are active and Ready and need nothing.
    pub quiet: usize,
    pub pending: &'a Pending,
    pub now: Timestamp,
    pub grace: Duration,
    pub max_batch: usize,
    /// Whether a member's Pod is unschedulable (PodScheduled False / Unschedulable).
    pub unschedulable: &'a dyn Fn(&Sandbox) -> bool,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Unowned Sandboxes with the pool label and a current blueprint: take them over.
    pub adopt: Vec<Arc<Sandbox>>,
    /// Owned members whose launch-type label is not `warm`.
    pub relabel: Vec<Arc<Sandbox>>,
    /// Stale members (Recreate) and stale orphans.
    pub delete_stale: Vec<Arc<Sandbox>>,
    /// Not Ready past the grace period and not unschedulable.
    pub delete_stuck: Vec<Arc<Sandbox>>,
    /// Surplus members, least useful first.
    pub delete_excess: Vec<Arc<Sandbox>>,
    /// Sandboxes to create (before refill shaping).
    pub create: usize,
    /// Members held although stuck, because their Pod cannot be scheduled.
    pub unschedulable: usize,
    /// When the earliest young not-Ready member reaches the end of its grace period.
    pub next_grace_check: Option<Duration>,
    /// A surplus exists but in-flight writes make the count unreliable: check again later.
    pub excess_deferred: bool,
    /// A surplus exists and choosing which members go needs every member, `quiet` ones too:
    /// plan again with all of them listed (and `quiet` 0); this plan deletes no excess.
    pub needs_full_listing: bool,
    pub status: SandboxWarmPoolStatus,
}

fn is_ready(sb: &Sandbox) -> bool {
    sb.status
        .as_ref()
        .is_some_and(|s| is_true(&s.conditions, READY))
}

fn age(sb: &Sandbox, now: Timestamp) -> Option<Duration> {
    let created = sb.metadata.creation_timestamp.as_ref()?.0;
    let millis = now
        .as_millisecond()
        .saturating_sub(created.as_millisecond());
    Some(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}

fn created_millis(sb: &Sandbox) -> i64 {
    sb.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_millisecond())
        .unwrap_or(i64::MAX)
}

/// Whether the pass of the pool with UID `pool_uid` may count the quiet members of `class`
/// without looking at them ([`PlanInput::quiet`]): they must be the pool's, and when the pool
/// vets its members against the template (Recreate, with the template known), their labels
/// must name the current template and blueprint, which [`is_stale`] trusts on owned members.
pub fn countable(
    class: &QuietClass,
    pool_uid: &str,
    recreate: bool,
    template: Option<(&str, &TemplateFacts)>,
) -> bool {
    if class.controller != pool_uid {
        return false;
    }
    match template {
        Some((name, facts)) if recreate => {
            !facts.blueprint_hash.is_empty()
                && class.blueprint_hash.as_deref() == Some(facts.blueprint_hash.as_str())
                && class.template_ref_hash.as_deref() == Some(name_hash(name).as_str())
        }
        _ => true,
    }
}

/// Margin added to grace deadlines so the re-check lands after the deadline.
pub const GRACE_RECHECK_MARGIN: Duration = Duration::from_secs(2);

pub fn plan(input: &PlanInput<'_>) -> Plan {
    let mut out = Plan::default();
    let mut active: Vec<Arc<Sandbox>> = Vec::new();
    let mut terminating = 0usize;

    for sb in input.listed {
        let meta = &sb.metadata;
        let owned = is_controlled_by(meta, input.pool_uid);
        if meta.deletion_timestamp.is_some() {
            terminating += usize::from(owned);
            continue;
        }
        let uid = meta.uid.as_deref().unwrap_or_default();
        if owned && input.pending.deleted_uids.iter().any(|u| u == uid) {
            terminating += 1;
            continue;
        }
        let orphan = controller_of(meta).is_none();
        if !owned && !orphan {
            continue; // claimed, or someone else's
        }
        if let Some((name, facts)) = input.template
            && (input.recreate || orphan)
            && is_stale(name, facts, sb, owned)
        {
            terminating += usize::from(owned);
            out.delete_stale.push(sb.clone());
            continue;
        }
        if orphan {
            if input.template.is_none() {
                continue; // cannot vet an orphan without its template
            }
            out.adopt.push(sb.clone());
        } else if meta
            .labels
            .as_ref()
            .and_then(|l| l.get(SANDBOX_LAUNCH_TYPE_LABEL))
            .map(String::as_str)
            != Some(SANDBOX_LAUNCH_TYPE_WARM)
        {
            out.relabel.push(sb.clone());
        }
        active.push(sb.clone());
    }

    // Stuck members: not Ready past the grace period.
    let mut kept = Vec::with_capacity(active.len());
    for sb in active {
        if is_ready(&sb) {
            kept.push(sb);
            continue;
        }
        match age(&sb, input.now) {
            Some(age) if age > input.grace => {
                if (input.unschedulable)(&sb) {
                    out.unschedulable += 1;
                    kept.push(sb);
                } else {
                    terminating += 1;
                    out.delete_stuck.push(sb);
                }
            }
            Some(age) => {
                let until = input.grace - age + GRACE_RECHECK_MARGIN;
                out.next_grace_check = Some(out.next_grace_check.map_or(until, |d| d.min(until)));
                kept.push(sb);
            }
            None => kept.push(sb),
        }
    }
    let active = kept;
    let current = active.len() + input.quiet;
    let ready = active.iter().filter(|s| is_ready(s)).count() + input.quiet;

    out.status = SandboxWarmPoolStatus {
        replicas: i32::try_from(current).unwrap_or(i32::MAX),
        ready_replicas: i32::try_from(ready).unwrap_or(i32::MAX),
        ..SandboxWarmPoolStatus::default()
    };

    let total = current + terminating + input.pending.creates;
    if input.template.is_some() && total < input.desired {
        out.create = (input.desired - total).min(input.max_batch);
    }

    if current > input.desired {
        if input.pending.creates > 0 || !input.pending.deleted_uids.is_empty() {
            out.excess_deferred = true;
        } else if input.quiet > 0 {
            out.needs_full_listing = true;
        } else {
            let mut order = active;
            // Not Ready first, then newest first: the members a claim would take last.
            order.sort_by_key(|sb| (is_ready(sb), std::cmp::Reverse(created_millis(sb))));
            out.delete_excess = order
                .into_iter()
                .take((current - input.desired).min(input.max_batch))
                .collect();
        }
    }
    out
}

#[cfg(test)]
mod census_equivalence;
#[cfg(test)]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::fixtures::{NOW, pool, ready_status, template};
    use super::*;
    use crate::warm_pool::blueprint::build_member;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};

    fn facts() -> TemplateFacts {
        template(None)
    }

    fn member(name: &str, age_secs: i64, ready: bool) -> Sandbox {
        let mut sb = build_member(&pool(), &facts(), true).unwrap();
        sb.metadata.name = Some(name.into());
        sb.metadata.uid = Some(format!("uid-{name}"));
        sb.metadata.creation_timestamp =
            Some(Time(Timestamp::from_second(NOW - age_secs).unwrap()));
        sb.status = Some(ready_status(ready));
        sb
    }

    struct Case {
        desired: usize,
        recreate: bool,
        listed: Vec<Arc<Sandbox>>,
        pending: Pending,
        unschedulable: bool,
        template: bool,
    }

    impl Case {
        fn new(desired: usize, listed: Vec<Sandbox>) -> Self {
            Case {
                desired,
                recreate: false,
                listed: listed.into_iter().map(Arc::new).collect(),
                pending: Pending::default(),
                unschedulable: false,
                template: true,
            }
        }

        fn run(&self) -> Plan {
            let f = facts();
            let unschedulable = self.unschedulable;
            let check = move |_: &Sandbox| unschedulable;
            plan(&PlanInput {
                pool_uid: "pool-uid",
                desired: self.desired,
                recreate: self.recreate,
                template: self.template.then_some(("tmpl", &f)),
                listed: &self.listed,
                quiet: 0,
                pending: &self.pending,
                now: Timestamp::from_second(NOW).unwrap(),
                grace: Duration::from_secs(300),
                max_batch: 300,
                unschedulable: &check,
            })
        }
    }

    fn names(list: &[Arc<Sandbox>]) -> Vec<&str> {
        list.iter()
            .map(|s| s.metadata.name.as_deref().unwrap())
            .collect()
    }

    #[test]
    fn fills_an_empty_pool_and_tops_up() {
        assert_eq!(Case::new(3, vec![]).run().create, 3);
        let p = Case::new(3, vec![member("a", 10, true)]).run();
        assert_eq!(
            (p.create, p.status.replicas, p.status.ready_replicas),
            (2, 1, 1)
        );
        assert_eq!(
            Case::new(
                3,
                vec![
                    member("a", 1, true),
                    member("b", 1, false),
                    member("c", 1, true)
                ]
            )
            .run()
            .create,
            0
        );
    }

    #[test]
    fn in_flight_creates_prevent_overshoot() {
        let mut case = Case::new(3, vec![member("a", 10, true)]);
        case.pending.creates = 2;
        let p = case.run();
        assert_eq!(
            p.create, 0,
            "the two unobserved creates already fill the pool"
        );
        assert_eq!(
            p.status.replicas, 1,
            "status counts only what the cache shows"
        );
    }

    #[test]
    fn terminating_members_count_against_the_target() {
        let mut gone = member("b", 10, true);
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).unwrap()));
        let p = Case::new(2, vec![member("a", 10, true), gone]).run();
        assert_eq!((p.create, p.status.replicas), (0, 1));
        let mut case = Case::new(2, vec![member("a", 10, true), member("c", 10, true)]);
        case.pending.deleted_uids = vec!["uid-c".into()];
        let p = case.run();
        assert_eq!((p.create, p.status.replicas), (0, 1));
    }

    #[test]
    fn excess_goes_not_ready_first_then_newest() {
        let p = Case::new(
            2,
            vec![
                member("old-ready", 100, true),
                member("new-ready", 10, true),
                member("mid-ready", 50, true),
                member("unready", 200, false),
            ],
        )
        .run();
        assert_eq!(names(&p.delete_excess), ["unready", "new-ready"]);
        let all = Case::new(0, vec![member("a", 1, true), member("b", 2, true)]).run();
        assert_eq!(all.delete_excess.len(), 2, "replicas 0 empties the pool");
        assert_eq!(all.status.replicas, 2);
    }

    #[test]
    fn excess_waits_for_in_flight_writes() {
        let mut case = Case::new(1, vec![member("a", 1, true), member("b", 2, true)]);
        case.pending.creates = 1;
        let p = case.run();
        assert!(p.delete_excess.is_empty() && p.excess_deferred);
    }

    #[test]
    fn claimed_and_foreign_sandboxes_are_not_members() {
        let mut claimed = member("claimed", 10, true);
        claimed.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
            kind: "SandboxClaim".into(),
            name: "c".into(),
            uid: "claim-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let p = Case::new(1, vec![claimed]).run();
        assert_eq!((p.create, p.status.replicas), (1, 0));
        assert!(p.delete_excess.is_empty() && p.delete_stale.is_empty());
    }

    #[test]
    fn current_orphans_are_adopted_and_stale_ones_deleted() {
        let mut orphan = member("orphan", 10, true);
        orphan.metadata.owner_references = None;
        let mut stale_orphan = member("stale", 10, true);
        stale_orphan.metadata.owner_references = None;
        stale_orphan.spec.blueprint.pod_template.spec.hostname = Some("x".into());
        let p = Case::new(2, vec![orphan, stale_orphan]).run();
        assert_eq!(names(&p.adopt), ["orphan"]);
        assert_eq!(names(&p.delete_stale), ["stale"]);
        assert_eq!((p.create, p.status.replicas), (1, 1));
    }

    #[test]
    fn recreate_deletes_stale_members_on_replenish_keeps_them() {
        let mut stale = member("stale", 10, true);
        stale.spec.blueprint.pod_template.spec.hostname = Some("old".into());
        if let Some(l) = stale.metadata.labels.as_mut() {
            l.insert(
                api_types::keys::SANDBOX_TEMPLATE_HASH_LABEL.into(),
                "oldhash".into(),
            );
        }
        let mut case = Case::new(1, vec![stale]);
        let keep = case.run();
        assert!(keep.delete_stale.is_empty());
        assert_eq!(keep.status.replicas, 1);
        case.recreate = true;
        let replace = case.run();
        assert_eq!(names(&replace.delete_stale), ["stale"]);
        assert_eq!(
            (replace.create, replace.status.replicas),
            (0, 0),
            "replacement after the delete is observed"
        );
    }

    #[test]
    fn stuck_members_are_replaced_unschedulable_ones_held() {
        let case = Case::new(
            2,
            vec![member("ok", 600, true), member("stuck", 600, false)],
        );
        let p = case.run();
        assert_eq!(names(&p.delete_stuck), ["stuck"]);
        assert_eq!((p.create, p.status.replicas), (0, 1));
        let mut held = Case::new(
            2,
            vec![member("ok", 600, true), member("stuck", 600, false)],
        );
        held.unschedulable = true;
        let p = held.run();
        assert!(p.delete_stuck.is_empty());
        assert_eq!(
            (
                p.unschedulable,
                p.create,
                p.status.replicas,
                p.status.ready_replicas
            ),
            (1, 0, 2, 1)
        );
    }

    #[test]
    fn young_unready_members_arm_a_grace_recheck() {
        let p = Case::new(2, vec![member("a", 120, false), member("b", 240, false)]).run();
        assert_eq!(p.next_grace_check, Some(Duration::from_secs(300 - 240 + 2)));
        assert!(
            Case::new(1, vec![member("a", 1, true)])
                .run()
                .next_grace_check
                .is_none()
        );
    }

    #[test]
    fn no_template_means_no_creates() {
        let mut case = Case::new(3, vec![]);
        case.template = false;
        assert_eq!(case.run().create, 0);
    }
}
