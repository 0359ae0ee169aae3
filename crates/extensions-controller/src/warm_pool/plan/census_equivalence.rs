//! A pool pass counts its quiet members ([`crate::warm_pool::census`]) instead of looking at each.
//! Over many random pools and watch histories (adds, changes, deletes, relists), this checks
//! that the pass decides exactly what the plan over the whole listing decides, and that the
//! index kept from the events says what an index rebuilt from the store says.

use std::collections::BTreeMap;

use api_types::keys::{
    SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_TEMPLATE_HASH_LABEL, SANDBOX_TEMPLATE_REF_HASH_LABEL,
    SANDBOX_WARM_POOL_LABEL,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;

use super::fixtures::{NOW, NS, pool, ready_status, template};
use super::*;
use crate::stores::sandbox_index::SandboxIndex;
use crate::warm_pool::blueprint::build_member;

fn owner(kind: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "extensions.agents.x-k8s.io/v1beta1".into(),
        kind: kind.into(),
        name: "pool".into(),
        uid: uid.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A labelled Sandbox with random facts: owner, deletion, readiness, labels, spec, age.
fn random_member(rng: &mut fastrand::Rng, name: &str, generation: u32) -> Sandbox {
    let (current, old) = (template(Some("v1")), template(Some("v0")));
    let facts = if rng.u8(..10) < 8 { &current } else { &old };
    let mut sb = build_member(&pool(), facts, true).expect("member");
    sb.metadata.name = Some(name.into());
    sb.metadata.uid = Some(format!("uid-{name}-{generation}"));
    sb.metadata.resource_version = Some(generation.to_string());
    let labels = sb.metadata.labels.get_or_insert_with(BTreeMap::new);
    match rng.u8(..20) {
        0 => {
            labels.remove(SANDBOX_LAUNCH_TYPE_LABEL);
        }
        1 => {
            labels.insert(SANDBOX_LAUNCH_TYPE_LABEL.into(), "cold".into());
        }
        2 => {
            labels.insert(SANDBOX_TEMPLATE_REF_HASH_LABEL.into(), name_hash("other"));
        }
        3 => {
            labels.remove(SANDBOX_TEMPLATE_HASH_LABEL);
        }
        4 => {
            // The label says current, the spec does not (a copied label).
            labels.insert(
                SANDBOX_TEMPLATE_HASH_LABEL.into(),
                current.blueprint_hash.clone(),
            );
            sb.spec.blueprint.pod_template.spec.hostname = Some("v9".into());
        }
        _ => {}
    }
    sb.metadata.owner_references = match rng.u8(..20) {
        0 | 1 => None,
        2 => Some(vec![owner("SandboxClaim", "claim-uid")]),
        3 => Some(vec![owner("SandboxWarmPool", "old-pool-uid")]),
        _ => sb.metadata.owner_references.take(),
    };
    if rng.u8(..10) == 0 {
        sb.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).expect("time")));
    }
    if rng.u8(..20) != 0 {
        sb.metadata.creation_timestamp = Some(Time(
            Timestamp::from_second(NOW - rng.i64(0..600)).expect("time"),
        ));
    }
    sb.status = Some(ready_status(rng.u8(..10) < 6));
    sb
}

/// The cache as the controller's watch driver feeds it: index first, then store.
struct Cache {
    store: Store<Sandbox>,
    writer: reflector::store::Writer<Sandbox>,
    index: SandboxIndex,
}

impl Cache {
    fn new() -> Cache {
        let (store, writer) = reflector::store::<Sandbox>();
        Cache {
            store,
            writer,
            index: SandboxIndex::default(),
        }
    }

    fn feed(&mut self, event: watcher::Event<Sandbox>) {
        self.index.observe(&event);
        self.writer.apply_watcher_event(&event);
    }

    fn relist(&mut self, objects: impl IntoIterator<Item = Sandbox>) {
        self.feed(watcher::Event::Init);
        for sb in objects {
            self.feed(watcher::Event::InitApply(sb));
        }
        self.feed(watcher::Event::InitDone);
    }

    fn labelled(&self) -> Vec<Arc<Sandbox>> {
        self.index
            .with_pool_label(&self.store, NS, &name_hash("pool"))
    }
}

/// What a plan decided, with the member lists as sorted names.
#[derive(Debug, PartialEq)]
struct Decided {
    lists: [Vec<String>; 5],
    create: usize,
    unschedulable: usize,
    next_grace_check: Option<Duration>,
    excess_deferred: bool,
    status: SandboxWarmPoolStatus,
}

fn decided(plan: &Plan) -> Decided {
    let names = |list: &[Arc<Sandbox>]| {
        let mut names: Vec<String> = list
            .iter()
            .filter_map(|sb| sb.metadata.name.clone())
            .collect();
        names.sort();
        names
    };
    Decided {
        lists: [
            names(&plan.adopt),
            names(&plan.relabel),
            names(&plan.delete_stale),
            names(&plan.delete_stuck),
            names(&plan.delete_excess),
        ],
        create: plan.create,
        unschedulable: plan.unschedulable,
        next_grace_check: plan.next_grace_check,
        excess_deferred: plan.excess_deferred,
        status: plan.status.clone(),
    }
}

/// Plans once from the whole listing and once the way the pass does, and compares.
fn check_pass(cache: &Cache, rng: &mut fastrand::Rng, seed: u64) {
    let facts = template(Some("v1"));
    let recreate = rng.bool();
    let template = rng.u8(..5).ne(&0).then_some(("tmpl", &facts));
    let all = cache.labelled();
    let mut pending = Pending {
        creates: rng.usize(..3),
        ..Pending::default()
    };
    for sb in all.iter().filter(|_| rng.u8(..8) == 0) {
        pending
            .deleted_uids
            .push(sb.metadata.uid.clone().unwrap_or_default());
        pending
            .deleted_names
            .push(sb.metadata.name.clone().unwrap_or_default());
    }
    if rng.bool() {
        pending.deleted_uids.push("uid-gone".into());
        pending.deleted_names.push("gone".into());
    }
    let unschedulable = |sb: &Sandbox| {
        sb.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.ends_with('3'))
    };
    let desired = rng.usize(..all.len() + 3);
    let plan_with = |listed: &[Arc<Sandbox>], quiet: usize| {
        plan(&PlanInput {
            pool_uid: "pool-uid",
            desired,
            recreate,
            template,
            listed,
            quiet,
            pending: &pending,
            now: Timestamp::from_second(NOW).expect("time"),
            grace: Duration::from_secs(300),
            max_batch: 300,
            unschedulable: &unschedulable,
        })
    };
    let full = plan_with(&all, 0);
    assert!(!full.needs_full_listing);

    let (quiet, looked) = cache.index.pool_census(
        &cache.store,
        NS,
        &name_hash("pool"),
        |class| countable(class, "pool-uid", recreate, template),
        &pending.deleted_names,
    );
    assert_eq!(
        quiet + looked.len(),
        all.len(),
        "seed {seed}: every member once"
    );
    let mut pass = plan_with(&looked, quiet);
    if pass.needs_full_listing {
        pass = plan_with(&all, 0);
    }
    assert_eq!(
        decided(&pass),
        decided(&full),
        "seed {seed}: recreate {recreate}, template {}, desired {desired}, quiet {quiet}",
        template.is_some()
    );
}

#[test]
fn counting_quiet_members_decides_what_the_full_listing_decides() {
    let mut counted = 0;
    for seed in 0..400u64 {
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut cache = Cache::new();
        let size = rng.usize(..30);
        let mut generation = 0;
        cache.relist((0..size).map(|i| random_member(&mut rng, &format!("m{i}"), 0)));
        for _ in 0..rng.usize(..60) {
            generation += 1;
            let name = format!("m{}", rng.usize(..size + 5));
            match rng.u8(..10) {
                0 | 1 => {
                    let gone = random_member(&mut rng, &name, generation);
                    cache.feed(watcher::Event::Delete(gone));
                }
                2 => {
                    // A relist that drops some Sandboxes and changes others.
                    let mut kept: Vec<Sandbox> = Vec::new();
                    for sb in cache.store.state() {
                        match rng.u8(..4) {
                            0 => {}
                            1 => {
                                let name = sb.metadata.name.clone().unwrap_or_default();
                                kept.push(random_member(&mut rng, &name, generation));
                            }
                            _ => kept.push((*sb).clone()),
                        }
                    }
                    cache.relist(kept);
                }
                3 => {
                    // Loses the pool label (a claim took it).
                    let mut taken = random_member(&mut rng, &name, generation);
                    if let Some(labels) = taken.metadata.labels.as_mut() {
                        labels.remove(SANDBOX_WARM_POOL_LABEL);
                    }
                    cache.feed(watcher::Event::Apply(taken));
                }
                _ => {
                    let changed = random_member(&mut rng, &name, generation);
                    cache.feed(watcher::Event::Apply(changed));
                }
            }
        }
        // The index kept from events says what one built from the store says (a restart).
        let mut rebuilt = Cache::new();
        rebuilt.relist(cache.store.state().iter().map(|sb| (**sb).clone()));
        for recreate in [false, true] {
            let facts = template(Some("v1"));
            let count = |c: &Cache| {
                c.index
                    .pool_census(
                        &c.store,
                        NS,
                        &name_hash("pool"),
                        |class| countable(class, "pool-uid", recreate, Some(("tmpl", &facts))),
                        &[],
                    )
                    .0
            };
            assert_eq!(count(&cache), count(&rebuilt), "seed {seed}");
            counted += count(&cache);
        }
        for _ in 0..4 {
            check_pass(&cache, &mut rng, seed);
        }
    }
    assert!(
        counted > 1000,
        "the cases exercise quiet members ({counted})"
    );
}
