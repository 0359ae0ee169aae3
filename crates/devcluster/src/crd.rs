//! CustomResourceDefinitions: checking a CRD write, its status (NamesAccepted, Established),
//! turning it into a served resource at once, and the custom-resource write pipeline
//! (prune, default, validate).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::api_error::{ApiError, Cause};
use crate::registry::{ResourceInfo, ScaleSpec};
use crate::schema::StructuralSchema;
use crate::server::SharedState;
use crate::store::WriteOutcome;
use crate::store::notes::WriteNotes;

pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn invalid(field: &str, reason: &str, message: String) -> Cause {
    Cause {
        reason: reason.into(),
        message,
        field: field.into(),
    }
}

/// Validate a CRD and fill in what the API server maintains (status, cleanup finalizer).
pub fn prepare(obj: &mut Value) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let group = spec.get("group").and_then(Value::as_str).unwrap_or("");
    let names = spec.get("names").cloned().unwrap_or(Value::Null);
    let plural = names.get("plural").and_then(Value::as_str).unwrap_or("");
    let kind = names.get("kind").and_then(Value::as_str).unwrap_or("");
    if group.is_empty() {
        causes.push(invalid(
            "spec.group",
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    if plural.is_empty() {
        causes.push(invalid(
            "spec.names.plural",
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    if kind.is_empty() {
        causes.push(invalid(
            "spec.names.kind",
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let name = crate::meta::meta_str(obj, "name").unwrap_or("").to_string();
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        causes.push(invalid(
            "metadata.name",
            "FieldValueInvalid",
            format!("Invalid value: {name:?}: must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") | Some("Cluster") => {}
        Some(other) => causes.push(invalid(
            "spec.scope",
            "FieldValueNotSupported",
            format!(
                "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
            ),
        )),
        None => causes.push(invalid(
            "spec.scope",
            "FieldValueRequired",
            "Required value".into(),
        )),
    }
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(invalid(
            "spec.versions",
            "FieldValueInvalid",
            "Invalid value: null: must have exactly one version marked as storage version".into(),
        ));
    }
    let storage: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(invalid(
            "spec.versions",
            "FieldValueInvalid",
            format!(
                "Invalid value: {:?}: must have exactly one version marked as storage version",
                versions
                    .iter()
                    .map(|v| v["name"].as_str().unwrap_or(""))
                    .collect::<Vec<_>>()
            ),
        ));
    }
    causes.extend(root_metadata_causes(&versions));
    if causes.is_empty() {
        causes.extend(crate::schema_glue::check_crd(obj));
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    let now = crate::meta::now_rfc3339();
    let mut accepted = json!({"plural": plural, "kind": kind});
    for key in ["singular", "shortNames", "listKind", "categories"] {
        if let Some(v) = names.get(key) {
            accepted[key] = v.clone();
        }
    }
    if accepted.get("singular").is_none() {
        accepted["singular"] = json!(kind.to_lowercase());
    }
    if accepted.get("listKind").is_none() {
        accepted["listKind"] = json!(format!("{kind}List"));
    }
    let stored = storage
        .first()
        .and_then(|v| v["name"].as_str())
        .unwrap_or("")
        .to_string();
    let mut stored_versions: Vec<String> = obj
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    if !stored_versions.contains(&stored) {
        stored_versions.push(stored);
    }
    let terminating = obj.pointer("/metadata/deletionTimestamp").is_some();
    // Normalize names in spec as the defaulting of a real server does.
    if let Some(n) = obj.pointer_mut("/spec/names")
        && n.is_object()
    {
        n["singular"] = accepted["singular"].clone();
        n["listKind"] = accepted["listKind"].clone();
    }
    let mut status =
        json!({"acceptedNames": accepted, "storedVersions": stored_versions, "conditions": []});
    if let Some(c) = obj.pointer("/status/conditions") {
        status["conditions"] = c.clone();
    }
    obj["status"] = status;
    crate::kinds::set_condition(
        obj,
        "NamesAccepted",
        "True",
        Some("NoConflicts"),
        Some("no conflicts found"),
        &now,
    );
    crate::kinds::set_condition(
        obj,
        "Established",
        "True",
        Some("InitialNamesAccepted"),
        Some("the initial names have been accepted"),
        &now,
    );
    if terminating {
        crate::kinds::set_condition(
            obj,
            "Terminating",
            "True",
            Some("InstanceDeletionInProgress"),
            Some("CustomResource deletion is in progress"),
            &now,
        );
    } else {
        let mut fins = crate::meta::finalizers(obj);
        if !fins.iter().any(|f| f == CLEANUP_FINALIZER) {
            fins.push(CLEANUP_FINALIZER.into());
            crate::meta::set_finalizers(obj, fins);
        }
    }
    // Clean the lastProbeTime key set_condition adds for pods; CRD conditions do not carry it.
    if let Some(Value::Array(conds)) = obj.pointer_mut("/status/conditions") {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastProbeTime");
            }
        }
    }
    Ok(())
}

/// kube-apiserver's rule for a version's root `metadata` schema: nothing but its type and the
/// `name`/`generateName` properties (a description is refused too).
fn root_metadata_causes(versions: &[Value]) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let Some(metadata) = version
            .pointer("/schema/openAPIV3Schema/properties/metadata")
            .and_then(Value::as_object)
        else {
            continue;
        };
        let allowed = metadata.iter().all(|(key, value)| match key.as_str() {
            "type" => value == "object",
            "properties" => value.as_object().is_some_and(|properties| {
                properties
                    .keys()
                    .all(|name| name == "name" || name == "generateName")
            }),
            _ => false,
        });
        if !allowed {
            causes.push(invalid(
                &format!("spec.versions[{i}].schema.openAPIV3Schema.properties[metadata]"),
                "FieldValueForbidden",
                "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
            ));
        }
    }
    causes
}

/// What a CRD update may not change: its scope, and the versions objects are stored at.
pub fn check_update(old: &Value, new: &Value) -> Result<(), Vec<Cause>> {
    let mut causes = Vec::new();
    let old_scope = old.pointer("/spec/scope").and_then(Value::as_str);
    let new_scope = new.pointer("/spec/scope").and_then(Value::as_str);
    if old_scope != new_scope {
        causes.push(invalid(
            "spec.scope",
            "FieldValueInvalid",
            format!(
                "Invalid value: {:?}: field is immutable",
                new_scope.unwrap_or("")
            ),
        ));
    }
    let versions: Vec<&str> = new
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(|v| v["name"].as_str()).collect())
        .unwrap_or_default();
    let stored = old
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, v) in stored.iter().filter_map(Value::as_str).enumerate() {
        if !versions.contains(&v) {
            causes.push(invalid(
                &format!("status.storedVersions[{i}]"),
                "FieldValueInvalid",
                format!("Invalid value: {v:?}: must appear in spec.versions"),
            ));
        }
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// The served resource described by a CRD.
pub fn resource_info(crd: &Value) -> Option<ResourceInfo> {
    let spec = crd.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let names = spec.get("names")?;
    let plural = names.get("plural")?.as_str()?.to_string();
    let kind = names.get("kind")?.as_str()?.to_string();
    let versions = spec.get("versions")?.as_array()?;
    let mut served: Vec<&Value> = versions.iter().filter(|v| v["served"] != false).collect();
    served.sort_by_key(|v| v["storage"] != true);
    let storage = served.first()?;
    let strings = |key: &str| -> Vec<String> {
        names
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let scale_of = |v: &Value| {
        v.pointer("/subresources/scale").map(|s| ScaleSpec {
            spec_replicas_path: s["specReplicasPath"]
                .as_str()
                .unwrap_or(".spec.replicas")
                .to_string(),
            status_replicas_path: s["statusReplicasPath"]
                .as_str()
                .unwrap_or(".status.replicas")
                .to_string(),
            label_selector_path: s["labelSelectorPath"].as_str().map(String::from),
        })
    };
    let scale = scale_of(storage);
    let version_subresources = served
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or("").to_string(),
                v.pointer("/subresources/status").is_some(),
                scale_of(v),
            )
        })
        .collect();
    Some(ResourceInfo {
        group,
        versions: served
            .iter()
            .filter_map(|v| v["name"].as_str().map(String::from))
            .collect(),
        singular: names
            .get("singular")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| kind.to_lowercase()),
        list_kind: names
            .get("listKind")
            .and_then(Value::as_str)
            .map(String::from)
            .unwrap_or_else(|| format!("{kind}List")),
        plural,
        kind,
        namespaced: spec.get("scope").and_then(Value::as_str) != Some("Cluster"),
        short_names: strings("shortNames"),
        categories: strings("categories"),
        has_status: storage.pointer("/subresources/status").is_some(),
        scale,
        tracks_generation: true,
        delete_returns_object: false,
        allow_unconditional_update: false,
        allow_create_on_update: false,
        crd: Some(std::sync::Arc::new(crd.clone())),
        schemas: crate::schema_glue::compile(crd),
        version_subresources,
        shared_storage: None,
    })
}

/// Keep the registry in step with CRD writes.
pub fn after_write(state: &SharedState, info: &ResourceInfo, outcome: &WriteOutcome) {
    if !(info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions") {
        return;
    }
    match outcome {
        WriteOutcome::Created(crd) | WriteOutcome::Updated(crd) => {
            if let Some(ri) = resource_info(crd) {
                state.registry.insert(ri);
            }
        }
        WriteOutcome::Deleted(crd) => {
            if let Some(ri) = resource_info(crd) {
                state.registry.remove(&ri.group_resource());
            }
        }
        WriteOutcome::Unchanged(_) => {}
    }
}

/// The custom-resource write pipeline: prune unknown fields, default, validate (422 with field
/// causes). `old` is the stored object on update. With `fieldValidation=Strict`, fields the
/// schema does not know are a 400 instead of being dropped silently. Returns the schema the
/// object was admitted under (none for kinds without one), for [`note_admitted`].
///
/// When `old` was itself admitted under this very schema (a note), only the top-level members
/// the write changed are pruned and defaulted: the others are as that admission left them.
pub fn validate_custom(
    notes: &WriteNotes,
    req_query: &crate::server::Query,
    version: &str,
    info: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
) -> Result<Option<Arc<StructuralSchema>>, ApiError> {
    if info.crd.is_none() {
        return Ok(None);
    }
    let Some(schema) = info
        .shared_schema_for(version)
        .or_else(|| info.shared_schema_for(info.storage_version()))
    else {
        return Ok(None);
    };
    let old_admitted_here = old.is_some_and(|o| {
        notes
            .admitted_under
            .get(o)
            .is_some_and(|under| Arc::ptr_eq(&under, schema))
    });
    let (dropped, causes) = crate::schema_glue::admit_onto(schema, old, old_admitted_here, new);
    if !dropped.is_empty() && req_query.get("fieldValidation") == Some("Strict") {
        let fields = dropped
            .iter()
            .map(|p| format!("unknown field \"{}\"", p.trim_start_matches('.')))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {fields}",
            kind = info.kind
        )));
    }
    if causes.is_empty() {
        Ok(Some(schema.clone()))
    } else {
        let name = crate::meta::meta_str(new, "name").unwrap_or("").to_string();
        Err(ApiError::invalid(&info.group, &info.kind, &name, causes))
    }
}

/// Notes the stored custom resource `obj` as admitted under `schema` when the write that
/// stored it admitted its object under that schema onto nothing (a create) or onto a version
/// noted under the same schema: its members are then the admitted object's, the earlier
/// version's, and metadata the server sets. Debug builds check that pruning and defaulting it
/// again changes nothing.
pub fn note_admitted(
    notes: &WriteNotes,
    schema: Option<&Arc<StructuralSchema>>,
    before: Option<&Value>,
    obj: &Value,
) {
    let Some(schema) = schema else {
        return;
    };
    if before.is_some_and(|b| {
        !notes
            .admitted_under
            .get(b)
            .is_some_and(|under| Arc::ptr_eq(&under, schema))
    }) {
        return;
    }
    #[cfg(debug_assertions)]
    {
        let mut copy = obj.clone();
        let dropped = schema.prune_reporting(&mut copy);
        schema.apply_defaults(&mut copy);
        debug_assert!(
            dropped.is_empty() && copy == *obj,
            "a version noted as admitted is not a fixed point: {dropped:?} in {obj}"
        );
    }
    notes.admitted_under.note(obj, schema.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(scope: &str, versions: &[&str]) -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": scope,
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": versions.iter().enumerate().map(|(i, v)| json!({
                    "name": v, "served": true, "storage": i == 0,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "subresources": if i == 0 { json!({"status": {}}) } else { json!({"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}) },
                })).collect::<Vec<_>>(),
            },
        })
    }

    #[test]
    fn a_crd_is_accepted_and_described_as_a_served_resource() {
        let mut c = crd("Namespaced", &["v1", "v1beta1"]);
        prepare(&mut c).unwrap();
        assert_eq!(c["status"]["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
        assert_eq!(finalizers_of(&c), [CLEANUP_FINALIZER]);
        let info = resource_info(&c).unwrap();
        assert_eq!(info.group_resource(), "widgets.example.com");
        assert_eq!(info.versions, ["v1", "v1beta1"]);
        assert!(info.namespaced && info.has_status && info.scale.is_none());
        let v1beta1 = std::sync::Arc::new(info).at_version("v1beta1");
        assert!(v1beta1.scale.is_some(), "scale declared only for v1beta1");
    }

    #[test]
    fn bad_crds_and_bad_updates_are_field_errors() {
        let mut wrong_name = crd("Namespaced", &["v1"]);
        wrong_name["metadata"]["name"] = json!("gadgets.example.com");
        let causes = prepare(&mut wrong_name).unwrap_err();
        assert_eq!(causes[0].field, "metadata.name");

        let mut old = crd("Namespaced", &["v1"]);
        prepare(&mut old).unwrap();
        let causes = check_update(&old, &crd("Cluster", &["v2"])).unwrap_err();
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["spec.scope", "status.storedVersions[0]"]);

        // As kube-apiserver: the root metadata schema carries nothing but its type.
        let mut described = crd("Namespaced", &["v1"]);
        described["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] =
            json!({"metadata": {"type": "object", "description": "Object metadata."}});
        let causes = prepare(&mut described).unwrap_err();
        assert_eq!(
            (causes[0].field.as_str(), causes[0].reason.as_str()),
            (
                "spec.versions[0].schema.openAPIV3Schema.properties[metadata]",
                "FieldValueForbidden"
            )
        );
        let mut plain = crd("Namespaced", &["v1"]);
        plain["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"] =
            json!({"metadata": {"type": "object"}});
        prepare(&mut plain).unwrap();
    }

    fn finalizers_of(v: &Value) -> Vec<String> {
        crate::meta::finalizers(v)
    }
}
