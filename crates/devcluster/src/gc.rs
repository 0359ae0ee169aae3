//! The in-process controllers a real control plane runs next to the API server: the garbage
//! collector (owner references: background, foreground with `blockOwnerDeletion`, orphan), the
//! namespace controller (emptying a terminating namespace) and the CRD finalizer (deleting a
//! CRD's objects before the CRD goes).
//!
//! Like the real ones they are asynchronous: they react to store events and act through the same
//! deletion path as the API.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::meta;
use crate::rest::{DeleteOptions, Propagation, delete_stored};
use crate::server::SharedState;
use crate::store::{EventType, ObjectKey, WriteOp, WriteOutcome};

/// How often the collector sweeps for dependents whose owners no longer exist.
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

/// The finalizer a delete with `propagationPolicy: Orphan` puts on the owner.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The finalizer a delete with `propagationPolicy: Foreground` puts on the owner.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

pub fn spawn(state: SharedState, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut rx = state.store.subscribe();
        let mut sweep = tokio::time::interval(SWEEP_INTERVAL);
        loop {
            let mut deleted_uids: Vec<String> = Vec::new();
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = sweep.tick() => {
                    sweep_dangling(&state);
                }
                msg = rx.recv() => match msg {
                    Ok(e) => {
                        if e.event_type == EventType::Deleted
                            && let Some(uid) = meta::meta_str(&e.object(), "uid")
                        {
                            deleted_uids.push(uid.to_string());
                        }
                        // Drain what is already queued.
                        while let Ok(e) = rx.try_recv() {
                            if e.event_type == EventType::Deleted
                                && let Some(uid) = meta::meta_str(&e.object(), "uid")
                            {
                                deleted_uids.push(uid.to_string());
                            }
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        sweep_dangling(&state);
                    }
                    Err(RecvError::Closed) => return,
                }
            }
            for uid in deleted_uids {
                collect_dependents_of_deleted(&state, &uid);
            }
            process_terminating(&state);
        }
    })
}

fn info_for(state: &SharedState, key: &ObjectKey) -> Option<Arc<crate::registry::ResourceInfo>> {
    state.registry.by_group_resource(&key.group_resource)
}

fn delete_key(state: &SharedState, key: &ObjectKey, propagation: Propagation) {
    if let Some(info) = info_for(state, key) {
        let opts = DeleteOptions {
            propagation: Some(propagation),
            ..Default::default()
        };
        let _ = delete_stored(state, &info, &key.namespace, &key.name, &opts);
    }
}

/// Owner references of an object, as (uid, blockOwnerDeletion).
fn owner_refs(obj: &Value) -> Vec<(String, bool)> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| {
                    Some((
                        r.get("uid")?.as_str()?.to_string(),
                        r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true),
                    ))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Remove the owner references naming `owner_uid` from an object.
fn drop_owner_ref(state: &SharedState, key: &ObjectKey, owner_uid: &str) {
    let _ = state.store.write::<()>(
        &key.group_resource,
        &key.namespace,
        &key.name,
        |current, _| {
            let Some(current) = current else {
                return Ok(WriteOp::Unchanged);
            };
            let mut obj = (**current).clone();
            if let Some(Value::Array(refs)) = obj.pointer_mut("/metadata/ownerReferences") {
                refs.retain(|r| r["uid"] != owner_uid);
                if refs.is_empty()
                    && let Some(m) = meta::metadata_mut(&mut obj)
                {
                    m.remove("ownerReferences");
                }
            }
            Ok(WriteOp::Put(obj))
        },
    );
}

/// An owner is gone: its dependents go too, unless another owner still exists (then only the
/// dangling reference is removed).
fn collect_dependents_of_deleted(state: &SharedState, owner_uid: &str) {
    for key in state.store.dependents_of(owner_uid) {
        let Some(obj) = state
            .store
            .get(&key.group_resource, &key.namespace, &key.name)
        else {
            continue;
        };
        let others_alive = owner_refs(&obj)
            .iter()
            .any(|(uid, _)| uid != owner_uid && state.store.uid_exists(uid));
        if others_alive {
            drop_owner_ref(state, &key, owner_uid);
        } else {
            delete_key(state, &key, Propagation::Background);
        }
    }
}

/// Objects whose every owner is missing are deleted (an owner deleted before the dependent was
/// indexed, or a reference to an object that never existed).
fn sweep_dangling(state: &SharedState) {
    for key in state.store.with_missing_owner() {
        let Some(obj) = state
            .store
            .get(&key.group_resource, &key.namespace, &key.name)
        else {
            continue;
        };
        if obj.pointer("/metadata/deletionTimestamp").is_some() {
            continue;
        }
        let refs = owner_refs(&obj);
        if !refs.is_empty() && refs.iter().all(|(uid, _)| !state.store.uid_exists(uid)) {
            delete_key(state, &key, Propagation::Background);
        }
    }
}

fn remove_finalizer(state: &SharedState, key: &ObjectKey, finalizer: &str) {
    let outcome = state.store.write::<()>(
        &key.group_resource,
        &key.namespace,
        &key.name,
        |current, _| {
            let Some(current) = current else {
                return Ok(WriteOp::Unchanged);
            };
            let mut fins = meta::finalizers(current);
            if !fins.iter().any(|f| f == finalizer) {
                return Ok(WriteOp::Unchanged);
            }
            fins.retain(|f| f != finalizer);
            let mut obj = (**current).clone();
            meta::set_finalizers(&mut obj, fins.clone());
            if meta::finalized(&obj) {
                Ok(WriteOp::Delete)
            } else {
                Ok(WriteOp::Put(obj))
            }
        },
    );
    if let (Ok(outcome), Some(info)) = (outcome, info_for(state, key)) {
        if let WriteOutcome::Deleted(o) = &outcome {
            crate::kinds::on_deleted(state, &key.group_resource, o);
        }
        crate::crd::after_write(state, &info, &outcome);
    }
}

fn process_terminating(state: &SharedState) {
    for (key, obj) in state.store.terminating_objects() {
        let uid = meta::meta_str(&obj, "uid").unwrap_or("").to_string();
        let fins = meta::finalizers(&obj);
        if fins.iter().any(|f| f == ORPHAN_FINALIZER) {
            for dep in state.store.dependents_of(&uid) {
                drop_owner_ref(state, &dep, &uid);
            }
            remove_finalizer(state, &key, ORPHAN_FINALIZER);
            continue;
        }
        if fins.iter().any(|f| f == FOREGROUND_FINALIZER) {
            let deps = state.store.dependents_of(&uid);
            let mut blocking = false;
            for dep in &deps {
                let Some(d) = state
                    .store
                    .get(&dep.group_resource, &dep.namespace, &dep.name)
                else {
                    continue;
                };
                if owner_refs(&d).iter().any(|(u, block)| *u == uid && *block) {
                    blocking = true;
                }
                if d.pointer("/metadata/deletionTimestamp").is_none() {
                    delete_key(state, dep, Propagation::Foreground);
                }
            }
            if !blocking {
                remove_finalizer(state, &key, FOREGROUND_FINALIZER);
            }
            continue;
        }
        if key.group_resource == "namespaces" {
            finish_namespace(state, &key, &obj);
            continue;
        }
        if key.group_resource == "customresourcedefinitions.apiextensions.k8s.io"
            && fins.iter().any(|f| f == crate::crd::CLEANUP_FINALIZER)
        {
            let target = crate::crd::resource_info(&obj).map(|i| i.group_resource());
            let remaining = match &target {
                Some(gr) => {
                    let (items, _) = state.store.list(gr, None);
                    for item in &items {
                        if item.pointer("/metadata/deletionTimestamp").is_none() {
                            let k = ObjectKey {
                                group_resource: gr.clone(),
                                namespace: meta::meta_str(item, "namespace").unwrap_or("").into(),
                                name: meta::meta_str(item, "name").unwrap_or("").into(),
                            };
                            delete_key(state, &k, Propagation::Background);
                        }
                    }
                    state.store.count(gr)
                }
                None => 0,
            };
            if remaining == 0 {
                remove_finalizer(state, &key, crate::crd::CLEANUP_FINALIZER);
            }
        }
    }
}

/// A terminating namespace: delete its contents; once empty, clear `spec.finalizers` and let it go.
fn finish_namespace(state: &SharedState, key: &ObjectKey, ns_obj: &Value) {
    let contents = state.store.keys_in_namespace(&key.name);
    for k in &contents {
        if let Some(o) = state.store.get(&k.group_resource, &k.namespace, &k.name)
            && o.pointer("/metadata/deletionTimestamp").is_none()
        {
            delete_key(state, k, Propagation::Background);
        }
    }
    if !state.store.keys_in_namespace(&key.name).is_empty() {
        return;
    }
    let spec_fins = ns_obj
        .pointer("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let _ = state
        .store
        .write::<()>("namespaces", "", &key.name, |current, _| {
            let Some(current) = current else {
                return Ok(WriteOp::Unchanged);
            };
            let mut obj = (**current).clone();
            if spec_fins {
                obj["spec"] = json!({});
            }
            if meta::finalizers(&obj).is_empty() {
                Ok(WriteOp::Delete)
            } else {
                Ok(WriteOp::Put(obj))
            }
        });
}
