//! SandboxTemplate: the shared NetworkPolicy (secure default, custom, Unmanaged) and the
//! template-ref-hash label.

use crate::harness;

use api_types::SandboxTemplate;
use api_types::keys::SANDBOX_TEMPLATE_REF_HASH_LABEL;
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::ExtEnv;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_default_custom_and_unmanaged() {
    let ext = ExtEnv::start(Options::default()).await;
    let created = ext.create_template("tmpl", json!({})).await;
    let policies = ext.api::<NetworkPolicy>();
    let np = wait_for("default NetworkPolicy", DEADLINE, || async {
        policies.get_opt("tmpl-network-policy").await.ok().flatten()
    })
    .await;
    let spec = np.spec.unwrap();
    assert_eq!(spec.policy_types.unwrap(), ["Ingress", "Egress"]);
    assert_eq!(
        spec.pod_selector.unwrap().match_labels.unwrap()[SANDBOX_TEMPLATE_REF_HASH_LABEL],
        api_types::name_hash("tmpl")
    );
    let egress = spec.egress.unwrap();
    let v4 = egress[0].to.as_ref().unwrap()[0].ip_block.clone().unwrap();
    assert_eq!(v4.cidr, "0.0.0.0/0");
    assert!(v4.except.unwrap().contains(&"169.254.0.0/16".to_owned()));
    let owner = &np.metadata.owner_references.unwrap()[0];
    assert_eq!(owner.uid, created.metadata.uid.clone().unwrap());

    let templates = ext.api::<SandboxTemplate>();
    let labelled = wait_for("template labelled", DEADLINE, || async {
        templates.get("tmpl").await.ok().filter(|t| {
            t.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SANDBOX_TEMPLATE_REF_HASH_LABEL))
                == Some(&api_types::name_hash("tmpl"))
        })
    })
    .await;

    // Custom rules replace the default in place.
    let custom = json!({"spec": {"networkPolicy": {"ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "ingress"}}}]}]}}});
    templates
        .patch("tmpl", &PatchParams::default(), &Patch::Merge(&custom))
        .await
        .unwrap();
    wait_for("custom ingress", DEADLINE, || async {
        let np = policies.get("tmpl-network-policy").await.ok()?;
        let ingress = np.spec?.ingress?;
        let peer = ingress.first()?.from.as_ref()?.first()?.clone();
        (peer
            .pod_selector?
            .match_labels?
            .get("app")
            .map(String::as_str)
            == Some("ingress"))
        .then_some(())
    })
    .await;
    let rv = templates
        .get("tmpl")
        .await
        .unwrap()
        .metadata
        .resource_version;
    assert_ne!(
        rv, labelled.metadata.resource_version,
        "the spec edit itself bumps it"
    );

    // Unmanaged: ours is deleted, none is created.
    let unmanaged = json!({"spec": {"networkPolicyManagement": "Unmanaged"}});
    templates
        .patch("tmpl", &PatchParams::default(), &Patch::Merge(&unmanaged))
        .await
        .unwrap();
    wait_for("policy deleted", DEADLINE, || async {
        policies
            .get_opt("tmpl-network-policy")
            .await
            .ok()
            .flatten()
            .is_none()
            .then_some(())
    })
    .await;
    let settled = templates.get("tmpl").await.unwrap();
    ext.settle().await;
    assert_eq!(
        templates
            .get("tmpl")
            .await
            .unwrap()
            .metadata
            .resource_version,
        settled.metadata.resource_version,
        "no redundant writes to the template"
    );
    ext.stop().await;
}
