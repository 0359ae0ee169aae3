//! The upgrade from a v1alpha1 install on kube-apiserver, which (unlike devcluster) calls the
//! conversion webhooks, step by step as `docs/upgrade.md` says: the reference's CRDs as v0.4.x
//! shipped them (v1alpha1 only, stored; from `../shared/spec/reference-crds/`) and v1alpha1
//! objects of all four kinds (a suspended Sandbox; a template; a pool; a cold claim, a claim
//! naming a pool, and a claim bound to a warm Sandbox as the reference's controller leaves
//! one); the backup (step 0); `cargo xtask migrate --phase=bootstrap` (1); our CRDs and both
//! controllers on their ServiceAccount tokens (3); the webhooks answering (4); every object
//! read as both versions with its v1alpha1 spec unchanged, the controllers binding and
//! readying the claims and filling the pool; bad ConversionReviews sent to the live webhook
//! answered with a clear failure, the webhook still serving after them; `cargo xtask migrate
//! --phase=migrate` (5) and the CRDs' `storedVersions` (6), v1alpha1 at every step before it
//! and v1beta1 alone after; every object still read as both versions, unchanged; and the error
//! a client sees while a webhook is down.
//!
//! Real control plane only (`AGENT_SANDBOX_CLUSTER=real`: devcluster calls no conversion
//! webhook, so on it the test skips with one line).
//!
//! How the API server reaches a webhook on loopback: the CRDs keep the release's `service`
//! reference (`<controller>-webhook.agent-sandbox-system`, path `/convert`) with the port the
//! test's controller serves on, and that Service is of type `ExternalName` with
//! `externalName: 127.0.0.1`. kube-apiserver resolves an ExternalName Service to that host
//! and the given port, and still checks the certificate against the Service's DNS name, which
//! the controller's managed certificate carries. (A ClusterIP Service does not route here: no
//! kube-proxy; Endpoints may not name a loopback address.)
//!
//! Needs `go` (skip with one line unless `CI`/`AGENT_SANDBOX_REQUIRE_GO=1`) and the reference
//! CRDs (found by the `reference-spec` crate: skip with one line unless
//! `AGENT_SANDBOX_REQUIRE_SPEC` is set, as by `.ci/run`).

#[path = "clients_support/cargo.rs"]
mod cargo;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use e2e_tests::controller_process::Running;
use e2e_tests::http_probe::free_port;
use e2e_tests::release_rbac::{self, SYSTEM_NAMESPACE};
use e2e_tests::{DEADLINE, Ground, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

const NS: &str = "upgrade";
const GROUP: &str = "agents.x-k8s.io";
const EXT_GROUP: &str = "extensions.agents.x-k8s.io";

/// `(group, kind, plural)` of the four kinds.
const KINDS: [(&str, &str, &str); 4] = [
    (GROUP, "Sandbox", "sandboxes"),
    (EXT_GROUP, "SandboxTemplate", "sandboxtemplates"),
    (EXT_GROUP, "SandboxWarmPool", "sandboxwarmpools"),
    (EXT_GROUP, "SandboxClaim", "sandboxclaims"),
];

/// The reference's CRD as v0.4.x installed it: only v1alpha1, stored, no conversion.
fn v1alpha1_only(path: &Path) -> CustomResourceDefinition {
    let text = std::fs::read_to_string(path).expect("read a reference CRD");
    let mut crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("a CRD");
    crd.spec.versions.retain(|v| v.name == "v1alpha1");
    assert_eq!(
        crd.spec.versions.len(),
        1,
        "{}: no v1alpha1",
        path.display()
    );
    crd.spec.versions[0].storage = true;
    crd.spec.conversion = None;
    crd.metadata.annotations = None;
    crd
}

fn api(
    client: &kube::Client,
    (group, kind, plural): (&str, &str, &str),
    version: &str,
) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    Api::namespaced_with(client.clone(), NS, &resource)
}

async fn create(api: &Api<DynamicObject>, object: Value) {
    let object: DynamicObject = serde_json::from_value(object).expect("an object");
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("create {:?}: {e}", object.metadata.name));
}

/// `cargo xtask migrate ARGS` as admin; its output (stdout and stderr), and whether it passed.
fn xtask_migrate(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let mut all = vec!["xtask", "migrate"];
    all.extend_from_slice(args);
    let out = cargo::cargo(&all)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("cargo xtask migrate runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn stored_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default()
}

const SANDBOX: (&str, &str, &str) = KINDS[0];
const TEMPLATE: (&str, &str, &str) = KINDS[1];
const POOL: (&str, &str, &str) = KINDS[2];
const CLAIM: (&str, &str, &str) = KINDS[3];
/// The Sandbox the reference's pool made and a claim then took (`<pool>-<suffix>`).
const WARM_SANDBOX: &str = "pool-x7k2p";

/// True when every field of `written` is in `read` with the same value (the controllers add
/// to some specs: a claim stamps its Sandbox's pod template with its labels).
fn keeps(read: &Value, written: &Value) -> bool {
    match (read, written) {
        (Value::Object(read), Value::Object(written)) => written
            .iter()
            .all(|(k, v)| read.get(k).is_some_and(|r| keeps(r, v))),
        (Value::Array(read), Value::Array(written)) => {
            read.len() == written.len() && read.iter().zip(written).all(|(r, w)| keeps(r, w))
        }
        _ => read == written,
    }
}

/// Asserts that every spec of `before` is kept in `now` (see [`keeps`]).
fn assert_kept(now: &BTreeMap<String, Value>, before: &BTreeMap<String, Value>, when: &str) {
    for (key, written) in before {
        assert!(
            keeps(&now[key], written),
            "{when}: {key} lost part of its spec\n  was: {written}\n  now: {}",
            now[key]
        );
    }
}

/// The spec of every object named in `names` (`(plural, name)`), read as `version`.
async fn specs(
    admin: &kube::Client,
    names: &[((&str, &str, &str), &str)],
    version: &str,
) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (kind, name) in names {
        let object = api(admin, *kind, version)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("read {} {name} as {version}: {e}", kind.2));
        out.insert(format!("{}/{name}", kind.2), object.data["spec"].clone());
    }
    out
}

/// The v0.4.x install's objects, as v1alpha1, as the reference's controller would have left
/// them; returns the `(kind, name)` of each.
async fn create_v1alpha1_objects(
    admin: &kube::Client,
) -> Vec<((&'static str, &'static str, &'static str), &'static str)> {
    let containers = json!([{"name": "main", "image": "busybox:1.36"}]);
    let alpha = "extensions.agents.x-k8s.io/v1alpha1";
    create(
        &api(admin, TEMPLATE, "v1alpha1"),
        json!({"apiVersion": alpha, "kind": "SandboxTemplate", "metadata": {"name": "tpl"},
               "spec": {"podTemplate": {"spec": {"containers": containers}}}}),
    )
    .await;
    create(
        &api(admin, POOL, "v1alpha1"),
        json!({"apiVersion": alpha, "kind": "SandboxWarmPool", "metadata": {"name": "pool"},
               "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "tpl"}}}),
    )
    .await;
    let claims = api(admin, CLAIM, "v1alpha1");
    for (name, warmpool) in [("cold", "none"), ("named", "pool"), ("warm", "default")] {
        create(
            &claims,
            json!({"apiVersion": alpha, "kind": "SandboxClaim", "metadata": {"name": name},
                   "spec": {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": warmpool}}),
        )
        .await;
    }
    let sandboxes = api(admin, SANDBOX, "v1alpha1");
    create(
        &sandboxes,
        json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
               "metadata": {"name": "napping"},
               "spec": {"replicas": 0, "podTemplate": {"spec": {"containers": containers}}}}),
    )
    .await;
    // The warm start the reference left: the pool's Sandbox, now controlled by the claim,
    // and the claim's status naming it.
    let warm = claims.get("warm").await.expect("the warm claim");
    create(
        &sandboxes,
        json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
               "metadata": {"name": WARM_SANDBOX, "ownerReferences": [{
                   "apiVersion": alpha, "kind": "SandboxClaim", "name": "warm",
                   "uid": warm.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
               "spec": {"podTemplate": {"spec": {"containers": containers}}}}),
    )
    .await;
    claims
        .patch_status(
            "warm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"sandbox": {"name": WARM_SANDBOX}}})),
        )
        .await
        .expect("the warm claim's status");
    vec![
        (TEMPLATE, "tpl"),
        (POOL, "pool"),
        (CLAIM, "cold"),
        (CLAIM, "named"),
        (CLAIM, "warm"),
        (SANDBOX, "napping"),
        (SANDBOX, WARM_SANDBOX),
    ]
}

/// Waits until the condition `Ready` of `kind`/`name` (read as v1beta1) is `True`; returns
/// the object.
async fn wait_ready(admin: &kube::Client, kind: (&str, &str, &str), name: &str) -> DynamicObject {
    let api = api(admin, kind, "v1beta1");
    wait_for(&format!("{} {name} Ready", kind.2), DEADLINE, || async {
        let object = api.get(name).await.ok()?;
        let ready = object.data["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        ready.then_some(object)
    })
    .await
}

/// The CRDs' `status.storedVersions`, by CRD name.
async fn all_stored_versions(
    crds: &Api<CustomResourceDefinition>,
    files: &[PathBuf],
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for file in files {
        let name = v1alpha1_only(file).metadata.name.unwrap();
        let crd = crds.get(&name).await.unwrap();
        out.insert(name, stored_versions(&crd));
    }
    out
}

/// Bad ConversionReviews sent to the live extensions webhook (as the API server would, over
/// TLS): each gets a failed review saying why, and the webhook keeps serving.
async fn bad_reviews_fail_clearly(admin: &kube::Client, port: u16) {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let crd = crds
        .get("sandboxclaims.extensions.agents.x-k8s.io")
        .await
        .unwrap();
    let ca = crd
        .spec
        .conversion
        .and_then(|c| c.webhook)
        .and_then(|w| w.client_config)
        .and_then(|c| c.ca_bundle)
        .expect("the controller patched the caBundle in");
    let host = format!("extensions-controller-webhook.{SYSTEM_NAMESPACE}.svc");
    let http = e2e_tests::webhook_client::client(
        std::str::from_utf8(&ca.0).expect("PEM"),
        &host,
        format!("127.0.0.1:{port}").parse().unwrap(),
    );
    let claim = json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxClaim",
        "metadata": {"name": "c", "namespace": NS, "uid": "u-c"},
        "spec": {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "none"}});
    let template = json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxTemplate",
        "metadata": {"name": "t", "namespace": NS, "uid": "u-t"},
        "spec": {"podTemplate": {"spec": {"containers": []}}}});
    let sandbox = json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
        "metadata": {"name": "s", "namespace": NS, "uid": "u-s"}, "spec": {"replicas": 0}});
    let mut bad_field = claim.clone();
    bad_field["spec"]["warmpool"] = json!(42);
    let review = |desired: &str, objects: Vec<Value>| {
        serde_json::to_vec(
            &json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "bad-1", "desiredAPIVersion": desired, "objects": objects}}),
        )
        .unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "garbage",
            b"{not json".to_vec(),
            400,
            "the request body is not a JSON ConversionReview",
        ),
        ("an empty body", Vec::new(), 400, "the request body is not a JSON ConversionReview"),
        (
            "an AdmissionReview",
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x"}}"#
                .to_vec(),
            400,
            "unsupported ConversionReview apiVersion \"admission.k8s.io/v1\"",
        ),
        (
            "a version no CRD serves",
            review("extensions.agents.x-k8s.io/v2", vec![claim.clone()]),
            200,
            "desiredAPIVersion \"extensions.agents.x-k8s.io/v2\" is not a version of SandboxClaim",
        ),
        (
            "mixed kinds",
            review("extensions.agents.x-k8s.io/v1beta1", vec![claim.clone(), template]),
            200,
            "mixed kinds in one ConversionReview",
        ),
        (
            "a kind of the other controller",
            review("agents.x-k8s.io/v1beta1", vec![sandbox]),
            200,
            "this webhook does not convert Sandbox.agents.x-k8s.io",
        ),
        (
            "a field of the wrong type",
            review("extensions.agents.x-k8s.io/v1beta1", vec![bad_field]),
            200,
            "",
        ),
    ];
    for (what, body, status, expected) in cases {
        let response = http
            .post(format!("https://{host}:{port}/convert"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: the webhook answers: {e}"));
        assert_eq!(response.status().as_u16(), status, "{what}");
        let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap())
            .unwrap_or_else(|e| panic!("{what}: a JSON ConversionReview back: {e}"));
        assert_eq!(answer["kind"], "ConversionReview", "{what}: {answer}");
        let result = &answer["response"]["result"];
        assert_eq!(result["status"], "Failure", "{what}: {answer}");
        let message = result["message"].as_str().unwrap_or_default();
        eprintln!("{what}: {message}");
        assert!(
            !message.is_empty() && message.contains(expected),
            "{what}: {message:?} does not say {expected:?}"
        );
        if status == 200 {
            assert_eq!(answer["response"]["uid"], "bad-1", "{what}");
        }
    }
    // Still serving: a good review converts.
    let response = http
        .post(format!("https://{host}:{port}/convert"))
        .body(review("extensions.agents.x-k8s.io/v1beta1", vec![claim]))
        .send()
        .await
        .expect("the webhook still answers");
    let answer: Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{answer}"
    );
    assert_eq!(
        answer["response"]["convertedObjects"][0]["spec"]["warmPoolRef"]["name"],
        "shadow-pool-tpl"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1alpha1_install_upgrades_through_the_webhooks_and_migrates_storage() {
    const TEST: &str = "a_v1alpha1_install_upgrades_through_the_webhooks_and_migrates_storage";
    if e2e_tests::ground() != Ground::Real {
        eprintln!(
            "skipping {TEST}: it needs AGENT_SANDBOX_CLUSTER=real (devcluster calls no conversion webhook)"
        );
        return;
    }
    if !realcluster::go_or_skip(TEST) {
        return;
    }
    let Some(reference) = reference_spec::reference_crds() else {
        return;
    };
    let binaries = tokio::task::spawn_blocking(|| cargo::build_controllers(&["xtask"]))
        .await
        .expect("build task");
    let cluster = realcluster::shared()
        .await
        .expect("the real cluster starts");
    let admin = cluster.client().await.expect("admin client");
    let kubeconfig = cluster.kubeconfig_path();

    // The v0.4.x install: v1alpha1 CRDs and objects.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let mut files: Vec<PathBuf> = std::fs::read_dir(&reference)
        .expect("list reference-crds")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        4,
        "four reference CRDs in {}",
        reference.display()
    );
    for file in &files {
        crds.create(&PostParams::default(), &v1alpha1_only(file))
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", file.display()));
    }
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap(),
        )
        .await
        .expect("namespace");
    for kind in KINDS {
        let api = api(&admin, kind, "v1alpha1");
        wait_for(&format!("{} v1alpha1 served", kind.2), DEADLINE, || async {
            api.list(&ListParams::default()).await.ok().map(|_| ())
        })
        .await;
    }
    let objects = create_v1alpha1_objects(&admin).await;
    let alpha_before = specs(&admin, &objects, "v1alpha1").await;

    // Step 0, the backup: every object, listed (the guide's `kubectl get ... -o yaml`).
    let mut backup = 0;
    for kind in KINDS {
        backup += api(&admin, kind, "v1alpha1")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
    }
    assert_eq!(backup, objects.len(), "the backup holds every object");

    // Step 1, bootstrap: the shadow pool the cold claim will convert to; a second run
    // changes nothing.
    for run in ["first", "second"] {
        let (ok, out) = tokio::task::spawn_blocking({
            let kubeconfig = kubeconfig.clone();
            move || xtask_migrate(&kubeconfig, &["--phase=bootstrap"])
        })
        .await
        .unwrap();
        assert!(ok, "bootstrap ({run} run) failed:\n{out}");
        eprintln!("bootstrap, {run} run:\n{out}");
    }
    let pools = api(&admin, POOL, "v1alpha1");
    let shadow = pools
        .get("shadow-pool-tpl")
        .await
        .unwrap_or_else(|e| panic!("bootstrap made no shadow pool ({e})"));
    assert_eq!(
        shadow.metadata.annotations.unwrap_or_default()["agents.x-k8s.io/migration-shadow"],
        "true"
    );
    let pool_count = pools
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(pool_count, 2, "pool and shadow-pool-tpl, nothing else");

    // Step 3, the new release: its RBAC, the webhook Services (ExternalName to loopback), our
    // CRDs pointing at them with the port each controller serves on, and the controllers.
    release_rbac::install(&admin).await;
    let ports = [free_port(), free_port()];
    let services: Api<Service> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    for c in &release_rbac::CONTROLLERS {
        services
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": format!("{}-webhook", c.binary)},
                    "spec": {"type": "ExternalName", "externalName": "127.0.0.1"},
                }))
                .unwrap(),
            )
            .await
            .expect("webhook Service");
    }
    let ours = api_types::core_crds()
        .into_iter()
        .map(|crd| (crd, ports[0]))
        .chain(
            api_types::extension_crds()
                .into_iter()
                .map(|crd| (crd, ports[1])),
        );
    for (mut crd, port) in ours {
        let name = crd.metadata.name.clone().unwrap();
        let webhook = api_types::conversion_service_mut(&mut crd)
            .expect("our CRDs convert through a Service");
        webhook.port = Some(i32::from(port));
        crd.metadata.resource_version = crds.get(&name).await.unwrap().metadata.resource_version;
        crds.replace(&name, &PostParams::default(), &crd)
            .await
            .unwrap_or_else(|e| panic!("replace CRD {name}: {e}"));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let mut running = Vec::new();
    for (c, port) in release_rbac::CONTROLLERS.iter().zip(ports) {
        let text = cluster
            .service_account_kubeconfig(SYSTEM_NAMESPACE, c.account, Duration::from_secs(3600))
            .await
            .expect("a ServiceAccount token");
        let path = dir.path().join(format!("{}.kubeconfig", c.account));
        std::fs::write(&path, text).expect("write kubeconfig");
        running.push(Running::start(&binaries, c, &path, port));
    }

    // Step 4: the webhooks answer (both versions list).
    for kind in KINDS {
        for version in ["v1beta1", "v1alpha1"] {
            let api = api(&admin, kind, version);
            wait_for(
                &format!("{} readable as {version}", kind.2),
                DEADLINE,
                || async { api.list(&ListParams::default()).await.ok().map(|_| ()) },
            )
            .await;
        }
    }

    // Both versions, nothing lost: the v1alpha1 specs as written, the v1beta1 ones converted.
    let alpha_upgraded = specs(&admin, &objects, "v1alpha1").await;
    assert_kept(
        &alpha_upgraded,
        &alpha_before,
        "after the upgrade, as v1alpha1",
    );
    let beta_before = specs(&admin, &objects, "v1beta1").await;
    assert_eq!(
        beta_before["sandboxes/napping"]["operatingMode"],
        "Suspended"
    );
    assert_eq!(
        beta_before[&format!("sandboxes/{WARM_SANDBOX}")]["operatingMode"],
        "Running"
    );
    for (claim, pool) in [
        ("cold", "shadow-pool-tpl"),
        ("named", "pool"),
        ("warm", "pool"),
    ] {
        assert_eq!(
            beta_before[&format!("sandboxclaims/{claim}")]["warmPoolRef"]["name"],
            pool,
            "claim {claim}"
        );
    }
    assert_eq!(beta_before["sandboxwarmpools/pool"]["replicas"], 1);

    // The controllers work on them: the warm claim keeps its Sandbox, the others get one,
    // all Ready; the pool fills; the suspended Sandbox has no Pod.
    let warm = wait_ready(&admin, CLAIM, "warm").await;
    assert_eq!(warm.data["status"]["sandbox"]["name"], WARM_SANDBOX);
    let mut bound = vec![WARM_SANDBOX.to_owned()];
    for claim in ["named", "cold"] {
        let object = wait_ready(&admin, CLAIM, claim).await;
        let sandbox = object.data["status"]["sandbox"]["name"]
            .as_str()
            .unwrap_or_else(|| panic!("claim {claim} names its Sandbox: {:?}", object.data))
            .to_owned();
        assert!(!bound.contains(&sandbox), "{sandbox} bound twice");
        bound.push(sandbox);
    }
    let beta_pools = api(&admin, POOL, "v1beta1");
    wait_for("the pool ready again (1 replica)", DEADLINE, || async {
        let pool = beta_pools.get("pool").await.ok()?;
        (pool.data["status"]["readyReplicas"] == 1).then_some(())
    })
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), NS);
    assert!(
        pods.get_opt("napping").await.unwrap().is_none(),
        "the suspended Sandbox has no Pod"
    );
    // A claim written as v1alpha1 now (through the webhook) is served too.
    create(
        &api(&admin, CLAIM, "v1alpha1"),
        json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1", "kind": "SandboxClaim",
               "metadata": {"name": "late"},
               "spec": {"sandboxTemplateRef": {"name": "tpl"}, "warmpool": "pool"}}),
    )
    .await;
    let late = wait_ready(&admin, CLAIM, "late").await;
    assert_eq!(late.data["spec"]["warmPoolRef"]["name"], "pool");

    // Bad ConversionReviews, sent to the live webhook.
    bad_reviews_fail_clearly(&admin, ports[1]).await;

    // Before step 5, v1alpha1 is still listed as stored.
    for (name, versions) in all_stored_versions(&crds, &files).await {
        assert!(
            versions.contains(&"v1alpha1".to_owned()),
            "{name}: storedVersions {versions:?} lost v1alpha1 before the migration"
        );
    }

    // Step 5: every object rewritten as v1beta1, storedVersions cleaned; idempotent.
    for run in ["first", "second"] {
        let (ok, out) = tokio::task::spawn_blocking({
            let kubeconfig = kubeconfig.clone();
            move || xtask_migrate(&kubeconfig, &["--phase=migrate"])
        })
        .await
        .unwrap();
        assert!(ok, "migrate ({run} run) failed:\n{out}");
        eprintln!("migrate, {run} run:\n{out}");
    }
    // Step 6.
    for (name, versions) in all_stored_versions(&crds, &files).await {
        assert_eq!(versions, ["v1beta1"], "{name}");
    }
    // Still both versions, nothing lost.
    let alpha_migrated = specs(&admin, &objects, "v1alpha1").await;
    assert_kept(
        &alpha_migrated,
        &alpha_before,
        "after the migration, as v1alpha1",
    );
    assert_kept(
        &alpha_migrated,
        &alpha_upgraded,
        "after the migration, as v1alpha1",
    );
    let beta_migrated = specs(&admin, &objects, "v1beta1").await;
    assert_kept(
        &beta_migrated,
        &beta_before,
        "after the migration, as v1beta1",
    );

    // The core webhook down: v1alpha1 needs it and fails, naming it; v1beta1 does not.
    drop(running.remove(0));
    let alpha = api(&admin, SANDBOX, "v1alpha1");
    let message = wait_for(
        "a v1alpha1 read failing without its webhook",
        DEADLINE,
        || async {
            match alpha.get("napping").await {
                Err(kube::Error::Api(status)) => Some(status.message),
                _ => None,
            }
        },
    )
    .await;
    eprintln!("a v1alpha1 read while the webhook is down: {message}");
    assert!(
        message.contains("conversion webhook for agents.x-k8s.io/v1beta1, Kind=Sandbox failed"),
        "{message}"
    );
    api(&admin, SANDBOX, "v1beta1")
        .get("napping")
        .await
        .expect("v1beta1 needs no conversion");
    drop(running);
}
