//! The deprecated `v1alpha1` API of all four kinds, served beside `v1beta1` so that existing
//! manifests, clients and objects stored by older installs keep working.
//!
//! Only the fields that differ from `v1beta1` have types of their own; the building blocks
//! (`PodTemplate`, `PersistentVolumeClaimTemplate`, network policy rules, lifecycle, env, ...)
//! are the `v1beta1` ones, which have the same wire shape. The differences
//! (`v1alpha1-conversion.md` §3–§6):
//!
//! | kind | v1alpha1 | v1beta1 |
//! |---|---|---|
//! | Sandbox | `spec.replicas` (0 or 1, default 1), `status.replicas`, scale subresource | `spec.operatingMode`, `status.nodeName`, CEL rule, printer columns |
//! | SandboxTemplate | — | `spec.volumeClaimTemplatesPolicy` |
//! | SandboxWarmPool | `spec.replicas` required, no default | optional, default 1; `status.observedGeneration` |
//! | SandboxClaim | `spec.sandboxTemplateRef`, `spec.warmpool` (default `default`) | `spec.warmPoolRef`, `spec.volumeClaimTemplates`, printer columns |
//!
//! Conversion between the two is in [`crate::conversion`]; the CRDs with both versions in
//! [`crate::crds`].

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::claim::{ClaimEnvVar, ClaimLifecycle, ClaimSandboxStatus};
use crate::sandbox::{PodMetadata, SandboxBlueprint, ShutdownPolicy, without_schema_default};
use crate::template::{EnvVarsInjectionPolicy, NetworkPolicyManagement, SandboxNetworkPolicySpec};
use crate::warm_pool::{SandboxTemplateRef, UpdateStrategy};

/// The deprecated version of all four kinds.
pub const VERSION: &str = "v1alpha1";

/// The value of `spec.warmpool` that means "any pool of the template, else a cold start".
pub const WARM_POOL_POLICY_DEFAULT: &str = "default";
/// The value of `spec.warmpool` that means "always a cold start".
pub const WARM_POOL_POLICY_NONE: &str = "none";

/// Spec of `agents.x-k8s.io/v1alpha1` `Sandbox` (deprecated).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "agents.x-k8s.io",
    version = "v1alpha1",
    kind = "Sandbox",
    plural = "sandboxes",
    singular = "sandbox",
    shortname = "sandbox",
    namespaced,
    status = "SandboxStatus",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    deprecated = "agents.x-k8s.io/v1alpha1 Sandbox is deprecated; use agents.x-k8s.io/v1beta1 Sandbox instead"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSpec {
    /// `podTemplate`, `volumeClaimTemplates`, `service` (same wire shape as v1beta1).
    #[serde(flatten)]
    pub blueprint: SandboxBlueprint,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Retain"))]
    pub shutdown_policy: Option<ShutdownPolicy>,
    /// `1` runs the Pod, `0` suspends it (v1beta1 `operatingMode`); the API server defaults it
    /// to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1), extend("default" = 1))]
    pub replicas: Option<i32>,
}

/// Observed state of a v1alpha1 Sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    #[serde(
        rename = "serviceFQDN",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub service_fqdn: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(rename = "selector", default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
    #[serde(rename = "podIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
    /// Running Pods (0 or 1); the scale subresource's status path.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0))]
    pub replicas: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// Spec of `extensions.agents.x-k8s.io/v1alpha1` `SandboxTemplate` (deprecated): v1beta1's
/// without `volumeClaimTemplatesPolicy`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1alpha1",
    kind = "SandboxTemplate",
    plural = "sandboxtemplates",
    singular = "sandboxtemplate",
    shortname = "sandboxtemplate",
    namespaced,
    derive = "PartialEq",
    deprecated = "extensions.agents.x-k8s.io/v1alpha1 SandboxTemplate is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxTemplate instead"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplateSpec {
    #[serde(flatten)]
    pub blueprint: SandboxBlueprint,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<SandboxNetworkPolicySpec>,
    #[serde(default)]
    pub network_policy_management: NetworkPolicyManagement,
    #[serde(default)]
    pub env_vars_injection_policy: EnvVarsInjectionPolicy,
}

/// Spec of `extensions.agents.x-k8s.io/v1alpha1` `SandboxWarmPool` (deprecated): `replicas`
/// is required and has no default.
// kube-derive `printcolumn(...)` entries repeat keys such as `type_ = "string"` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1alpha1",
    kind = "SandboxWarmPool",
    plural = "sandboxwarmpools",
    singular = "sandboxwarmpool",
    shortname = "swp",
    namespaced,
    status = "SandboxWarmPoolStatus",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    deprecated = "extensions.agents.x-k8s.io/v1alpha1 SandboxWarmPool is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxWarmPool instead"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolSpec {
    #[schemars(range(min = 0))]
    pub replicas: i32,
    pub sandbox_template_ref: SandboxTemplateRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

/// Observed state of a v1alpha1 SandboxWarmPool (no `observedGeneration`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ready_replicas: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
}

/// Spec of `extensions.agents.x-k8s.io/v1alpha1` `SandboxClaim` (deprecated): a template plus
/// a warm-pool policy instead of v1beta1's single `warmPoolRef`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1alpha1",
    kind = "SandboxClaim",
    plural = "sandboxclaims",
    singular = "sandboxclaim",
    shortname = "sandboxclaim",
    namespaced,
    status = "SandboxClaimStatus",
    derive = "PartialEq",
    deprecated = "extensions.agents.x-k8s.io/v1alpha1 SandboxClaim is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxClaim instead"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimSpec {
    /// The template to run.
    pub sandbox_template_ref: SandboxTemplateRef,
    /// `default` (any pool of the template, else cold), `none` (always cold) or the name of one
    /// pool; the API server defaults it to `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "default"))]
    pub warmpool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<ClaimLifecycle>,
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub additional_pod_metadata: PodMetadata,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub env: Vec<ClaimEnvVar>,
}

/// Observed state of a v1alpha1 SandboxClaim (same as v1beta1).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub sandbox: ClaimSandboxStatus,
}

/// True when `warmpool` names one specific pool (not `none`, not `default`, not empty).
pub fn is_specific_pool(warmpool: &str) -> bool {
    !matches!(
        warmpool,
        "" | WARM_POOL_POLICY_NONE | WARM_POOL_POLICY_DEFAULT
    )
}
