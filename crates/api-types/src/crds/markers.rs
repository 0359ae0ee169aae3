//! Schema facts of the embedded Kubernetes types that k8s-openapi's schemars output does not
//! carry: list and map semantics (`x-kubernetes-list-type`, `-list-map-keys`, `-map-type`),
//! API-server defaults, and the validations of `metav1.Condition`, `Quantity` and
//! `IntOrString`. They are facts of the Kubernetes 1.36 API (its `+listType`, `+default`,
//! `+structType` markers), which the reference's controller-gen output shows and the
//! `schema_parity` test checks path by path.
//!
//! [`apply`] runs on the fully inlined schema of each named type, innermost types first.

use serde_json::{Map, Value, json};

/// The validation pattern of a `resource.Quantity` string.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";
/// `metav1.Condition.type`: an optional DNS-subdomain prefix and a qualified name.
const CONDITION_TYPE_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";
/// `metav1.Condition.reason`: a CamelCase identifier.
const CONDITION_REASON_PATTERN: &str = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$";

/// Adds the Kubernetes facts known for the type named `type_name` (its schemars schema name) to
/// its schema.
pub(crate) fn apply(type_name: &str, schema: &mut Value) {
    match type_name {
        "io.k8s.api.core.v1.AzureDiskVolumeSource" => {
            default(schema, "fsType", json!("ext4"));
            default(schema, "readOnly", json!(false));
        }
        "io.k8s.api.core.v1.Capabilities" => {
            atomic_list(schema, "add");
            atomic_list(schema, "drop");
        }
        "io.k8s.api.core.v1.CephFSVolumeSource" => {
            atomic_list(schema, "monitors");
        }
        "io.k8s.api.core.v1.ConfigMapEnvSource" => {
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.ConfigMapKeySelector" => {
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.ConfigMapProjection" => {
            atomic_list(schema, "items");
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.ConfigMapVolumeSource" => {
            atomic_list(schema, "items");
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.Container" => {
            atomic_list(schema, "args");
            atomic_list(schema, "command");
            map_list(schema, "env", &["name"]);
            atomic_list(schema, "envFrom");
            map_list(schema, "ports", &["containerPort", "protocol"]);
            atomic_list(schema, "resizePolicy");
            atomic_list(schema, "restartPolicyRules");
            map_list(schema, "volumeDevices", &["devicePath"]);
            map_list(schema, "volumeMounts", &["mountPath"]);
        }
        "io.k8s.api.core.v1.ContainerPort" => {
            default(schema, "protocol", json!("TCP"));
        }
        "io.k8s.api.core.v1.ContainerRestartRuleOnExitCodes" => {
            set_list(schema, "values");
        }
        "io.k8s.api.core.v1.DownwardAPIProjection" => {
            atomic_list(schema, "items");
        }
        "io.k8s.api.core.v1.DownwardAPIVolumeSource" => {
            atomic_list(schema, "items");
        }
        "io.k8s.api.core.v1.EphemeralContainer" => {
            atomic_list(schema, "args");
            atomic_list(schema, "command");
            map_list(schema, "env", &["name"]);
            atomic_list(schema, "envFrom");
            map_list(schema, "ports", &["containerPort", "protocol"]);
            atomic_list(schema, "resizePolicy");
            atomic_list(schema, "restartPolicyRules");
            map_list(schema, "volumeDevices", &["devicePath"]);
            map_list(schema, "volumeMounts", &["mountPath"]);
        }
        "io.k8s.api.core.v1.ExecAction" => {
            atomic_list(schema, "command");
        }
        "io.k8s.api.core.v1.FCVolumeSource" => {
            atomic_list(schema, "targetWWNs");
            atomic_list(schema, "wwids");
        }
        "io.k8s.api.core.v1.FileKeySelector" => {
            default(schema, "optional", json!(false));
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.GRPCAction" => {
            default(schema, "service", json!(""));
        }
        "io.k8s.api.core.v1.HTTPGetAction" => {
            atomic_list(schema, "httpHeaders");
        }
        "io.k8s.api.core.v1.HostAlias" => {
            atomic_list(schema, "hostnames");
        }
        "io.k8s.api.core.v1.ISCSIVolumeSource" => {
            default(schema, "iscsiInterface", json!("default"));
            atomic_list(schema, "portals");
        }
        "io.k8s.api.core.v1.LocalObjectReference" => {
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.NodeAffinity" => {
            atomic_list(schema, "preferredDuringSchedulingIgnoredDuringExecution");
        }
        "io.k8s.api.core.v1.NodeSelector" => {
            atomic_list(schema, "nodeSelectorTerms");
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.NodeSelectorRequirement" => {
            atomic_list(schema, "values");
        }
        "io.k8s.api.core.v1.NodeSelectorTerm" => {
            atomic_list(schema, "matchExpressions");
            atomic_list(schema, "matchFields");
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.ObjectFieldSelector" => {
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.PersistentVolumeClaimSpec" => {
            atomic_list(schema, "accessModes");
        }
        "io.k8s.api.core.v1.PodAffinity" => {
            atomic_list(schema, "preferredDuringSchedulingIgnoredDuringExecution");
            atomic_list(schema, "requiredDuringSchedulingIgnoredDuringExecution");
        }
        "io.k8s.api.core.v1.PodAffinityTerm" => {
            atomic_list(schema, "matchLabelKeys");
            atomic_list(schema, "mismatchLabelKeys");
            atomic_list(schema, "namespaces");
        }
        "io.k8s.api.core.v1.PodAntiAffinity" => {
            atomic_list(schema, "preferredDuringSchedulingIgnoredDuringExecution");
            atomic_list(schema, "requiredDuringSchedulingIgnoredDuringExecution");
        }
        "io.k8s.api.core.v1.PodDNSConfig" => {
            atomic_list(schema, "nameservers");
            atomic_list(schema, "options");
            atomic_list(schema, "searches");
        }
        "io.k8s.api.core.v1.PodSecurityContext" => {
            atomic_list(schema, "supplementalGroups");
            atomic_list(schema, "sysctls");
        }
        "io.k8s.api.core.v1.PodSpec" => {
            map_list(schema, "containers", &["name"]);
            map_list(schema, "ephemeralContainers", &["name"]);
            map_list(schema, "hostAliases", &["ip"]);
            map_list(schema, "imagePullSecrets", &["name"]);
            map_list(schema, "initContainers", &["name"]);
            atomic_map(schema, "nodeSelector");
            atomic_list(schema, "readinessGates");
            map_list(schema, "resourceClaims", &["name"]);
            map_list(schema, "schedulingGates", &["name"]);
            atomic_list(schema, "tolerations");
            map_list(
                schema,
                "topologySpreadConstraints",
                &["topologyKey", "whenUnsatisfiable"],
            );
            map_list(schema, "volumes", &["name"]);
        }
        "io.k8s.api.core.v1.ProjectedVolumeSource" => {
            atomic_list(schema, "sources");
        }
        "io.k8s.api.core.v1.RBDVolumeSource" => {
            default(schema, "keyring", json!("/etc/ceph/keyring"));
            atomic_list(schema, "monitors");
            default(schema, "pool", json!("rbd"));
            default(schema, "user", json!("admin"));
        }
        "io.k8s.api.core.v1.ResourceFieldSelector" => {
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.ResourceRequirements" => {
            map_list(schema, "claims", &["name"]);
        }
        "io.k8s.api.core.v1.ScaleIOVolumeSource" => {
            default(schema, "fsType", json!("xfs"));
            default(schema, "storageMode", json!("ThinProvisioned"));
        }
        "io.k8s.api.core.v1.SecretEnvSource" => {
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.SecretKeySelector" => {
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.SecretProjection" => {
            atomic_list(schema, "items");
            optional_name(schema);
            atomic_struct(schema);
        }
        "io.k8s.api.core.v1.SecretVolumeSource" => {
            atomic_list(schema, "items");
        }
        "io.k8s.api.core.v1.TopologySpreadConstraint" => {
            atomic_list(schema, "matchLabelKeys");
        }
        "io.k8s.api.core.v1.TypedLocalObjectReference" => {
            atomic_struct(schema);
        }
        "io.k8s.api.networking.v1.IPBlock" => {
            atomic_list(schema, "except");
        }
        "io.k8s.api.networking.v1.NetworkPolicyEgressRule" => {
            atomic_list(schema, "ports");
            atomic_list(schema, "to");
        }
        "io.k8s.api.networking.v1.NetworkPolicyIngressRule" => {
            atomic_list(schema, "from");
            atomic_list(schema, "ports");
        }
        "io.k8s.apimachinery.pkg.api.resource.Quantity" => {
            quantity(schema);
        }
        "io.k8s.apimachinery.pkg.apis.meta.v1.Condition" => {
            property(schema, "message", "maxLength", json!(32768));
            property(schema, "observedGeneration", "minimum", json!(0));
            property(schema, "reason", "maxLength", json!(1024));
            property(schema, "reason", "minLength", json!(1));
            property(schema, "reason", "pattern", json!(CONDITION_REASON_PATTERN));
            property(
                schema,
                "status",
                "enum",
                json!(["True", "False", "Unknown"]),
            );
            property(schema, "type", "maxLength", json!(316));
            property(schema, "type", "pattern", json!(CONDITION_TYPE_PATTERN));
        }
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector" => {
            atomic_list(schema, "matchExpressions");
            atomic_struct(schema);
        }
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement" => {
            atomic_list(schema, "values");
        }
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" => {
            *schema = json!({"type": "object"});
        }
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => {
            int_or_string(schema);
        }
        _ => {}
    }
}

fn object(schema: &mut Value) -> &mut Map<String, Value> {
    if !schema.is_object() {
        *schema = json!({});
    }
    match schema {
        Value::Object(map) => map,
        _ => unreachable!("just made an object"),
    }
}

/// Sets `keyword: value` on property `field` (creating nothing if the type lacks the field:
/// a marker for a field k8s-openapi does not know is a bug the parity test will show).
fn property(schema: &mut Value, field: &str, keyword: &str, value: Value) {
    if let Some(Value::Object(property)) = schema.pointer_mut(&format!("/properties/{field}")) {
        property.insert(keyword.to_owned(), value);
    }
}

fn atomic_list(schema: &mut Value, field: &str) {
    property(schema, field, "x-kubernetes-list-type", json!("atomic"));
}

fn set_list(schema: &mut Value, field: &str) {
    property(schema, field, "x-kubernetes-list-type", json!("set"));
}

fn map_list(schema: &mut Value, field: &str, keys: &[&str]) {
    property(schema, field, "x-kubernetes-list-type", json!("map"));
    property(schema, field, "x-kubernetes-list-map-keys", json!(keys));
}

fn atomic_map(schema: &mut Value, field: &str) {
    property(schema, field, "x-kubernetes-map-type", json!("atomic"));
}

/// The whole struct is replaced, never merged field by field (`+structType=atomic`).
fn atomic_struct(schema: &mut Value) {
    object(schema).insert("x-kubernetes-map-type".into(), json!("atomic"));
}

fn default(schema: &mut Value, field: &str, value: Value) {
    property(schema, field, "default", value);
}

/// Object references whose `name` is optional with default `""`.
fn optional_name(schema: &mut Value) {
    default(schema, "name", json!(""));
    let object = object(schema);
    if let Some(Value::Array(required)) = object.get_mut("required") {
        required.retain(|r| r != "name");
        if required.is_empty() {
            object.remove("required");
        }
    }
}

fn int_or_string(schema: &mut Value) {
    let object = object(schema);
    object.insert(
        "anyOf".into(),
        json!([{"type": "integer"}, {"type": "string"}]),
    );
    object.insert("x-kubernetes-int-or-string".into(), json!(true));
}

fn quantity(schema: &mut Value) {
    int_or_string(schema);
    object(schema).insert("pattern".into(), json!(QUANTITY_PATTERN));
}
