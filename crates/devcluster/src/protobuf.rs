//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`) for the few built-in kinds
//! kubectl's typed generators send that way (`kubectl create namespace|configmap|secret|
//! serviceaccount`). The envelope is `k8s\0` + `runtime.Unknown`; the object inside is decoded
//! with prost messages that declare only the fields those commands set, then turned into the
//! JSON form the rest of the server works with. Other kinds are answered 415.

use std::collections::BTreeMap;

use base64::Engine;
use prost::Message;
use serde_json::{Map, Value, json};

const MAGIC: &[u8] = b"k8s\0";

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    uid: String,
    #[prost(string, tag = "5")]
    api_version: String,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    generate_name: String,
    #[prost(string, tag = "3")]
    namespace: String,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct NamespaceSpec {
    #[prost(string, repeated, tag = "1")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct Namespace {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<NamespaceSpec>,
}

#[derive(Clone, PartialEq, Message)]
struct ConfigMap {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, string", tag = "2")]
    data: BTreeMap<String, String>,
    #[prost(btree_map = "string, bytes", tag = "3")]
    binary_data: BTreeMap<String, Vec<u8>>,
    #[prost(bool, optional, tag = "4")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct Secret {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(btree_map = "string, bytes", tag = "2")]
    data: BTreeMap<String, Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    type_: Option<String>,
    #[prost(btree_map = "string, string", tag = "4")]
    string_data: BTreeMap<String, String>,
    #[prost(bool, optional, tag = "5")]
    immutable: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct LocalObjectReference {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, Message)]
struct ServiceAccount {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "3")]
    image_pull_secrets: Vec<LocalObjectReference>,
    #[prost(bool, optional, tag = "4")]
    automount_service_account_token: Option<bool>,
}

/// Why a protobuf body cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the protobuf body has no k8s envelope")]
    NoEnvelope,
    #[error("cannot decode the protobuf body: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A kind devcluster cannot read as protobuf (answered 415).
    #[error("protobuf is not supported for {0}; send JSON")]
    Unsupported(String),
}

fn b64(bytes: &[u8]) -> Value {
    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
}

fn metadata(m: Option<ObjectMeta>) -> Value {
    let m = m.unwrap_or_default();
    let mut out = Map::new();
    let mut put = |k: &str, v: Value| {
        out.insert(k.to_string(), v);
    };
    if !m.name.is_empty() {
        put("name", json!(m.name));
    }
    if !m.generate_name.is_empty() {
        put("generateName", json!(m.generate_name));
    }
    if !m.namespace.is_empty() {
        put("namespace", json!(m.namespace));
    }
    if !m.labels.is_empty() {
        put("labels", json!(m.labels));
    }
    if !m.annotations.is_empty() {
        put("annotations", json!(m.annotations));
    }
    if !m.finalizers.is_empty() {
        put("finalizers", json!(m.finalizers));
    }
    if !m.owner_references.is_empty() {
        let refs: Vec<Value> = m
            .owner_references
            .iter()
            .map(|r| {
                let mut v = json!({"apiVersion": r.api_version, "kind": r.kind, "name": r.name, "uid": r.uid});
                if let Some(c) = r.controller {
                    v["controller"] = json!(c);
                }
                if let Some(b) = r.block_owner_deletion {
                    v["blockOwnerDeletion"] = json!(b);
                }
                v
            })
            .collect();
        put("ownerReferences", json!(refs));
    }
    Value::Object(out)
}

/// Decode a protobuf request body into the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoEnvelope)?;
    let unknown = Unknown::decode(rest)?;
    let tm = unknown.type_meta.unwrap_or_default();
    let raw = unknown.raw.as_slice();
    let mut obj = match (tm.api_version.as_str(), tm.kind.as_str()) {
        ("v1", "Namespace") => {
            let ns = Namespace::decode(raw)?;
            let mut v = json!({"metadata": metadata(ns.metadata)});
            if let Some(spec) = ns.spec.filter(|s| !s.finalizers.is_empty()) {
                v["spec"] = json!({"finalizers": spec.finalizers});
            }
            v
        }
        ("v1", "ConfigMap") => {
            let cm = ConfigMap::decode(raw)?;
            let mut v = json!({"metadata": metadata(cm.metadata)});
            if !cm.data.is_empty() {
                v["data"] = json!(cm.data);
            }
            if !cm.binary_data.is_empty() {
                let bd: Map<String, Value> = cm
                    .binary_data
                    .iter()
                    .map(|(k, b)| (k.clone(), b64(b)))
                    .collect();
                v["binaryData"] = Value::Object(bd);
            }
            if let Some(i) = cm.immutable {
                v["immutable"] = json!(i);
            }
            v
        }
        ("v1", "Secret") => {
            let s = Secret::decode(raw)?;
            let mut v = json!({"metadata": metadata(s.metadata)});
            if !s.data.is_empty() {
                let d: Map<String, Value> =
                    s.data.iter().map(|(k, b)| (k.clone(), b64(b))).collect();
                v["data"] = Value::Object(d);
            }
            if !s.string_data.is_empty() {
                v["stringData"] = json!(s.string_data);
            }
            if let Some(t) = s.type_.filter(|t| !t.is_empty()) {
                v["type"] = json!(t);
            }
            if let Some(i) = s.immutable {
                v["immutable"] = json!(i);
            }
            v
        }
        ("v1", "ServiceAccount") => {
            let sa = ServiceAccount::decode(raw)?;
            let mut v = json!({"metadata": metadata(sa.metadata)});
            if !sa.image_pull_secrets.is_empty() {
                v["imagePullSecrets"] = json!(
                    sa.image_pull_secrets
                        .iter()
                        .map(|r| json!({"name": r.name}))
                        .collect::<Vec<_>>()
                );
            }
            if let Some(a) = sa.automount_service_account_token {
                v["automountServiceAccountToken"] = json!(a);
            }
            v
        }
        (av, kind) => return Err(ProtobufError::Unsupported(format!("{av}, Kind={kind}"))),
    };
    obj["apiVersion"] = json!(tm.api_version);
    obj["kind"] = json!(tm.kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        Unknown {
            type_meta: Some(TypeMeta {
                api_version: api_version.into(),
                kind: kind.into(),
            }),
            raw,
        }
        .encode(&mut out)
        .unwrap();
        out
    }

    #[test]
    fn configmap_round_trips_to_json() {
        let cm = ConfigMap {
            metadata: Some(ObjectMeta {
                name: "cfg".into(),
                labels: [("a".into(), "b".into())].into(),
                ..Default::default()
            }),
            data: [("k".into(), "v".into())].into(),
            ..Default::default()
        };
        let body = envelope("v1", "ConfigMap", cm.encode_to_vec());
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "labels": {"a": "b"}}, "data": {"k": "v"}})
        );
    }

    #[test]
    fn secret_data_is_base64_and_other_kinds_are_unsupported() {
        let s = Secret {
            metadata: Some(ObjectMeta {
                name: "s".into(),
                ..Default::default()
            }),
            data: [("k".into(), b"hi".to_vec())].into(),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        let v = decode(&envelope("v1", "Secret", s.encode_to_vec())).unwrap();
        assert_eq!(v["data"]["k"], "aGk=");
        assert!(matches!(
            decode(&envelope("apps/v1", "Deployment", vec![])),
            Err(ProtobufError::Unsupported(_))
        ));
        assert!(matches!(decode(b"{}"), Err(ProtobufError::NoEnvelope)));
    }
}
