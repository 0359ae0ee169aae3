//! How the lists of each kind merge: the `listType`/`listMapKey` markers used by server-side apply
//! and the `patchStrategy`/`patchMergeKey` tags used by strategic merge patch, for the built-in
//! kinds devcluster serves. Lists not in the table are atomic (replaced whole).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use super::TypeMeta;

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// A list of objects identified by the values of these key fields, merged element by element.
    Map(Vec<String>),
}

/// Tells the merge code how lists at a path merge. `path` is the field names from the object root,
/// without list indices (e.g. `["spec", "containers", "env"]`). `None` means unknown: atomic.
pub trait FieldShape {
    fn list_type(&self, path: &[&str]) -> Option<ListType>;

    /// Whether the object at `path` is atomic (`x-kubernetes-map-type: atomic`,
    /// `+structType=atomic`): owned and replaced whole. For the path of a map-list, whether its
    /// elements are atomic structs (owned as the element alone, without their fields).
    fn is_atomic_map(&self, _path: &[&str]) -> bool {
        false
    }

    /// What the kind's empty object looks like when serialized: the objects that exist even when
    /// nothing is set (for built-in kinds, the non-pointer structs such as `spec` and `status`).
    /// An update that creates an object owns the objects it adds beyond these.
    fn zero_object(&self) -> Value {
        json!({"metadata": {}})
    }
}

/// Any closure from a path to a list type is a shape (e.g. one reading a CRD schema).
impl<F: Fn(&[&str]) -> Option<ListType>> FieldShape for F {
    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        self(path)
    }
}

/// A shape in which every list is atomic (what merge patch does to every list).
#[derive(Debug, Clone, Copy, Default)]
pub struct AtomicShape;

impl FieldShape for AtomicShape {
    fn list_type(&self, _path: &[&str]) -> Option<ListType> {
        None
    }
}

/// The strategic-merge-patch strategy of one list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchStrategy<'a> {
    /// `patchStrategy:"merge"` on a list of scalars.
    MergePrimitives,
    /// `patchStrategy:"merge"` with `patchMergeKey`.
    MergeByKey(&'a str),
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// dotted path relative to the entry's base
    path: &'static str,
    /// `listMapKey`s for server-side apply (empty: a set; see `set`)
    map_keys: &'static [&'static str],
    /// `listType=set`
    set: bool,
    /// strategic merge patch merge key (`None` with `set`: merge primitives; `None` otherwise: replace)
    smp_key: Option<&'static str>,
}

const fn map(path: &'static str, keys: &'static [&'static str], smp_key: &'static str) -> Entry {
    Entry {
        path,
        map_keys: keys,
        set: false,
        smp_key: Some(smp_key),
    }
}

const fn map_no_smp(path: &'static str, keys: &'static [&'static str]) -> Entry {
    Entry {
        path,
        map_keys: keys,
        set: false,
        smp_key: None,
    }
}

const fn set(path: &'static str) -> Entry {
    Entry {
        path,
        map_keys: &[],
        set: true,
        smp_key: None,
    }
}

const OBJECT_META: &[Entry] = &[map("ownerReferences", &["uid"], "uid"), set("finalizers")];

const CONTAINER: &[Entry] = &[
    map("ports", &["containerPort", "protocol"], "containerPort"),
    map("env", &["name"], "name"),
    map("volumeMounts", &["mountPath"], "mountPath"),
    map("volumeDevices", &["devicePath"], "devicePath"),
    map_no_smp("resources.claims", &["name"]),
];

const POD_SPEC: &[Entry] = &[
    map("volumes", &["name"], "name"),
    map("imagePullSecrets", &["name"], "name"),
    map("hostAliases", &["ip"], "ip"),
    map(
        "topologySpreadConstraints",
        &["topologyKey", "whenUnsatisfiable"],
        "topologyKey",
    ),
    map("resourceClaims", &["name"], "name"),
    map("schedulingGates", &["name"], "name"),
];

const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

const POD_STATUS: &[Entry] = &[
    map("conditions", &["type"], "type"),
    map("podIPs", &["ip"], "ip"),
    map("hostIPs", &["ip"], "ip"),
    map_no_smp("resourceClaimStatuses", &["name"]),
];

/// Atomic structs and maps inside a pod spec (`+structType=atomic`, `+mapType=atomic`).
const POD_SPEC_ATOMIC: &[&str] = &[
    "nodeSelector",
    "imagePullSecrets",
    "containers.env.valueFrom.configMapKeyRef",
    "containers.env.valueFrom.secretKeyRef",
    "containers.env.valueFrom.fieldRef",
    "containers.env.valueFrom.resourceFieldRef",
    "initContainers.env.valueFrom.configMapKeyRef",
    "initContainers.env.valueFrom.secretKeyRef",
    "initContainers.env.valueFrom.fieldRef",
    "initContainers.env.valueFrom.resourceFieldRef",
];

const CONDITIONS: &[Entry] = &[map("conditions", &["type"], "type")];

const SERVICE_SPEC: &[Entry] = &[map("ports", &["port", "protocol"], "port")];

const SERVICE_ACCOUNT: &[Entry] = &[map("secrets", &["name"], "name")];

/// The shape of a built-in kind: its list types and strategic merge keys.
#[derive(Debug, Clone, Default)]
pub struct BuiltinShape {
    entries: Vec<(Vec<String>, Entry)>,
    atomic_maps: Vec<Vec<String>>,
    zero: Value,
}

impl BuiltinShape {
    fn add(&mut self, base: &[&str], entries: &[Entry]) {
        for entry in entries {
            let mut path: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            path.extend(entry.path.split('.').map(str::to_string));
            self.entries.push((path, *entry));
        }
    }

    fn atomic(&mut self, base: &[&str], paths: &[&str]) {
        for path in paths {
            let mut full: Vec<String> = base.iter().map(|s| s.to_string()).collect();
            full.extend(path.split('.').map(str::to_string));
            self.atomic_maps.push(full);
        }
    }

    fn add_pod_spec(&mut self, base: &[&str]) {
        self.add(base, POD_SPEC);
        self.atomic(base, POD_SPEC_ATOMIC);
        for list in CONTAINER_LISTS {
            let mut entry_base = base.to_vec();
            entry_base.push(list);
            self.entries.push((
                entry_base.iter().map(|s| s.to_string()).collect(),
                map(list, &["name"], "name"),
            ));
            self.add(&entry_base, CONTAINER);
        }
    }

    fn lookup(&self, path: &[&str]) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|(p, _)| p.len() == path.len() && p.iter().zip(path).all(|(a, b)| a == b))
            .map(|(_, e)| e)
    }

    /// The strategic merge patch strategy of the list at `path` (`None`: replace).
    pub(crate) fn patch_strategy(&self, path: &[&str]) -> Option<PatchStrategy<'_>> {
        let entry = self.lookup(path)?;
        match entry.smp_key {
            Some(key) => Some(PatchStrategy::MergeByKey(key)),
            None if entry.set => Some(PatchStrategy::MergePrimitives),
            None => None,
        }
    }
}

impl FieldShape for BuiltinShape {
    fn list_type(&self, path: &[&str]) -> Option<ListType> {
        let entry = self.lookup(path)?;
        if entry.set {
            Some(ListType::Set)
        } else {
            Some(ListType::Map(
                entry.map_keys.iter().map(|k| k.to_string()).collect(),
            ))
        }
    }

    fn is_atomic_map(&self, path: &[&str]) -> bool {
        self.atomic_maps
            .iter()
            .any(|p| p.len() == path.len() && p.iter().zip(path).all(|(a, b)| a == b))
    }

    fn zero_object(&self) -> Value {
        if self.zero.is_null() {
            json!({"metadata": {}})
        } else {
            self.zero.clone()
        }
    }
}

/// The shape of a built-in kind. Every kind gets the `metadata` rules (ownerReferences by `uid`,
/// finalizers as a set); unknown kinds get nothing more, so their other lists are atomic.
pub fn builtin_shape(type_meta: &TypeMeta) -> BuiltinShape {
    let mut shape = BuiltinShape::default();
    shape.add(&["metadata"], OBJECT_META);
    let pod_template_zero = json!({"metadata": {}, "spec": {"containers": null}});
    shape.zero = match (type_meta.group(), type_meta.kind.as_str()) {
        ("", "Pod") => {
            shape.add_pod_spec(&["spec"]);
            shape.add(&["status"], POD_STATUS);
            json!({"metadata": {}, "spec": {"containers": null}, "status": {}})
        }
        ("", "PodTemplate") => {
            shape.add(&["template", "metadata"], OBJECT_META);
            shape.add_pod_spec(&["template", "spec"]);
            json!({"metadata": {}, "template": pod_template_zero})
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            shape.add(&["spec", "template", "metadata"], OBJECT_META);
            shape.add_pod_spec(&["spec", "template", "spec"]);
            shape.add(&["status"], CONDITIONS);
            shape.atomic(&["spec"], &["selector"]);
            let mut spec = json!({"selector": null, "template": pod_template_zero});
            if type_meta.kind == "Deployment" {
                spec["strategy"] = json!({});
            }
            json!({"metadata": {}, "spec": spec, "status": {}})
        }
        ("", "Service") => {
            shape.add(&["spec"], SERVICE_SPEC);
            shape.add(&["status"], CONDITIONS);
            shape.atomic(&["spec"], &["selector"]);
            json!({"metadata": {}, "spec": {}, "status": {"loadBalancer": {}}})
        }
        ("", "PersistentVolumeClaim") => {
            shape.add(&["status"], CONDITIONS);
            shape.atomic(&["spec"], &["selector", "dataSource", "dataSourceRef"]);
            json!({"metadata": {}, "spec": {"resources": {}}, "status": {}})
        }
        ("", "Namespace" | "Node") => {
            shape.add(&["status"], CONDITIONS);
            json!({"metadata": {}, "spec": {}, "status": {}})
        }
        ("", "ServiceAccount") => {
            shape.add(&[], SERVICE_ACCOUNT);
            shape.atomic(&[], &["secrets"]);
            json!({"metadata": {}})
        }
        ("", "Event") => {
            shape.atomic(&[], &["involvedObject", "related"]);
            json!({"metadata": {}, "involvedObject": {}, "source": {}})
        }
        ("events.k8s.io", "Event") => {
            shape.atomic(&[], &["regarding", "related"]);
            json!({"metadata": {}, "regarding": {}, "deprecatedSource": {}})
        }
        ("networking.k8s.io", "NetworkPolicy") => {
            shape.atomic(&["spec"], &["podSelector"]);
            json!({"metadata": {}, "spec": {"podSelector": {}}})
        }
        ("coordination.k8s.io", "Lease") => json!({"metadata": {}, "spec": {}}),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            json!({"metadata": {}, "roleRef": {}})
        }
        ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => {
            json!({"metadata": {}, "rules": null})
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            shape.add(&["status"], CONDITIONS);
            json!({"metadata": {}, "spec": {"names": {}, "versions": null},
                   "status": {"acceptedNames": {}, "storedVersions": null}})
        }
        _ => json!({"metadata": {}}),
    };
    shape
}

/// [`builtin_shape`], built once per kind (group and kind: all it depends on) and shared, since
/// every write of a built-in kind, and the metadata of every custom resource write, needs one.
pub fn shared_builtin_shape(type_meta: &TypeMeta) -> Arc<BuiltinShape> {
    type Shapes = Mutex<HashMap<(String, String), Arc<BuiltinShape>>>;
    static SHAPES: OnceLock<Shapes> = OnceLock::new();
    let key = (type_meta.group().to_string(), type_meta.kind.clone());
    let mut shapes = SHAPES
        .get_or_init(Shapes::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    shapes
        .entry(key)
        .or_insert_with(|| Arc::new(builtin_shape(type_meta)))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_shape_of_a_kind_is_built_once_and_equals_a_fresh_one() {
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
            ("v1", "ConfigMap"),
            ("events.k8s.io/v1", "Event"),
            ("v1", "Event"),
            ("agents.x-k8s.io/v1beta1", "Sandbox"),
        ] {
            let type_meta = TypeMeta::new(api_version, kind);
            let shared = shared_builtin_shape(&type_meta);
            assert_eq!(
                format!("{:?}", *shared),
                format!("{:?}", builtin_shape(&type_meta)),
                "{api_version} {kind}"
            );
            assert!(Arc::ptr_eq(&shared, &shared_builtin_shape(&type_meta)));
        }
        // Another version of the same kind has the same shape.
        assert!(Arc::ptr_eq(
            &shared_builtin_shape(&TypeMeta::new("apps/v1", "Deployment")),
            &shared_builtin_shape(&TypeMeta::new("apps/v1beta2", "Deployment")),
        ));
    }

    #[test]
    fn pod_lists() {
        let pod = builtin_shape(&TypeMeta::new("v1", "Pod"));
        assert_eq!(
            pod.list_type(&["spec", "containers"]),
            Some(ListType::Map(vec!["name".into()]))
        );
        assert_eq!(
            pod.list_type(&["spec", "initContainers", "ports"]),
            Some(ListType::Map(vec![
                "containerPort".into(),
                "protocol".into()
            ]))
        );
        assert_eq!(
            pod.patch_strategy(&["spec", "containers", "ports"]),
            Some(PatchStrategy::MergeByKey("containerPort"))
        );
        assert_eq!(
            pod.list_type(&["metadata", "finalizers"]),
            Some(ListType::Set)
        );
        assert_eq!(
            pod.patch_strategy(&["metadata", "finalizers"]),
            Some(PatchStrategy::MergePrimitives)
        );
        assert_eq!(pod.list_type(&["spec", "tolerations"]), None);
        assert_eq!(pod.patch_strategy(&["spec", "tolerations"]), None);
        assert_eq!(
            pod.list_type(&["status", "conditions"]),
            Some(ListType::Map(vec!["type".into()]))
        );
    }

    #[test]
    fn deployment_template_is_a_pod_template() {
        let d = builtin_shape(&TypeMeta::new("apps/v1", "Deployment"));
        assert_eq!(
            d.list_type(&["spec", "template", "spec", "containers", "env"]),
            Some(ListType::Map(vec!["name".into()]))
        );
        assert_eq!(d.list_type(&["spec", "containers"]), None);
        assert!(d.is_atomic_map(&["spec", "selector"]));
        assert!(d.is_atomic_map(&["spec", "template", "spec", "nodeSelector"]));
        assert!(!d.is_atomic_map(&["spec", "template"]));
        assert_eq!(d.zero_object()["spec"]["strategy"], json!({}));
        let cm = builtin_shape(&TypeMeta::new("v1", "ConfigMap"));
        assert_eq!(
            cm.list_type(&["metadata", "ownerReferences"]),
            Some(ListType::Map(vec!["uid".into()]))
        );
    }
}
