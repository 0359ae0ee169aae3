//! Claims that cannot be served warm, or at all: each gets the documented Ready condition and
//! recovers when the cause is fixed.

use crate::harness;

use api_types::Sandbox;
use api_types::keys::{SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_TEMPLATE_REF_HASH_LABEL};
use extensions_controller::Options;
use harness::{ExtEnv, claim_ready};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_pool_then_missing_template_then_cold_start() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_claim("lonely", "nopool", json!({})).await;
    let c = ext.wait_claim_reason("lonely", "WarmPoolNotFound").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "SandboxWarmPool \"nopool\" not found"
    );

    ext.create_pool("nopool", "notemplate", 0).await;
    let c = ext.wait_claim_reason("lonely", "TemplateNotFound").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "SandboxTemplate \"notemplate\" not found"
    );

    ext.create_template("notemplate", json!({})).await;
    // Empty pool (replicas 0): the claim cold-starts a Sandbox named after itself.
    let c = ext.wait_claim_reason("lonely", "DependenciesReady").await;
    assert_eq!(c.status.as_ref().unwrap().sandbox.name, "lonely");
    let sb = ext.api::<Sandbox>().get("lonely").await.unwrap();
    let labels = sb.metadata.labels.unwrap();
    assert_eq!(labels[SANDBOX_LAUNCH_TYPE_LABEL], "cold");
    assert_eq!(
        labels[SANDBOX_TEMPLATE_REF_HASH_LABEL],
        api_types::name_hash("notemplate")
    );
    let pod = sb.spec.blueprint.pod_template.spec;
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.dns_policy.as_deref(), Some("None"));
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_errors_get_their_reasons_and_no_sandbox() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 0).await;

    ext.create_claim(
        "router",
        "pool",
        json!({"additionalPodMetadata": {"labels": {"app": "sandbox-router"}}}),
    )
    .await;
    let c = ext.wait_claim_reason("router", "InvalidMetadata").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "invalid additionalPodMetadata: failed to validate label \"app\": restricted system label value: \"app\"=\"sandbox-router\" is not allowed in AdditionalPodMetadata"
    );
    ext.create_claim(
        "nodomain",
        "pool",
        json!({"additionalPodMetadata": {"labels": {"team": "a"}}}),
    )
    .await;
    let c = ext.wait_claim_reason("nodomain", "InvalidMetadata").await;
    assert!(
        claim_ready(&c)
            .unwrap()
            .2
            .contains("must have a domain prefix")
    );

    ext.create_claim("env", "pool", json!({"env": [{"name": "A", "value": "1"}]}))
        .await;
    let c = ext
        .wait_claim_reason("env", "EnvVarsInjectionRejected")
        .await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "environment variable injection rejected: environment variable injection is not allowed by the template policy"
    );
    ext.create_claim(
        "vct",
        "pool",
        json!({"volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}]}),
    )
    .await;
    let c = ext
        .wait_claim_reason("vct", "VolumeClaimTemplatesError")
        .await;
    assert!(
        claim_ready(&c)
            .unwrap()
            .2
            .contains("volume claim templates are disallowed by the template")
    );

    ext.settle().await;
    let sandboxes = ext
        .api::<Sandbox>()
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        sandboxes.items.is_empty(),
        "no Sandbox for refused claims: {:?}",
        sandboxes
            .items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_env_and_metadata_reach_the_cold_sandbox() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({"envVarsInjectionPolicy": "Overrides",
        "podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36", "env": [{"name": "EXISTING", "value": "t"}]}]}}}))
        .await;
    let pool = ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    ext.create_claim(
        "custom",
        "pool",
        json!({"env": [{"name": "EXISTING", "value": "c"}, {"name": "NEW", "value": "n"}],
               "additionalPodMetadata": {"labels": {"sandbox.users.io/user": "u"}, "annotations": {"note": "x"}}}),
    )
    .await;
    let c = ext.wait_claim_reason("custom", "DependenciesReady").await;
    assert_eq!(
        c.status.as_ref().unwrap().sandbox.name,
        "custom",
        "env forces a cold start"
    );
    let sb = ext.api::<Sandbox>().get("custom").await.unwrap();
    let env: Vec<_> = sb.spec.blueprint.pod_template.spec.containers[0]
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    assert_eq!(
        env,
        [("EXISTING".into(), "c".into()), ("NEW".into(), "n".into())]
    );
    let meta = sb.spec.blueprint.pod_template.metadata;
    assert_eq!(meta.labels["sandbox.users.io/user"], "u");
    assert_eq!(meta.annotations["note"], "x");
    assert_eq!(
        ext.pool_members(&pool).await.len(),
        1,
        "the warm member was left alone"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_deleted_under_a_live_pool() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 1).await;
    ext.wait_pool_ready("pool", 1).await;
    ext.api::<api_types::SandboxTemplate>()
        .delete("tmpl", &Default::default())
        .await
        .unwrap();
    e2e_tests::wait_for("template gone", e2e_tests::DEADLINE, || async {
        ext.api::<api_types::SandboxTemplate>()
            .get_opt("tmpl")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;

    // The template's NetworkPolicy went with it (it is the template's), so not even the warm
    // member is handed out (fail closed), and there is nothing to cold-start from.
    let pool = ext
        .api::<api_types::SandboxWarmPool>()
        .get("pool")
        .await
        .unwrap();
    let members = ext.pool_members(&pool).await;
    ext.create_claim("first", "pool", json!({})).await;
    let c = ext.wait_claim_reason("first", "TemplateNotFound").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "SandboxTemplate \"tmpl\" not found"
    );
    assert_eq!(ext.pool_members(&pool).await.len(), members.len());
    // The template comes back: its policy is made and the claim is served.
    ext.create_template("tmpl", json!({})).await;
    ext.wait_claim_reason("first", "DependenciesReady").await;

    // A claim cannot reach a pool in another namespace: refs are namespace-local.
    let other: api_types::SandboxClaim = serde_json::from_value(json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
        "metadata": {"name": "elsewhere"},
        "spec": {"warmPoolRef": {"name": "pool"}},
    }))
    .unwrap();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(ext.env.client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap();
    namespaces
        .create(&Default::default(), &ns)
        .await
        .expect("namespace created");
    let mut other = other;
    other.metadata.namespace = Some("other".into());
    let api: kube::Api<api_types::SandboxClaim> =
        kube::Api::namespaced(ext.env.client.clone(), "other");
    api.create(&Default::default(), &other)
        .await
        .expect("claim created");
    let c = e2e_tests::wait_for(
        "claim in another namespace reports its pool missing",
        e2e_tests::DEADLINE,
        || async {
            api.get("elsewhere")
                .await
                .ok()
                .filter(|c| claim_ready(c).is_some_and(|(_, r, _)| r == "WarmPoolNotFound"))
        },
    )
    .await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "SandboxWarmPool \"pool\" not found"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_per_claim_network_policy_is_removed_foreign_one_kept() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    use kube::api::{Patch, PatchParams};
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 0).await;
    let owned = ext.create_claim("legacy", "pool", json!({})).await;
    ext.wait_claim_reason("legacy", "DependenciesReady").await;
    let policies = ext.api::<NetworkPolicy>();
    let np = |name: &str, owner: Option<&api_types::SandboxClaim>| -> NetworkPolicy {
        let mut value = json!({"metadata": {"name": name}, "spec": {"podSelector": {}}});
        if let Some(c) = owner {
            value["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
                "name": c.metadata.name, "uid": c.metadata.uid, "controller": true}]);
        }
        serde_json::from_value(value).unwrap()
    };
    policies
        .create(
            &Default::default(),
            &np("legacy-network-policy", Some(&owned)),
        )
        .await
        .unwrap();
    policies
        .create(&Default::default(), &np("user-network-policy", None))
        .await
        .unwrap();
    ext.create_claim("user", "pool", json!({})).await;
    // Any change to the claim makes the controller look again.
    let touch = json!({"metadata": {"labels": {"touched": "yes"}}});
    for name in ["legacy", "user"] {
        ext.api::<api_types::SandboxClaim>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&touch))
            .await
            .unwrap();
    }
    e2e_tests::wait_for("legacy policy deleted", e2e_tests::DEADLINE, || async {
        policies
            .get_opt("legacy-network-policy")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    ext.wait_claim_reason("user", "DependenciesReady").await;
    assert!(
        policies
            .get_opt("user-network-policy")
            .await
            .unwrap()
            .is_some(),
        "a policy the claim does not own survives"
    );
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_sandbox_with_the_claims_name_is_reported_then_recovered() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("tmpl", json!({})).await;
    ext.create_pool("pool", "tmpl", 0).await;
    let foreign = e2e_tests::sandbox("squat", json!({}));
    ext.api::<Sandbox>()
        .create(&Default::default(), &foreign)
        .await
        .unwrap();
    ext.create_claim("squat", "pool", json!({})).await;
    let c = ext.wait_claim_reason("squat", "ReconcilerError").await;
    assert_eq!(
        claim_ready(&c).unwrap().2,
        "Error seen: sandbox \"squat\" is not controlled by claim \"squat\". Please use a different claim name or delete the sandbox manually"
    );
    // The user deletes the squatter; the claim recovers on its own.
    ext.api::<Sandbox>()
        .delete("squat", &Default::default())
        .await
        .unwrap();
    let c = ext.wait_claim_reason("squat", "DependenciesReady").await;
    assert_eq!(c.status.unwrap().sandbox.name, "squat");
    let sb = ext.api::<Sandbox>().get("squat").await.unwrap();
    assert_eq!(
        sb.metadata.owner_references.unwrap()[0].kind,
        "SandboxClaim"
    );
    ext.stop().await;
}
