//! The resource registry: which kinds are served, under which group, version and plural, and
//! how they behave (scope, subresources, generation, deletion answer).
//!
//! Built-in kinds are a fixed table; custom resources are added and removed as
//! CustomResourceDefinitions are written (see `crd.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

/// How a kind's `/scale` subresource maps onto the object (CRD `subresources.scale`).
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// One served resource (group + plural), with every version it is served at.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    /// Served versions, storage/preferred version first.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub has_status: bool,
    pub scale: Option<ScaleSpec>,
    /// `metadata.generation` is maintained (bumped when something outside metadata and status changes).
    pub tracks_generation: bool,
    /// DELETE answers with the object (pods, namespaces...) rather than a `Status` of success.
    pub delete_returns_object: bool,
    /// PUT without `metadata.resourceVersion` is allowed (built-in kinds) or rejected (custom resources).
    pub allow_unconditional_update: bool,
    /// PUT of a missing object creates it (leases, events, endpoints, services, RBAC kinds).
    pub allow_create_on_update: bool,
    /// Set when the kind is served from a CustomResourceDefinition: the CRD object.
    pub crd: Option<Arc<Value>>,
    /// Compiled schemas of a custom resource, by version.
    pub schemas: Vec<(String, Arc<crate::schema::StructuralSchema>)>,
    /// Subresources of a custom resource per served version (status, scale), when they differ
    /// between versions; empty for built-in kinds.
    pub version_subresources: Vec<(String, bool, Option<ScaleSpec>)>,
    /// Set when the objects are another resource's, stored in that resource's form and
    /// converted on the way in and out (`events.k8s.io/v1` Events are core Events).
    pub shared_storage: Option<SharedStorage>,
}

/// Resources served as a view of another resource's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedStorage {
    /// `events.k8s.io/v1` Events: stored as core `v1` Events (see `event_versions.rs`).
    EventsV1,
}

impl ResourceInfo {
    /// The store key of the resource, e.g. `pods` or `sandboxes.agents.x-k8s.io`.
    pub fn group_resource(&self) -> String {
        group_resource(&self.group, &self.plural)
    }

    /// The key the objects are stored under: the resource's own `group_resource`, or the
    /// resource whose objects it shares (`events.k8s.io` events are stored as `events`).
    pub fn storage_key(&self) -> String {
        match self.shared_storage {
            Some(SharedStorage::EventsV1) => "events".to_string(),
            None => self.group_resource(),
        }
    }

    /// The `apiVersion` of the stored form of the objects.
    pub fn stored_api_version(&self) -> String {
        match self.shared_storage {
            Some(SharedStorage::EventsV1) => "v1".to_string(),
            None => self.api_version(self.storage_version()),
        }
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.group, version)
        }
    }

    pub fn storage_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// [`ResourceInfo::schema_for`], shared: the same `Arc` for as long as the CRD is unchanged.
    pub fn shared_schema_for(
        &self,
        version: &str,
    ) -> Option<&Arc<crate::schema::StructuralSchema>> {
        self.schemas
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, s)| s)
    }

    pub fn schema_for(&self, version: &str) -> Option<&crate::schema::StructuralSchema> {
        self.schemas
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, s)| s.as_ref())
    }

    /// The resource as served at `version` (a CRD may declare subresources per version).
    pub fn at_version(self: &Arc<Self>, version: &str) -> Arc<Self> {
        match self
            .version_subresources
            .iter()
            .find(|(v, _, _)| v == version)
        {
            Some((_, status, scale)) if *status != self.has_status || *scale != self.scale => {
                let mut view = (**self).clone();
                view.has_status = *status;
                view.scale = scale.clone();
                Arc::new(view)
            }
            _ => self.clone(),
        }
    }

    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }

    /// The verbs discovery advertises.
    pub fn verbs(&self) -> Vec<&'static str> {
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

pub fn group_resource(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

/// The table of served kinds, shared by the handlers and updated on CRD writes.
#[derive(Debug, Default)]
pub struct Registry {
    inner: RwLock<BTreeMap<String, Arc<ResourceInfo>>>,
}

impl Registry {
    pub fn with_builtins() -> Self {
        let reg = Registry::default();
        for info in builtin_resources() {
            reg.insert(info);
        }
        reg
    }

    pub fn insert(&self, info: ResourceInfo) {
        let key = info.group_resource();
        self.write_map().insert(key, Arc::new(info));
    }

    pub fn remove(&self, group_resource: &str) {
        self.write_map().remove(group_resource);
    }

    fn write_map(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<ResourceInfo>>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read_map(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<ResourceInfo>>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `group` is one of the built-in API groups (the core group `""` included), as
    /// opposed to a group served for CustomResourceDefinitions or not served at all.
    pub fn is_builtin_group(&self, group: &str) -> bool {
        group.is_empty()
            || self
                .read_map()
                .values()
                .any(|info| !info.is_custom() && info.group == group)
    }

    /// The resource served at `group`/`version` under `plural`.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let map = self.read_map();
        let info = map.get(&group_resource(group, plural))?;
        info.versions
            .iter()
            .any(|v| v == version)
            .then(|| info.clone())
    }

    pub fn by_group_resource(&self, group_resource: &str) -> Option<Arc<ResourceInfo>> {
        self.read_map().get(group_resource).cloned()
    }

    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.read_map().values().cloned().collect()
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    has_status: bool,
    generation: bool,
    returns_object: bool,
}

const BUILTINS: &[Builtin] = &[
    b(
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        &["ns"],
        true,
        false,
        true,
    ),
    b("", "v1", "nodes", "Node", false, &["no"], true, false, true),
    b("", "v1", "pods", "Pod", true, &["po"], true, true, true),
    b(
        "",
        "v1",
        "services",
        "Service",
        true,
        &["svc"],
        true,
        false,
        true,
    ),
    b(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
        false,
        true,
    ),
    b(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
        false,
        true,
    ),
    b(
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        &["cm"],
        false,
        false,
        false,
    ),
    b(
        "",
        "v1",
        "secrets",
        "Secret",
        true,
        &[],
        false,
        false,
        false,
    ),
    b(
        "",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        false,
        false,
    ),
    b(
        "",
        "v1",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        false,
        false,
        false,
    ),
    b(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        false,
        false,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"],
        false,
        true,
        false,
    ),
    b(
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
        false,
        false,
    ),
    b(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
        &["hpa"],
        true,
        false,
        false,
    ),
    b(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
        true,
        false,
    ),
    b(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
        true,
        false,
    ),
    // Stored only: no controller creates them, but `kubectl describe deployment` and
    // `kubectl get all` list them.
    b(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
        true,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "Role",
        true,
        &[],
        false,
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
        false,
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
        false,
        false,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        true,
        false,
    ),
];

#[allow(clippy::too_many_arguments)]
const fn b(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    has_status: bool,
    generation: bool,
    returns_object: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        plural,
        kind,
        namespaced,
        short_names,
        has_status,
        generation,
        returns_object,
    }
}

fn builtin_resources() -> Vec<ResourceInfo> {
    BUILTINS
        .iter()
        .map(|b| ResourceInfo {
            group: b.group.to_string(),
            versions: vec![b.version.to_string()],
            plural: b.plural.to_string(),
            singular: b.kind.to_lowercase(),
            kind: b.kind.to_string(),
            list_kind: format!("{}List", b.kind),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
            categories: if matches!(
                b.plural,
                // The real `all` category (PVCs are not in it).
                "pods" | "services" | "deployments" | "replicasets" | "horizontalpodautoscalers"
            ) {
                vec!["all".to_string()]
            } else {
                vec![]
            },
            has_status: b.has_status,
            scale: matches!(b.plural, "deployments" | "replicasets").then(|| ScaleSpec {
                spec_replicas_path: ".spec.replicas".into(),
                status_replicas_path: ".status.replicas".into(),
                label_selector_path: None,
            }),
            tracks_generation: b.generation,
            delete_returns_object: b.returns_object,
            allow_unconditional_update: true,
            allow_create_on_update: matches!(
                (b.group, b.plural),
                ("coordination.k8s.io", "leases")
                    | ("", "events")
                    | ("events.k8s.io", "events")
                    | ("", "endpoints")
                    | ("", "services")
                    | ("rbac.authorization.k8s.io", _)
            ),
            crd: None,
            schemas: Vec::new(),
            version_subresources: Vec::new(),
            shared_storage: (b.group == "events.k8s.io").then_some(SharedStorage::EventsV1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_found_by_group_version_and_plural() {
        let reg = Registry::with_builtins();
        let pods = reg.lookup("", "v1", "pods").expect("pods served");
        assert_eq!(pods.kind, "Pod");
        assert!(pods.namespaced && pods.has_status);
        assert!(reg.lookup("", "v2", "pods").is_none());
        let leases = reg
            .lookup("coordination.k8s.io", "v1", "leases")
            .expect("leases");
        assert_eq!(leases.group_resource(), "leases.coordination.k8s.io");
        assert_eq!(leases.api_version("v1"), "coordination.k8s.io/v1");
    }
}
