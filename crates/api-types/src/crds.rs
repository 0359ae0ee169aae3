//! The CustomResourceDefinitions of the API, as they are installed.
//!
//! Always use these functions rather than `K::crd()`: kube-derive's schema lacks the
//! Kubernetes markers and defaults of the embedded core types, keeps the embedded types' long
//! descriptions and marks optional fields `nullable`; these functions build the schema the
//! reference installs, described from this crate's doc comments (see `schema`).
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

/// What `kubectl explain sandbox` says a Sandbox is.
const SANDBOX: &str = "A Sandbox is one isolated, stateful Pod with a stable identity, and optionally a headless Service and volumes, that can be suspended, resumed and expired.";
/// What `kubectl explain sandboxtemplate` says a SandboxTemplate is.
const SANDBOX_TEMPLATE: &str = "A SandboxTemplate is the blueprint of the sandboxes that warm pools and claims make: their Pod, volumes and network policy, and what a claim may change.";
/// What `kubectl explain sandboxwarmpool` says a SandboxWarmPool is.
const SANDBOX_WARM_POOL: &str = "A SandboxWarmPool keeps a number of ready, unclaimed sandboxes made from a SandboxTemplate, for claims to take at once.";
/// What `kubectl explain sandboxclaim` says a SandboxClaim is.
const SANDBOX_CLAIM: &str = "A SandboxClaim asks for one sandbox: a ready one from a warm pool, or a new one made from the pool's template.";

/// The Service a CRD's conversion webhook is reached through, to point it elsewhere (another
/// namespace, a port, a chart template); `None` when the CRD converts without a webhook.
pub fn conversion_service_mut(crd: &mut CustomResourceDefinition) -> Option<&mut ServiceReference> {
    crd.spec
        .conversion
        .as_mut()?
        .webhook
        .as_mut()?
        .client_config
        .as_mut()?
        .service
        .as_mut()
}

/// The core CRD: `sandboxes.agents.x-k8s.io`.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    let sandbox = both_versions(
        finish::<SandboxSpec, SandboxStatus>(Sandbox::crd(), true, SANDBOX),
        finish::<v1alpha1::SandboxSpec, v1alpha1::SandboxStatus>(
            v1alpha1::Sandbox::crd(),
            true,
            SANDBOX,
        ),
        CORE_WEBHOOK_SERVICE,
    );
    vec![sandbox]
}

/// The extension CRDs, in install order: SandboxTemplate, SandboxWarmPool, SandboxClaim.
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![
        // SandboxTemplate has no status.
        both_versions(
            finish::<SandboxTemplateSpec, ()>(SandboxTemplate::crd(), false, SANDBOX_TEMPLATE),
            finish::<v1alpha1::SandboxTemplateSpec, ()>(
                v1alpha1::SandboxTemplate::crd(),
                false,
                SANDBOX_TEMPLATE,
            ),
            EXTENSIONS_WEBHOOK_SERVICE,
        ),
        both_versions(
            finish::<SandboxWarmPoolSpec, SandboxWarmPoolStatus>(
                SandboxWarmPool::crd(),
                true,
                SANDBOX_WARM_POOL,
            ),
            finish::<v1alpha1::SandboxWarmPoolSpec, v1alpha1::SandboxWarmPoolStatus>(
                v1alpha1::SandboxWarmPool::crd(),
                true,
                SANDBOX_WARM_POOL,
            ),
            EXTENSIONS_WEBHOOK_SERVICE,
        ),
        both_versions(
            finish::<SandboxClaimSpec, SandboxClaimStatus>(
                SandboxClaim::crd(),
                true,
                SANDBOX_CLAIM,
            ),
            finish::<v1alpha1::SandboxClaimSpec, v1alpha1::SandboxClaimStatus>(
                v1alpha1::SandboxClaim::crd(),
                true,
                SANDBOX_CLAIM,
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
    description: &str,
) -> CustomResourceDefinition {
    let schema = schema::kind_schema::<Spec, Status>(with_status, description);
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
