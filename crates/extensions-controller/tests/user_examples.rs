//! The manifests users already apply (spec `examples/`) work as-is with both controllers.
//! Skipped with a printed line where the spec's examples are absent (`reference-spec`).

use crate::harness;

use std::path::Path;

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use extensions_controller::Options;
use harness::ExtEnv;
use kube::api::PostParams;

fn load<K: serde::de::DeserializeOwned>(examples: &Path, file: &str) -> K {
    let text = std::fs::read_to_string(examples.join(file)).expect("example readable");
    serde_yaml::from_str(&text).expect("example parses")
}

/// On the real control plane, the StorageClasses `claim` names, served by its volume
/// provisioner: a user applying the example has them (e.g. `dynamic-rwo` on GKE); the test
/// cluster has only its default class. devcluster binds no volumes and needs none.
async fn storage_classes_for(ext: &ExtEnv, claim: &SandboxClaim) {
    if e2e_tests::ground() != e2e_tests::Ground::Real {
        return;
    }
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(ext.env.client.clone());
    for template in &claim.spec.volume_claim_templates {
        let Some(name) = template.spec.storage_class_name.as_deref() else {
            continue;
        };
        if classes
            .get_opt(name)
            .await
            .expect("read StorageClass")
            .is_none()
        {
            let class = realcluster::provisioner::storage_class(name, false);
            classes
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(class).expect("a StorageClass"),
                )
                .await
                .expect("StorageClass created");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmpool_quickstart_applies_and_serves_its_claim() {
    let Some(examples) = reference_spec::examples() else {
        return;
    };
    let ext = ExtEnv::start(Options::default()).await;
    let pp = PostParams::default();
    let template: SandboxTemplate = load(&examples, "warmpool-quickstart__sandboxtemplate.yaml");
    let pool: SandboxWarmPool = load(&examples, "warmpool-quickstart__sandboxwarmpool.yaml");
    let claim: SandboxClaim = load(&examples, "warmpool-quickstart__sandbox-claim.yaml");
    ext.api::<SandboxTemplate>()
        .create(&pp, &template)
        .await
        .unwrap();
    ext.api::<SandboxWarmPool>()
        .create(&pp, &pool)
        .await
        .unwrap();
    let pool_name = pool.metadata.name.clone().unwrap();
    ext.wait_pool_ready(&pool_name, 1).await;
    storage_classes_for(&ext, &claim).await;
    ext.api::<SandboxClaim>().create(&pp, &claim).await.unwrap();

    // The claim overrides the template's `workspace` volume, so it cold-starts.
    let name = claim.metadata.name.clone().unwrap();
    let ready = ext.wait_claim_reason(&name, "DependenciesReady").await;
    assert_eq!(ready.status.as_ref().unwrap().sandbox.name, name);
    let sb = ext.api::<Sandbox>().get(&name).await.unwrap();
    let vcts = &sb.spec.blueprint.volume_claim_templates;
    assert_eq!(vcts.len(), 1);
    assert_eq!(vcts[0].metadata.name, "workspace");
    let storage = vcts[0]
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    assert_eq!(storage.as_deref(), Some("6Gi"), "the claim's override wins");
    ext.wait_pool_ready(&pool_name, 1).await;
    ext.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hermes_example_binds_alice_warm_and_rejects_mallory() {
    let Some(examples) = reference_spec::examples() else {
        return;
    };
    let ext = ExtEnv::start(Options::default()).await;
    let pp = PostParams::default();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(ext.env.client.clone());
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "hermes-demo"}})).unwrap();
    namespaces.create(&pp, &ns).await.unwrap();
    let client = ext.env.client.clone();
    let templates: kube::Api<SandboxTemplate> =
        kube::Api::namespaced(client.clone(), "hermes-demo");
    let pools: kube::Api<SandboxWarmPool> = kube::Api::namespaced(client.clone(), "hermes-demo");
    let claims: kube::Api<SandboxClaim> = kube::Api::namespaced(client.clone(), "hermes-demo");
    let sandboxes: kube::Api<Sandbox> = kube::Api::namespaced(client.clone(), "hermes-demo");
    templates
        .create(
            &pp,
            &load(
                &examples,
                "hermes-agents-as-a-service__10-sandboxtemplate.yaml",
            ),
        )
        .await
        .unwrap();
    pools
        .create(
            &pp,
            &load(
                &examples,
                "hermes-agents-as-a-service__20-sandboxwarmpool.yaml",
            ),
        )
        .await
        .unwrap();
    e2e_tests::wait_for("hermes pool ready", e2e_tests::DEADLINE, || async {
        pools
            .get("hermes-pool")
            .await
            .ok()
            .filter(|p| p.status.as_ref().is_some_and(|s| s.ready_replicas == 2))
    })
    .await;
    let alice: SandboxClaim = load(&examples, "hermes-agents-as-a-service__30-claim-alice.yaml");
    let mallory: SandboxClaim = load(
        &examples,
        "hermes-agents-as-a-service__40-claim-rejected.yaml",
    );
    claims.create(&pp, &alice).await.unwrap();
    claims.create(&pp, &mallory).await.unwrap();
    let reason_of = |c: &SandboxClaim| harness::claim_ready(c).map(|(_, r, _)| r);
    let alice_name = alice.metadata.name.clone().unwrap();
    let bound = e2e_tests::wait_for("alice Ready", e2e_tests::DEADLINE, || async {
        claims
            .get(&alice_name)
            .await
            .ok()
            .filter(|c| reason_of(c).as_deref() == Some("DependenciesReady"))
    })
    .await;
    let sandbox = bound.status.unwrap().sandbox.name;
    assert!(
        sandbox.starts_with("hermes-pool-"),
        "alice got a warm member: {sandbox}"
    );
    let sb = sandboxes.get(&sandbox).await.unwrap();
    assert_eq!(
        sb.spec.blueprint.pod_template.metadata.labels["sandbox.users.io/hermes-user"],
        "alice"
    );
    let mallory_name = mallory.metadata.name.clone().unwrap();
    e2e_tests::wait_for("mallory rejected", e2e_tests::DEADLINE, || async {
        claims
            .get(&mallory_name)
            .await
            .ok()
            .filter(|c| reason_of(c).as_deref() == Some("EnvVarsInjectionRejected"))
    })
    .await;
    assert!(
        sandboxes.get_opt(&mallory_name).await.unwrap().is_none(),
        "no Sandbox for a rejected claim"
    );
    ext.stop().await;
}
