//! The Sandbox as the controller caches it: metadata (without managedFields and kubectl's
//! last-applied copy), the spec fields a reconcile reads on every pass, and the status.
//!
//! Like [`crate::cached_pod`], it is deserialized straight from the watch: the Pod template's
//! spec (images, commands, env, probes, ...) is skipped by the parser instead of being allocated
//! and dropped. Of the template's containers only the ports are kept, and only when the Sandbox
//! asks for a Service (its ports come from them).
//!
//! The one exception: a Sandbox that no pass has written a status for yet (a new one, whose
//! Pod is still to be created) also keeps its template's spec as the watch delivered it
//! ([`CachedPodTemplate::pending_spec`], as JSON text), so that the Pod is created from
//! the object the pass reconciles without reading the Sandbox again. The first status write
//! (Ready, or progress held past its window) drops it, so at rest no Sandbox holds one.
//! Without it (a Pod deleted later, a resume from suspend) the create reads the whole Sandbox
//! from the API server first (`reconcile::pod_step`).
//!
//! A reconcile works on [`CachedSandbox::to_sandbox`]; the controller never writes the cached
//! object back (status and annotation writes are patches of the fields they change).

use std::borrow::Cow;

use api_types::{
    OperatingMode, PersistentVolumeClaimTemplate, PodMetadata, PodTemplate, Sandbox,
    SandboxBlueprint, SandboxSpec, SandboxStatus, ShutdownPolicy,
};
use controller_common::json_text::JsonText;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use serde::{Deserialize, Deserializer, Serialize};

/// kubectl's copy of the whole applied object (a second, unparsed copy of the spec).
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct CachedSandbox {
    /// Decoded without `managedFields` ([`controller_common::lean`]).
    #[serde(default, deserialize_with = "controller_common::lean::object_meta")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: CachedSandboxSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SandboxStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedSandboxSpec {
    #[serde(default)]
    pub pod_template: CachedPodTemplate,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<PersistentVolumeClaimTemplate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_policy: Option<ShutdownPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operating_mode: Option<OperatingMode>,
}

/// The template's labels and annotations (propagated to the Pod on every pass) and, of its
/// spec, what the Service's ports are computed from.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CachedPodTemplate {
    #[serde(default)]
    pub metadata: PodMetadata,
    #[serde(default)]
    pub spec: CachedPodTemplateSpec,
    /// The whole template spec, as the JSON text the watch delivered, while the Sandbox has no
    /// status yet (see the module documentation). Never serialized.
    #[serde(skip)]
    pub pending_spec: Option<JsonText>,
}

impl PartialEq for CachedPodTemplate {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata
            && self.spec == other.spec
            && json_value(self.pending_spec.as_ref()) == json_value(other.pending_spec.as_ref())
    }
}

/// JSON text compared by value (key order aside).
fn json_value(text: Option<&JsonText>) -> Option<serde_json::Value> {
    text.map(|t| serde_json::from_str(t.get()).unwrap_or(serde_json::Value::Null))
}

/// The template as it arrives: its spec is taken as text once (written as it is parsed, see
/// [`JsonText`]), and the reduced form is parsed from that text.
#[derive(Deserialize)]
struct WireTemplate {
    #[serde(default)]
    metadata: PodMetadata,
    #[serde(default)]
    spec: Option<JsonText>,
}

impl<'de> Deserialize<'de> for CachedPodTemplate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireTemplate::deserialize(deserializer)?;
        let spec = match &wire.spec {
            Some(text) => serde_json::from_str(text.get()).map_err(serde::de::Error::custom)?,
            None => CachedPodTemplateSpec::default(),
        };
        Ok(CachedPodTemplate {
            metadata: wire.metadata,
            spec,
            pending_spec: wire.spec,
        })
    }
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<CachedContainer>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init_containers: Vec<CachedContainer>,
}

/// A container reduced to its ports (and, for init containers, whether it is a sidecar).
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedContainer {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
}

impl Resource for CachedSandbox {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Sandbox::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Sandbox::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Sandbox::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Sandbox::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl CachedSandbox {
    /// The key the reconciler's per-Sandbox memory uses (name and namespace).
    pub fn object_ref(&self) -> ObjectRef<Sandbox> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        match self.metadata.namespace.as_deref() {
            Some(ns) => ObjectRef::new(name).within(ns),
            None => ObjectRef::new(name),
        }
    }

    /// The key of this object in the Sandbox store.
    pub fn cache_key(&self) -> ObjectRef<CachedSandbox> {
        let name = self.metadata.name.as_deref().unwrap_or_default();
        match self.metadata.namespace.as_deref() {
            Some(ns) => ObjectRef::new(name).within(ns),
            None => ObjectRef::new(name),
        }
    }

    /// Drops what the parser could not skip: the last-applied annotation, the template spec text
    /// once a status was written, and, unless a Service is wanted, the container ports (and
    /// managedFields, which only a [`Self::from_sandbox`] copy can carry: the watch never decodes
    /// them).
    pub fn slim(&mut self) {
        self.metadata.managed_fields = None;
        if !self.awaits_first_status() {
            self.spec.pod_template.pending_spec = None;
        }
        if let Some(annotations) = self.metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED_ANNOTATION);
        }
        if self.spec.service != Some(true) {
            self.spec.pod_template.spec = CachedPodTemplateSpec::default();
        }
    }

    /// No pass has written a status yet: the Pod is (normally) still to be created.
    pub fn awaits_first_status(&self) -> bool {
        self.status.as_ref().is_none_or(|s| s.conditions.is_empty())
    }

    /// The template's whole spec as the watch delivered it, kept only while
    /// [`Self::awaits_first_status`] (see the module documentation).
    pub fn pending_pod_spec(&self) -> Option<&str> {
        self.spec
            .pod_template
            .pending_spec
            .as_ref()
            .map(JsonText::get)
    }

    /// The cached form of a whole `Sandbox` (what the watch would have produced, before
    /// [`CachedSandbox::slim`]).
    pub fn from_sandbox(sandbox: &Sandbox) -> Self {
        let blueprint = &sandbox.spec.blueprint;
        let container = |c: &Container| CachedContainer {
            name: c.name.clone(),
            restart_policy: c.restart_policy.clone(),
            ports: c.ports.clone(),
        };
        let template = &blueprint.pod_template.spec;
        CachedSandbox {
            metadata: sandbox.metadata.clone(),
            spec: CachedSandboxSpec {
                pod_template: CachedPodTemplate {
                    metadata: blueprint.pod_template.metadata.clone(),
                    spec: CachedPodTemplateSpec {
                        containers: template.containers.iter().map(container).collect(),
                        init_containers: template
                            .init_containers
                            .iter()
                            .flatten()
                            .map(container)
                            .collect(),
                    },
                    pending_spec: serde_json::to_string(template)
                        .ok()
                        .map(|text| JsonText(text.into_boxed_str())),
                },
                volume_claim_templates: blueprint.volume_claim_templates.clone(),
                service: blueprint.service,
                shutdown_time: sandbox.spec.shutdown_time.clone(),
                shutdown_policy: sandbox.spec.shutdown_policy,
                operating_mode: sandbox.spec.operating_mode,
            },
            status: sandbox.status.clone(),
        }
    }

    /// The cached fields as a `Sandbox`. Its Pod template's spec holds only the containers'
    /// names and ports (and the init containers' restart policies): enough for the Service,
    /// never enough to create a Pod from.
    pub fn to_sandbox(&self) -> Sandbox {
        let spec = &self.spec;
        let container = |c: &CachedContainer| Container {
            name: c.name.clone(),
            restart_policy: c.restart_policy.clone(),
            ports: c.ports.clone(),
            ..Default::default()
        };
        let init: Vec<Container> = spec
            .pod_template
            .spec
            .init_containers
            .iter()
            .map(container)
            .collect();
        let pod_spec = PodSpec {
            containers: spec
                .pod_template
                .spec
                .containers
                .iter()
                .map(container)
                .collect(),
            init_containers: (!init.is_empty()).then_some(init),
            ..Default::default()
        };
        let mut sandbox = Sandbox::new(
            "",
            SandboxSpec {
                blueprint: SandboxBlueprint {
                    pod_template: PodTemplate {
                        spec: pod_spec,
                        metadata: spec.pod_template.metadata.clone(),
                    },
                    volume_claim_templates: spec.volume_claim_templates.clone(),
                    service: spec.service,
                },
                shutdown_time: spec.shutdown_time.clone(),
                shutdown_policy: spec.shutdown_policy,
                operating_mode: spec.operating_mode,
            },
        );
        sandbox.metadata = self.metadata.clone();
        sandbox.status = self.status.clone();
        sandbox
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn watched(service: Option<bool>) -> serde_json::Value {
        json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": "sb", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                         "generation": 2, "labels": {"a": "b"},
                         "annotations": {"agents.x-k8s.io/pod-name": "p",
                                         LAST_APPLIED_ANNOTATION: "{\"a whole\": \"copy\"}"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {
                "podTemplate": {
                    "metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}},
                    "spec": {
                        "containers": [{"name": "agent", "image": "alpine", "command": ["sleep"],
                                        "env": [{"name": "E", "value": "v"}],
                                        "ports": [{"containerPort": 8080, "name": "http"}]}],
                        "initContainers": [{"name": "side", "image": "i", "restartPolicy": "Always",
                                            "ports": [{"containerPort": 9090}]}],
                        "terminationGracePeriodSeconds": 1
                    }
                },
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                          "spec": {"accessModes": ["ReadWriteOnce"]}}],
                "service": service,
                "shutdownTime": "2030-01-01T00:00:00Z",
                "shutdownPolicy": "Delete",
                "operatingMode": "Running"
            },
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady",
                                       "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                                       "observedGeneration": 2}],
                       "podIPs": ["10.0.0.1"], "nodeName": "node-1", "selector": "s=h"}
        })
    }

    fn cached(value: serde_json::Value) -> CachedSandbox {
        let mut c: CachedSandbox = serde_json::from_value(value).expect("a valid Sandbox");
        c.slim();
        c
    }

    #[test]
    fn a_cached_sandbox_keeps_what_a_pass_reads_and_drops_the_pod_spec() {
        let full: Sandbox = serde_json::from_value(watched(None)).expect("a valid Sandbox");
        let sandbox = cached(watched(None)).to_sandbox();
        assert_eq!(sandbox.metadata.managed_fields, None);
        assert_eq!(
            sandbox.metadata.annotations,
            Some([("agents.x-k8s.io/pod-name".to_string(), "p".to_string())].into())
        );
        assert_eq!(sandbox.metadata.labels, full.metadata.labels);
        assert_eq!(sandbox.metadata.uid, full.metadata.uid);
        assert_eq!(sandbox.metadata.generation, Some(2));
        assert_eq!(sandbox.status, full.status);
        assert_eq!(
            sandbox.spec.blueprint.pod_template.metadata,
            full.spec.blueprint.pod_template.metadata
        );
        assert_eq!(
            sandbox.spec.blueprint.volume_claim_templates,
            full.spec.blueprint.volume_claim_templates
        );
        assert_eq!(sandbox.spec.shutdown_time, full.spec.shutdown_time);
        assert_eq!(sandbox.spec.shutdown_policy, full.spec.shutdown_policy);
        assert_eq!(sandbox.spec.operating_mode, full.spec.operating_mode);
        assert_eq!(sandbox.spec.blueprint.pod_template.spec, PodSpec::default());
    }

    #[test]
    fn with_a_service_the_container_ports_are_kept_and_give_the_same_service_ports() {
        let full: Sandbox = serde_json::from_value(watched(Some(true))).expect("a valid Sandbox");
        let sandbox = cached(watched(Some(true))).to_sandbox();
        let spec = &sandbox.spec.blueprint.pod_template.spec;
        assert_eq!(spec.containers.len(), 1);
        assert_eq!(spec.containers[0].image, None, "no more than the ports");
        assert_eq!(spec.containers[0].env, None);
        let ports = crate::desired::service::service_ports(spec);
        assert_eq!(
            ports,
            crate::desired::service::service_ports(&full.spec.blueprint.pod_template.spec)
        );
        assert_eq!(
            ports.map(|p| p.len()),
            Some(2),
            "container and sidecar port"
        );
    }

    #[test]
    fn the_cached_form_of_a_sandbox_is_what_the_watch_gives() {
        let full: Sandbox = serde_json::from_value(watched(Some(true))).expect("a valid Sandbox");
        let mut converted = CachedSandbox::from_sandbox(&full);
        converted.slim();
        assert_eq!(converted, cached(watched(Some(true))));
    }

    #[test]
    fn the_watch_never_decodes_managed_fields() {
        let decoded: CachedSandbox =
            serde_json::from_value(watched(None)).expect("a valid Sandbox");
        assert_eq!(decoded.metadata.managed_fields, None);
        assert_eq!(decoded.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(decoded.metadata.generation, Some(2));
    }

    #[test]
    fn it_is_addressed_like_a_sandbox() {
        assert_eq!(
            CachedSandbox::url_path(&(), Some("ns")),
            Sandbox::url_path(&(), Some("ns"))
        );
        assert_eq!(CachedSandbox::api_version(&()), Sandbox::api_version(&()));
        assert_eq!(CachedSandbox::kind(&()), "Sandbox");
    }
}
