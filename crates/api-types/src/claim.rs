//! `extensions.agents.x-k8s.io/v1beta1` `SandboxClaim`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sandbox::{PersistentVolumeClaimTemplate, PodMetadata, without_schema_default};

/// Field path the controllers index SandboxClaims by (the referenced pool's name).
pub const WARM_POOL_REF_FIELD: &str = ".spec.warmPoolRef.name";

/// Reference to a SandboxWarmPool in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct WarmPoolRef {
    pub name: String,
}

/// What happens on claim expiry.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ClaimShutdownPolicy {
    /// Delete the claim (the Sandbox cascades).
    Delete,
    /// Delete the claim with foreground propagation.
    DeleteForeground,
    /// Keep the claim; delete Sandbox, Pod and Service; `Ready=False`/`ClaimExpired`.
    #[default]
    Retain,
}

/// `spec.lifecycle` of a claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimLifecycle {
    /// Absolute claim expiry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<Time>,
    /// Retention after the `Finished` condition turns True.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    #[serde(default)]
    pub shutdown_policy: ClaimShutdownPolicy,
}

/// An environment variable to inject into the claimed sandbox (literal value only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEnvVar {
    pub name: String,
    pub value: String,
    /// Target container; empty means the first container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_name: String,
}

/// Spec of `extensions.agents.x-k8s.io/v1beta1` `SandboxClaim`.
// kube-derive `printcolumn(...)` entries repeat keys such as `type_ = "string"` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxClaim",
    plural = "sandboxclaims",
    singular = "sandboxclaim",
    shortname = "sandboxclaim",
    namespaced,
    status = "SandboxClaimStatus",
    derive = "PartialEq",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
    printcolumn(name = "Sandbox", type_ = "string", json_path = ".status.sandbox.name"),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimSpec {
    pub warm_pool_ref: WarmPoolRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<ClaimLifecycle>,
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub additional_pod_metadata: PodMetadata,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub env: Vec<ClaimEnvVar>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub volume_claim_templates: Vec<PersistentVolumeClaimTemplate>,
}

/// The Sandbox bound to a claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSandboxStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(rename = "podIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
}

/// Observed state of a SandboxClaim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    /// `Ready` and `Finished`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub sandbox: ClaimSandboxStatus,
}
