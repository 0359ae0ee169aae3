//! `extensions.agents.x-k8s.io/v1beta1` `SandboxWarmPool`.

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::object::{HasSpec, HasStatus};
use kube::core::{ApiResource, NamespaceResourceScope, Resource};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize, Serializer};

/// Field path the controllers index SandboxWarmPools by (the referenced template's name).
pub const TEMPLATE_REF_FIELD: &str = ".spec.sandboxTemplateRef.name";

/// Replicas when `spec.replicas` is unset (the API server applies the same default).
pub const DEFAULT_WARM_POOL_REPLICAS: i32 = 1;

/// Reference to a SandboxTemplate in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub struct SandboxTemplateRef {
    /// Name of the SandboxTemplate.
    pub name: String,
}

/// How unclaimed sandboxes made from an older version of the template are replaced.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum UpdateStrategyType {
    /// Delete stale unclaimed sandboxes right away.
    Recreate,
    /// Leave stale ones until they are deleted or claimed.
    #[default]
    OnReplenish,
}

/// How the pool replaces unclaimed sandboxes when its template changes.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct UpdateStrategy {
    /// `OnReplenish` (default): outdated sandboxes stay until claimed or deleted; `Recreate`: they
    /// are replaced at once.
    #[serde(rename = "type", default)]
    pub type_: UpdateStrategyType,
}

/// How many ready sandboxes to keep, and from which template.
///
/// Spec of `extensions.agents.x-k8s.io/v1beta1` `SandboxWarmPool`. The CRD and `Resource` plumbing
/// is derived on the hidden `SandboxWarmPoolDefinition`;
/// [`SandboxWarmPool`] itself is written out so that its status is always serialized, as the
/// reference's Go type does (`status` has no `omitzero` there).
// kube-derive `printcolumn(...)` entries repeat keys such as `type_ = "string"` by design.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "extensions.agents.x-k8s.io",
    version = "v1beta1",
    kind = "SandboxWarmPool",
    root = "SandboxWarmPoolDefinition",
    attr = "doc(hidden)",
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
    /// Number of unclaimed sandboxes to keep ready (default 1).
    ///
    /// The API server defaults it to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 1))]
    pub replicas: Option<i32>,
    /// The SandboxTemplate (same namespace) the pool's sandboxes are made from.
    ///
    /// Required; always serialized.
    pub sandbox_template_ref: SandboxTemplateRef,
    /// How unclaimed sandboxes made from an older version of the template are replaced.
    ///
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

/// Observed state of the pool, written by the controller.
///
/// Zero values are not serialized here (as the reference's Go type); the controller's status
/// patch writes the two counts even when zero, so `kubectl get` shows `0` rather than a blank.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolStatus {
    /// Unclaimed sandboxes the pool has, ready or not.
    ///
    /// The scale subresource's status path.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub replicas: i32,
    /// How many of them are Ready.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub ready_replicas: i32,
    /// Label selector that matches the pool's unclaimed sandboxes.
    ///
    /// The scale subresource's selector path.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// The `metadata.generation` the controller last acted on.
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

/// `extensions.agents.x-k8s.io/v1beta1` `SandboxWarmPool`.
///
/// Same shape and traits as a kube-derived resource (`Resource`, `HasSpec`, `HasStatus`,
/// `CustomResourceExt`), except that serialization always emits `status` (as `{}` when `None`),
/// like the reference.
#[derive(Deserialize, Clone, Debug, PartialEq)]
pub struct SandboxWarmPool {
    pub metadata: ObjectMeta,
    pub spec: SandboxWarmPoolSpec,
    #[serde(default)]
    pub status: Option<SandboxWarmPoolStatus>,
}

impl SandboxWarmPool {
    /// A pool named `name` with `spec` and no status.
    pub fn new(name: &str, spec: SandboxWarmPoolSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
            status: None,
        }
    }
}

impl Serialize for SandboxWarmPool {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let empty = SandboxWarmPoolStatus::default();
        let mut object = serializer.serialize_struct("SandboxWarmPool", 5)?;
        object.serialize_field("apiVersion", &Self::api_version(&()))?;
        object.serialize_field("kind", &Self::kind(&()))?;
        object.serialize_field("metadata", &self.metadata)?;
        object.serialize_field("spec", &self.spec)?;
        object.serialize_field("status", self.status.as_ref().unwrap_or(&empty))?;
        object.end()
    }
}

impl Resource for SandboxWarmPool {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        SandboxWarmPoolDefinition::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        SandboxWarmPoolDefinition::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        SandboxWarmPoolDefinition::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        SandboxWarmPoolDefinition::plural(dt)
    }

    fn api_version(dt: &()) -> Cow<'_, str> {
        SandboxWarmPoolDefinition::api_version(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for SandboxWarmPool {
    type Spec = SandboxWarmPoolSpec;

    fn spec(&self) -> &SandboxWarmPoolSpec {
        &self.spec
    }

    fn spec_mut(&mut self) -> &mut SandboxWarmPoolSpec {
        &mut self.spec
    }
}

impl HasStatus for SandboxWarmPool {
    type Status = SandboxWarmPoolStatus;

    fn status(&self) -> Option<&SandboxWarmPoolStatus> {
        self.status.as_ref()
    }

    fn status_mut(&mut self) -> &mut Option<SandboxWarmPoolStatus> {
        &mut self.status
    }
}

impl CustomResourceExt for SandboxWarmPool {
    fn crd() -> CustomResourceDefinition {
        SandboxWarmPoolDefinition::crd()
    }

    fn crd_name() -> &'static str {
        SandboxWarmPoolDefinition::crd_name()
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        SandboxWarmPoolDefinition::shortnames()
    }
}
