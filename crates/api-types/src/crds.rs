//! The CustomResourceDefinitions of the API, as they are installed.
//!
//! Always use these functions rather than `K::crd()`: kube-derive's schema lacks the
//! Kubernetes markers and defaults of the embedded core types, keeps descriptions and marks
//! optional fields `nullable`; these functions build the schema the reference installs.
//!
//! Every CRD serves two versions, like the reference's: `v1beta1` (served, stored, listed
//! first) and `v1alpha1` (served, deprecated with the reference's warning text). Objects are
//! converted between them by a webhook (`spec.conversion.strategy: Webhook`): the core
//! controller's Service for Sandbox, the extensions controller's for the other three, so the two
//! installs stay independent. The CRDs carry no `caBundle`: the controller that owns a CRD
//! patches it in at startup (or cert-manager's CA injector does, with unmanaged certificates).

mod markers;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
    ServiceReference, WebhookClientConfig, WebhookConversion,
};
use kube::CustomResourceExt;
use kube::core::crd::merge_crds;
use schemars::JsonSchema;

use crate::conversion::{
    CONVERSION_PATH, CONVERSION_REVIEW_VERSIONS, CORE_WEBHOOK_SERVICE, EXTENSIONS_WEBHOOK_SERVICE,
    HUB_VERSION, WEBHOOK_NAMESPACE,
};
use crate::{
    Sandbox, SandboxClaim, SandboxClaimSpec, SandboxClaimStatus, SandboxSpec, SandboxStatus,
    SandboxTemplate, SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
    SandboxWarmPoolStatus, v1alpha1,
};

/// The core CRD: `sandboxes.agents.x-k8s.io`.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    let sandbox = both_versions(
        finish::<SandboxSpec, SandboxStatus>(Sandbox::crd(), true),
        finish::<v1alpha1::SandboxSpec, v1alpha1::SandboxStatus>(v1alpha1::Sandbox::crd(), true),
        CORE_WEBHOOK_SERVICE,
    );
    vec![sandbox]
}

/// The extension CRDs, in install order: SandboxTemplate, SandboxWarmPool, SandboxClaim.
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![
        // SandboxTemplate has no status.
        both_versions(
            finish::<SandboxTemplateSpec, ()>(SandboxTemplate::crd(), false),
            finish::<v1alpha1::SandboxTemplateSpec, ()>(v1alpha1::SandboxTemplate::crd(), false),
            EXTENSIONS_WEBHOOK_SERVICE,
        ),
        both_versions(
            finish::<SandboxWarmPoolSpec, SandboxWarmPoolStatus>(SandboxWarmPool::crd(), true),
            finish::<v1alpha1::SandboxWarmPoolSpec, v1alpha1::SandboxWarmPoolStatus>(
                v1alpha1::SandboxWarmPool::crd(),
                true,
            ),
            EXTENSIONS_WEBHOOK_SERVICE,
        ),
        both_versions(
            finish::<SandboxClaimSpec, SandboxClaimStatus>(SandboxClaim::crd(), true),
            finish::<v1alpha1::SandboxClaimSpec, v1alpha1::SandboxClaimStatus>(
                v1alpha1::SandboxClaim::crd(),
                true,
            ),
            EXTENSIONS_WEBHOOK_SERVICE,
        ),
    ]
}

/// The `spec.conversion` of a CRD whose objects the webhook Service `service` (in
/// [`WEBHOOK_NAMESPACE`]) converts, without a `caBundle`.
pub fn webhook_conversion(service: &str) -> CustomResourceConversion {
    CustomResourceConversion {
        strategy: "Webhook".into(),
        webhook: Some(WebhookConversion {
            conversion_review_versions: CONVERSION_REVIEW_VERSIONS.map(String::from).to_vec(),
            client_config: Some(WebhookClientConfig {
                service: Some(ServiceReference {
                    name: service.into(),
                    namespace: WEBHOOK_NAMESPACE.into(),
                    path: Some(CONVERSION_PATH.into()),
                    port: None,
                }),
                ..WebhookClientConfig::default()
            }),
        }),
    }
}

/// One CRD serving `hub` (stored, first) and `spoke`, converted by the webhook `service`.
fn both_versions(
    hub: CustomResourceDefinition,
    spoke: CustomResourceDefinition,
    service: &str,
) -> CustomResourceDefinition {
    let mut crd = merge_crds(vec![hub, spoke], HUB_VERSION)
        .unwrap_or_else(|e| panic!("the two versions of a kind do not merge: {e}"));
    crd.spec.conversion = Some(webhook_conversion(service));
    crd
}

/// Replaces kube-derive's schema with ours and fills in what kube-derive leaves out.
fn finish<Spec: JsonSchema, Status: JsonSchema>(
    mut crd: CustomResourceDefinition,
    with_status: bool,
) -> CustomResourceDefinition {
    let schema = schema::kind_schema::<Spec, Status>(with_status);
    let schema: JSONSchemaProps = serde_json::from_value(schema)
        .unwrap_or_else(|e| panic!("generated schema is not a JSONSchemaProps: {e}"));
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        });
    }
    let names = &mut crd.spec.names;
    names.list_kind = Some(format!("{}List", names.kind));
    crd
}
