//! Both controllers as themselves on the real control plane: each binary runs with a token of
//! its own ServiceAccount (from `deploy/`, the pieces of the release manifests), never admin,
//! with leader election and the managed conversion-webhook certificates on, as the release's
//! Deployments run them. The test drives every reconciler (Sandboxes with a Service and a PVC,
//! suspend, expiry with `Delete`; a template, a warm pool, a warm claim, an expiring claim, a
//! template turned Unmanaged), then reads kube-apiserver's audit log and checks, per
//! controller:
//! - no request was denied (403) and every request is one of its roles' grants;
//! - every grant was used, or is one `deploy/README.md` explains (listed in [`EXPLAINED`]).
//!
//! Needs `go` (the control plane is built with it): without it the test prints one line and
//! passes, except under `CI` or `AGENT_SANDBOX_REQUIRE_GO=1`.

#[path = "clients_support/cargo.rs"]
mod cargo;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use e2e_tests::controller_process::Running;
use e2e_tests::http_probe::free_port;
use e2e_tests::release_rbac::{CONTROLLERS, SYSTEM_NAMESPACE};
use e2e_tests::{DEADLINE, install_crds, wait_for};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use realcluster::audit::Request;
use serde_json::{Value, json};

const SYSTEM: &str = SYSTEM_NAMESPACE;
const NS: &str = "rbac-audit";

/// Grants a run of this test need not use, each explained in `deploy/README.md`
/// ("Permissions"): `<group> <resource> <verb>[ (<name>)]`, as [`grants`] spells them.
const EXPLAINED: &[&str] = &[
    // OwnerReferencesPermissionEnforcement checks it; no request is ever made with it.
    "agents.x-k8s.io sandboxes/finalizers update",
    "extensions.agents.x-k8s.io sandboxclaims/finalizers update",
    "extensions.agents.x-k8s.io sandboxtemplates/finalizers update",
    "extensions.agents.x-k8s.io sandboxwarmpools/finalizers update",
    // A repeat of the same Event within six minutes continues its series.
    "events.k8s.io events patch",
    // Reads after a create collided with an object the cache had not seen yet.
    "core pods get",
    "core persistentvolumeclaims get",
    "core services get",
    "agents.x-k8s.io sandboxes get",
    // Adoption of an existing unowned Service; repair of a drifted one or PVC.
    "core services update",
    "core services patch",
    "core persistentvolumeclaims patch",
    // Lease and certificate Secret: create the first time, update on takeover or renewal.
    "coordination.k8s.io leases create",
    "coordination.k8s.io leases update (a3317529.agent-sandbox.x-k8s.io)",
    "coordination.k8s.io leases update (extensions.agent-sandbox.x-k8s.io)",
    "core secrets create",
    "core secrets update (sandbox-controller-webhook-certs)",
    "core secrets update (extensions-controller-webhook-certs)",
];

fn object<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).expect("a valid object")
}

fn ready(status: &Value) -> bool {
    status["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn in_seconds(seconds: i64) -> String {
    let at =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Everything each reconciler does at least once.
async fn exercise(admin: &kube::Client) {
    let sandboxes: Api<Sandbox> = Api::namespaced(admin.clone(), NS);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NS);
    let container = json!([{"name": "main", "image": "busybox:1.36"}]);
    let pod_template = json!({"spec": {"containers": container}});
    // A Sandbox with a Service and a PVC; suspended once its children exist.
    sandboxes
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                "metadata": {"name": "full"},
                "spec": {"podTemplate": pod_template, "service": true,
                         "volumeClaimTemplates": [{"metadata": {"name": "home"},
                            "spec": {"accessModes": ["ReadWriteOnce"],
                                     "resources": {"requests": {"storage": "1Gi"}}}}]},
            })),
        )
        .await
        .expect("Sandbox full created");
    let services: Api<Service> = Api::namespaced(admin.clone(), NS);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), NS);
    wait_for("full's Pod, Service and PVC", DEADLINE, || async {
        let pod = pods.get_opt("full").await.ok()??;
        services.get_opt("full").await.ok()??;
        pvcs.get_opt("home-full").await.ok()??;
        Some(pod)
    })
    .await;
    sandboxes
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"operatingMode": "Suspended"}})),
        )
        .await
        .expect("suspend");
    wait_for("full's Pod gone on suspend", DEADLINE, || async {
        pods.get_opt("full").await.ok()?.is_none().then_some(())
    })
    .await;
    // Its Service no longer wanted: deleted.
    sandboxes
        .patch(
            "full",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"service": false}})),
        )
        .await
        .expect("service off");
    wait_for("full's Service deleted", DEADLINE, || async {
        services.get_opt("full").await.ok()?.is_none().then_some(())
    })
    .await;

    // A Sandbox that becomes Ready, expires and is deleted by the controller.
    sandboxes
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                "metadata": {"name": "brief"},
                "spec": {"podTemplate": pod_template, "shutdownTime": in_seconds(15),
                         "shutdownPolicy": "Delete"},
            })),
        )
        .await
        .expect("Sandbox brief created");
    wait_for("brief Ready", DEADLINE, || async {
        let sb = sandboxes.get_opt("brief").await.ok()??;
        ready(&serde_json::to_value(sb.status?).ok()?).then_some(())
    })
    .await;
    wait_for("brief deleted on expiry", DEADLINE, || async {
        sandboxes
            .get_opt("brief")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;

    // Template (with its NetworkPolicy), warm pool, a warm claim and an expiring claim.
    let templates: Api<SandboxTemplate> = Api::namespaced(admin.clone(), NS);
    templates
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
                "metadata": {"name": "tpl"}, "spec": {"podTemplate": pod_template},
            })),
        )
        .await
        .expect("template created");
    let pools: Api<SandboxWarmPool> = Api::namespaced(admin.clone(), NS);
    pools
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
                "metadata": {"name": "pool"},
                "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}},
            })),
        )
        .await
        .expect("pool created");
    let policies: Api<NetworkPolicy> = Api::namespaced(admin.clone(), NS);
    wait_for("the template's NetworkPolicy", DEADLINE, || async {
        let list = policies.list(&ListParams::default()).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    wait_for("a Ready member in the pool", DEADLINE, || async {
        let pool = pools.get_opt("pool").await.ok()??;
        let status = serde_json::to_value(pool.status?).ok()?;
        (status["readyReplicas"].as_i64()? >= 1).then_some(())
    })
    .await;
    let claims: Api<SandboxClaim> = Api::namespaced(admin.clone(), NS);
    for (name, lifecycle) in [
        ("warm", Value::Null),
        (
            "brief",
            json!({"shutdownTime": in_seconds(15), "shutdownPolicy": "Delete"}),
        ),
    ] {
        let mut spec = json!({"warmPoolRef": {"name": "pool"}});
        if !lifecycle.is_null() {
            spec["lifecycle"] = lifecycle;
        }
        claims
            .create(
                &PostParams::default(),
                &object(json!({
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                    "metadata": {"name": name}, "spec": spec,
                })),
            )
            .await
            .expect("claim created");
        wait_for(&format!("claim {name} Ready"), DEADLINE, || async {
            let claim = claims.get_opt(name).await.ok()??;
            ready(&serde_json::to_value(claim.status?).ok()?).then_some(())
        })
        .await;
    }
    wait_for("claim brief deleted on expiry", DEADLINE, || async {
        claims.get_opt("brief").await.ok()?.is_none().then_some(())
    })
    .await;

    // The pool scaled to zero: its members are deleted.
    pools
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("pool scaled to 0");
    wait_for("the pool's members deleted", DEADLINE, || async {
        let pool = pools.get_opt("pool").await.ok()??;
        let status = serde_json::to_value(pool.status?).ok()?;
        (status["replicas"].as_i64().unwrap_or(0) == 0).then_some(())
    })
    .await;

    // The template's own rules: its NetworkPolicy's spec is applied (a `patch`).
    templates
        .patch(
            "tpl",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"networkPolicy": {"ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "gateway"}}}]}
            ]}}})),
        )
        .await
        .expect("template rules changed");
    wait_for(
        "the template's rules in its NetworkPolicy",
        DEADLINE,
        || async {
            let list = policies.list(&ListParams::default()).await.ok()?;
            let spec = serde_json::to_value(list.items.first()?.spec.as_ref()?).ok()?;
            (spec["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app"] == "gateway")
                .then_some(())
        },
    )
    .await;

    // The template turned Unmanaged: its NetworkPolicy is deleted.
    templates
        .patch(
            "tpl",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"networkPolicyManagement": "Unmanaged"}})),
        )
        .await
        .expect("template Unmanaged");
    wait_for("the template's NetworkPolicy deleted", DEADLINE, || async {
        let list = policies.list(&ListParams::default()).await.ok()?;
        list.items.is_empty().then_some(())
    })
    .await;
}

/// Every `<group> <resource> <verb>[ (<name>)]` a set of rules grants.
fn grants(rules: &[PolicyRule]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        for group in rule.api_groups.iter().flatten() {
            let group = if group.is_empty() { "core" } else { group };
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    if names.is_empty() {
                        out.insert(format!("{group} {resource} {verb}"));
                    }
                    for name in &names {
                        out.insert(format!("{group} {resource} {verb} ({name})"));
                    }
                }
            }
        }
    }
    out
}

/// The grant that allows `request` (`None`: a grant of no rule of ours, e.g. discovery).
fn grant_in(request: &Request, granted: &BTreeSet<String>) -> Option<String> {
    let plain = format!(
        "{} {} {}",
        request.group,
        request.resource_path(),
        request.verb
    );
    if granted.contains(&plain) {
        return Some(plain);
    }
    let named = format!("{plain} ({})", request.name.as_deref()?);
    granted.contains(&named).then_some(named)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_on_their_service_accounts_use_their_grants_and_nothing_else() {
    const TEST: &str = "controllers_on_their_service_accounts_use_their_grants_and_nothing_else";
    if !realcluster::go_or_skip(TEST) {
        return;
    }
    let binaries = tokio::task::spawn_blocking(|| cargo::build_controllers(&[]))
        .await
        .expect("build task");
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let admin = cluster.client().await.expect("admin client");
    install_crds(&admin, api_types::core_crds()).await;
    install_crds(&admin, api_types::extension_crds()).await;
    let claims: Api<SandboxClaim> = Api::all(admin.clone());
    wait_for("the extension CRDs served", DEADLINE, || async {
        claims.list(&ListParams::default()).await.ok().map(|_| ())
    })
    .await;
    let rbac = e2e_tests::release_rbac::install(&admin).await;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": NS}})),
        )
        .await
        .expect("test namespace");
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    wait_for(
        "the test namespace's default ServiceAccount",
        DEADLINE,
        || async { accounts.get_opt("default").await.ok()? },
    )
    .await;

    let dir = tempfile::tempdir().expect("temp dir");
    let mut running = Vec::new();
    for c in &CONTROLLERS {
        let kubeconfig = cluster
            .service_account_kubeconfig(SYSTEM, c.account, Duration::from_secs(3600))
            .await
            .expect("a ServiceAccount token");
        let path = dir.path().join(format!("{}.kubeconfig", c.account));
        std::fs::write(&path, kubeconfig).expect("write kubeconfig");
        running.push(Running::start(&binaries, c, &path, free_port()));
    }
    exercise(&admin).await;
    for r in running {
        tokio::task::spawn_blocking(move || r.stop())
            .await
            .expect("stop task");
    }

    let log = std::fs::read_to_string(cluster.audit_log_path()).expect("read the audit log");
    let mut report = String::new();
    let mut failures = Vec::new();
    for c in &CONTROLLERS {
        let user = format!("system:serviceaccount:{SYSTEM}:{}", c.account);
        // Cluster-wide grants, and the Roles' grants (namespaced to agent-sandbox-system).
        let mut cluster_grants = BTreeSet::new();
        let mut role_grants = BTreeSet::new();
        for doc in &rbac {
            let name = doc["metadata"]["name"].as_str().unwrap_or("");
            let rules: Vec<PolicyRule> =
                serde_json::from_value(doc["rules"].clone()).expect("rules");
            if doc["kind"] == "ClusterRole" && name == c.cluster_role {
                cluster_grants.extend(grants(&rules));
            } else if doc["kind"] == "Role" && c.roles.contains(&name) {
                role_grants.extend(grants(&rules));
            }
        }
        let requests: Vec<Request> = realcluster::audit::requests(&log)
            .into_iter()
            .filter(|r| r.user == user)
            .collect();
        assert!(
            !requests.is_empty(),
            "no request of {user} in the audit log: did the controller run with its token?"
        );
        let mut used: BTreeMap<String, usize> = BTreeMap::new();
        for request in &requests {
            if request.code == 403 {
                failures.push(format!("{user}: denied {request:?}"));
                continue;
            }
            let grant = grant_in(request, &cluster_grants).or_else(|| {
                (request.namespace.as_deref() == Some(SYSTEM))
                    .then(|| grant_in(request, &role_grants))
                    .flatten()
            });
            match grant {
                Some(grant) => *used.entry(grant).or_default() += 1,
                None => failures.push(format!("{user}: a request no rule grants: {request:?}")),
            }
        }
        let all: BTreeSet<String> = cluster_grants.union(&role_grants).cloned().collect();
        let unused: Vec<&String> = all.iter().filter(|g| !used.contains_key(*g)).collect();
        report.push_str(&format!(
            "{}: {} requests, {} of {} grants used; unused: {unused:?}\n",
            c.account,
            requests.len(),
            used.len(),
            all.len()
        ));
        for grant in unused {
            if !EXPLAINED.contains(&grant.as_str()) {
                failures.push(format!(
                    "{user}: grant {grant:?} was never used and deploy/README.md does not explain it"
                ));
            }
        }
    }
    eprintln!("{report}");
    assert!(failures.is_empty(), "{report}{}", failures.join("\n"));
}
