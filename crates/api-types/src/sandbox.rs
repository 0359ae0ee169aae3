//! `agents.x-k8s.io/v1beta1` `Sandbox` and the building blocks shared with the extensions group
//! (`PodTemplate`, `PodMetadata`, `PersistentVolumeClaimTemplate`, `SandboxBlueprint`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of the core `Sandbox` kind.
pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// The hub version: served and stored (v1alpha1 is served too, see `crate::v1alpha1`).
pub const API_VERSION: &str = "v1beta1";

/// The CEL transition rule that makes `Sandbox.spec.volumeClaimTemplates` immutable.
pub const VOLUME_CLAIM_TEMPLATES_IMMUTABLE_RULE: &str = "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)";
/// The message the API server returns when the immutability rule fails.
pub const VOLUME_CLAIM_TEMPLATES_IMMUTABLE_MESSAGE: &str = "volumeClaimTemplates is immutable";

/// Schema transform for struct fields that deserialize with `#[serde(default)]` but have no
/// `default` in the reference CRD (Go emits them always, the API server does not default them).
pub(crate) fn without_schema_default(schema: &mut schemars::Schema) {
    schema.remove("default");
}

/// Labels and annotations for the Pod (or, in a claim, merged into the Sandbox's pod template).
/// Only these two maps exist: the Pod's name is chosen by the controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl PodMetadata {
    /// True when there are neither labels nor annotations.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

/// The Pod a Sandbox runs: a full core/v1 `PodSpec` plus labels and annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PodTemplate {
    /// The Pod's spec.
    pub spec: PodSpec,
    /// Labels/annotations copied to the Pod. Always serialized (possibly as `{}`), like the
    /// reference does.
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub metadata: PodMetadata,
}

/// Metadata of a PVC template: a name (used for override-by-name merging) plus labels and
/// annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EmbeddedObjectMetadata {
    /// Name of the claim template; empty means unset.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// One PVC the controller creates for a sandbox.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PersistentVolumeClaimTemplate {
    /// Always serialized (possibly as `{}`).
    #[serde(default)]
    #[schemars(transform = without_schema_default)]
    pub metadata: EmbeddedObjectMetadata,
    pub spec: PersistentVolumeClaimSpec,
}

/// The part of a Sandbox that a SandboxTemplate also carries: what to run, with which volumes,
/// and whether to manage a headless Service. Inlined (flattened) on the wire.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxBlueprint {
    pub pod_template: PodTemplate,
    /// PVC templates. An empty list is not serialized (same as absent).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub volume_claim_templates: Vec<PersistentVolumeClaimTemplate>,
    /// Tri-state headless Service management: `Some(true)` create/adopt, `Some(false)` delete
    /// the owned one, `None` keep a pre-existing Service but never create one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,
}

/// Desired state of a Sandbox (intent only; observed state is in the conditions).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OperatingMode {
    /// Keep a backing Pod (and Service if requested).
    #[default]
    Running,
    /// Delete the Pod; keep the Sandbox object and its PVCs.
    Suspended,
}

impl OperatingMode {
    pub fn as_str(self) -> &'static str {
        match self {
            OperatingMode::Running => "Running",
            OperatingMode::Suspended => "Suspended",
        }
    }
}

/// What happens to a Sandbox object when its `shutdownTime` is reached.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ShutdownPolicy {
    /// Delete the Sandbox object once its resources are gone.
    Delete,
    /// Keep the object with `Ready=False`/`SandboxExpired`.
    #[default]
    Retain,
}

impl ShutdownPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ShutdownPolicy::Delete => "Delete",
            ShutdownPolicy::Retain => "Retain",
        }
    }
}

/// Spec of `agents.x-k8s.io/v1beta1` `Sandbox`.
// kube-derive `printcolumn(...)` entries repeat keys such as `type_ = "string"` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "agents.x-k8s.io",
    version = "v1beta1",
    kind = "Sandbox",
    plural = "sandboxes",
    singular = "sandbox",
    shortname = "sandbox",
    namespaced,
    status = "SandboxStatus",
    derive = "PartialEq",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Ready')].status"
    ),
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": VOLUME_CLAIM_TEMPLATES_IMMUTABLE_RULE,
    "message": VOLUME_CLAIM_TEMPLATES_IMMUTABLE_MESSAGE,
}]))]
pub struct SandboxSpec {
    /// `podTemplate`, `volumeClaimTemplates`, `service`.
    #[serde(flatten)]
    pub blueprint: SandboxBlueprint,
    /// Absolute expiry instant; `None` never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<Time>,
    /// Policy at expiry; the API server defaults it to `Retain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Retain"))]
    pub shutdown_policy: Option<ShutdownPolicy>,
    /// `Running` or `Suspended`; the API server defaults it to `Running`. `None` is not
    /// serialized (like Go's empty string), so a writer that leaves it unset never takes
    /// ownership of the field away from the user (server-side apply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Running"))]
    pub operating_mode: Option<OperatingMode>,
}

impl SandboxSpec {
    /// The operating mode in force (`Running` when unset).
    pub fn effective_operating_mode(&self) -> OperatingMode {
        self.operating_mode.unwrap_or_default()
    }

    /// The policy that applies at expiry (`Retain` when unset).
    pub fn effective_shutdown_policy(&self) -> ShutdownPolicy {
        self.shutdown_policy.unwrap_or_default()
    }
}

/// Observed state of a Sandbox. Empty strings and lists are not serialized.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// `<service>.<namespace>.svc.<clusterDomain>`; empty when there is no Service.
    #[serde(
        rename = "serviceFQDN",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub service_fqdn: String,
    /// Name of the headless Service; empty when none exists.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub service: String,
    /// `Ready`, `Suspended`, `PodScheduled`, `Finished`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Label selector string for the sandbox's Pod (`status.selector` on the wire).
    #[serde(rename = "selector", default, skip_serializing_if = "String::is_empty")]
    pub label_selector: String,
    /// IPs of the backing Pod.
    #[serde(rename = "podIPs", default, skip_serializing_if = "Vec::is_empty")]
    pub pod_ips: Vec<String>,
    /// Node of the backing Pod.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub node_name: String,
}

impl SandboxStatus {
    /// True when nothing would be serialized.
    pub fn is_empty(&self) -> bool {
        *self == SandboxStatus::default()
    }
}
