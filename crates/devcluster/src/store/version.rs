//! One stored version of one object, shared by the store's object map, the history event that
//! wrote it and the event that replaced it (as that event's `previous`).
//!
//! A version starts as a `serde_json::Value` tree, which every write, patch and watcher reads.
//! Once [`super::FRAMES_KEPT`] newer events exist it is kept as its JSON instead (the bytes of
//! the watch frame built when it was written): a tree of small JSON maps is ten to twenty times
//! larger than its JSON, and most versions are never read again (superseded ones are kept only
//! for watches resuming from an old resourceVersion, and most objects stop changing once they
//! are settled). Reading an encoded version parses it again, outside the store lock.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;

/// A stored version of an object: its tree while fresh, its JSON once old.
#[derive(Debug)]
pub struct Version {
    form: Mutex<Form>,
}

#[derive(Debug)]
enum Form {
    Tree(Arc<Value>),
    Encoded(Bytes),
}

impl Version {
    pub fn new(tree: Arc<Value>) -> Self {
        Version {
            form: Mutex::new(Form::Tree(tree)),
        }
    }

    fn form(&self) -> std::sync::MutexGuard<'_, Form> {
        self.form.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The object: the kept tree, or a tree parsed from the JSON (a new one on every call).
    pub fn tree(&self) -> Arc<Value> {
        let encoded = match &*self.form() {
            Form::Tree(tree) => return tree.clone(),
            Form::Encoded(bytes) => bytes.clone(),
        };
        Arc::new(decode(&encoded))
    }

    /// Whether the object has `metadata.deletionTimestamp`, read from the kept tree or, when
    /// the version is kept as JSON, from the JSON without building a tree.
    pub fn is_terminating(&self) -> bool {
        #[derive(serde::Deserialize)]
        struct Object {
            metadata: Option<Metadata>,
        }
        #[derive(serde::Deserialize)]
        struct Metadata {
            #[serde(rename = "deletionTimestamp", default)]
            deletion_timestamp: Present,
        }
        /// Whether a member is there at all (also as `null`, as a pointer into the tree sees it).
        #[derive(Default)]
        struct Present(bool);
        impl<'de> serde::Deserialize<'de> for Present {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                serde::de::IgnoredAny::deserialize(d).map(|_| Present(true))
            }
        }
        let encoded = match &*self.form() {
            Form::Tree(tree) => return tree.pointer("/metadata/deletionTimestamp").is_some(),
            Form::Encoded(bytes) => bytes.clone(),
        };
        match serde_json::from_slice::<Object>(&encoded) {
            Ok(o) => o.metadata.is_some_and(|m| m.deletion_timestamp.0),
            // Not the shape expected: read the whole tree as any other reader would.
            Err(_) => decode(&encoded)
                .pointer("/metadata/deletionTimestamp")
                .is_some(),
        }
    }

    /// Whether the object's `apiVersion` and `kind` are these strings, read from the kept tree
    /// or, when the version is kept as JSON, from the JSON without building a tree.
    pub fn has_type(&self, api_version: &str, kind: &str) -> bool {
        #[derive(serde::Deserialize)]
        struct TypeMeta<'a> {
            #[serde(rename = "apiVersion", borrow, default)]
            api_version: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            kind: Option<std::borrow::Cow<'a, str>>,
        }
        let encoded = match &*self.form() {
            Form::Tree(tree) => {
                return tree.get("apiVersion").and_then(Value::as_str) == Some(api_version)
                    && tree.get("kind").and_then(Value::as_str) == Some(kind);
            }
            Form::Encoded(bytes) => bytes.clone(),
        };
        match serde_json::from_slice::<TypeMeta>(&encoded) {
            Ok(meta) => {
                meta.api_version.as_deref() == Some(api_version)
                    && meta.kind.as_deref() == Some(kind)
            }
            // Not strings: not these.
            Err(_) => false,
        }
    }

    /// The kept tree, if the version is not encoded yet.
    pub fn kept_tree(&self) -> Option<Arc<Value>> {
        match &*self.form() {
            Form::Tree(tree) => Some(tree.clone()),
            Form::Encoded(_) => None,
        }
    }

    /// Whether `tree` is this version's kept tree (the same allocation).
    pub fn holds(&self, tree: &Arc<Value>) -> bool {
        matches!(&*self.form(), Form::Tree(kept) if Arc::ptr_eq(kept, tree))
    }

    /// The JSON, when the version is encoded.
    pub fn encoded(&self) -> Option<Bytes> {
        match &*self.form() {
            Form::Tree(_) => None,
            Form::Encoded(bytes) => Some(bytes.clone()),
        }
    }

    /// Keeps the JSON `json` (which must be this version's tree serialized) instead of the tree,
    /// and returns the tree so that the caller frees it (outside any lock).
    pub fn encode_with(&self, json: Bytes) -> Option<Arc<Value>> {
        let mut form = self.form();
        if matches!(&*form, Form::Encoded(_)) {
            return None;
        }
        match std::mem::replace(&mut *form, Form::Encoded(json)) {
            Form::Tree(tree) => Some(tree),
            Form::Encoded(_) => None,
        }
    }

    /// Whether the version is kept as JSON (for tests).
    #[cfg(test)]
    pub fn is_encoded(&self) -> bool {
        matches!(&*self.form(), Form::Encoded(_))
    }
}

/// The JSON of a tree.
pub fn encode(tree: &Value) -> Bytes {
    // Serializing a Value into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(tree).unwrap_or_default())
}

/// The tree of JSON that [`encode`] (or a frame) produced.
fn decode(json: &[u8]) -> Value {
    // The bytes are serde_json's own serialization of a Value, which parses back to an equal
    // Value; a failure would be a bug here, reported rather than hidden.
    serde_json::from_slice(json).unwrap_or_else(|e| {
        tracing::error!(error = %e, "a stored version's JSON did not parse back");
        Value::Null
    })
}
