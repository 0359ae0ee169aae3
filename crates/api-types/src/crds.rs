//! The CustomResourceDefinitions of the API, as they are installed.
//!
//! Always use these functions rather than `K::crd()`: kube-derive's schema lacks the
//! Kubernetes markers and defaults of the embedded core types, keeps the embedded types' long
//! descriptions and marks optional fields `nullable`; these functions build the schema the
//! reference installs, described from this crate's doc comments (see `schema`).

mod markers;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::CustomResourceExt;
use schemars::JsonSchema;

use crate::{
    Sandbox, SandboxClaim, SandboxClaimSpec, SandboxClaimStatus, SandboxSpec, SandboxStatus,
    SandboxTemplate, SandboxTemplateSpec, SandboxWarmPool, SandboxWarmPoolSpec,
    SandboxWarmPoolStatus,
};

/// What `kubectl explain sandbox` says a Sandbox is.
const SANDBOX: &str = "A Sandbox is one isolated, stateful Pod with a stable identity, and optionally a headless Service and volumes, that can be suspended, resumed and expired.";
/// What `kubectl explain sandboxtemplate` says a SandboxTemplate is.
const SANDBOX_TEMPLATE: &str = "A SandboxTemplate is the blueprint of the sandboxes that warm pools and claims make: their Pod, volumes and network policy, and what a claim may change.";
/// What `kubectl explain sandboxwarmpool` says a SandboxWarmPool is.
const SANDBOX_WARM_POOL: &str = "A SandboxWarmPool keeps a number of ready, unclaimed sandboxes made from a SandboxTemplate, for claims to take at once.";
/// What `kubectl explain sandboxclaim` says a SandboxClaim is.
const SANDBOX_CLAIM: &str = "A SandboxClaim asks for one sandbox: a ready one from a warm pool, or a new one made from the pool's template.";

/// The core CRD: `sandboxes.agents.x-k8s.io`.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    vec![finish::<SandboxSpec, SandboxStatus>(
        Sandbox::crd(),
        true,
        SANDBOX,
    )]
}

/// The extension CRDs, in install order: SandboxTemplate, SandboxWarmPool, SandboxClaim.
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![
        // SandboxTemplate has no status.
        finish::<SandboxTemplateSpec, ()>(SandboxTemplate::crd(), false, SANDBOX_TEMPLATE),
        finish::<SandboxWarmPoolSpec, SandboxWarmPoolStatus>(
            SandboxWarmPool::crd(),
            true,
            SANDBOX_WARM_POOL,
        ),
        finish::<SandboxClaimSpec, SandboxClaimStatus>(SandboxClaim::crd(), true, SANDBOX_CLAIM),
    ]
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
