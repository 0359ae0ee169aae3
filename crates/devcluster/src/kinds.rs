//! Per-kind behaviour of built-in types on create and update: the defaults and initial status a
//! real API server fills in (pods, services, namespaces, PVCs, secrets), service clusterIP
//! allocation, and the immutability rules users run into.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use crate::api_error::Cause;
use crate::registry::ResourceInfo;
use crate::server::SharedState;

/// Hands out service cluster IPs from 10.96.0.0/16 (never 10.96.0.0 or .1, which a real
/// cluster reserves for the network and the `kubernetes` service).
#[derive(Debug, Default)]
pub struct ServiceIpAllocator {
    used: Mutex<BTreeSet<u32>>,
}

impl ServiceIpAllocator {
    pub fn allocate(&self) -> Option<String> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let n = (10..65534u32).find(|n| !used.contains(n))?;
        used.insert(n);
        Some(format!("10.96.{}.{}", n / 256, n % 256))
    }

    /// Mark an address as taken (a user asked for it explicitly).
    pub fn reserve(&self, ip: &str) -> bool {
        let parts: Vec<u32> = ip.split('.').filter_map(|p| p.parse().ok()).collect();
        if parts.len() != 4 || parts[0] != 10 || parts[1] != 96 {
            return true;
        }
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        used.insert(parts[2] * 256 + parts[3])
    }

    pub fn release(&self, ip: &str) {
        let parts: Vec<u32> = ip.split('.').filter_map(|p| p.parse().ok()).collect();
        if parts.len() == 4 && parts[0] == 10 && parts[1] == 96 {
            let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
            used.remove(&(parts[2] * 256 + parts[3]));
        }
    }
}

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.into(),
        message,
        field: field.into(),
    }
}

fn default(obj: &mut Value, key: &str, value: Value) {
    if let Some(o) = obj.as_object_mut()
        && o.get(key).is_none_or(Value::is_null)
    {
        o.insert(key.to_string(), value);
    }
}

/// Set (or replace) a condition of `status.conditions`, keeping lastTransitionTime when the
/// status does not change.
pub fn set_condition(
    obj: &mut Value,
    type_: &str,
    status: &str,
    reason: Option<&str>,
    message: Option<&str>,
    now: &str,
) {
    let Some(o) = obj.as_object_mut() else { return };
    let st = o.entry("status").or_insert_with(|| json!({}));
    if !st.is_object() {
        *st = json!({});
    }
    let conds = st
        .as_object_mut()
        .map(|s| s.entry("conditions").or_insert_with(|| json!([])));
    let Some(conds) = conds else { return };
    if !conds.is_array() {
        *conds = json!([]);
    }
    let Some(list) = conds.as_array_mut() else {
        return;
    };
    let mut cond =
        json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": now});
    if let Some(r) = reason {
        cond["reason"] = json!(r);
    }
    if let Some(m) = message {
        cond["message"] = json!(m);
    }
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(existing) => {
            if existing["status"] == status {
                cond["lastTransitionTime"] = existing["lastTransitionTime"].clone();
            }
            *existing = cond;
        }
        None => list.push(cond),
    }
}

/// Defaults and initial status on create. Errors are field causes of a 422.
pub fn prepare_create(
    state: &SharedState,
    info: &ResourceInfo,
    obj: &mut Value,
) -> Result<(), Vec<Cause>> {
    if info.is_custom() {
        return Ok(());
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => {
            let name = crate::meta::meta_str(obj, "name").unwrap_or("").to_string();
            if let Some(m) = crate::meta::metadata_mut(obj) {
                let labels = m.entry("labels").or_insert_with(|| json!({}));
                if let Some(l) = labels.as_object_mut() {
                    l.insert("kubernetes.io/metadata.name".into(), json!(name));
                }
            }
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
        }
        ("", "pods") => prepare_pod(obj)?,
        ("", "services") => prepare_service(state, obj, None)?,
        ("", "persistentvolumeclaims") => {
            if let Some(spec) = obj.get_mut("spec") {
                default(spec, "volumeMode", json!("Filesystem"));
            }
            obj["status"] = json!({"phase": "Pending"});
        }
        ("", "secrets") => {
            default(obj, "type", json!("Opaque"));
            fold_string_data(obj);
        }
        ("apps", "replicasets") => {
            if let Some(spec) = obj.get_mut("spec") {
                default(spec, "replicas", json!(1));
                if let Some(template_spec) = spec.pointer_mut("/template/spec") {
                    default_pod_spec(template_spec);
                }
            }
            obj["status"] = json!({"replicas": 0});
        }
        ("apps", "deployments") => {
            if let Some(spec) = obj.get_mut("spec") {
                default(spec, "replicas", json!(1));
                default(spec, "revisionHistoryLimit", json!(10));
                default(spec, "progressDeadlineSeconds", json!(600));
                if let Some(template_spec) = spec.pointer_mut("/template/spec") {
                    default_pod_spec(template_spec);
                }
                default(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
            }
            obj["status"] = json!({});
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crate::crd::prepare(obj)?;
        }
        _ => {}
    }
    Ok(())
}

/// `stringData` is write-only: merged into base64 `data`.
fn fold_string_data(obj: &mut Value) {
    use base64::Engine;
    let Some(o) = obj.as_object_mut() else { return };
    let Some(Value::Object(sd)) = o.remove("stringData") else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            if let Some(s) = v.as_str() {
                d.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(s)),
                );
            }
        }
    }
}

/// The defaults of a PodSpec (pods and pod templates alike).
fn default_pod_spec(spec: &mut Value) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    for list in ["initContainers", "containers"] {
        if let Some(Value::Array(cs)) = spec.get_mut(list) {
            for c in cs.iter_mut() {
                let image = c.get("image").and_then(Value::as_str).unwrap_or("");
                let tag_latest = !image.contains('@')
                    && image
                        .rsplit('/')
                        .next()
                        .is_none_or(|last| !last.contains(':') || last.ends_with(":latest"));
                default(
                    c,
                    "imagePullPolicy",
                    json!(if tag_latest { "Always" } else { "IfNotPresent" }),
                );
                default(c, "terminationMessagePath", json!("/dev/termination-log"));
                default(c, "terminationMessagePolicy", json!("File"));
                default(c, "resources", json!({}));
                if let Some(Value::Array(ports)) = c.get_mut("ports") {
                    for p in ports {
                        default(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

fn prepare_pod(obj: &mut Value) -> Result<(), Vec<Cause>> {
    let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
        return Err(vec![cause(
            "FieldValueRequired",
            "spec.containers",
            "Required value".into(),
        )]);
    };
    if spec
        .get("containers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        return Err(vec![cause(
            "FieldValueRequired",
            "spec.containers",
            "Required value".into(),
        )]);
    }
    default_pod_spec(spec);
    default(spec, "enableServiceLinks", json!(true));
    default(spec, "priority", json!(0));
    default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    let sa = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    default(spec, "serviceAccountName", json!(sa));
    default(spec, "serviceAccount", json!(sa));
    let tolerations = spec
        .as_object_mut()
        .map(|s| s.entry("tolerations").or_insert_with(|| json!([])));
    if let Some(Value::Array(t)) = tolerations {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            if !t.iter().any(|x| x["key"] == key) {
                t.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
    let mut any_requests = false;
    let mut guaranteed = true;
    for list in ["initContainers", "containers"] {
        for c in spec
            .get(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let res = &c["resources"];
            let non_empty = |k: &str| {
                res.get(k)
                    .and_then(Value::as_object)
                    .is_some_and(|m| !m.is_empty())
            };
            any_requests |= non_empty("requests") || non_empty("limits");
            let lim = res.get("limits").and_then(Value::as_object);
            let full = lim.is_some_and(|l| l.contains_key("cpu") && l.contains_key("memory"));
            let equal = res
                .get("requests")
                .and_then(Value::as_object)
                .is_none_or(|r| r.iter().all(|(k, v)| lim.and_then(|l| l.get(k)) == Some(v)));
            guaranteed &= full && equal;
        }
    }
    let qos = if !any_requests {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    };
    obj["status"] = json!({"phase": "Pending", "qosClass": qos});
    Ok(())
}

fn prepare_service(
    state: &SharedState,
    obj: &mut Value,
    old: Option<&Value>,
) -> Result<(), Vec<Cause>> {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports {
            default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                default(p, "targetPort", port);
            }
        }
    }
    let type_ = spec["type"].as_str().unwrap_or("ClusterIP").to_string();
    if type_ == "ExternalName" {
        return Ok(());
    }
    default(spec, "internalTrafficPolicy", json!("Cluster"));
    let old_ip = old
        .and_then(|o| o.pointer("/spec/clusterIP"))
        .and_then(Value::as_str)
        .map(String::from);
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(String::from);
    let ip = match (old_ip, requested) {
        (Some(old), Some(new)) if old != new => {
            return Err(vec![cause(
                "FieldValueInvalid",
                "spec.clusterIPs[0]",
                format!("Invalid value: []string{{\"{new}\"}}: may not change once set"),
            )]);
        }
        (Some(old), _) => old,
        (None, Some(req)) if req == "None" => "None".to_string(),
        (None, Some(req)) => {
            if !state.service_ips.reserve(&req) {
                return Err(vec![cause(
                    "FieldValueInvalid",
                    "spec.clusterIPs",
                    format!(
                        "Invalid value: []string{{\"{req}\"}}: failed to allocate IP {req}: provided IP is already allocated"
                    ),
                )]);
            }
            req
        }
        (None, None) => state.service_ips.allocate().ok_or_else(|| {
            vec![cause(
                "FieldValueInvalid",
                "spec.clusterIPs",
                "Internal error: range is full".into(),
            )]
        })?,
    };
    spec["clusterIP"] = json!(ip);
    spec["clusterIPs"] = json!([ip]);
    default(spec, "ipFamilies", json!(["IPv4"]));
    default(spec, "ipFamilyPolicy", json!("SingleStack"));
    if old.is_none() {
        obj["status"] = json!({"loadBalancer": {}});
    }
    Ok(())
}

/// Rules on update (after identity metadata and status were carried over).
pub fn prepare_update(
    state: &SharedState,
    info: &ResourceInfo,
    old: &Value,
    new: &mut Value,
) -> Result<(), Vec<Cause>> {
    if info.is_custom() {
        return Ok(());
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "services") => prepare_service(state, new, Some(old))?,
        ("", "namespaces") => {
            // spec.finalizers only change through /finalize.
            new["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
        }
        ("", "secrets") => {
            fold_string_data(new);
            check_immutable_data(old, new)?;
        }
        ("", "configmaps") => check_immutable_data(old, new)?,
        ("", "pods") => {
            if let Some(spec) = new.get_mut("spec") {
                default_pod_spec(spec);
            }
            check_pod_update(old, new)?;
        }
        ("apps", "deployments") | ("apps", "replicasets") => {
            if let Some(template_spec) = new.pointer_mut("/spec/template/spec") {
                default_pod_spec(template_spec);
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crate::crd::check_update(old, new)?;
            crate::crd::prepare(new)?;
        }
        _ => {}
    }
    Ok(())
}

/// ConfigMaps and Secrets marked `immutable: true` keep their data and the flag.
fn check_immutable_data(old: &Value, new: &Value) -> Result<(), Vec<Cause>> {
    if old.get("immutable") != Some(&Value::Bool(true)) {
        return Ok(());
    }
    let mut causes = Vec::new();
    for field in ["data", "binaryData"] {
        if old.get(field) != new.get(field) {
            causes.push(cause(
                "FieldValueForbidden",
                field,
                "Forbidden: field is immutable when `immutable` is set".into(),
            ));
        }
    }
    if new.get("immutable") != Some(&Value::Bool(true)) {
        causes.push(cause(
            "FieldValueForbidden",
            "immutable",
            "Forbidden: field is immutable when `immutable` is set".into(),
        ));
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// Pod specs are immutable except images, activeDeadlineSeconds, tolerations additions and
/// terminationGracePeriodSeconds (and nodeName set by binding).
fn check_pod_update(old: &Value, new: &Value) -> Result<(), Vec<Cause>> {
    let null = Value::Null;
    let old_spec = old.get("spec").unwrap_or(&null);
    let new_spec = new.get("spec").unwrap_or(&null);
    if !pod_specs_equal_but_mutable(old_spec, new_spec) {
        return Err(vec![cause(
            "FieldValueForbidden",
            "spec",
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into(),
        )]);
    }
    Ok(())
}

/// Pod spec fields an update may change.
const MUTABLE_POD_SPEC_FIELDS: [&str; 3] = [
    "activeDeadlineSeconds",
    "tolerations",
    "terminationGracePeriodSeconds",
];

/// Whether two pod specs are equal apart from the fields an update may change (the mutable
/// spec fields and the containers' and init containers' images), compared in place.
fn pod_specs_equal_but_mutable(old: &Value, new: &Value) -> bool {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return old == new;
    };
    let compared = |map: &'_ Map<String, Value>| {
        map.keys()
            .filter(|k| !MUTABLE_POD_SPEC_FIELDS.contains(&k.as_str()))
            .count()
    };
    compared(old) == compared(new)
        && old
            .iter()
            .filter(|(k, _)| !MUTABLE_POD_SPEC_FIELDS.contains(&k.as_str()))
            .all(|(key, value)| match (key.as_str(), new.get(key)) {
                (_, None) => false,
                ("containers" | "initContainers", Some(other)) => {
                    containers_equal_but_images(value, other)
                }
                (_, Some(other)) => value == other,
            })
}

/// Whether two container lists are equal apart from each container's `image`.
fn containers_equal_but_images(old: &Value, new: &Value) -> bool {
    let (Value::Array(old), Value::Array(new)) = (old, new) else {
        return old == new;
    };
    old.len() == new.len()
        && old.iter().zip(new).all(|pair| match pair {
            (Value::Object(a), Value::Object(b)) => {
                let compared = |m: &Map<String, Value>| m.keys().filter(|k| *k != "image").count();
                compared(a) == compared(b)
                    && a.iter()
                        .filter(|(k, _)| *k != "image")
                        .all(|(k, v)| b.get(k) == Some(v))
            }
            (a, b) => a == b,
        })
}

/// Release what a deleted object held (service cluster IPs).
pub fn on_deleted(state: &SharedState, group_resource: &str, obj: &Value) {
    if group_resource == "services"
        && let Some(ip) = obj.pointer("/spec/clusterIP").and_then(Value::as_str)
    {
        state.service_ips.release(ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain formulation of [`pod_specs_equal_but_mutable`]: copy both specs, remove what
    /// may change, compare.
    fn pod_specs_equal_reference(old: &Value, new: &Value) -> bool {
        let normalize = |spec: &Value| {
            let mut s = spec.clone();
            if let Some(o) = s.as_object_mut() {
                for field in MUTABLE_POD_SPEC_FIELDS {
                    o.remove(field);
                }
                for list in ["containers", "initContainers"] {
                    if let Some(Value::Array(cs)) = o.get_mut(list) {
                        for c in cs {
                            if let Some(co) = c.as_object_mut() {
                                co.remove("image");
                            }
                        }
                    }
                }
            }
            s
        };
        normalize(old) == normalize(new)
    }

    #[test]
    fn pod_spec_comparison_matches_the_plain_formulation() {
        let mut g = crate::patch::test_gen::Gen(0x90d_5bec);
        let container = |g: &mut crate::patch::test_gen::Gen| {
            if g.chance(8) {
                return json!("odd");
            }
            let mut c = Map::new();
            for (field, values) in [
                ("name", ["a", "b"]),
                ("image", ["i1", "i2"]),
                ("x", ["1", "2"]),
            ] {
                if !g.chance(3) {
                    c.insert(field.into(), json!(g.pick(&values)));
                }
            }
            Value::Object(c)
        };
        let spec = |g: &mut crate::patch::test_gen::Gen| {
            if g.chance(10) {
                return if g.chance(2) { Value::Null } else { json!(3) };
            }
            let mut s = Map::new();
            for field in [
                "containers",
                "initContainers",
                "tolerations",
                "activeDeadlineSeconds",
                "nodeName",
            ] {
                if g.chance(2) {
                    continue;
                }
                let value = match field {
                    "containers" | "initContainers" if !g.chance(6) => {
                        Value::Array((0..g.below(3)).map(|_| container(g)).collect())
                    }
                    _ => json!(g.pick(&["p", "q"])),
                };
                s.insert(field.into(), value);
            }
            Value::Object(s)
        };
        let mut equal = 0;
        for case in 0..5000 {
            let old = spec(&mut g);
            let new = if g.chance(3) {
                spec(&mut g)
            } else {
                old.clone()
            };
            let mut new = new;
            if g.chance(2)
                && let Some(c) = new.pointer_mut("/containers/0")
                && c.is_object()
            {
                c["image"] = json!(g.pick(&["i1", "i3"]));
            }
            let got = pod_specs_equal_but_mutable(&old, &new);
            assert_eq!(
                got,
                pod_specs_equal_reference(&old, &new),
                "case {case}: {old} vs {new}"
            );
            equal += usize::from(got);
        }
        assert!((1000..4900).contains(&equal), "{equal} of 5000 equal");
    }

    #[test]
    fn pod_specs_get_the_real_defaults() {
        let mut spec = json!({"containers": [
            {"name": "a", "image": "nginx", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "nginx:1.27"}
        ]});
        default_pod_spec(&mut spec);
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(
            spec["containers"][1]["terminationMessagePath"],
            "/dev/termination-log"
        );
    }

    #[test]
    fn immutable_data_cannot_change() {
        let old = json!({"immutable": true, "data": {"a": "1"}});
        assert!(check_immutable_data(&old, &old).is_ok());
        let changed = json!({"immutable": true, "data": {"a": "2"}});
        assert_eq!(
            check_immutable_data(&old, &changed).unwrap_err()[0].field,
            "data"
        );
        let unset = json!({"data": {"a": "1"}});
        assert_eq!(
            check_immutable_data(&old, &unset).unwrap_err()[0].field,
            "immutable"
        );
    }

    #[test]
    fn service_ips_are_not_handed_out_twice() {
        let alloc = ServiceIpAllocator::default();
        let a = alloc.allocate().unwrap();
        let b = alloc.allocate().unwrap();
        assert_ne!(a, b);
        assert!(!alloc.reserve(&a), "already taken");
        alloc.release(&a);
        assert!(alloc.reserve(&a));
    }
}
