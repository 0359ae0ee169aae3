//! The Pod as the controller caches it: metadata, the node name, and the status fields it reads
//! (phase, conditions, IPs). It is deserialized straight from the watch (and from the responses
//! to the controller's Pod creates and reads, `reconcile::pod_step`), so the rest of a Pod
//! (its spec, container statuses) is skipped by the parser instead of being allocated and
//! dropped: freed pieces of thousands of Pods would otherwise stay scattered in the heap.
//!
//! Pod writes are merge patches of labels, annotations and owner references only, so nothing
//! left out here is ever written back.

use std::borrow::Cow;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodCondition, PodIP, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct CachedPod {
    /// Decoded without `managedFields` ([`controller_common::lean`]).
    #[serde(default, deserialize_with = "controller_common::lean::object_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<CachedPodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<CachedPodStatus>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedPodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodCondition>>,
    #[serde(default, rename = "podIP", skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    #[serde(default, rename = "podIPs", skip_serializing_if = "Option::is_none")]
    pub pod_ips: Option<Vec<PodIP>>,
}

impl kube::Resource for CachedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl CachedPod {
    /// Drops what the parser could not skip: the conditions not read (managedFields are never
    /// decoded; clearing them keeps a hand-built `CachedPod` to the same shape).
    pub fn slim(&mut self) {
        self.metadata.managed_fields = None;
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| c.type_ == "PodScheduled" || c.type_ == "Ready");
        }
    }

    /// The cached fields as a `Pod` (everything else unset).
    pub fn to_pod(&self) -> Pod {
        Pod {
            metadata: self.metadata.clone(),
            spec: Some(PodSpec {
                node_name: self.spec.as_ref().and_then(|s| s.node_name.clone()),
                ..Default::default()
            }),
            status: self.status.as_ref().map(|s| PodStatus {
                phase: s.phase.clone(),
                conditions: s.conditions.clone(),
                pod_ip: s.pod_ip.clone(),
                pod_ips: s.pod_ips.clone(),
                ..Default::default()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_pod_keeps_metadata_node_and_the_status_fields_read() {
        let mut cached: CachedPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                         "managedFields": [{"manager": "x"}],
                         "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1",
                             "kind": "Sandbox", "name": "p", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "node-7", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                       "hostIP": "10.0.0.1", "qosClass": "BestEffort",
                       "conditions": [
                           {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                           {"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "False", "message": "probe"}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "x",
                           "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        assert_eq!(
            cached.metadata.managed_fields, None,
            "never decoded, not only dropped"
        );
        cached.slim();
        let pod = serde_json::to_value(cached.to_pod()).unwrap();
        assert_eq!(
            pod,
            serde_json::json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b"},
                             "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1",
                                 "kind": "Sandbox", "name": "p", "uid": "u", "controller": true}]},
                "spec": {"nodeName": "node-7", "containers": []},
                "status": {"phase": "Running", "podIP": "127.0.0.1",
                           "podIPs": [{"ip": "127.0.0.1"}],
                           "conditions": [
                               {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                               {"type": "Ready", "status": "False", "message": "probe"}]}
            })
        );
    }

    #[test]
    fn it_is_addressed_like_a_pod() {
        use kube::Resource;
        assert_eq!(
            CachedPod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert_eq!(CachedPod::api_version(&()), "v1");
    }
}
