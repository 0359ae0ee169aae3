//! The invariants a chaos run checks, from the harness's own watches and a final listing.
//!
//! During the run ([`History`], fed by every watch event, in the API server's resourceVersion
//! order):
//! - a claim gets at most one Sandbox, ever (adopted or created cold); a Sandbox is never
//!   handed from one claim to another;
//! - no claim adopts (or creates) a Sandbox after its deletion began;
//! - a pool never has more members than its replicas, counted at every Sandbox event.
//!
//! At rest ([`check_at_rest`], on a fresh listing once the disturbances stopped):
//! - every live claim is bound to exactly one Sandbox (`status.sandbox.name`, Ready, controlled
//!   by the claim) and no Sandbox is bound to two claims;
//! - every pool has exactly its replicas in members;
//! - no Sandbox is left without a live controller (pool or claim), no Pod without its Sandbox.
//!
//! After cleanup (every claim, pool and template deleted): nothing is left ([`leftovers`]).
//!
//! resourceVersions are compared as numbers: devcluster, and etcd behind kube-apiserver,
//! number every write from one revision counter. That is an assumption of this harness only;
//! the controllers compare them for equality. An object first seen in a relist (the harness's
//! watch lost its place) is not used to date an adoption.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use serde_json::Value;

/// One broken invariant, with the objects involved.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Violation {
    /// Which invariant (a short key, e.g. `adopted-after-deletion`).
    pub invariant: &'static str,
    /// What happened, naming the objects.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.invariant, self.detail)
    }
}

pub const CLAIM_KIND: &str = "SandboxClaim";
pub const POOL_KIND: &str = "SandboxWarmPool";
pub const SANDBOX_KIND: &str = "Sandbox";

/// The controller owner reference of an object: `(kind, uid, name)`.
pub fn controller_of(obj: &DynamicObject) -> Option<(String, String, String)> {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.uid.clone(), o.name.clone()))
}

fn rv_of(obj: &DynamicObject) -> u64 {
    obj.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn uid_of(obj: &DynamicObject) -> String {
    obj.metadata.uid.clone().unwrap_or_default()
}

fn name_of(obj: &DynamicObject) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

/// Whether the object's Ready condition is True.
pub fn is_ready(obj: &DynamicObject) -> bool {
    obj.data["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// A claim's `status.sandbox.name` (empty when unbound).
pub fn bound_sandbox(claim: &DynamicObject) -> &str {
    claim.data["status"]["sandbox"]["name"]
        .as_str()
        .unwrap_or_default()
}

/// The Ready condition's reason, if any.
pub fn ready_reason(obj: &DynamicObject) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["reason"].as_str())
        .map(str::to_owned)
}

/// How an event reached the harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A watch event: the object's resourceVersion dates the change.
    Live,
    /// Part of a (re)list: the change may have happened any time before.
    Relisted,
    /// A deletion.
    Deleted,
}

#[derive(Debug, Default)]
struct ClaimRecord {
    name: String,
    /// The first resourceVersion at which the claim was seen deleting or deleted.
    deleted_at: Option<u64>,
    ever_bound: bool,
}

/// A claim getting a Sandbox: adoption or cold creation.
#[derive(Debug, Clone)]
struct Acquisition {
    claim_uid: String,
    claim_name: String,
    sandbox: String,
    rv: u64,
    dated: bool,
}

#[derive(Debug, Default)]
struct PoolRecord {
    name: String,
    replicas: Option<i64>,
    members: BTreeSet<String>,
    most: usize,
    /// The largest excess seen, with the members at that moment.
    worst: Option<(usize, Vec<String>)>,
}

/// A Sandbox's controller as last seen: (kind, uid, name).
type Controller = (String, String, String);

/// What the watches showed, in order (see the module docs).
#[derive(Debug, Default)]
pub struct History {
    claims: BTreeMap<String, ClaimRecord>,
    /// Sandbox uid -> (name, controller (kind, uid, name) last seen).
    sandboxes: BTreeMap<String, (String, Option<Controller>)>,
    /// Claim uid -> the Sandboxes it ever controlled.
    claim_sandboxes: BTreeMap<String, BTreeSet<String>>,
    acquisitions: Vec<Acquisition>,
    pools: BTreeMap<String, PoolRecord>,
    /// Sandbox uid -> pool uid it counts in.
    membership: BTreeMap<String, String>,
    handovers: Vec<Violation>,
    events: u64,
    /// (claim name, Sandbox name) -> the claim's resourceVersion the controller acted on when
    /// it took the Sandbox (from its log, see [`History::decided`]).
    decisions: BTreeMap<(String, String), u64>,
}

impl History {
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The controller took `sandbox` for `claim` acting on the claim at `claim_version`.
    ///
    /// A take that lands after the claim's deletion began but was decided on a version from
    /// before it raced the deletion: the controller sent it before it could know, and no write
    /// order avoids that (Kubernetes has no write across two objects); garbage collection
    /// removes the Sandbox with the claim. Such takes are counted ([`History::raced_deletion`]),
    /// not reported as violations; a take decided on a deleting claim, or one the log does not
    /// explain, is a violation.
    pub fn decided(&mut self, claim: &str, sandbox: &str, claim_version: u64) {
        self.decisions
            .insert((claim.to_owned(), sandbox.to_owned()), claim_version);
    }

    /// Takes after the claim's deletion began that were decided before it (see
    /// [`History::decided`]).
    pub fn raced_deletion(&self) -> usize {
        self.late_acquisitions().filter(|(_, raced)| *raced).count()
    }

    /// Dated takes after the claim's deletion began, with the resourceVersion it began at and
    /// whether the take raced the deletion.
    fn late_acquisitions(&self) -> impl Iterator<Item = ((&Acquisition, u64), bool)> {
        self.acquisitions.iter().filter_map(|a| {
            let deleted_at = self.claims.get(&a.claim_uid)?.deleted_at?;
            (a.dated && a.rv > deleted_at).then(|| {
                let raced = self
                    .decisions
                    .get(&(a.claim_name.clone(), a.sandbox.clone()))
                    .is_some_and(|v| *v < deleted_at);
                ((a, deleted_at), raced)
            })
        })
    }

    /// Claims ever seen bound (Ready with a Sandbox).
    pub fn claims_bound(&self) -> usize {
        self.claims.values().filter(|c| c.ever_bound).count()
    }

    /// Claim names seen bound that are not deleting yet (for "delete when Ready").
    pub fn bound_claim(&self, uid: &str) -> bool {
        self.claims.get(uid).is_some_and(|c| c.ever_bound)
    }

    pub fn claim(&mut self, obj: &DynamicObject, seen: Seen) {
        self.events += 1;
        let uid = uid_of(obj);
        let rv = rv_of(obj);
        let record = self.claims.entry(uid).or_default();
        record.name = name_of(obj);
        if seen == Seen::Deleted || obj.metadata.deletion_timestamp.is_some() {
            record.deleted_at.get_or_insert(rv);
        }
        if is_ready(obj) && !bound_sandbox(obj).is_empty() {
            record.ever_bound = true;
        }
    }

    pub fn pool(&mut self, obj: &DynamicObject, seen: Seen) {
        self.events += 1;
        let record = self.pools.entry(uid_of(obj)).or_default();
        record.name = name_of(obj);
        if seen == Seen::Deleted {
            record.replicas = None;
        } else {
            record.replicas = obj.data["spec"]["replicas"].as_i64().or(Some(1));
        }
    }

    pub fn sandbox(&mut self, obj: &DynamicObject, seen: Seen) {
        self.events += 1;
        let uid = uid_of(obj);
        let name = name_of(obj);
        let rv = rv_of(obj);
        let controller = controller_of(obj);
        let previous = self
            .sandboxes
            .insert(uid.clone(), (name.clone(), controller.clone()))
            .and_then(|(_, c)| c);
        if let Some((kind, claim_uid, claim_name)) = &controller
            && kind == CLAIM_KIND
            && previous.as_ref().map(|(_, u, _)| u) != Some(claim_uid)
        {
            if let Some((prev_kind, _, prev_name)) = &previous
                && prev_kind == CLAIM_KIND
            {
                self.handovers.push(Violation {
                    invariant: "sandbox-owned-twice",
                    detail: format!(
                        "Sandbox {name} went from claim {prev_name} to claim {claim_name}"
                    ),
                });
            }
            self.claim_sandboxes
                .entry(claim_uid.clone())
                .or_default()
                .insert(name.clone());
            self.acquisitions.push(Acquisition {
                claim_uid: claim_uid.clone(),
                claim_name: claim_name.clone(),
                sandbox: name.clone(),
                rv,
                dated: seen == Seen::Live,
            });
        }
        // Pool membership: controlled by the pool, not deleting, still there.
        let member_of = match (&controller, seen) {
            (Some((kind, pool_uid, _)), Seen::Live | Seen::Relisted)
                if kind == POOL_KIND && obj.metadata.deletion_timestamp.is_none() =>
            {
                Some(pool_uid.clone())
            }
            _ => None,
        };
        let before = self.membership.remove(&uid);
        if let Some(pool) = before
            && let Some(record) = self.pools.get_mut(&pool)
        {
            record.members.remove(&name);
        }
        if let Some(pool) = member_of {
            self.membership.insert(uid, pool.clone());
            let record = self.pools.entry(pool).or_default();
            record.members.insert(name);
            record.most = record.most.max(record.members.len());
            if let Some(replicas) = record.replicas {
                let excess = record
                    .members
                    .len()
                    .saturating_sub(usize::try_from(replicas).unwrap_or(0));
                if excess > 0 && record.worst.as_ref().is_none_or(|(e, _)| excess > *e) {
                    record.worst = Some((excess, record.members.iter().cloned().collect()));
                }
            }
        }
    }

    /// A relist ended: objects of `kind` not in it are gone.
    pub fn relisted(&mut self, kind: &str, present: &BTreeSet<String>) {
        if kind == SANDBOX_KIND {
            let gone: Vec<String> = self
                .membership
                .keys()
                .filter(|uid| !present.contains(*uid))
                .cloned()
                .collect();
            for uid in gone {
                if let Some(pool) = self.membership.remove(&uid)
                    && let Some(record) = self.pools.get_mut(&pool)
                    && let Some((name, _)) = self.sandboxes.get(&uid)
                {
                    record.members.remove(name);
                }
            }
        }
    }

    /// The run's violations (see the module docs).
    pub fn violations(&self) -> Vec<Violation> {
        let mut out = self.handovers.clone();
        for (claim_uid, sandboxes) in &self.claim_sandboxes {
            if sandboxes.len() > 1 {
                let name = self
                    .claims
                    .get(claim_uid)
                    .map(|c| c.name.clone())
                    .unwrap_or_else(|| claim_uid.clone());
                out.push(Violation {
                    invariant: "claim-got-two-sandboxes",
                    detail: format!(
                        "claim {name} got {}: {}",
                        sandboxes.len(),
                        sandboxes.iter().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
        }
        for ((a, deleted_at), _) in self.late_acquisitions().filter(|(_, raced)| !raced) {
            let decided = self
                .decisions
                .get(&(a.claim_name.clone(), a.sandbox.clone()))
                .map_or_else(
                    || "no decision logged".to_owned(),
                    |v| format!("decided on the claim at {v}"),
                );
            out.push(Violation {
                invariant: "adopted-after-deletion",
                detail: format!(
                    "claim {} got Sandbox {} at resourceVersion {} after its deletion began at {deleted_at} ({decided})",
                    a.claim_name, a.sandbox, a.rv
                ),
            });
        }
        for pool in self.pools.values() {
            if let (Some((excess, members)), Some(replicas)) = (&pool.worst, pool.replicas) {
                out.push(Violation {
                    invariant: "pool-overshoot",
                    detail: format!(
                        "pool {} had {} members for {replicas} replicas: {}",
                        pool.name,
                        usize::try_from(replicas).unwrap_or(0) + excess,
                        members.join(", ")
                    ),
                });
            }
        }
        out.sort();
        out
    }
}

/// What a listing shows at rest.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    pub claims: Vec<DynamicObject>,
    pub sandboxes: Vec<DynamicObject>,
    pub pools: Vec<DynamicObject>,
    pub pods: Vec<DynamicObject>,
}

/// The invariants at rest (see the module docs); empty when they all hold.
pub fn check_at_rest(listing: &Listing) -> Vec<Violation> {
    let mut out = Vec::new();
    let uids = |objs: &[DynamicObject]| -> BTreeSet<String> { objs.iter().map(uid_of).collect() };
    let claim_uids = uids(&listing.claims);
    let pool_uids = uids(&listing.pools);
    let sandboxes: BTreeMap<String, &DynamicObject> =
        listing.sandboxes.iter().map(|s| (name_of(s), s)).collect();
    let mut bound_to: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for claim in &listing.claims {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = name_of(claim);
        let uid = uid_of(claim);
        let controlled: Vec<String> = listing
            .sandboxes
            .iter()
            .filter(|s| controller_of(s).is_some_and(|(_, u, _)| u == uid))
            .map(name_of)
            .collect();
        let sandbox = bound_sandbox(claim);
        if sandbox.is_empty() || !is_ready(claim) {
            out.push(Violation {
                invariant: "claim-not-bound",
                detail: format!(
                    "claim {name} is not bound (Ready reason {:?}, status.sandbox.name {sandbox:?})",
                    ready_reason(claim)
                ),
            });
            continue;
        }
        bound_to
            .entry(sandbox.to_owned())
            .or_default()
            .push(name.clone());
        match sandboxes.get(sandbox) {
            None => out.push(Violation {
                invariant: "claim-bound-to-missing-sandbox",
                detail: format!("claim {name} names Sandbox {sandbox}, which does not exist"),
            }),
            Some(s) if controller_of(s).is_none_or(|(_, u, _)| u != uid) => out.push(Violation {
                invariant: "claim-bound-to-foreign-sandbox",
                detail: format!("claim {name} names Sandbox {sandbox}, not controlled by it"),
            }),
            Some(_) => {}
        }
        if controlled.len() > 1 {
            out.push(Violation {
                invariant: "claim-controls-two-sandboxes",
                detail: format!("claim {name} controls {}", controlled.join(", ")),
            });
        }
    }
    for (sandbox, claims) in bound_to {
        if claims.len() > 1 {
            out.push(Violation {
                invariant: "sandbox-bound-twice",
                detail: format!("Sandbox {sandbox} is bound to {}", claims.join(", ")),
            });
        }
    }
    for pool in &listing.pools {
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let uid = uid_of(pool);
        let replicas = pool.data["spec"]["replicas"].as_i64().unwrap_or(1);
        let members = listing
            .sandboxes
            .iter()
            .filter(|s| {
                s.metadata.deletion_timestamp.is_none()
                    && controller_of(s).is_some_and(|(k, u, _)| k == POOL_KIND && u == uid)
            })
            .count();
        if i64::try_from(members).unwrap_or(i64::MAX) != replicas {
            out.push(Violation {
                invariant: "pool-not-at-replicas",
                detail: format!(
                    "pool {} has {members} members for {replicas} replicas",
                    name_of(pool)
                ),
            });
        }
    }
    for s in &listing.sandboxes {
        if s.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let live_owner = controller_of(s).is_some_and(|(kind, uid, _)| match kind.as_str() {
            CLAIM_KIND => claim_uids.contains(&uid),
            POOL_KIND => pool_uids.contains(&uid),
            _ => true,
        });
        if !live_owner {
            out.push(Violation {
                invariant: "leaked-sandbox",
                detail: format!(
                    "Sandbox {} has no live controller ({:?})",
                    name_of(s),
                    controller_of(s).map(|(k, _, n)| format!("{k}/{n}"))
                ),
            });
        }
    }
    let sandbox_uids = uids(&listing.sandboxes);
    for pod in &listing.pods {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let owned = controller_of(pod)
            .is_some_and(|(kind, uid, _)| kind == SANDBOX_KIND && sandbox_uids.contains(&uid));
        if !owned {
            out.push(Violation {
                invariant: "leaked-pod",
                detail: format!("Pod {} has no live Sandbox", name_of(pod)),
            });
        }
    }
    out.sort();
    out
}

/// What is left after cleanup: every Sandbox and Pod (none should be).
pub fn leftovers(listing: &Listing) -> Vec<Violation> {
    let mut out: Vec<Violation> = listing
        .sandboxes
        .iter()
        .map(|s| Violation {
            invariant: "cleanup-left-sandbox",
            detail: format!("Sandbox {} is still there after cleanup", name_of(s)),
        })
        .chain(listing.pods.iter().map(|p| Violation {
            invariant: "cleanup-left-pod",
            detail: format!("Pod {} is still there after cleanup", name_of(p)),
        }))
        .collect();
    out.sort();
    out
}

/// Helper for tests and the bad-input checks: an object from JSON.
pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|_| DynamicObject {
        types: None,
        metadata: Default::default(),
        data: Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn owner(kind: &str, uid: &str) -> Value {
        json!([{"apiVersion": "x/v1", "kind": kind, "name": format!("{kind}-{uid}"),
                "uid": uid, "controller": true}])
    }

    fn sandbox(name: &str, rv: u64, controller: Option<(&str, &str)>) -> DynamicObject {
        let mut v = json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": name, "uid": format!("s-{name}"), "resourceVersion": rv.to_string()}});
        if let Some((kind, uid)) = controller {
            v["metadata"]["ownerReferences"] = owner(kind, uid);
        }
        object(v)
    }

    fn claim(name: &str, rv: u64, deleting: bool) -> DynamicObject {
        let mut v = json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
            "metadata": {"name": name, "uid": name, "resourceVersion": rv.to_string()}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        object(v)
    }

    fn pool(name: &str, replicas: i64) -> DynamicObject {
        object(
            json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
            "metadata": {"name": name, "uid": name, "resourceVersion": "1"},
            "spec": {"replicas": replicas}}),
        )
    }

    #[test]
    fn an_adoption_after_the_claims_deletion_and_a_second_sandbox_are_violations() {
        let mut h = History::default();
        h.pool(&pool("p", 2), Seen::Live);
        h.sandbox(&sandbox("m1", 2, Some((POOL_KIND, "p"))), Seen::Live);
        h.claim(&claim("c", 3, false), Seen::Live);
        h.sandbox(&sandbox("m1", 4, Some((CLAIM_KIND, "c"))), Seen::Live);
        h.claim(&claim("c", 5, true), Seen::Live);
        // Adopting a second member after the deletion began.
        h.sandbox(&sandbox("m2", 6, Some((POOL_KIND, "p"))), Seen::Live);
        h.sandbox(&sandbox("m2", 7, Some((CLAIM_KIND, "c"))), Seen::Live);
        let v = h.violations();
        let keys: Vec<&str> = v.iter().map(|v| v.invariant).collect();
        assert_eq!(
            keys,
            ["adopted-after-deletion", "claim-got-two-sandboxes"],
            "{v:?}"
        );
        assert!(
            v[0].detail.contains("Sandbox m2 at resourceVersion 7"),
            "{}",
            v[0]
        );
    }

    /// The first quick run reported 4 of 100 churn-fast claims as adopting after their deletion
    /// began; the audit log showed each adoption patch in flight when the delete arrived. Seen
    /// failing (reported as violations) before the controller's decision was taken into account.
    #[test]
    fn a_take_decided_before_the_deletion_raced_it_and_one_decided_after_is_a_violation() {
        let mut h = History::default();
        h.pool(&pool("p", 2), Seen::Live);
        h.sandbox(&sandbox("m1", 2, Some((POOL_KIND, "p"))), Seen::Live);
        h.sandbox(&sandbox("m2", 3, Some((POOL_KIND, "p"))), Seen::Live);
        h.claim(&claim("early", 4, false), Seen::Live);
        h.claim(&claim("late", 5, false), Seen::Live);
        h.claim(&claim("early", 6, true), Seen::Live);
        h.claim(&claim("late", 7, true), Seen::Live);
        h.sandbox(&sandbox("m1", 8, Some((CLAIM_KIND, "early"))), Seen::Live);
        h.sandbox(&sandbox("m2", 9, Some((CLAIM_KIND, "late"))), Seen::Live);
        h.decided("SandboxClaim-early", "m1", 4);
        h.decided("SandboxClaim-late", "m2", 7);
        assert_eq!(h.raced_deletion(), 1);
        let v = h.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].invariant, "adopted-after-deletion");
        assert!(
            v[0].detail.contains("decided on the claim at 7"),
            "{}",
            v[0]
        );
    }

    #[test]
    fn a_relisted_adoption_is_not_dated_and_a_clean_run_has_no_violation() {
        let mut h = History::default();
        h.pool(&pool("p", 1), Seen::Live);
        h.sandbox(&sandbox("m1", 2, Some((POOL_KIND, "p"))), Seen::Live);
        h.claim(&claim("c", 3, true), Seen::Live);
        h.sandbox(&sandbox("m1", 9, Some((CLAIM_KIND, "c"))), Seen::Relisted);
        assert_eq!(h.violations(), []);
    }

    #[test]
    fn more_members_than_replicas_at_any_event_is_an_overshoot() {
        let mut h = History::default();
        h.pool(&pool("p", 1), Seen::Live);
        h.sandbox(&sandbox("m1", 2, Some((POOL_KIND, "p"))), Seen::Live);
        h.sandbox(&sandbox("m2", 3, Some((POOL_KIND, "p"))), Seen::Live);
        h.sandbox(&sandbox("m2", 4, Some((POOL_KIND, "p"))), Seen::Deleted);
        let v = h.violations();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].invariant, "pool-overshoot");
        assert!(
            v[0].detail.contains("2 members for 1 replicas: m1, m2"),
            "{}",
            v[0]
        );
    }

    #[test]
    fn at_rest_every_live_claim_is_bound_once_and_nothing_leaks() {
        let mut bound = claim("c", 5, false);
        bound.data["status"] = json!({"sandbox": {"name": "m1"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]});
        let unbound = claim("d", 6, false);
        let listing = Listing {
            claims: vec![bound, unbound],
            sandboxes: vec![
                sandbox("m1", 2, Some((CLAIM_KIND, "c"))),
                sandbox("m2", 3, Some((POOL_KIND, "p"))),
                sandbox("orphan", 4, Some((CLAIM_KIND, "gone"))),
            ],
            pools: vec![pool("p", 2)],
            pods: vec![object(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "stray", "uid": "pod-1"}}))],
        };
        let keys: Vec<String> = check_at_rest(&listing)
            .iter()
            .map(|v| format!("{} {}", v.invariant, v.detail))
            .collect();
        assert_eq!(
            keys,
            [
                "claim-not-bound claim d is not bound (Ready reason None, status.sandbox.name \"\")",
                "leaked-pod Pod stray has no live Sandbox",
                "leaked-sandbox Sandbox orphan has no live controller (Some(\"SandboxClaim/SandboxClaim-gone\"))",
                "pool-not-at-replicas pool p has 1 members for 2 replicas",
            ]
        );
    }
}
