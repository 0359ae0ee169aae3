//! Core `v1` Events and `events.k8s.io/v1` Events are one resource seen through two versions, as
//! on a real API server: objects are stored in the core form (under the `events` store key) and
//! converted when written or read through `events.k8s.io/v1`.
//!
//! Field mapping (core <-> events.k8s.io/v1): `involvedObject` <-> `regarding`, `message` <->
//! `note`, `source` <-> `deprecatedSource`, `firstTimestamp`/`lastTimestamp`/`count` <->
//! `deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount`, `reportingComponent`
//! <-> `reportingController`; `reportingInstance`, `related`, `series`, `eventTime`, `action`,
//! `type` and `reason` keep their names.

use serde_json::{Map, Value, json};

use crate::api_error::Cause;
use crate::registry::{ResourceInfo, SharedStorage};

/// (core name, events.k8s.io/v1 name) of the fields that are renamed.
const RENAMED: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
];

/// Fields with the same name in both versions.
const SHARED: &[&str] = &[
    "metadata",
    "reportingInstance",
    "related",
    "series",
    "eventTime",
    "action",
    "type",
    "reason",
];

/// Field labels of `events.k8s.io/v1` Events and the core field label each one selects.
pub const EVENTS_V1_FIELD_LABELS: &[(&str, &str)] = &[
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("reason", "reason"),
    ("type", "type"),
];

fn is_present(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null())
}

/// The core form of an event, with the fields a real server always serializes (an empty
/// `involvedObject` and `source`, null timestamps, empty reporting strings).
fn normalize_core(obj: &mut Map<String, Value>) {
    for key in ["involvedObject", "source"] {
        if !obj.get(key).is_some_and(Value::is_object) {
            obj.insert(key.into(), json!({}));
        }
    }
    for key in ["firstTimestamp", "lastTimestamp", "eventTime"] {
        obj.entry(key).or_insert(Value::Null);
    }
    for key in ["reportingComponent", "reportingInstance"] {
        if !obj.get(key).is_some_and(Value::is_string) {
            obj.insert(key.into(), json!(""));
        }
    }
}

/// An `events.k8s.io/v1` Event in the core `v1` form (unknown fields are dropped earlier).
pub fn events_v1_to_core(obj: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    for key in SHARED {
        if let Some(v) = obj.get(*key).filter(|v| !v.is_null()) {
            out.insert((*key).into(), v.clone());
        }
    }
    for (core, v1) in RENAMED {
        if let Some(v) = obj.get(*v1).filter(|v| !v.is_null()) {
            out.insert((*core).into(), v.clone());
        }
    }
    normalize_core(&mut out);
    Value::Object(out)
}

/// A stored (core) Event as `events.k8s.io/v1` serves it.
pub fn core_to_events_v1(obj: &Value) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    for key in SHARED {
        if let Some(v) = obj.get(*key).filter(|v| !v.is_null()) {
            out.insert((*key).into(), v.clone());
        }
    }
    for (core, v1) in RENAMED {
        let Some(v) = obj.get(*core).filter(|v| !v.is_null()) else {
            continue;
        };
        // The v1 type omits empty strings and zero counts.
        let empty = v.as_str() == Some("") || v.as_i64() == Some(0);
        if !empty {
            out.insert((*v1).into(), v.clone());
        }
    }
    if out.get("reportingInstance").and_then(Value::as_str) == Some("") {
        out.remove("reportingInstance");
    }
    // Always serialized by the v1 type (a struct and a non-omitempty time).
    for key in ["regarding", "deprecatedSource"] {
        out.entry(key).or_insert_with(|| json!({}));
    }
    if !is_present(out.get("eventTime")) {
        out.insert("eventTime".into(), Value::Null);
    }
    Value::Object(out)
}

/// The stored form of an object written through `info` (events are converted or normalized;
/// other kinds are returned unchanged).
pub fn into_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.shared_storage {
        Some(SharedStorage::EventsV1) => events_v1_to_core(&obj),
        None if info.group.is_empty() && info.plural == "events" => {
            let mut obj = obj;
            if let Some(o) = obj.as_object_mut() {
                normalize_core(o);
            }
            obj
        }
        None => obj,
    }
}

/// A stored object as served through `info` (only `events.k8s.io/v1` converts).
pub fn from_storage(info: &ResourceInfo, obj: Value) -> Value {
    match info.shared_storage {
        Some(SharedStorage::EventsV1) => core_to_events_v1(&obj),
        None => obj,
    }
}

/// Length limits of `events.k8s.io/v1` fields.
const SHORT_FIELD_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// What a real server refuses in a core `v1` Event created in `namespace` (`obj` in the core
/// form).
pub fn core_event_create_causes(obj: &Value, namespace: &str) -> Vec<Cause> {
    legacy_event_causes(obj, namespace, "reportingComponent")
}

/// What a real server refuses in an Event created through `events.k8s.io/v1` in `namespace`
/// (`obj` in the v1 form): the core checks, then a time and a type, and none of the deprecated
/// fields.
pub fn events_v1_create_causes(obj: &Value, namespace: &str) -> Vec<Cause> {
    let mut causes = legacy_event_causes(&events_v1_to_core(obj), namespace, "reportingController");
    let invalid = |field: &str, why: String| Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"\": {why}"),
        field: field.into(),
    };
    if !is_present(obj.get("eventTime")) {
        causes.push(Cause {
            reason: "FieldValueRequired".into(),
            message: "Required value".into(),
            field: "eventTime".into(),
        });
    }
    let type_ = obj.get("type").and_then(Value::as_str).unwrap_or("");
    if type_ != "Normal" && type_ != "Warning" {
        causes.push(invalid("type", format!("has invalid value: {type_}")));
    }
    for key in [
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    ] {
        if is_present(obj.get(key)) && obj.get(key) != Some(&json!(0)) {
            causes.push(invalid(key, "needs to be unset".to_string()));
        }
    }
    if obj
        .get("deprecatedSource")
        .and_then(Value::as_object)
        .is_some_and(|s| {
            s.values()
                .any(|v| v.as_str().is_some_and(|v| !v.is_empty()))
        })
    {
        causes.push(invalid("deprecatedSource", "needs to be unset".to_string()));
    }
    causes
}

/// The checks a real server makes of every new Event, whichever API wrote it (`core` in the
/// core form; `controller_field` names `reportingComponent` as the request's version calls it).
/// An old-style event (no `eventTime`) must be about an object of its own namespace (or of
/// none, in `default`); a new-style one, with `eventTime`, must also say who reported it and
/// what it did. Field paths are the core ones, as a real server reports them for both APIs.
fn legacy_event_causes(core: &Value, namespace: &str, controller_field: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let text = |key: &str| core.get(key).and_then(Value::as_str).unwrap_or("");
    let involved_namespace = core
        .pointer("/involvedObject/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mismatch = || Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {involved_namespace:?}: does not match event.namespace"),
        field: "involvedObject.namespace".into(),
    };
    let too_long = |field: &str, limit: usize| Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: \"\": can have at most {limit} characters"),
        field: field.into(),
    };
    let required = |field: &str| Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    };
    if !is_present(core.get("eventTime")) {
        let agrees = if involved_namespace.is_empty() {
            namespace.is_empty() || namespace == "default"
        } else {
            involved_namespace == namespace
        };
        if !agrees {
            causes.push(mismatch());
        }
        return causes;
    }
    if involved_namespace.is_empty() && namespace != "default" && namespace != "kube-system" {
        causes.push(mismatch());
    }
    let component = text("reportingComponent");
    if component.is_empty() {
        causes.push(required(controller_field));
    }
    for problem in crate::selector::qualified_name_problems(component) {
        causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: {component:?}: {problem}"),
            field: controller_field.into(),
        });
    }
    for key in ["reportingInstance", "action", "reason"] {
        let value = text(key);
        if value.is_empty() {
            causes.push(required(key));
        }
        if value.len() > SHORT_FIELD_LIMIT {
            causes.push(too_long(key, SHORT_FIELD_LIMIT));
        }
    }
    if text("message").len() > NOTE_LIMIT {
        causes.push(too_long("message", NOTE_LIMIT));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "box.1", "namespace": "default"},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "reportingController": "agent-sandbox.x-k8s.io/sandbox-controller",
            "reportingInstance": "controller-0",
            "action": "Reconcile",
            "reason": "PodCreated",
            "regarding": {"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox", "name": "box", "namespace": "default", "uid": "u1"},
            "related": {"kind": "Pod", "name": "box"},
            "note": "created pod box",
            "type": "Normal",
        })
    }

    #[test]
    fn events_v1_fields_map_onto_the_core_fields() {
        let core = events_v1_to_core(&recorder_event());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["kind"], "Sandbox");
        assert_eq!(core["involvedObject"]["uid"], "u1");
        assert_eq!(core["message"], "created pod box");
        assert_eq!(
            core["reportingComponent"],
            "agent-sandbox.x-k8s.io/sandbox-controller"
        );
        assert_eq!(core["reportingInstance"], "controller-0");
        assert_eq!(core["series"]["count"], 2);
        assert_eq!(core["related"]["kind"], "Pod");
        assert_eq!(core["action"], "Reconcile");
        assert_eq!(core["source"], json!({}));
        assert!(core["firstTimestamp"].is_null() && core["lastTimestamp"].is_null());
        assert!(core.get("note").is_none() && core.get("regarding").is_none());
    }

    #[test]
    fn a_round_trip_through_the_core_form_keeps_every_v1_field() {
        let original = recorder_event();
        let back = core_to_events_v1(&events_v1_to_core(&original));
        let mut expected = original.clone();
        expected["deprecatedSource"] = json!({});
        assert_eq!(back, expected);
    }

    fn cause_fields(causes: Vec<Cause>) -> Vec<String> {
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.reason))
            .collect()
    }

    /// As kube-apiserver answered the same events (crates/devcluster/tests/parity.rs): without
    /// an `eventTime` only the time, the type and the deprecated fields are checked; with one,
    /// who reported the event and what it did.
    #[test]
    fn new_style_events_need_their_fields_and_none_of_the_deprecated_ones() {
        assert_eq!(
            events_v1_create_causes(&recorder_event(), "default"),
            vec![]
        );
        let mut bare = recorder_event();
        for key in ["eventTime", "action", "reportingInstance"] {
            bare.as_object_mut().unwrap().remove(key);
        }
        bare["type"] = json!("Bogus");
        bare["deprecatedCount"] = json!(3);
        bare["reportingController"] = json!("not a name!");
        assert_eq!(
            cause_fields(events_v1_create_causes(&bare, "default")),
            [
                "eventTime: FieldValueRequired",
                "type: FieldValueInvalid",
                "deprecatedCount: FieldValueInvalid",
            ]
        );
        let mut unreported = recorder_event();
        for key in ["action", "reportingInstance"] {
            unreported.as_object_mut().unwrap().remove(key);
        }
        unreported["reportingController"] = json!("not a name!");
        assert_eq!(
            cause_fields(events_v1_create_causes(&unreported, "default")),
            [
                "reportingController: FieldValueInvalid",
                "reportingInstance: FieldValueRequired",
                "action: FieldValueRequired",
            ]
        );
        // A new-style event about a namespaced object may sit in another namespace; one about an
        // object without a namespace belongs in `default` or `kube-system`.
        assert_eq!(events_v1_create_causes(&recorder_event(), "other"), vec![]);
        let mut cluster_scoped = recorder_event();
        cluster_scoped["regarding"] = json!({"kind": "Node", "name": "node-0"});
        assert_eq!(
            events_v1_create_causes(&cluster_scoped, "kube-system"),
            vec![]
        );
        assert_eq!(
            cause_fields(events_v1_create_causes(&cluster_scoped, "other")),
            ["involvedObject.namespace: FieldValueInvalid"]
        );
    }

    #[test]
    fn core_events_with_an_event_time_say_who_reported_them() {
        let old_style = json!({"metadata": {"name": "e"}, "reason": "R",
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns"}});
        assert_eq!(core_event_create_causes(&old_style, "ns"), vec![]);
        assert_eq!(
            cause_fields(core_event_create_causes(&old_style, "other")),
            ["involvedObject.namespace: FieldValueInvalid"]
        );
        let mut new_style = old_style.clone();
        new_style["eventTime"] = json!("2026-01-01T00:00:00.000000Z");
        assert_eq!(
            cause_fields(core_event_create_causes(&new_style, "ns")),
            [
                "reportingComponent: FieldValueRequired",
                "reportingComponent: FieldValueInvalid",
                "reportingComponent: FieldValueInvalid",
                "reportingInstance: FieldValueRequired",
                "action: FieldValueRequired",
            ]
        );
        new_style["reportingComponent"] = json!("agents.x-k8s.io/sandbox-controller");
        new_style["reportingInstance"] = json!("controller-0");
        new_style["action"] = json!("Check");
        assert_eq!(core_event_create_causes(&new_style, "ns"), vec![]);
    }

    #[test]
    fn core_events_are_served_with_the_v1_names() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "p.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "message": "pulled", "reason": "Pulled", "type": "Normal",
            "source": {"component": "kubelet", "host": "node-0"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
            "count": 3, "reportingComponent": "", "reportingInstance": "",
        });
        let v1 = core_to_events_v1(&core);
        assert_eq!(v1["regarding"]["name"], "p");
        assert_eq!(v1["note"], "pulled");
        assert_eq!(v1["deprecatedSource"]["component"], "kubelet");
        assert_eq!(v1["deprecatedFirstTimestamp"], "2026-01-01T00:00:00Z");
        assert_eq!(v1["deprecatedLastTimestamp"], "2026-01-01T00:05:00Z");
        assert_eq!(v1["deprecatedCount"], 3);
        assert!(v1["eventTime"].is_null(), "eventTime is always serialized");
        assert!(v1.get("reportingController").is_none());
        assert!(v1.get("reportingInstance").is_none());
    }
}
