//! The CustomResourceDefinitions of the API, as they are installed.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};

/// The core CRD: `sandboxes.agents.x-k8s.io`.
pub fn core_crds() -> Vec<CustomResourceDefinition> {
    vec![Sandbox::crd()]
}

/// The extension CRDs, in install order: SandboxTemplate, SandboxWarmPool, SandboxClaim.
pub fn extension_crds() -> Vec<CustomResourceDefinition> {
    vec![
        SandboxTemplate::crd(),
        SandboxWarmPool::crd(),
        SandboxClaim::crd(),
    ]
}
