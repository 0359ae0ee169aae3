//! Which objects a list or watch returns: `labelSelector` and `fieldSelector`, with the field
//! labels each kind supports (others are a 400, as on a real server).

use serde_json::Value;

use crate::api_error::ApiError;
use crate::registry::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::server::Query;

pub struct ListFilter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
    /// Field labels of the requested version that select another field of the stored form
    /// (`events.k8s.io/v1` `regarding.name` is the core `involvedObject.name`).
    aliases: &'static [(&'static str, &'static str)],
}

/// The stored field a field label reads: most labels are paths, a few are not (a core Event's
/// `source` is its `source.component`).
const CORE_EVENT_LABELS: &[(&str, &str)] = &[("source", "source.component")];

/// Field labels a kind can be selected by, beyond `metadata.name` and `metadata.namespace`.
fn extra_field_labels(info: &ResourceInfo) -> Vec<String> {
    let fixed: &[&str] = match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("events.k8s.io", "events") => {
            return crate::event_versions::EVENTS_V1_FIELD_LABELS
                .iter()
                .map(|(label, _)| label.to_string())
                .collect();
        }
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "nodes") => &["spec.unschedulable"],
        _ => &[],
    };
    let mut out: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    // CRD selectableFields of the storage version.
    if let Some(crd) = &info.crd
        && let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array)
    {
        for v in versions {
            for f in v
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(path) = f.get("jsonPath").and_then(Value::as_str) {
                    out.push(path.trim_start_matches('.').to_string());
                }
            }
        }
    }
    out
}

/// The string value of a field label on an object ("" when absent, like the real server).
fn field_value(obj: &Value, label: &str) -> Option<String> {
    let mut cur = obj;
    for part in label.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return Some(String::new()),
        }
    }
    Some(match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

impl ListFilter {
    /// Whether the request selects nothing out (no label and no field selector).
    pub fn is_empty(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    pub fn from_query(info: &ResourceInfo, query: &Query) -> Result<Self, ApiError> {
        let labels = match query.get("labelSelector") {
            Some(s) => Some(LabelSelector::parse(s).map_err(|e| {
                // Some parse errors already say "unable to parse requirement".
                let message = e.to_string();
                if message.starts_with("unable to parse requirement: ") {
                    ApiError::bad_request(message)
                } else {
                    ApiError::bad_request(format!("unable to parse requirement: {message}"))
                }
            })?),
            None => None,
        };
        let fields = match query.get("fieldSelector") {
            Some(s) => {
                let sel =
                    FieldSelector::parse(s).map_err(|e| ApiError::bad_request(e.to_string()))?;
                let extra = extra_field_labels(info);
                for name in sel.field_names() {
                    if name != "metadata.name"
                        && name != "metadata.namespace"
                        && !extra.iter().any(|e| e == name)
                    {
                        // Kinds with field labels of their own word it as their conversion
                        // does; the others as the generic check does.
                        return Err(ApiError::bad_request(if extra.is_empty() {
                            format!(
                                "\"{name}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                            )
                        } else {
                            format!("field label not supported: {name}")
                        }));
                    }
                }
                Some(sel)
            }
            None => None,
        };
        let aliases: &'static [(&'static str, &'static str)] =
            match (info.group.as_str(), info.plural.as_str()) {
                ("events.k8s.io", "events") => crate::event_versions::EVENTS_V1_FIELD_LABELS,
                ("", "events") => CORE_EVENT_LABELS,
                _ => &[],
            };
        Ok(ListFilter {
            labels,
            fields,
            aliases,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(l) = &self.labels
            && !l.matches(&crate::meta::labels(obj))
        {
            return false;
        }
        if let Some(f) = &self.fields
            && !f.matches(|label| {
                let path = self
                    .aliases
                    .iter()
                    .find(|(l, _)| *l == label)
                    .map_or(label, |(_, path)| *path);
                field_value(obj, path)
            })
        {
            return false;
        }
        true
    }
}
