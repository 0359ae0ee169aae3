//! Multi-document YAML manifests and strict typing of their documents.
//!
//! [`parse_documents`] splits a YAML stream into documents; [`TypedObject::from_document`]
//! turns one document into the k8s-openapi type its `apiVersion` and `kind` name, and refuses
//! any field that type does not know (a misspelled field would otherwise be dropped silently by
//! deserialization and then by the API server).

use std::any::TypeId;
use std::fmt;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::{Metadata, NamespaceResourceScope, Resource};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::XtaskError;

/// Splits a YAML stream into its documents, converted to JSON values.
///
/// An empty document (only comments, or a trailing `---`) is an error: it is noise in a
/// release file and usually a mistake in a hand-written piece.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Value>, XtaskError> {
    let mut documents = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let position = index + 1;
        let yaml = serde_yaml::Value::deserialize(document).map_err(|e| XtaskError::Yaml {
            origin: format!("{origin} (document {position})"),
            message: e.to_string(),
        })?;
        if yaml.is_null() {
            return Err(XtaskError::Yaml {
                origin: format!("{origin} (document {position})"),
                message: "empty YAML document (remove the stray `---` or comment-only block)"
                    .to_string(),
            });
        }
        let json = serde_json::to_value(&yaml).map_err(|e| XtaskError::Yaml {
            origin: format!("{origin} (document {position})"),
            message: format!("not representable as JSON: {e}"),
        })?;
        documents.push(json);
    }
    Ok(documents)
}

/// The identity of an object in a cluster: what `kubectl apply` keys on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// `metadata.namespace`; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{} {}/{}", self.kind, namespace, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A manifest document parsed into its k8s-openapi type.
///
/// These are the kinds the release manifests are made of; any other kind is refused so a new
/// kind has to be added here (and so gets the same strict checking) before it can ship.
/// The large types are boxed to keep the enum small.
#[derive(Debug, Clone, PartialEq)]
pub enum TypedObject {
    Namespace(Namespace),
    ServiceAccount(ServiceAccount),
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    Service(Box<Service>),
    Deployment(Box<Deployment>),
    CustomResourceDefinition(Box<CustomResourceDefinition>),
}

/// Deserializes `document` as `T`, then checks that serializing it back gives the same
/// document: a field `T` does not know, or a value it would change, is an error naming the
/// field's path.
fn strict<T>(document: &Value, origin: &str) -> Result<T, XtaskError>
where
    T: Resource + DeserializeOwned + serde::Serialize,
{
    let what = format!("{} {}", T::API_VERSION, T::KIND);
    let object: T =
        serde_json::from_value(document.clone()).map_err(|e| XtaskError::InvalidManifest {
            origin: origin.to_string(),
            message: format!("not a valid {what}: {e}"),
        })?;
    let round_trip = serde_json::to_value(&object).map_err(|e| XtaskError::InvalidManifest {
        origin: origin.to_string(),
        message: format!("cannot serialize {what}: {e}"),
    })?;
    if let Some(difference) = first_difference(document, &round_trip, String::new()) {
        return Err(XtaskError::InvalidManifest {
            origin: origin.to_string(),
            message: format!("{difference} (not a field of {what}, or an invalid value for it)"),
        });
    }
    Ok(object)
}

/// The first place where `original` and `round_trip` differ, as a readable path.
fn first_difference(original: &Value, round_trip: &Value, path: String) -> Option<String> {
    let shown = |p: &str| {
        if p.is_empty() {
            ".".to_string()
        } else {
            p.to_string()
        }
    };
    match (original, round_trip) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let child = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match b.get(key) {
                    None => return Some(format!("field {child} is dropped")),
                    Some(other) => {
                        if let Some(found) = first_difference(value, other, child) {
                            return Some(found);
                        }
                    }
                }
            }
            b.keys()
                .find(|key| !a.contains_key(*key))
                .map(|key| format!("field {}.{key} appears on re-serialization", shown(&path)))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, format!("{path}[{i}]"))),
        _ if original == round_trip => None,
        _ => Some(format!(
            "value at {} changes from {original} to {round_trip}",
            shown(&path)
        )),
    }
}

fn is_namespaced<T: Resource>() -> bool
where
    T::Scope: 'static,
{
    TypeId::of::<T::Scope>() == TypeId::of::<NamespaceResourceScope>()
}

/// What every typed object offers the checks below.
struct Facts<'a> {
    api_version: &'static str,
    kind: &'static str,
    namespaced: bool,
    metadata: &'a ObjectMeta,
}

fn facts<T>(object: &T) -> Facts<'_>
where
    T: Resource + Metadata<Ty = ObjectMeta>,
    T::Scope: 'static,
{
    Facts {
        api_version: T::API_VERSION,
        kind: T::KIND,
        namespaced: is_namespaced::<T>(),
        metadata: object.metadata(),
    }
}

impl TypedObject {
    /// Parses one document into the type its `apiVersion`/`kind` claim, strictly (see the
    /// module docs), and checks the metadata a release object needs: a name, and a namespace
    /// exactly when the kind is namespaced (so `kubectl apply` never falls back to the
    /// namespace of the current context).
    pub fn from_document(document: &Value, origin: &str) -> Result<Self, XtaskError> {
        let api_version = document.get("apiVersion").and_then(Value::as_str);
        let kind = document.get("kind").and_then(Value::as_str);
        let (Some(api_version), Some(kind)) = (api_version, kind) else {
            return Err(XtaskError::InvalidManifest {
                origin: origin.to_string(),
                message: "document has no string apiVersion and kind".to_string(),
            });
        };
        let object = match (api_version, kind) {
            ("v1", "Namespace") => Self::Namespace(strict(document, origin)?),
            ("v1", "ServiceAccount") => Self::ServiceAccount(strict(document, origin)?),
            ("v1", "Service") => Self::Service(Box::new(strict(document, origin)?)),
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                Self::ClusterRole(strict(document, origin)?)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                Self::ClusterRoleBinding(strict(document, origin)?)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => Self::Role(strict(document, origin)?),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                Self::RoleBinding(strict(document, origin)?)
            }
            ("apps/v1", "Deployment") => Self::Deployment(Box::new(strict(document, origin)?)),
            ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
                Self::CustomResourceDefinition(Box::new(strict(document, origin)?))
            }
            _ => {
                return Err(XtaskError::InvalidManifest {
                    origin: origin.to_string(),
                    message: format!(
                        "kind {kind} of {api_version} is not one the release manifests may contain"
                    ),
                });
            }
        };
        object.check_metadata(origin)?;
        Ok(object)
    }

    fn facts(&self) -> Facts<'_> {
        match self {
            Self::Namespace(o) => facts(o),
            Self::ServiceAccount(o) => facts(o),
            Self::ClusterRole(o) => facts(o),
            Self::ClusterRoleBinding(o) => facts(o),
            Self::Role(o) => facts(o),
            Self::RoleBinding(o) => facts(o),
            Self::Service(o) => facts(o.as_ref()),
            Self::Deployment(o) => facts(o.as_ref()),
            Self::CustomResourceDefinition(o) => facts(o.as_ref()),
        }
    }

    fn check_metadata(&self, origin: &str) -> Result<(), XtaskError> {
        let facts = self.facts();
        let problem = |message: String| XtaskError::InvalidManifest {
            origin: origin.to_string(),
            message,
        };
        if facts.metadata.name.as_deref().unwrap_or("").is_empty() {
            return Err(problem(format!("{} has no metadata.name", facts.kind)));
        }
        let has_namespace = !facts.metadata.namespace.as_deref().unwrap_or("").is_empty();
        if facts.namespaced && !has_namespace {
            return Err(problem(format!(
                "{} is namespaced but sets no metadata.namespace",
                facts.kind
            )));
        }
        if !facts.namespaced && facts.metadata.namespace.is_some() {
            return Err(problem(format!(
                "{} is cluster-scoped but sets metadata.namespace",
                facts.kind
            )));
        }
        Ok(())
    }

    /// The (apiVersion, kind, namespace, name) of this object.
    pub fn key(&self) -> ObjectKey {
        let facts = self.facts();
        ObjectKey {
            api_version: facts.api_version.to_string(),
            kind: facts.kind.to_string(),
            namespace: facts.metadata.namespace.clone(),
            name: facts.metadata.name.clone().unwrap_or_default(),
        }
    }
}

/// Parses every document of a manifest file strictly; see [`TypedObject::from_document`].
/// Error messages name `origin` and the 1-based document number.
pub fn parse_typed_manifest(text: &str, origin: &str) -> Result<Vec<TypedObject>, XtaskError> {
    parse_documents(text, origin)?
        .iter()
        .enumerate()
        .map(|(index, document)| {
            TypedObject::from_document(document, &format!("{origin} (document {})", index + 1))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelled_field_is_refused_with_its_path() {
        let text = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n  namespace: b\nautomountServiceAccountTokn: false\n";
        let error = parse_typed_manifest(text, "piece.yaml")
            .unwrap_err()
            .to_string();
        assert!(error.contains("piece.yaml (document 1)"), "{error}");
        assert!(
            error.contains("field automountServiceAccountTokn is dropped"),
            "{error}"
        );
    }

    #[test]
    fn namespaced_kind_without_namespace_is_refused() {
        let text = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n";
        let error = parse_typed_manifest(text, "p").unwrap_err().to_string();
        assert!(
            error.contains("namespaced but sets no metadata.namespace"),
            "{error}"
        );
    }

    #[test]
    fn cluster_scoped_kind_with_namespace_is_refused() {
        let text = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: a\n  namespace: b\n";
        let error = parse_typed_manifest(text, "p").unwrap_err().to_string();
        assert!(
            error.contains("cluster-scoped but sets metadata.namespace"),
            "{error}"
        );
    }

    #[test]
    fn unknown_kind_and_empty_documents_are_refused() {
        let unknown = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  namespace: b\n";
        let error = parse_typed_manifest(unknown, "p").unwrap_err().to_string();
        assert!(error.contains("kind Pod of v1"), "{error}");
        let empty = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n---\n# nothing\n";
        let error = parse_typed_manifest(empty, "p").unwrap_err().to_string();
        assert!(
            error.contains("(document 2): empty YAML document"),
            "{error}"
        );
    }

    #[test]
    fn valid_documents_give_their_keys() {
        let text = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n  namespace: ns\n";
        let keys: Vec<String> = parse_typed_manifest(text, "p")
            .unwrap()
            .iter()
            .map(|o| o.key().to_string())
            .collect();
        assert_eq!(keys, ["Namespace ns", "ServiceAccount ns/sa"]);
    }
}
