//! The CustomResourceDefinitions of the API, as they are installed.
//!
//! Always use these functions rather than `K::crd()`: kube-derive's schema lacks the
//! Kubernetes markers and defaults of the embedded core types, keeps descriptions and marks
//! optional fields `nullable`; these functions build the schema the reference installs.

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

/// The core CRD: `sandboxes.agents.x-k8s.io`.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    vec![finish::<SandboxSpec, SandboxStatus>(Sandbox::crd(), true)]
}

/// The extension CRDs, in install order: SandboxTemplate, SandboxWarmPool, SandboxClaim.
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![
        // SandboxTemplate has no status.
        finish::<SandboxTemplateSpec, ()>(SandboxTemplate::crd(), false),
        finish::<SandboxWarmPoolSpec, SandboxWarmPoolStatus>(SandboxWarmPool::crd(), true),
        finish::<SandboxClaimSpec, SandboxClaimStatus>(SandboxClaim::crd(), true),
    ]
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
