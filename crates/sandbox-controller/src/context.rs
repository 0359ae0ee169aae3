//! What every reconcile shares: the client, the reflector stores it reads from, the event
//! recorder, metrics and settings.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use api_types::{Sandbox, SandboxStatus};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Service};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use crate::metrics::Metrics;

/// Field manager recorded on the objects this controller creates.
pub const FIELD_MANAGER: &str = "sandbox-controller";

/// Settings of the reconciler that come from flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Used in `status.serviceFQDN`.
    pub cluster_domain: String,
    /// Publish Kubernetes Events.
    pub events: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_domain: "cluster.local".to_string(),
            events: true,
        }
    }
}

/// The reflector stores the reconciler reads from.
#[derive(Clone)]
pub struct Stores {
    pub sandboxes: Store<Sandbox>,
    pub pods: Store<Pod>,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
}

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub settings: Settings,
    pub metrics: Metrics,
    pub recorder: Option<Recorder>,
    /// Consecutive failures per Sandbox, for exponential retry backoff.
    failures: Mutex<HashMap<ObjectRef<Sandbox>, u32>>,
    /// Sandboxes whose creation latency was already recorded by this process.
    latency_recorded: Mutex<HashSet<String>>,
    /// The last status this process wrote per Sandbox, with the resourceVersion the write
    /// produced: a pass that runs before the watch delivered that write computes from it instead
    /// of from the stale cached status (no re-stamped transition times, no duplicate write).
    written: Mutex<HashMap<ObjectRef<Sandbox>, (u64, SandboxStatus)>>,
}

/// Upper bound of the retry backoff after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Context {
    pub fn new(
        client: Client,
        stores: Stores,
        settings: Settings,
        metrics: Metrics,
        recorder: Option<Recorder>,
    ) -> Self {
        Context {
            client,
            stores,
            settings,
            metrics,
            recorder,
            failures: Mutex::default(),
            latency_recorded: Mutex::default(),
            written: Mutex::default(),
        }
    }

    /// The delay before retrying a Sandbox that failed `base`-style, doubling per consecutive
    /// failure up to [`MAX_BACKOFF`].
    pub fn next_backoff(&self, key: ObjectRef<Sandbox>, base: Duration) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        let factor = 2u32.saturating_pow((*n - 1).min(16));
        base.saturating_mul(factor).min(MAX_BACKOFF)
    }

    pub fn reset_backoff(&self, key: &ObjectRef<Sandbox>) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// The status a pass starts from: the cached one, unless this process wrote a newer one
    /// that the cache has not caught up with yet.
    pub fn base_status(&self, sandbox: &Sandbox) -> SandboxStatus {
        let key = ObjectRef::from_obj(sandbox);
        let cached_rv = sandbox
            .meta()
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some((rv, status)), Some(cached)) = (written.get(&key), cached_rv) {
            if cached < *rv {
                return status.clone();
            }
            written.remove(&key);
        }
        sandbox.status.clone().unwrap_or_default()
    }

    /// Remembers a status written with the resulting resourceVersion.
    pub fn remember_written(
        &self,
        sandbox: &Sandbox,
        resource_version: Option<&str>,
        status: SandboxStatus,
    ) {
        let key = ObjectRef::from_obj(sandbox);
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match resource_version.and_then(|rv| rv.parse::<u64>().ok()) {
            Some(rv) => {
                written.insert(key, (rv, status));
            }
            None => {
                written.remove(&key);
            }
        }
    }

    /// Forgets per-Sandbox memory (the Sandbox is gone).
    pub fn forget(&self, sandbox: &Sandbox) {
        let key = ObjectRef::from_obj(sandbox);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// True the first time it is called for `uid` in this process.
    pub fn first_ready(&self, uid: &str) -> bool {
        self.latency_recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string())
    }

    /// Publishes an event about the Sandbox; failures are logged, never fatal.
    pub async fn event(
        &self,
        sandbox: &Sandbox,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let ev = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&ev, &sandbox.object_ref(&())).await {
            tracing::warn!(error = %err, reason, "failed to publish event");
        }
    }
}
