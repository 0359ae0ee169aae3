//! [`MetaOnly<K>`]: a response of `K` of which only the metadata is decoded.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// The metadata of a `K` (without `managedFields`), everything else in the input stepped over
/// by the parser without allocating. For write responses a controller reads no more of than
/// the new `resourceVersion` (a status patch of an object with a large spec, a metadata patch):
/// `Api<MetaOnly<K>>` is addressed like `Api<K>`, and `patch`, `patch_status` and `get` return
/// only the metadata. It serializes as `{"metadata": ..}`.
pub struct MetaOnly<K> {
    pub metadata: ObjectMeta,
    kind: PhantomData<fn() -> K>,
}

impl<K> MetaOnly<K> {
    pub fn new(metadata: ObjectMeta) -> Self {
        MetaOnly {
            metadata,
            kind: PhantomData,
        }
    }

    /// The object's `resourceVersion`.
    pub fn resource_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
}

impl<K> Clone for MetaOnly<K> {
    fn clone(&self) -> Self {
        MetaOnly::new(self.metadata.clone())
    }
}

impl<K> fmt::Debug for MetaOnly<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetaOnly")
            .field("metadata", &self.metadata)
            .finish()
    }
}

impl<K> PartialEq for MetaOnly<K> {
    fn eq(&self, other: &Self) -> bool {
        self.metadata == other.metadata
    }
}

impl<K> Default for MetaOnly<K> {
    fn default() -> Self {
        MetaOnly::new(ObjectMeta::default())
    }
}

impl<K: Resource> Resource for MetaOnly<K> {
    resource_type_of_wrapped!(K);

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<K> Serialize for MetaOnly<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut s = serializer.serialize_struct("MetaOnly", 1)?;
        s.serialize_field("metadata", &self.metadata)?;
        s.end()
    }
}

/// The keys of an object as far as [`MetaOnly`] cares.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "camelCase")]
enum Field {
    Metadata,
    #[serde(other)]
    Other,
}

struct MetaOnlyVisitor<K>(PhantomData<fn() -> K>);

impl<'de, K> Visitor<'de> for MetaOnlyVisitor<K> {
    type Value = MetaOnly<K>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MetaOnly<K>, A::Error> {
        let mut metadata = None;
        while let Some(key) = map.next_key::<Field>()? {
            match key {
                Field::Metadata if metadata.is_some() => {
                    return Err(de::Error::duplicate_field("metadata"));
                }
                Field::Metadata => metadata = Some(map.next_value::<LeanMeta>()?.0),
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(MetaOnly::new(metadata.unwrap_or_default()))
    }
}

/// `ObjectMeta` through [`super::object_meta`] (no managedFields).
struct LeanMeta(ObjectMeta);

impl<'de> Deserialize<'de> for LeanMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::object_meta(deserializer).map(LeanMeta)
    }
}

impl<'de, K> Deserialize<'de> for MetaOnly<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MetaOnlyVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;

    #[test]
    fn only_the_metadata_is_decoded_and_managed_fields_are_left_out() {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "42",
                         "labels": {"a": "b"}, "managedFields": [{"manager": "m"}]},
            "status": {"phase": "Running"}
        });
        let decoded: MetaOnly<Pod> = serde_json::from_value(body).expect("a valid Pod");
        assert_eq!(decoded.resource_version(), Some("42"));
        assert_eq!(decoded.metadata.name.as_deref(), Some("p"));
        assert_eq!(
            decoded.metadata.labels,
            Some([("a".to_string(), "b".to_string())].into())
        );
        assert_eq!(decoded.metadata.managed_fields, None);
    }

    #[test]
    fn it_is_addressed_like_the_object_and_rejects_what_is_not_one() {
        assert_eq!(
            MetaOnly::<Pod>::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert!(serde_json::from_str::<MetaOnly<Pod>>("[1, 2]").is_err());
        assert!(
            serde_json::from_str::<MetaOnly<Pod>>(r#"{"metadata": {"name": 5}}"#).is_err(),
            "a malformed metadata is an error, not an empty one"
        );
        let without: MetaOnly<Pod> = serde_json::from_str(r#"{"kind": "Pod"}"#).unwrap();
        assert_eq!(without.metadata, ObjectMeta::default());
    }
}
