//! Decoding API objects without their `metadata.managedFields`.
//!
//! The API server sends every object with its server-side-apply bookkeeping
//! (`metadata.managedFields`): one entry per field manager, each holding a tree of every field
//! that manager set. The controllers never read it, yet kube decodes it into
//! `ManagedFieldsEntry`/`FieldsV1` values for every watch event and every response (under load
//! about a tenth of a controller's CPU), only for them to be dropped right after.
//!
//! The decoders here hand the object's own `Deserialize` a view of the input in which
//! `metadata.managedFields` reads as absent: the parser still steps over its bytes (it must, to
//! find the next field) but allocates nothing for them. Everything else reaches the object's
//! decoder untouched, so every other field decodes exactly as before. (A watch event whose
//! `object` comes before its `type` is buffered whole by serde before it is decoded, so there
//! the field is allocated once, then still left out; API servers send `type` first.)
//!
//! - [`Lean<K>`]: `K` decoded this way. It is a [`kube::Resource`] addressed like `K`, so
//!   `Api<Lean<K>>` and `watcher(Api<Lean<K>>, ..)` read and watch `K` without managedFields;
//!   [`lean_events`] turns such a watch back into events of `K` for a reflector of `K`.
//! - [`MetaOnly<K>`]: only the metadata of `K`, decoded this way (the rest stepped over), for
//!   write responses of which nothing but the new `resourceVersion` is read.
//! - [`object_meta`]: an `ObjectMeta` decoded this way, for
//!   `#[serde(deserialize_with = "controller_common::lean::object_meta")]` on a controller's
//!   own cached object types.

use std::borrow::Cow;
use std::fmt;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
    value::UnitDeserializer,
};
use serde::{Deserialize, Serialize};

/// The type-level half of [`Resource`] for a wrapper of `K` (kind, group, version, plural,
/// scope), so an `Api` of the wrapper addresses the same URLs as an `Api<K>`.
macro_rules! resource_type_of_wrapped {
    ($k:ident) => {
        type DynamicType = $k::DynamicType;
        type Scope = $k::Scope;

        fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
            $k::kind(dt)
        }
        fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
            $k::group(dt)
        }
        fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
            $k::version(dt)
        }
        fn api_version(dt: &Self::DynamicType) -> Cow<'_, str> {
            $k::api_version(dt)
        }
        fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
            $k::plural(dt)
        }
    };
}

mod meta_only;

pub use meta_only::MetaOnly;

/// The field of an object that holds its metadata.
const METADATA: &str = "metadata";
/// The metadata field skipped while decoding.
const MANAGED_FIELDS: &str = "managedFields";

/// `K`, decoded with `metadata.managedFields` left out (see the module documentation).
/// Serializes as `K`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Lean<K>(pub K);

impl<K> Lean<K> {
    pub fn into_inner(self) -> K {
        self.0
    }
}

impl<'de, K: Deserialize<'de>> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::deserialize(Filtered {
            inner: deserializer,
            level: Level::Object,
        })
        .map(Lean)
    }
}

impl<K: Serialize> Serialize for Lean<K> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<K: Resource> Resource for Lean<K> {
    resource_type_of_wrapped!(K);

    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

/// An `ObjectMeta` decoded with `managedFields` left out, for
/// `#[serde(deserialize_with = "controller_common::lean::object_meta")]`.
pub fn object_meta<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ObjectMeta, D::Error> {
    ObjectMeta::deserialize(Filtered {
        inner: deserializer,
        level: Level::Metadata,
    })
}

/// One watcher event of a lean watch as the same event of `K` (a move, no copy).
pub fn unwrap_event<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(obj) => watcher::Event::Apply(obj.0),
        watcher::Event::Delete(obj) => watcher::Event::Delete(obj.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(obj) => watcher::Event::InitApply(obj.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// A watch of `Lean<K>` as a watch of `K`, ready for `.reflect(..)` into a store of `K`.
pub fn lean_events<K, S>(stream: S) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
where
    S: Stream<Item = Result<watcher::Event<Lean<K>>, watcher::Error>>,
{
    stream.map(|event| event.map(unwrap_event))
}

/// Which map the filter is applied to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The object: its `metadata` value is filtered at [`Level::Metadata`].
    Object,
    /// The object's metadata: its `managedFields` reads as absent.
    Metadata,
}

impl Level {
    /// The key of this level's map that gets special treatment.
    fn key(self) -> &'static str {
        match self {
            Level::Object => METADATA,
            Level::Metadata => MANAGED_FIELDS,
        }
    }
}

/// A deserializer whose top-level map is seen through [`FilteredMap`]; nothing else changes.
struct Filtered<D> {
    inner: D,
    level: Level,
}

/// Forwards `deserialize_*` methods to the inner deserializer with the visitor wrapped.
macro_rules! forward_filtered {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
                self.inner.$method($($arg,)* FilteredVisitor { inner: visitor, level: self.level })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Filtered<D> {
    type Error = D::Error;

    forward_filtered! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

/// Passes every value on to `inner` unchanged, except that a map is seen through
/// [`FilteredMap`] and an option's or newtype's content through [`Filtered`] (an
/// `Option<ObjectMeta>` field is filtered like an `ObjectMeta` one).
struct FilteredVisitor<V> {
    inner: V,
    level: Level,
}

/// Forwards `visit_*` methods with one value argument to the inner visitor.
macro_rules! forward_visits {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
                self.inner.$method(v)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for FilteredVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    forward_visits! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Filtered {
            inner: deserializer,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Filtered {
            inner: deserializer,
            level: self.level,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(FilteredMap {
            inner: map,
            level: self.level,
            special: false,
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(data)
    }
}

/// A map whose [`Level::key`] entry is handled on the way: at the object level its value is
/// filtered as metadata, at the metadata level it is stepped over and reads as `null` (an
/// absent optional field).
struct FilteredMap<A> {
    inner: A,
    level: Level,
    /// The key just read was this level's special key.
    special: bool,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for FilteredMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.special = false;
        self.inner.next_key_seed(ProbeSeed {
            inner: seed,
            target: self.level.key(),
            hit: &mut self.special,
        })
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        if !std::mem::take(&mut self.special) {
            return self.inner.next_value_seed(seed);
        }
        match self.level {
            Level::Object => self.inner.next_value_seed(MetadataSeed(seed)),
            Level::Metadata => {
                self.inner.next_value::<IgnoredAny>()?;
                seed.deserialize(UnitDeserializer::new())
            }
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// Decodes the object's metadata value through the metadata-level filter.
struct MetadataSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for MetadataSeed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Filtered {
            inner: deserializer,
            level: Level::Metadata,
        })
    }
}

/// Decodes a map key with `inner`, noting whether it was `target`.
struct ProbeSeed<'a, S> {
    inner: S,
    target: &'static str,
    hit: &'a mut bool,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for ProbeSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(ProbeDeserializer {
            inner: deserializer,
            target: self.target,
            hit: self.hit,
        })
    }
}

struct ProbeDeserializer<'a, D> {
    inner: D,
    target: &'static str,
    hit: &'a mut bool,
}

impl<'a, D> ProbeDeserializer<'a, D> {
    fn split<V>(self, visitor: V) -> (D, ProbeVisitor<'a, V>) {
        (
            self.inner,
            ProbeVisitor {
                inner: visitor,
                target: self.target,
                hit: self.hit,
            },
        )
    }
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ProbeDeserializer<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let (inner, visitor) = self.split(visitor);
        inner.deserialize_any(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let (inner, visitor) = self.split(visitor);
        inner.deserialize_identifier(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let (inner, visitor) = self.split(visitor);
        inner.deserialize_str(visitor)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        let (inner, visitor) = self.split(visitor);
        inner.deserialize_string(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_ignored_any(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum
    }
}

/// Passes a key on to the key's own visitor, noting whether it was the target.
struct ProbeVisitor<'a, V> {
    inner: V,
    target: &'static str,
    hit: &'a mut bool,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for ProbeVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        *self.hit = v == self.target;
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        *self.hit = v == self.target;
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        *self.hit = v == self.target;
        self.inner.visit_string(v)
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<V::Value, E> {
        *self.hit = v == self.target.as_bytes();
        self.inner.visit_bytes(v)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, v: &'de [u8]) -> Result<V::Value, E> {
        *self.hit = v == self.target.as_bytes();
        self.inner.visit_borrowed_bytes(v)
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<V::Value, E> {
        *self.hit = v == self.target.as_bytes();
        self.inner.visit_byte_buf(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kube::core::WatchEvent;
    use serde_json::json;

    fn object_with_managed_fields() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": "cm", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"managedFields": "a label, not the field"},
                "annotations": {"metadata": "an annotation"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                                   "apiVersion": "v1", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:data": {"f:k": {}}}}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                     "uid": "u-2", "controller": true}]
            },
            "data": {"managedFields": "data, not metadata", "k": "v"}
        })
    }

    #[test]
    fn a_lean_object_is_the_object_without_managed_fields() {
        let text = object_with_managed_fields().to_string();
        let mut full: ConfigMap = serde_json::from_str(&text).expect("valid");
        assert!(full.metadata.managed_fields.is_some(), "the input has them");
        let lean: Lean<ConfigMap> = serde_json::from_str(&text).expect("valid");
        full.metadata.managed_fields = None;
        assert_eq!(lean.0, full);
    }

    #[test]
    fn every_object_of_a_list_decodes_lean() {
        let mut service = object_with_managed_fields();
        service["kind"] = json!("Service");
        service["spec"] = json!({"clusterIP": "10.0.0.1", "ports": [{"port": 80}]});
        service.as_object_mut().map(|o| o.remove("data"));
        let list = json!({"apiVersion": "v1", "kind": "ServiceList", "metadata": {"resourceVersion": "9"},
                          "items": [service.clone(), service.clone()]});
        let mut full: Service = serde_json::from_value(service).expect("valid");
        assert!(full.metadata.managed_fields.is_some(), "the input has them");
        full.metadata.managed_fields = None;
        let lean: kube::core::ObjectList<Lean<Service>> =
            serde_json::from_str(&list.to_string()).expect("valid");
        assert_eq!(lean.items.len(), 2);
        for item in lean.items {
            assert_eq!(item.0, full);
        }
    }

    #[test]
    fn watch_events_decode_lean_whatever_the_field_order() {
        let object = object_with_managed_fields();
        let type_first = format!(r#"{{"type":"MODIFIED","object":{object}}}"#);
        let object_first = format!(r#"{{"object":{object},"type":"ADDED"}}"#);
        for line in [type_first, object_first] {
            let event: WatchEvent<Lean<ConfigMap>> = serde_json::from_str(&line).expect("valid");
            let (WatchEvent::Added(obj) | WatchEvent::Modified(obj)) = event else {
                panic!("an object event");
            };
            assert_eq!(obj.0.metadata.managed_fields, None);
            assert_eq!(obj.0.metadata.name.as_deref(), Some("cm"));
            assert_eq!(
                obj.0.metadata.owner_references.as_ref().map(Vec::len),
                Some(1)
            );
            assert_eq!(
                obj.0.data.as_ref().and_then(|d| d.get("managedFields")),
                Some(&"data, not metadata".to_owned())
            );
        }
    }

    #[test]
    fn metadata_alone_decodes_lean() {
        #[derive(Deserialize)]
        struct Cached {
            #[serde(deserialize_with = "object_meta")]
            metadata: ObjectMeta,
        }
        let cached: Cached = serde_json::from_value(object_with_managed_fields()).expect("valid");
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("42"));
        assert_eq!(
            cached.metadata.labels.as_ref().map(|l| l.len()),
            Some(1),
            "a label named like the field is kept"
        );
    }

    #[test]
    fn bad_input_still_fails_with_the_objects_own_error() {
        let err = serde_json::from_value::<Lean<Service>>(json!({
            "metadata": {"name": 7, "managedFields": []}
        }))
        .expect_err("a number is not a name");
        assert!(err.to_string().contains("invalid type"), "{err}");
        let err = serde_json::from_str::<Lean<Service>>(r#"{"metadata": {"managedFields": [}}"#)
            .expect_err("broken JSON inside the skipped field");
        assert!(err.is_syntax(), "{err}");
    }

    #[test]
    fn it_is_addressed_like_the_object() {
        assert_eq!(
            Lean::<Service>::url_path(&(), Some("ns")),
            Service::url_path(&(), Some("ns"))
        );
        assert_eq!(Lean::<Service>::api_version(&()), "v1");
        assert_eq!(Lean::<Service>::kind(&()), "Service");
    }
}
