//! What every reconcile shares: the client, the caches ([`crate::stores`]), event recorders,
//! reconcile metrics and the error backoff. Each controller's own state lives beside it:
//! [`crate::claim::state`], [`crate::warm_pool::state`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use controller_common::events::{Event, EventRecorder, EventType};
use controller_common::{ControllerMetrics, ReconcileResult};
use kube::Client;
use kube::Resource;

use crate::claim::state::ClaimState;
use crate::stores::Stores;
use crate::template::state::TemplateState;
use crate::warm_pool::state::PoolState;

/// Field manager / event reporter name of this binary.
pub const FIELD_MANAGER: &str = "extensions-controller";

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub pool: PoolState,
    pub claim: ClaimState,
    pub template: TemplateState,
    /// Recorders for pool and template events (reporters `sandboxwarmpool-controller`,
    /// `sandboxtemplate-controller`, as the reference).
    pub pool_recorder: Option<EventRecorder>,
    pub template_recorder: Option<EventRecorder>,
    /// EventRecorder for claim events (`None` with `--disable-claim-events`).
    pub claim_recorder: Option<EventRecorder>,
    /// controller-runtime style reconcile metrics.
    pub reconcile_metrics: Option<ControllerMetrics>,
    /// Consecutive failures per object key, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// True once every cache has its initial list: decisions on a partial cache would
    /// over-create pool members or cold-start claims that are already bound.
    synced: std::sync::atomic::AtomicBool,
}

/// How long a reconcile waits for the caches' initial lists before looking again.
pub const SYNC_RECHECK: Duration = Duration::from_millis(100);

/// Longest error backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(120);
const BASE_BACKOFF: Duration = Duration::from_millis(200);

impl Context {
    pub fn new(
        client: Client,
        stores: Stores,
        pool: PoolState,
        claim: ClaimState,
        recorders: [Option<EventRecorder>; 3],
        reconcile_metrics: Option<ControllerMetrics>,
    ) -> Self {
        Context {
            client,
            stores,
            pool,
            claim,
            pool_recorder: recorders[0].clone(),
            template_recorder: recorders[1].clone(),
            claim_recorder: recorders[2].clone(),
            reconcile_metrics,
            template: TemplateState::default(),
            failures: Mutex::default(),
            synced: std::sync::atomic::AtomicBool::new(false),
        }
    }

    pub fn set_synced(&self) {
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
    }

    pub fn is_synced(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The next retry delay for `key` after a failure (exponential, capped).
    pub fn backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.to_owned()).or_insert(0);
        *n = n.saturating_add(1);
        BASE_BACKOFF
            .saturating_mul(2u32.saturating_pow((*n - 1).min(12)))
            .min(MAX_BACKOFF)
    }

    pub fn succeeded(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }

    /// Records one reconcile in the controller-runtime style metrics.
    pub fn observe(
        &self,
        controller: &str,
        started: Instant,
        result: &Result<controller_common::runner::Action, crate::Error>,
    ) {
        let Some(metrics) = &self.reconcile_metrics else {
            return;
        };
        let outcome = match result {
            Err(_) => ReconcileResult::Error,
            Ok(action) if *action == controller_common::runner::Action::await_change() => {
                ReconcileResult::Success
            }
            Ok(_) => ReconcileResult::RequeueAfter,
        };
        metrics.observe_reconcile(controller, outcome, started.elapsed());
    }

    fn event_of(type_: EventType, reason: &str, action: &str, note: String) -> Event {
        Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note),
            action: action.to_owned(),
            secondary: None,
        }
    }

    /// Publishes an Event; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(
        recorder: Option<&EventRecorder>,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let Some(recorder) = recorder else {
            return;
        };
        let event = Self::event_of(type_, reason, action, note);
        if let Err(err) = recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(error = %err, reason, "failed to publish event");
        }
    }
}
