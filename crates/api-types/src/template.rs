//! `extensions.agents.x-k8s.io/v1beta1` `SandboxTemplate`.

use k8s_openapi::api::networking::v1::{NetworkPolicyEgressRule, NetworkPolicyIngressRule};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sandbox::SandboxBlueprint;

/// The API group of the extension kinds.
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";

/// Whether the controller keeps a NetworkPolicy for the template's sandboxes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum NetworkPolicyManagement {
    /// The controller ensures the shared NetworkPolicy (custom rules or the secure default).
    #[default]
    Managed,
    /// The controller creates none and deletes one it owns.
    Unmanaged,
}

/// Whether claims may set environment variables (`spec.env`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum EnvVarsInjectionPolicy {
    /// Only names the template does not define.
    Allowed,
    /// New names added, existing names overwritten.
    Overrides,
    /// Any claim with env is rejected.
    #[default]
    Disallowed,
}

/// Whether claims may add volumes (`spec.volumeClaimTemplates`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum VolumeClaimTemplatesPolicy {
    /// A claim with any volume claim templates is rejected.
    #[default]
    Disallowed,
    /// Appended; name collisions with the template are rejected.
    Allowed,
    /// Same-name templates replace the template's; new names are appended.
    Overrides,
}

/// Ingress and egress rules of the NetworkPolicy the template's sandboxes share.
///
/// The restricted NetworkPolicySpec a template carries: only the rules. The pod selector and
/// policy types of the shared policy are owned by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SandboxNetworkPolicySpec {
    /// Incoming traffic to allow, as in a NetworkPolicy (`kubectl explain
    /// networkpolicy.spec.ingress`); empty allows none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// Outgoing traffic to allow, as in a NetworkPolicy (`kubectl explain
    /// networkpolicy.spec.egress`); empty allows none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress: Vec<NetworkPolicyEgressRule>,
}

/// The sandboxes made from this template, their network policy, and what claims may change.
///
/// Spec of `extensions.agents.x-k8s.io/v1beta1` `SandboxTemplate` (the kind has no status).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxTemplate",
    plural = "sandboxtemplates",
    singular = "sandboxtemplate",
    shortname = "sandboxtemplate",
    namespaced,
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplateSpec {
    /// `podTemplate`, `volumeClaimTemplates`, `service`.
    #[serde(flatten)]
    pub blueprint: SandboxBlueprint,
    /// Custom rules for the sandboxes' NetworkPolicy; unset means the secure default
    /// (docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<SandboxNetworkPolicySpec>,
    /// `Managed` (default): the controller keeps one NetworkPolicy for the template's sandboxes;
    /// `Unmanaged`: none.
    #[serde(default)]
    pub network_policy_management: NetworkPolicyManagement,
    /// Whether claims may set env: `Disallowed` (default), `Allowed` (new names only) or
    /// `Overrides` (also replace the template's).
    #[serde(default)]
    pub env_vars_injection_policy: EnvVarsInjectionPolicy,
    /// Whether claims may add volumeClaimTemplates: `Disallowed` (default), `Allowed` (new names
    /// only) or `Overrides` (same names replace the template's).
    #[serde(default)]
    pub volume_claim_templates_policy: VolumeClaimTemplatesPolicy,
}
