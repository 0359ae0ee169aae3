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
    /// Name of the SandboxWarmPool.
    pub name: String,
}

/// What happens when the claim expires.
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

/// When the claim expires, and what happens then.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimLifecycle {
    /// When the claim expires (RFC 3339 time); unset never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<Time>,
    /// Seconds after the sandbox's Pod finished (condition `Finished=True`) at which the claim
    /// expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// At expiry: `Retain` (default) deletes the Sandbox and keeps the claim, `Delete` deletes the
    /// claim and its Sandbox, `DeleteForeground` does so with foreground deletion.
    #[serde(default)]
    pub shutdown_policy: ClaimShutdownPolicy,
}

/// An environment variable to set in the claimed sandbox (literal value only).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimEnvVar {
    /// Name of the variable.
    pub name: String,
    /// Value of the variable.
    pub value: String,
    /// Container to set it in; empty means the first container.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub container_name: String,
}

/// Which warm pool to take a sandbox from, and what to add to it.
///
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
    /// The SandboxWarmPool (same namespace) to take a ready sandbox from; its template makes a new
    /// one when none is ready.
    pub warm_pool_ref: WarmPoolRef,
    /// When the claim expires, and what happens then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<ClaimLifecycle>,
    /// Labels and annotations to add to the sandbox's Pod (label keys need an allowed domain
    /// prefix, by default sandbox.users.io).
    ///
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub additional_pod_metadata: PodMetadata,
    /// Environment variables to set in the sandbox, if the template's envVarsInjectionPolicy allows
    /// them (the claim then gets a new sandbox, not a warm one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub env: Vec<ClaimEnvVar>,
    /// Volumes to add to the sandbox, if the template's volumeClaimTemplatesPolicy allows them (the
    /// claim then gets a new sandbox, not a warm one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub volume_claim_templates: Vec<PersistentVolumeClaimTemplate>,
}

/// The Sandbox bound to a claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSandboxStatus {
    /// Name of the Sandbox (a warm one keeps its pool-generated name; a new one has the claim's
    /// name).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// IP addresses of its Pod.
    #[serde(rename = "podIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
}

/// Observed state of the claim, written by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxClaimStatus {
    /// The conditions `Ready` and `Finished`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The Sandbox the claim got.
    ///
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub sandbox: ClaimSandboxStatus,
}
