//! The Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`) of the built-in
//! kinds devcluster serves: request bodies are read, and answers (objects, lists, watch streams)
//! are written in it when the client asks for it first in `Accept`, as client-go does for
//! built-in kinds. Custom resources stay JSON, as on a real server.
//!
//! An object is `k8s\0` followed by a `runtime.Unknown` (`typeMeta`, `raw`: the object's own
//! message). A watch stream is length-prefixed frames (4 bytes, big-endian), each a bare
//! `WatchEvent` message (`type`, `object`: the object's envelope as raw bytes).
//!
//! Why not a crate of generated messages: `k8s-pb` (prost messages of every Kubernetes proto)
//! would give typed messages, but devcluster keeps objects as JSON, and `k8s-pb` has no JSON
//! mapping (no serde, no reflection), so every message type would need a converter written by
//! hand: the kinds devcluster serves reach 381 message types with 1,490 fields (counted in
//! `schema.json`). Instead one table-driven codec (`codec.rs`, ~500 lines) reads the field
//! table that `tests/protobuf-client/schema` generates from client-go's own Go types (numbers,
//! JSON names, `omitempty`, pointers, inline structs), and `prost`'s wire primitives do the
//! encoding. A test checks the committed table against a fresh generation when Go is there.

mod codec;
mod schema;

use serde_json::{Map, Value};

pub use schema::schema;

/// The media type of the protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

const MAGIC: &[u8] = b"k8s\0";

/// Why a protobuf body cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the protobuf body has no k8s envelope")]
    NoEnvelope,
    #[error("cannot decode the protobuf body: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("cannot decode the protobuf body: {0}")]
    Invalid(String),
    /// A kind devcluster cannot read as protobuf (answered 415).
    #[error("protobuf is not supported for {0}; send JSON")]
    Unsupported(String),
}

/// `runtime.Unknown` as far as the envelope goes.
#[derive(Clone, PartialEq, prost::Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
    #[prost(string, tag = "3")]
    content_encoding: String,
    #[prost(string, tag = "4")]
    content_type: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

/// `metav1.WatchEvent`.
#[derive(Clone, PartialEq, prost::Message)]
struct WatchEvent {
    #[prost(string, tag = "1")]
    type_: String,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RawExtension {
    #[prost(bytes = "vec", tag = "1")]
    raw: Vec<u8>,
}

/// Decodes a protobuf request body into the JSON object it stands for (with `apiVersion` and
/// `kind` from its envelope).
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    use prost::Message as _;
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoEnvelope)?;
    let unknown = Unknown::decode(rest)?;
    let type_meta = unknown.type_meta.unwrap_or_default();
    let table = schema();
    let index = table
        .kind(&type_meta.api_version, &type_meta.kind)
        .ok_or_else(|| {
            ProtobufError::Unsupported(format!(
                "{}, Kind={}",
                type_meta.api_version, type_meta.kind
            ))
        })?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(type_meta.api_version));
    object.insert("kind".into(), Value::String(type_meta.kind));
    object.extend(codec::to_json(table, index, &unknown.raw)?);
    Ok(Value::Object(object))
}

/// Whether devcluster writes this kind at this API version in protobuf.
pub fn serves(api_version: &str, kind: &str) -> bool {
    schema().kind(api_version, kind).is_some()
}

/// Encodes an object (or list, or `Status`) in its envelope, by its `apiVersion` and `kind`;
/// `None` when devcluster has no protobuf form of it.
pub fn encode(object: &Value) -> Option<Result<Vec<u8>, ProtobufError>> {
    use prost::Message as _;
    let map = object.as_object()?;
    let api_version = map.get("apiVersion")?.as_str()?;
    let kind = map.get("kind")?.as_str()?;
    let table = schema();
    let index = table.kind(api_version, kind)?;
    let mut raw = Vec::new();
    if let Err(e) = codec::from_json(table, index, map, &mut raw) {
        return Some(Err(e));
    }
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }),
        raw,
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let mut out = MAGIC.to_vec();
    unknown.encode(&mut out).ok()?;
    Some(Ok(out))
}

/// One watch frame (`{"type": ..., "object": ...}`) as a length-prefixed protobuf frame of a
/// `WatchEvent`.
pub fn encode_watch_frame(frame: &Value) -> Result<Vec<u8>, ProtobufError> {
    use prost::Message as _;
    let type_ = frame
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let object = frame.get("object").cloned().unwrap_or(Value::Null);
    let raw = match encode(&object) {
        Some(encoded) => encoded?,
        None => {
            return Err(ProtobufError::Unsupported(format!(
                "{}, Kind={}",
                object["apiVersion"], object["kind"]
            )));
        }
    };
    // The stream's frames are raw `WatchEvent` messages (no envelope); the object inside is
    // enveloped.
    let message = WatchEvent {
        type_,
        object: Some(RawExtension { raw }),
    }
    .encode_to_vec();
    let len = u32::try_from(message.len())
        .map_err(|_| ProtobufError::Invalid("a watch event over 4 GiB".into()))?;
    let mut out = len.to_be_bytes().to_vec();
    out.extend_from_slice(&message);
    Ok(out)
}

/// Whether the client's `Accept` asks for protobuf before anything devcluster would answer
/// otherwise: its first media range is plain protobuf (no `as=` conversion such as `Table`).
pub fn wants_protobuf(accept: &str) -> bool {
    accept
        .split(',')
        .map(str::trim)
        .find(|range| !range.is_empty())
        .is_some_and(|range| {
            let mut parts = range.split(';').map(str::trim);
            parts.next() == Some(MEDIA_TYPE) && !parts.any(|p| p.starts_with("as="))
        })
}

#[cfg(test)]
mod tests;
