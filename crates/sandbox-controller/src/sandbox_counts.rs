//! The counts behind `agent_sandboxes`, kept up to date from the Sandbox watch.
//!
//! A scrape used to count every cached Sandbox (a snapshot of the store and one label set per
//! Sandbox, each time): at tens of thousands of Sandboxes and one scrape a second that was a
//! tenth of the controller's CPU. Now each watch event moves at most one Sandbox from one
//! series to another, and a scrape reads the per-series totals.
//!
//! The counts follow the reflector store's rules exactly (an apply replaces the Sandbox's
//! entry, a delete removes it, a relist is built apart and swapped in when complete), so they
//! always equal a full count of the store fed the same events (see the tests).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use kube::runtime::watcher;

use crate::cached_sandbox::CachedSandbox;
use crate::metrics::{SandboxLabels, SeriesView};

/// Sandboxes per `agent_sandboxes` series; cheap to clone (shared).
#[derive(Debug, Clone, Default)]
pub struct SandboxCounts {
    inner: Arc<Mutex<Counts>>,
}

#[derive(Debug, Default)]
struct Counts {
    live: Tally,
    /// What a relist has delivered so far (the reflector's buffer).
    relisting: Tally,
}

#[derive(Debug, Default)]
struct Tally {
    /// Namespace → name → the series the Sandbox counts toward (shared with `per_series`).
    series_of: HashMap<String, HashMap<String, Arc<SandboxLabels>>>,
    /// Series with at least one Sandbox → how many.
    per_series: BTreeMap<Arc<SandboxLabels>, i64>,
}

impl Tally {
    fn apply(&mut self, sandbox: &CachedSandbox) {
        let meta = &sandbox.metadata;
        let Some(name) = meta.name.as_deref() else {
            return;
        };
        let namespace = meta.namespace.as_deref().unwrap_or_default();
        let view = SeriesView::of(sandbox);
        let current = self.series_of.get(namespace).and_then(|m| m.get(name));
        if current.is_some_and(|labels| view.is(labels)) {
            return;
        }
        let series = self.add(view.to_labels());
        let names = match self.series_of.get_mut(namespace) {
            Some(names) => names,
            None => self.series_of.entry(namespace.to_owned()).or_default(),
        };
        let previous = match names.get_mut(name) {
            Some(slot) => Some(std::mem::replace(slot, series)),
            None => {
                names.insert(name.to_owned(), series);
                None
            }
        };
        if let Some(previous) = previous {
            self.subtract(&previous);
        }
    }

    fn delete(&mut self, sandbox: &CachedSandbox) {
        let meta = &sandbox.metadata;
        let (Some(name), namespace) = (
            meta.name.as_deref(),
            meta.namespace.as_deref().unwrap_or_default(),
        ) else {
            return;
        };
        let Some(names) = self.series_of.get_mut(namespace) else {
            return;
        };
        let Some(previous) = names.remove(name) else {
            return;
        };
        if names.is_empty() {
            self.series_of.remove(namespace);
        }
        self.subtract(&previous);
    }

    /// Counts one more Sandbox in `labels`; returns the shared series.
    fn add(&mut self, labels: SandboxLabels) -> Arc<SandboxLabels> {
        if let Some((series, count)) = self.per_series.get_key_value(&labels) {
            let series = series.clone();
            let count = *count;
            self.per_series.insert(series.clone(), count + 1);
            return series;
        }
        let series = Arc::new(labels);
        self.per_series.insert(series.clone(), 1);
        series
    }

    fn subtract(&mut self, labels: &SandboxLabels) {
        if let Some(count) = self.per_series.get_mut(labels) {
            *count -= 1;
            if *count <= 0 {
                self.per_series.remove(labels);
            }
        }
    }
}

impl SandboxCounts {
    /// Feeds one watcher event (the store's events, in the store's order).
    pub fn observe(&self, event: &watcher::Event<CachedSandbox>) {
        let mut counts = self.lock();
        match event {
            watcher::Event::Apply(sb) => counts.live.apply(sb),
            watcher::Event::Delete(sb) => counts.live.delete(sb),
            watcher::Event::Init => counts.relisting = Tally::default(),
            watcher::Event::InitApply(sb) => counts.relisting.apply(sb),
            watcher::Event::InitDone => {
                counts.live = std::mem::take(&mut counts.relisting);
            }
        }
    }

    /// Calls `f` with each series that has Sandboxes and its count, in label order; stops at
    /// the first error.
    pub fn for_each_series<E>(
        &self,
        mut f: impl FnMut(&SandboxLabels, i64) -> Result<(), E>,
    ) -> Result<(), E> {
        let counts = self.lock();
        for (labels, count) in &counts.live.per_series {
            f(labels, *count)?;
        }
        Ok(())
    }

    /// The current counts (what a scrape shows).
    pub fn snapshot(&self) -> BTreeMap<SandboxLabels, i64> {
        let mut out = BTreeMap::new();
        let _ = self.for_each_series::<()>(|labels, count| {
            out.insert(labels.clone(), count);
            Ok(())
        });
        out
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{CREATED_BY_LABEL, LAUNCH_TYPE_LABEL, TEMPLATE_REF_ANNOTATION};
    use crate::metrics::count_sandboxes;
    use api_types::SandboxStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::reflector;

    /// A Sandbox whose every series-relevant field is drawn from a few choices.
    fn random_sandbox(rng: &mut fastrand::Rng) -> CachedSandbox {
        let mut sb = CachedSandbox::default();
        sb.metadata.name = Some(["a", "b", "c", "d", "e", "f"][rng.usize(..6)].to_string());
        sb.metadata.namespace =
            [None, Some("n1".to_string()), Some("n2".to_string())][rng.usize(..3)].clone();
        let mut labels = std::collections::BTreeMap::new();
        if rng.bool() {
            labels.insert(
                LAUNCH_TYPE_LABEL.to_string(),
                ["warm", "cold", "x"][rng.usize(..3)].to_string(),
            );
        }
        if rng.bool() {
            labels.insert(
                CREATED_BY_LABEL.to_string(),
                ["go-client", "python-client", "hacker", ""][rng.usize(..4)].to_string(),
            );
        }
        sb.metadata.labels = (!labels.is_empty() || rng.bool()).then_some(labels);
        if rng.bool() {
            sb.metadata.annotations = Some(
                [(
                    TEMPLATE_REF_ANNOTATION.to_string(),
                    ["", "t1", "t2"][rng.usize(..3)].to_string(),
                )]
                .into(),
            );
        }
        if rng.bool() {
            let (api_version, kind) = [
                ("extensions.agents.x-k8s.io/v1beta1", "SandboxClaim"),
                ("extensions.agents.x-k8s.io/v1beta1", "SandboxWarmPool"),
                ("apps/v1", "Deployment"),
            ][rng.usize(..3)];
            sb.metadata.owner_references = Some(vec![OwnerReference {
                api_version: api_version.into(),
                kind: kind.into(),
                name: "o".into(),
                uid: "u".into(),
                controller: Some(rng.bool()),
                block_owner_deletion: None,
            }]);
        }
        if rng.bool() {
            let (status, reason) = [
                ("True", "DependenciesReady"),
                ("False", "SandboxExpired"),
                ("False", "DependenciesNotReady"),
            ][rng.usize(..3)];
            sb.status = Some(SandboxStatus {
                conditions: vec![Condition {
                    type_: "Ready".into(),
                    status: status.into(),
                    reason: reason.into(),
                    message: String::new(),
                    observed_generation: None,
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                }],
                ..Default::default()
            });
        }
        sb
    }

    #[test]
    fn counts_equal_a_full_count_of_the_store_after_any_events() {
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let (store, mut writer) = reflector::store::<CachedSandbox>();
            let counts = SandboxCounts::default();
            for step in 0..150 {
                let event = match rng.u8(..20) {
                    0 => watcher::Event::Init,
                    1 => watcher::Event::InitDone,
                    2..=4 => watcher::Event::InitApply(random_sandbox(&mut rng)),
                    5..=8 => watcher::Event::Delete(random_sandbox(&mut rng)),
                    _ => watcher::Event::Apply(random_sandbox(&mut rng)),
                };
                writer.apply_watcher_event(&event);
                counts.observe(&event);
                let full = count_sandboxes(store.state().iter().map(|s| s.as_ref()));
                assert_eq!(
                    counts.snapshot(),
                    full,
                    "seed {seed}, step {step}, after {event:?}"
                );
            }
        }
    }

    #[test]
    fn a_sandbox_moves_between_series_and_a_relist_drops_the_departed() {
        let counts = SandboxCounts::default();
        let mut sb = CachedSandbox::default();
        sb.metadata.name = Some("a".into());
        sb.metadata.namespace = Some("ns".into());
        counts.observe(&watcher::Event::Apply(sb.clone()));
        let cold = counts.snapshot();
        assert_eq!(cold.values().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(
            cold.keys().next().map(|l| l.ready_condition.as_str()),
            Some("false")
        );

        sb.status = Some(SandboxStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "DependenciesReady".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
            }],
            ..Default::default()
        });
        counts.observe(&watcher::Event::Apply(sb.clone()));
        let ready = counts.snapshot();
        assert_eq!(ready.len(), 1, "{ready:?}");
        assert_eq!(
            ready.keys().next().map(|l| l.ready_condition.as_str()),
            Some("true")
        );

        // A relist without it: counted until the relist completes, then gone.
        counts.observe(&watcher::Event::Init);
        assert_eq!(counts.snapshot(), ready);
        counts.observe(&watcher::Event::InitDone);
        assert!(counts.snapshot().is_empty());
    }
}
