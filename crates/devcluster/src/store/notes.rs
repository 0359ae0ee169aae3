//! Facts the write path learned about stored versions, kept beside the store: which Pod
//! versions are known to decode into their type with no unknown fields, and under which schema
//! a custom resource's version was pruned and defaulted. A write onto a version with a note
//! checks only the top-level members it changed; without one (a version written by a path that
//! does not note, or whose note was dropped from the bounded table) it checks the whole object.
//!
//! A version is known by its uid and resourceVersion, which no other version shares and which
//! survive the version being kept as JSON and parsed again. Each cluster keeps its own notes
//! ([`WriteNotes`], in its `AppState`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// How many versions a table remembers (the oldest notes go first): at a few thousand writes a
/// second, the last half minute or so.
const CAPACITY: usize = 1 << 16;

/// The notes one cluster's writes keep about the versions they stored.
#[derive(Default)]
pub struct WriteNotes {
    /// Pod versions known to decode into their type and to have no fields it lacks ("clean";
    /// `builtin_types::note_written`).
    pub clean_pods: NoteTable<()>,
    /// Custom-resource versions with the schema they were pruned and defaulted under
    /// (`crd::note_admitted`).
    pub admitted_under: NoteTable<Arc<crate::schema::StructuralSchema>>,
}

/// A bounded table of notes (`V`) about stored versions.
pub struct NoteTable<V> {
    inner: Mutex<Inner<V>>,
}

struct Inner<V> {
    notes: HashMap<Arc<str>, V>,
    order: VecDeque<Arc<str>>,
}

impl<V: Clone> Default for NoteTable<V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<V: Clone> NoteTable<V> {
    pub fn new() -> Self {
        NoteTable {
            inner: Mutex::new(Inner {
                notes: HashMap::new(),
                order: VecDeque::new(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<V>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The note about the stored version `obj`, if there is one.
    pub fn get(&self, obj: &Value) -> Option<V> {
        let key = version_key(obj)?;
        self.lock().notes.get(key.as_str()).cloned()
    }

    /// Notes `note` about the stored version `obj` (a version without uid or resourceVersion
    /// is not noted).
    pub fn note(&self, obj: &Value, note: V) {
        let Some(key) = version_key(obj) else {
            return;
        };
        let key: Arc<str> = Arc::from(key);
        let mut inner = self.lock();
        if inner.notes.insert(key.clone(), note).is_some() {
            return;
        }
        inner.order.push_back(key);
        while inner.order.len() > CAPACITY {
            if let Some(old) = inner.order.pop_front() {
                inner.notes.remove(&old);
            }
        }
    }
}

/// A version's name in a table: `uid/resourceVersion` (none without both).
fn version_key(obj: &Value) -> Option<String> {
    let meta = obj.get("metadata")?;
    let uid = meta.get("uid")?.as_str().filter(|u| !u.is_empty())?;
    let rv = meta
        .get("resourceVersion")?
        .as_str()
        .filter(|r| !r.is_empty())?;
    Some(format!("{uid}/{rv}"))
}
