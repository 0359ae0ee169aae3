//! `cargo xtask migrate` against devcluster, on an install that stored v1alpha1: the CRDs of
//! the reference's v0.4.x (v1alpha1 only, stored) with v1alpha1 objects, bootstrap (dry run,
//! real, again), an attempt to migrate before the upgrade, the upgrade to our CRDs, and the
//! storage migration with the `storedVersions` cleanup.
//!
//! devcluster serves several versions but does not call conversion webhooks (it relabels
//! objects, like `conversion.strategy: None`), so the claims are converted by hand here: the
//! v1alpha1 claims are deleted after bootstrap and v1beta1 ones created after the upgrade. The
//! same run with real conversion is the end-to-end test on kube-apiserver (docs/upgrade.md).

use std::time::{Duration, Instant};

use api_types::conversion::SERVED_VERSIONS;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use xtask::migrate::{self, Log, MigrateArgs, Phase};

const NS: &str = "default";

fn args(phase: Phase, dry_run: bool) -> MigrateArgs {
    MigrateArgs {
        phase,
        dry_run,
        namespace: None,
        kubeconfig: None,
        keep_stored_versions: false,
    }
}

fn all_crds() -> Vec<CustomResourceDefinition> {
    api_types::core_crds()
        .into_iter()
        .chain(api_types::extension_crds())
        .collect()
}

/// The reference's v0.4.x CRDs: only v1alpha1, stored, no conversion.
fn v1alpha1_only(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    crd.spec.versions.retain(|v| v.name == "v1alpha1");
    let version = &mut crd.spec.versions[0];
    version.storage = true;
    version.deprecated = None;
    version.deprecation_warning = None;
    crd.spec.conversion = None;
    crd
}

fn api(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), NS, &resource)
}

async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name));
}

/// Waits until `version` of every CRD is served.
async fn wait_served(client: &kube::Client, version: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    for crd in all_crds() {
        let (group, kind, plural) = (
            crd.spec.group.clone(),
            crd.spec.names.kind.clone(),
            crd.spec.names.plural.clone(),
        );
        let api = api(client, &group, version, &kind, &plural);
        while api.list(&ListParams::default()).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "{plural}.{group}/{version} never served"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn template(name: &str) -> Value {
    json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxTemplate",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}})
}

fn claim(name: &str, template: &str, warmpool: Option<&str>) -> Value {
    let mut claim = json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxClaim",
                           "metadata": {"name": name, "namespace": NS},
                           "spec": {"sandboxTemplateRef": {"name": template}}});
    if let Some(warmpool) = warmpool {
        claim["spec"]["warmpool"] = json!(warmpool);
    }
    claim
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_and_migrate_move_a_v1alpha1_install_to_v1beta1_storage() {
    let cluster = devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts");
    let client = cluster.client();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in all_crds() {
        crds.create(&PostParams::default(), &v1alpha1_only(crd))
            .await
            .unwrap();
    }
    wait_served(&client, "v1alpha1").await;

    let group = "extensions.agents.x-k8s.io";
    let templates = api(
        &client,
        group,
        "v1alpha1",
        "SandboxTemplate",
        "sandboxtemplates",
    );
    let pools = api(
        &client,
        group,
        "v1alpha1",
        "SandboxWarmPool",
        "sandboxwarmpools",
    );
    let claims = api(&client, group, "v1alpha1", "SandboxClaim", "sandboxclaims");
    let sandboxes = api(
        &client,
        "agents.x-k8s.io",
        "v1alpha1",
        "Sandbox",
        "sandboxes",
    );
    for name in ["cold-tmpl", "warm-tmpl"] {
        create(&templates, template(name)).await;
    }
    create(
        &pools,
        json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxWarmPool",
        "metadata": {"name": "specific-pool", "namespace": NS},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "warm-tmpl"}}}),
    )
    .await;
    create(&claims, claim("cold", "cold-tmpl", Some("default"))).await;
    create(&claims, claim("cold-none", "cold-tmpl", Some("none"))).await;
    create(
        &claims,
        claim("specific", "warm-tmpl", Some("specific-pool")),
    )
    .await;
    create(&claims, claim("missing", "warm-tmpl", Some("no-such-pool"))).await;
    create(&claims, claim("warm", "warm-tmpl", None)).await;
    claims
        .patch_status(
            "warm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"sandbox": {"name": "warm-pool-abcde"}}})),
        )
        .await
        .unwrap();
    create(&sandboxes, json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "suspended", "namespace": NS},
        "spec": {"replicas": 0, "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}})).await;

    // Bootstrap, dry run: counts what it would create, creates nothing.
    let mut log = Log::default();
    let dry = migrate::bootstrap(&client, &args(Phase::Bootstrap, true), &mut log)
        .await
        .unwrap();
    assert_eq!(
        (dry.scanned, dry.created, dry.errors),
        (5, 1, 0),
        "{:?}",
        log.lines
    );
    assert!(
        pools
            .get_opt("shadow-pool-cold-tmpl")
            .await
            .unwrap()
            .is_none()
    );

    // For real: one shadow pool for both cold claims of the template.
    let mut log = Log::default();
    let done = migrate::bootstrap(&client, &args(Phase::Bootstrap, false), &mut log)
        .await
        .unwrap();
    assert_eq!(done.created, 1);
    assert_eq!(
        done.warm_start_skipped, 1,
        "the bound claim converts to its Sandbox's pool"
    );
    assert_eq!(done.specific_existing, 1);
    assert_eq!(done.operator_action, ["default/missing -> no-such-pool"]);
    assert!(
        log.lines
            .iter()
            .any(|l| l.contains("OPERATOR ACTION REQUIRED"))
    );
    let shadow = pools.get("shadow-pool-cold-tmpl").await.unwrap();
    let annotations = shadow.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations["agents.x-k8s.io/migration-shadow"], "true");
    assert_eq!(
        annotations["agents.x-k8s.io/migration-source-template"],
        "cold-tmpl"
    );
    assert_eq!(
        shadow.data["spec"],
        json!({"replicas": 0, "sandboxTemplateRef": {"name": "cold-tmpl"}})
    );

    // Again: nothing new.
    let again = migrate::bootstrap(&client, &args(Phase::Bootstrap, false), &mut Log::default())
        .await
        .unwrap();
    assert_eq!((again.created, again.skipped_existing_shadow), (0, 1));

    // Migrate before the upgrade: refused, nothing stamped.
    let mut log = Log::default();
    let early = migrate::migrate(
        &client,
        &args(Phase::Migrate, false),
        "2026-01-01T00:00:00Z",
        &mut log,
    )
    .await;
    assert_eq!(early.total_failure, 4);
    assert!(
        log.lines
            .iter()
            .any(|l| l.contains("still stores v1alpha1; apply this release's CRDs first")),
        "{:?}",
        log.lines
    );

    // devcluster does not convert: trade the v1alpha1 claims for v1beta1 ones (see the docs).
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();

    // The upgrade: our CRDs, both versions, v1beta1 stored.
    for crd in all_crds() {
        let name = crd.metadata.name.clone().unwrap();
        let mut ours = crd;
        ours.metadata.resource_version = crds.get(&name).await.unwrap().metadata.resource_version;
        crds.replace(&name, &PostParams::default(), &ours)
            .await
            .unwrap();
    }
    for version in SERVED_VERSIONS {
        wait_served(&client, version).await;
    }
    let beta_claims = api(&client, group, "v1beta1", "SandboxClaim", "sandboxclaims");
    for (name, pool) in [
        ("cold", "shadow-pool-cold-tmpl"),
        ("specific", "specific-pool"),
    ] {
        create(
            &beta_claims,
            json!({"apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim", "metadata": {"name": name, "namespace": NS},
            "spec": {"warmPoolRef": {"name": pool}}}),
        )
        .await;
    }
    let stored = |crd: &CustomResourceDefinition| {
        crd.status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default()
    };
    let sandbox_crd = crds.get("sandboxes.agents.x-k8s.io").await.unwrap();
    assert_eq!(stored(&sandbox_crd), ["v1alpha1", "v1beta1"]);

    // Dry run: counts, writes nothing.
    let dry = migrate::migrate(
        &client,
        &args(Phase::Migrate, true),
        "2026-01-01T00:00:00Z",
        &mut Log::default(),
    )
    .await;
    assert_eq!((dry.total_success, dry.total_failure), (7, 0));
    assert!(dry.pruned.is_empty());

    let mut log = Log::default();
    let done = migrate::migrate(
        &client,
        &args(Phase::Migrate, false),
        "2026-01-02T03:04:05Z",
        &mut log,
    )
    .await;
    assert_eq!(
        (done.total_success, done.total_failure),
        (7, 0),
        "{:?}",
        log.lines
    );
    assert_eq!(
        done.per_crd
            .iter()
            .map(|(crd, ok, _)| (crd.as_str(), *ok))
            .collect::<Vec<_>>(),
        [
            ("sandboxwarmpools.extensions.agents.x-k8s.io", 2),
            ("sandboxtemplates.extensions.agents.x-k8s.io", 2),
            ("sandboxes.agents.x-k8s.io", 1),
            ("sandboxclaims.extensions.agents.x-k8s.io", 2),
        ],
        "pools and templates before what refers to them"
    );
    for (version, kind, plural, group) in [
        ("v1beta1", "SandboxWarmPool", "sandboxwarmpools", group),
        ("v1beta1", "SandboxTemplate", "sandboxtemplates", group),
        ("v1beta1", "Sandbox", "sandboxes", "agents.x-k8s.io"),
        ("v1beta1", "SandboxClaim", "sandboxclaims", group),
    ] {
        for object in api(&client, group, version, kind, plural)
            .list(&ListParams::default())
            .await
            .unwrap()
        {
            assert_eq!(
                object.metadata.annotations.unwrap_or_default()["agents.x-k8s.io/storage-migrated-at"],
                "2026-01-02T03:04:05Z"
            );
        }
    }
    assert_eq!(done.pruned.len(), 4);
    for crd in crds.list(&ListParams::default()).await.unwrap() {
        assert_eq!(stored(&crd), ["v1beta1"], "{:?}", crd.metadata.name);
    }

    // Once more, one namespace: stamps again, storedVersions already clean.
    let mut scoped = args(Phase::Migrate, false);
    scoped.namespace = Some(NS.into());
    let again = migrate::migrate(
        &client,
        &scoped,
        "2026-01-03T00:00:00Z",
        &mut Log::default(),
    )
    .await;
    assert_eq!((again.total_success, again.total_failure), (7, 0));
    assert!(again.pruned.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_on_a_cluster_without_v1alpha1_has_nothing_to_do() {
    let cluster = devcluster::DevCluster::start(devcluster::Config {
        node_agent: false,
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts");
    let summary = migrate::bootstrap(
        &cluster.client(),
        &args(Phase::Bootstrap, false),
        &mut Log::default(),
    )
    .await
    .unwrap();
    assert_eq!(summary.scanned, 0);
}
