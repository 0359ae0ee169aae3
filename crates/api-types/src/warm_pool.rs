//! `extensions.agents.x-k8s.io/v1beta1` `SandboxWarmPool`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Replicas when `spec.replicas` is unset (the API server applies the same default).
pub const DEFAULT_WARM_POOL_REPLICAS: i32 = 1;

/// Reference to a SandboxTemplate in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct SandboxTemplateRef {
    pub name: String,
}

/// How stale unclaimed sandboxes are replaced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum UpdateStrategyType {
    /// Delete stale unclaimed sandboxes right away.
    Recreate,
    /// Leave stale ones until they are deleted or claimed.
    #[default]
    OnReplenish,
}

/// `spec.updateStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct UpdateStrategy {
    #[serde(rename = "type", default)]
    pub type_: UpdateStrategyType,
}

/// Spec of `extensions.agents.x-k8s.io/v1beta1` `SandboxWarmPool`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
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
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolSpec {
    /// Desired number of unclaimed sandboxes; the API server defaults it to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub replicas: Option<i32>,
    /// Always serialized.
    #[serde(default)]
    pub sandbox_template_ref: SandboxTemplateRef,
    /// `None` is treated as `OnReplenish`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
}

impl SandboxWarmPoolSpec {
    /// `spec.replicas`, or the default 1 when unset.
    pub fn desired_replicas(&self) -> i32 {
        self.replicas.unwrap_or(DEFAULT_WARM_POOL_REPLICAS)
    }

    /// The update strategy in force (`OnReplenish` when unset).
    pub fn effective_update_strategy(&self) -> UpdateStrategyType {
        self.update_strategy
            .as_ref()
            .map(|s| s.type_)
            .unwrap_or_default()
    }
}

/// Observed state of a SandboxWarmPool. Zero values are not serialized.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    /// Active pool sandboxes (scale status path).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// How many of those are `Ready=True`.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_replicas: i32,
    /// Label selector string (scale selector path).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// Last `metadata.generation` processed.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    #[schemars(range(min = 0))]
    pub observed_generation: i64,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
