//! Unknown fields of built-in kinds. A real API server decodes built-in objects into their Go
//! types, so fields the type does not have are dropped (or, with `fieldValidation=Strict`, the
//! request is a 400). devcluster does the same by round-tripping the object through its
//! k8s-openapi type: when that drops something, the dropped paths are reported.
//!
//! Objects that do not decode (a value of the wrong type) are left as they are: devcluster does
//! not second-guess them here (a real server would answer 400; see docs/devcluster.md).

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::registry::ResourceInfo;
use crate::store::notes::WriteNotes;

/// Whether versions of this kind are noted: Pods, the built-in kind written most often.
fn tracked(info: &ResourceInfo) -> bool {
    !info.is_custom() && info.group.is_empty() && info.plural == "pods"
}

/// Whether the stored version `obj` is known to be clean (decodes into its type and has no
/// fields it lacks), as the write that stored it noted ([`note_written`]).
fn is_clean(notes: &WriteNotes, info: &ResourceInfo, obj: &Value) -> bool {
    tracked(info) && notes.clean_pods.get(obj).is_some()
}

fn round_trip<T: DeserializeOwned + Serialize>(obj: &Value) -> Option<Value> {
    // Read from the borrowed value: no copy of the object to decode it.
    let typed = T::deserialize(obj).ok()?;
    serde_json::to_value(typed).ok()
}

/// The object as its built-in type keeps it, or `None` when the kind is not a built-in one
/// devcluster knows the type of, or the object does not decode.
fn typed_form(info: &ResourceInfo, obj: &Value) -> Option<Value> {
    use k8s_openapi::api::{
        apps, autoscaling, coordination, core, events, networking, policy, rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    if info.is_custom() {
        return None;
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => round_trip::<core::v1::Namespace>(obj),
        ("", "nodes") => round_trip::<core::v1::Node>(obj),
        ("", "pods") => round_trip::<core::v1::Pod>(obj),
        ("", "services") => round_trip::<core::v1::Service>(obj),
        ("", "persistentvolumeclaims") => round_trip::<core::v1::PersistentVolumeClaim>(obj),
        ("", "serviceaccounts") => round_trip::<core::v1::ServiceAccount>(obj),
        ("", "configmaps") => round_trip::<core::v1::ConfigMap>(obj),
        ("", "secrets") => round_trip::<core::v1::Secret>(obj),
        ("", "events") => round_trip::<core::v1::Event>(obj),
        ("", "endpoints") => round_trip::<core::v1::Endpoints>(obj),
        ("events.k8s.io", "events") => round_trip::<events::v1::Event>(obj),
        ("networking.k8s.io", "networkpolicies") => {
            round_trip::<networking::v1::NetworkPolicy>(obj)
        }
        ("coordination.k8s.io", "leases") => round_trip::<coordination::v1::Lease>(obj),
        ("apps", "deployments") => round_trip::<apps::v1::Deployment>(obj),
        ("apps", "replicasets") => round_trip::<apps::v1::ReplicaSet>(obj),
        ("autoscaling", "horizontalpodautoscalers") => {
            round_trip::<autoscaling::v2::HorizontalPodAutoscaler>(obj)
        }
        ("policy", "poddisruptionbudgets") => round_trip::<policy::v1::PodDisruptionBudget>(obj),
        ("rbac.authorization.k8s.io", "roles") => round_trip::<rbac::v1::Role>(obj),
        ("rbac.authorization.k8s.io", "rolebindings") => round_trip::<rbac::v1::RoleBinding>(obj),
        ("rbac.authorization.k8s.io", "clusterroles") => round_trip::<rbac::v1::ClusterRole>(obj),
        ("rbac.authorization.k8s.io", "clusterrolebindings") => {
            round_trip::<rbac::v1::ClusterRoleBinding>(obj)
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            round_trip::<apiext::CustomResourceDefinition>(obj)
        }
        _ => None,
    }
}

/// What checking a built-in object against its type found.
struct Found {
    /// Paths (`.spec.foo`) of the fields the type does not have.
    dropped: Vec<String>,
    /// Whether the object decodes into its type (else nothing is dropped).
    decoded: bool,
}

/// Drops the fields a built-in kind's type does not have; returns their paths (`.spec.foo`).
#[cfg(test)]
fn drop_unknown_fields(info: &ResourceInfo, obj: &mut Value) -> Vec<String> {
    drop_unknown_fields_found(info, obj).dropped
}

fn drop_unknown_fields_found(info: &ResourceInfo, obj: &mut Value) -> Found {
    let Some(typed) = typed_form(info, obj) else {
        return Found {
            dropped: Vec::new(),
            decoded: false,
        };
    };
    let mut dropped = Vec::new();
    crate::schema_glue::dropped_fields(obj, &typed, "", &mut dropped);
    // Values the type keeps but cannot tell from absent (empty strings, nulls) are not unknown.
    dropped.retain(|path| !null_or_empty_at(obj, path));
    if !dropped.is_empty() {
        for path in &dropped {
            remove_path(obj, path);
        }
    }
    Found {
        dropped,
        decoded: true,
    }
}

/// [`drop_unknown_fields_found`] for a write onto `clean_stored`, a stored version known to
/// decode and to have no unknown fields: only the top-level members of `obj` that differ from
/// it are decoded and encoded again. The types decode each top-level member on its own, so the
/// members equal to the stored ones decode and drop nothing, as they did there; the others are
/// checked in an object of their own (the rest set aside and put back). Same result as checking
/// the whole object.
fn drop_unknown_fields_onto(
    info: &ResourceInfo,
    obj: &mut Value,
    clean_stored: Option<&Value>,
) -> Found {
    let (Some(Value::Object(stored)), Value::Object(members)) = (clean_stored, &mut *obj) else {
        return drop_unknown_fields_found(info, obj);
    };
    let unchanged: Vec<String> = members
        .iter()
        .filter(|(k, v)| {
            !matches!(k.as_str(), "apiVersion" | "kind") && stored.get(k.as_str()) == Some(*v)
        })
        .map(|(k, _)| k.clone())
        .collect();
    let set_aside: Vec<(String, Value)> = unchanged
        .iter()
        .filter_map(|k| members.remove_entry(k.as_str()))
        .collect();
    let found = drop_unknown_fields_found(info, obj);
    if let Value::Object(members) = obj {
        members.extend(set_aside);
    }
    found
}

/// Drops unknown fields of a built-in object; with `fieldValidation=Strict` (kubectl's default)
/// they are a 400 instead, worded like the real server's strict decoding error.
pub fn admit(
    query: &crate::server::Query,
    info: &ResourceInfo,
    obj: &mut Value,
) -> Result<(), crate::api_error::ApiError> {
    admit_checked(query, info, obj, None).map(|_| ())
}

/// [`admit`] for a write onto the stored version `stored` (none for a create): when that
/// version is noted clean, only the top-level members the write
/// changed are checked. Returns whether the admitted object is clean (it decodes into its type
/// and, its unknown fields dropped, has none).
pub fn admit_onto(
    notes: &WriteNotes,
    query: &crate::server::Query,
    info: &ResourceInfo,
    obj: &mut Value,
    stored: Option<&Value>,
) -> Result<bool, crate::api_error::ApiError> {
    admit_checked(
        query,
        info,
        obj,
        stored.filter(|s| is_clean(notes, info, s)),
    )
}

/// [`admit`] onto `clean_stored`, a stored version known to be clean (see
/// [`drop_unknown_fields_onto`]); returns whether the admitted object is clean.
fn admit_checked(
    query: &crate::server::Query,
    info: &ResourceInfo,
    obj: &mut Value,
    clean_stored: Option<&Value>,
) -> Result<bool, crate::api_error::ApiError> {
    if let Some(problem) = micro_time_problem(info, obj) {
        return Err(crate::api_error::ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {problem}",
            kind = info.kind,
            version = info.storage_version(),
        )));
    }
    let found = drop_unknown_fields_onto(info, obj, clean_stored);
    if found.dropped.is_empty() || query.get("fieldValidation") != Some("Strict") {
        return Ok(found.decoded);
    }
    let fields = found
        .dropped
        .iter()
        .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
        .collect::<Vec<_>>()
        .join(", ");
    Err(crate::api_error::ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {fields}",
        kind = info.kind,
        version = info.storage_version(),
    )))
}

/// The fields of built-in kinds typed `MicroTime` (JSON pointers).
fn micro_time_fields(info: &ResourceInfo) -> &'static [&'static str] {
    if info.is_custom() {
        return &[];
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "events") | ("events.k8s.io", "events") => &["/eventTime", "/series/lastObservedTime"],
        ("coordination.k8s.io", "leases") => &["/spec/acquireTime", "/spec/renewTime"],
        _ => &[],
    }
}

/// The layout a real server parses `MicroTime` with (Go's notation): exactly six fraction
/// digits. k8s-openapi accepts any RFC 3339 time, so this is checked before decoding.
const MICRO_TIME_LAYOUT: &str = "2006-01-02T15:04:05.000000Z07:00";

/// Why a `MicroTime` field of `obj` would not parse on a real server (a 400 there): a time
/// without exactly six fraction digits, e.g. `2026-01-01T00:00:00Z` as Python's client prints a
/// `datetime` whose microseconds are 0.
fn micro_time_problem(info: &ResourceInfo, obj: &Value) -> Option<String> {
    micro_time_fields(info).iter().find_map(|pointer| {
        let value = obj.pointer(pointer)?.as_str()?;
        let (head, rest) = value.split_at_checked(19).unwrap_or((value, ""));
        let shaped = |s: &str, digits: usize| {
            s.len() == digits && s.bytes().all(|b| b.is_ascii_digit())
        };
        let fraction_ok = rest.strip_prefix('.').is_some_and(|r| {
            r.get(..6).is_some_and(|d| shaped(d, 6)) && {
                let zone = &r[6..];
                zone == "Z"
                    || (zone.len() == 6
                        && matches!(zone.as_bytes()[0], b'+' | b'-')
                        && zone.as_bytes()[3] == b':')
            }
        });
        let head_ok = head.len() == 19 && head.as_bytes()[10] == b'T';
        (!(head_ok && fraction_ok)).then(|| {
            let unparsed = if head_ok { rest } else { value };
            let expected = if head_ok { ".000000" } else { "2006" };
            format!(
                "parsing time {value:?} as {MICRO_TIME_LAYOUT:?}: cannot parse {unparsed:?} as {expected:?}"
            )
        })
    })
}

/// Notes the stored version `obj` as clean when the write that stored it
/// admitted a clean object (`admitted_clean`) onto a version noted clean, or onto nothing (a
/// create): the stored object is then the admitted one's members, the earlier version's, and
/// fields the server sets. Debug builds check it against the whole-object check.
pub fn note_written(
    notes: &WriteNotes,
    info: &ResourceInfo,
    admitted_clean: bool,
    before: Option<&Value>,
    obj: &Value,
) {
    if !admitted_clean || !tracked(info) {
        return;
    }
    if before.is_some_and(|b| !is_clean(notes, info, b)) {
        return;
    }
    #[cfg(debug_assertions)]
    {
        let mut copy = obj.clone();
        let found = drop_unknown_fields_found(info, &mut copy);
        debug_assert!(
            found.decoded && found.dropped.is_empty(),
            "a version noted clean is not: {:?} in {obj}",
            found.dropped
        );
    }
    notes.clean_pods.note(obj, ());
}

/// Splits `.a.b[2].c` into steps.
fn steps(path: &str) -> Vec<Step<'_>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            out.push(Step::Key(&rest[..i]));
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                if let Ok(n) = rest[1..end].parse() {
                    out.push(Step::Index(n));
                }
                rest = &rest[end + 1..];
            }
        } else {
            out.push(Step::Key(rest));
        }
    }
    out
}

enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

fn null_or_empty_at(obj: &Value, path: &str) -> bool {
    let mut cur = obj;
    for step in steps(path) {
        let next = match step {
            Step::Key(k) => cur.get(k),
            Step::Index(i) => cur.get(i),
        };
        match next {
            Some(v) => cur = v,
            None => return true,
        }
    }
    match cur {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn remove_path(obj: &mut Value, path: &str) {
    let steps = steps(path);
    let Some((last, parents)) = steps.split_last() else {
        return;
    };
    let mut cur = obj;
    for step in parents {
        let next = match step {
            Step::Key(k) => cur.get_mut(*k),
            Step::Index(i) => cur.get_mut(*i),
        };
        match next {
            Some(v) => cur = v,
            None => return,
        }
    }
    if let (Step::Key(k), Some(map)) = (last, cur.as_object_mut()) {
        map.remove(*k);
    }
}

#[cfg(test)]
mod onto_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use serde_json::json;

    #[test]
    fn unknown_fields_of_built_in_kinds_are_found_and_dropped() {
        let reg = Registry::with_builtins();
        let cm = reg.lookup("", "v1", "configmaps").unwrap();
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let mut dropped = drop_unknown_fields(&cm, &mut obj);
        dropped.sort();
        assert_eq!(dropped, [".extra", ".metadata.bogus"]);
        assert_eq!(
            obj,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}})
        );

        let pods = reg.lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i", "imagePolicy": "x"}]}});
        assert_eq!(
            drop_unknown_fields(&pods, &mut pod),
            [".spec.containers[0].imagePolicy"]
        );
        assert!(pod["spec"]["containers"][0].get("imagePolicy").is_none());
    }

    #[test]
    fn objects_that_do_not_decode_are_left_alone() {
        let reg = Registry::with_builtins();
        let pods = reg.lookup("", "v1", "pods").unwrap();
        let mut pod =
            json!({"metadata": {"name": "p"}, "spec": {"containers": "not a list", "whatever": 1}});
        assert!(drop_unknown_fields(&pods, &mut pod).is_empty());
        assert_eq!(pod["spec"]["whatever"], 1);
    }

    /// Decoding from the borrowed object gives what decoding an owned copy gave, for values of
    /// every special form the types have (quantities, int-or-string, bytes, times) and for
    /// values of the wrong type.
    #[test]
    fn decoding_the_borrowed_object_equals_decoding_a_copy() {
        use k8s_openapi::api::core::v1::{ConfigMap, Event, Pod, Secret, Service};
        fn same<T: DeserializeOwned + Serialize>(obj: Value) -> Option<Value> {
            let copied = serde_json::from_value::<T>(obj.clone())
                .ok()
                .and_then(|t| serde_json::to_value(t).ok());
            assert_eq!(round_trip::<T>(&obj), copied, "{obj}");
            copied
        }
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": "2024-01-02T03:04:05Z",
                "managedFields": [{"manager": "m", "operation": "Update", "time": "2024-01-02T03:04:05Z",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}], "bogus": 1},
            "spec": {"containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 80}],
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                "livenessProbe": {"httpGet": {"port": "http", "path": "/"}},
                "readinessProbe": {"tcpSocket": {"port": 8080}}}],
                "terminationGracePeriodSeconds": 30, "unknown": [1, 2]},
            "status": {"phase": "Running", "startTime": "2024-01-02T03:04:05Z",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2024-01-02T03:04:05Z"}]}
        });
        assert!(same::<Pod>(pod.clone()).is_some());
        let mut wrong = pod;
        wrong["spec"]["containers"][0]["ports"][0]["containerPort"] = json!("eighty");
        assert!(same::<Pod>(wrong).is_none());
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"k": "aGVsbG8="}, "type": "Opaque"});
        assert!(same::<Secret>(secret).is_some());
        assert!(
            same::<Secret>(json!({"metadata": {"name": "s"}, "data": {"k": "not base64!"}}))
                .is_none()
        );
        let cm =
            json!({"metadata": {"name": "c"}, "data": {"a": "b"}, "binaryData": {"x": "AAE="}});
        assert!(same::<ConfigMap>(cm).is_some());
        let svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [
            {"port": 80, "targetPort": "http"}, {"port": 81, "targetPort": 8081}]}});
        assert!(same::<Service>(svc).is_some());
        let event = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"},
            "eventTime": "2024-01-02T03:04:05.123456Z", "count": 2, "reason": "R"});
        assert!(same::<Event>(event).is_some());
    }

    /// kube-apiserver parses `MicroTime` with exactly six fraction digits and answers 400 to
    /// anything else; k8s-openapi would take any RFC 3339 time.
    #[test]
    fn micro_times_need_six_fraction_digits() {
        let reg = Registry::with_builtins();
        let events = reg.lookup("", "v1", "events").unwrap();
        let leases = reg.lookup("coordination.k8s.io", "v1", "leases").unwrap();
        let configmaps = reg.lookup("", "v1", "configmaps").unwrap();
        for good in [
            "2026-01-01T00:00:00.000000Z",
            "2026-01-01T00:00:00.123456+02:00",
        ] {
            assert_eq!(
                micro_time_problem(&events, &json!({"eventTime": good})),
                None,
                "{good}"
            );
        }
        for bad in [
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:00:00.123Z",
            "2026-01-01T00:00:00.1234567Z",
            "yesterday",
        ] {
            let problem = micro_time_problem(&events, &json!({"eventTime": bad}))
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(problem.contains(MICRO_TIME_LAYOUT), "{problem}");
            assert!(
                micro_time_problem(&leases, &json!({"spec": {"renewTime": bad}})).is_some(),
                "{bad}"
            );
        }
        assert_eq!(
            micro_time_problem(&events, &json!({"eventTime": null})),
            None
        );
        // Only MicroTime fields: a ConfigMap's data is anything.
        assert_eq!(
            micro_time_problem(&configmaps, &json!({"eventTime": "x"})),
            None
        );
        let query = crate::server::Query::parse(None);
        let mut event = json!({"metadata": {"name": "e"}, "eventTime": "2026-01-01T00:00:00Z"});
        let error = admit(&query, &events, &mut event).unwrap_err();
        assert_eq!(error.code, 400);
        assert!(
            error
                .message
                .starts_with("Event in version \"v1\" cannot be handled as a Event: parsing time"),
            "{}",
            error.message
        );
    }
}
