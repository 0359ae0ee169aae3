//! What every reconcile shares: the client, the reflector stores it reads from, the event
//! recorder, metrics and settings.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use api_types::{Sandbox, SandboxStatus};
use controller_common::events::{Event, EventRecorder, EventType};
use controller_common::own_writes::{ECHO_WAIT, OwnWrites};
use controller_common::write_echo::Echo;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Service};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};

use crate::cached_pod::CachedPod;
use crate::cached_sandbox::CachedSandbox;
use crate::coalesce::ProgressHolds;
use crate::created::CreatedChildren;
use crate::keys::POD_NAME_ANNOTATION;
use crate::metrics::Metrics;
use crate::pod_index::PodIndex;
use crate::tracing_context::TraceMemory;

/// Field manager recorded on the objects this controller creates.
pub const FIELD_MANAGER: &str = "sandbox-controller";

/// Settings of the reconciler that come from flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Used in `status.serviceFQDN`.
    pub cluster_domain: String,
    /// Publish Kubernetes Events.
    pub events: bool,
    /// How long a status change that is only progress towards Ready may be held back so that
    /// it is written together with later news (see `coalesce`). Zero writes every change.
    pub status_progress_window: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            cluster_domain: "cluster.local".to_string(),
            events: true,
            status_progress_window: crate::coalesce::DEFAULT_PROGRESS_WINDOW,
        }
    }
}

/// The reflector stores the reconciler reads from.
#[derive(Clone)]
pub struct Stores {
    /// Compact Sandboxes (see `cached_sandbox`).
    pub sandboxes: Store<CachedSandbox>,
    pub pods: Store<CachedPod>,
    /// The Pods of `pods` by controlling owner UID (fed the same watch events).
    pub pod_index: PodIndex,
    pub services: Store<Service>,
    pub pvcs: Store<PersistentVolumeClaim>,
}

pub struct Context {
    pub client: Client,
    pub stores: Stores,
    pub settings: Settings,
    pub metrics: Metrics,
    pub recorder: Option<EventRecorder>,
    /// Consecutive failures per Sandbox at one step (hashed), for exponential retry backoff.
    failures: Mutex<HashMap<ObjectRef<Sandbox>, (u32, u64)>>,
    /// Sandboxes whose creation latency was already recorded by this process, by hashed UID (a
    /// collision at most skips one sample).
    latency_recorded: Mutex<HashSet<u64>>,
    /// The last status this process wrote per Sandbox, until the watch delivers that write
    /// ([`Context::delivered`]): a pass that runs before computes from it instead of from the
    /// stale cached status (no re-stamped transition times, no duplicate write).
    ///
    /// resourceVersion is opaque (the API promises equality, not an order): whether the cache
    /// is behind a write is told by the watch delivering that very version, not by comparing
    /// numbers. Only this controller writes a Sandbox's status, so a remembered status is never
    /// older than the cached one, even in the rare case where the watch delivered the write
    /// before its response was read (it is then kept until [`ECHO_WAIT`] for nothing).
    written: Mutex<HashMap<ObjectRef<Sandbox>, Written<SandboxStatus>>>,
    /// Progress-only status writes being held back.
    pub progress: ProgressHolds,
    /// The last `pod-name` annotation value this process wrote per Sandbox (`None`: removed);
    /// like `written`, for passes that run before the watch delivered the write (so the
    /// annotation is not written twice).
    pod_name_written: Mutex<HashMap<ObjectRef<Sandbox>, Written<Option<String>>>>,
    /// Pods this process created or relabelled, until their watch event arrives: that event
    /// does not trigger the owner again (the pass that wrote acted on the server's answer).
    pub own_pod_writes: OwnWrites,
    /// Children this process created that the stores do not show yet: a pass observes them
    /// there instead of creating them again (`created`).
    pub created: CreatedChildren,
    /// The trace bookkeeping of this controller (`tracing_context`).
    pub traces: TraceMemory,
}

/// A write this process made: what it wrote, and its version as the watch sees it.
struct Written<V> {
    echo: Echo,
    value: V,
}

impl<V> Written<V> {
    /// Whether a pass's copy (at `cached_rv`) still lacks this write: the copy is not the
    /// written version nor one delivered after it, and the write is recent enough for its
    /// echo to be still coming.
    fn ahead_of(&self, cached_rv: Option<&str>, now: Instant) -> bool {
        !self.echo.held_by(cached_rv) && !self.echo.is_older_than(ECHO_WAIT, now)
    }
}

/// Records `value` written with `resource_version` under `key` (a response without one is
/// forgotten).
fn remember<V>(
    map: &Mutex<HashMap<ObjectRef<Sandbox>, Written<V>>>,
    key: ObjectRef<Sandbox>,
    resource_version: Option<&str>,
    value: V,
) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    match resource_version {
        Some(rv) => {
            map.insert(
                key,
                Written {
                    echo: Echo::new(rv.to_owned(), Instant::now()),
                    value,
                },
            );
        }
        None => {
            map.remove(&key);
        }
    }
}

/// The key of a Sandbox in the per-Sandbox memory: namespace and name only (no copy of the
/// resourceVersion and UID, which `ObjectRef::from_obj` carries along and comparisons ignore).
pub fn memory_key(sandbox: &Sandbox) -> ObjectRef<Sandbox> {
    let name = sandbox.metadata.name.as_deref().unwrap_or_default();
    match sandbox.metadata.namespace.as_deref() {
        Some(ns) => ObjectRef::new(name).within(ns),
        None => ObjectRef::new(name),
    }
}

fn uid_hash(uid: &str) -> u64 {
    let mut h = DefaultHasher::new();
    uid.hash(&mut h);
    h.finish()
}

/// Upper bound of the retry backoff after repeated failures.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

impl Context {
    pub fn new(
        client: Client,
        stores: Stores,
        settings: Settings,
        metrics: Metrics,
        recorder: Option<EventRecorder>,
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
            progress: ProgressHolds::default(),
            pod_name_written: Mutex::default(),
            own_pod_writes: OwnWrites::new(),
            created: CreatedChildren::default(),
            traces: TraceMemory::default(),
        }
    }

    /// The delay before retrying a Sandbox whose pass failed at `step` (what it was doing, see
    /// [`crate::Error::retry_step`]): `base`, doubling per consecutive failure *at the same step*
    /// up to [`MAX_BACKOFF`]. A failure at another step means the pass got past the previous one
    /// (progress), so the count starts again: independent transient errors at successive steps
    /// (a 500 on the Pod create, then a 429 on the status write) do not escalate to a minute-long
    /// wait, while a step that keeps failing backs off as before.
    pub fn next_backoff(&self, key: ObjectRef<Sandbox>, step: &str, base: Duration) -> Duration {
        let step = {
            let mut h = DefaultHasher::new();
            step.hash(&mut h);
            h.finish()
        };
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let (n, last_step) = failures.entry(key).or_insert((0, step));
        if *last_step != step {
            (*n, *last_step) = (0, step);
        }
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

    /// The status a pass starts from: the cached one, unless this process wrote one that the
    /// cache has not caught up with yet.
    pub fn base_status(&self, sandbox: &Sandbox) -> SandboxStatus {
        let key = memory_key(sandbox);
        let cached_rv = sandbox.meta().resource_version.as_deref();
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(w) = written.get(&key) {
            if w.ahead_of(cached_rv, Instant::now()) {
                return w.value.clone();
            }
            // This pass's copy holds the write (a copy from the cache: the cache does too, and
            // the next pass of this Sandbox starts from a copy at least as new).
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
        remember(&self.written, memory_key(sandbox), resource_version, status);
    }

    /// Remembers a `pod-name` annotation write (`None`: removed) with the resulting
    /// resourceVersion.
    pub fn remember_pod_name(
        &self,
        sandbox: &Sandbox,
        resource_version: Option<&str>,
        value: Option<String>,
    ) {
        remember(
            &self.pod_name_written,
            memory_key(sandbox),
            resource_version,
            value,
        );
    }

    /// The watch delivered (and the store applied) `sandbox`: a remembered write learns whether
    /// its version is in the cache now, or one after it. Entries are not dropped here: a pass
    /// that started before this delivery still holds the older copy and must see the write.
    pub fn delivered(&self, sandbox: &CachedSandbox) {
        let Some(rv) = sandbox.metadata.resource_version.as_deref() else {
            return;
        };
        let name = sandbox.metadata.name.as_deref().unwrap_or_default();
        let key = match sandbox.metadata.namespace.as_deref() {
            Some(ns) => ObjectRef::new(name).within(ns),
            None => ObjectRef::new(name),
        };
        if let Some(w) = self
            .written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&key)
        {
            w.echo.delivered(rv);
        }
        if let Some(w) = self
            .pod_name_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(&key)
        {
            w.echo.delivered(rv);
        }
    }

    /// The Sandbox as this pass should see it: the cached object, with the `pod-name`
    /// annotation this process wrote last if the cache has not caught up with that write.
    pub fn with_own_writes<'a>(&self, sandbox: &'a Sandbox) -> Cow<'a, Sandbox> {
        let key = memory_key(sandbox);
        let cached_rv = sandbox.metadata.resource_version.as_deref();
        let mut written = self
            .pod_name_written
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(w) = written.get(&key) else {
            return Cow::Borrowed(sandbox);
        };
        if !w.ahead_of(cached_rv, Instant::now()) {
            written.remove(&key);
            return Cow::Borrowed(sandbox);
        }
        let mut own = sandbox.clone();
        let annotations = own.metadata.annotations.get_or_insert_default();
        match &w.value {
            Some(v) => annotations.insert(POD_NAME_ANNOTATION.to_string(), v.clone()),
            None => annotations.remove(POD_NAME_ANNOTATION),
        };
        Cow::Owned(own)
    }

    /// Forgets per-Sandbox memory (the Sandbox is gone).
    pub fn forget(&self, sandbox: &Sandbox) {
        let key = memory_key(sandbox);
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        self.progress.release(&key);
        self.pod_name_written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
    }

    /// Drops the remembered status and `pod-name` writes the cache holds, those whose echo is
    /// not coming any more, and those of Sandboxes the cache no longer has. It looks only at the
    /// remembered entries (none at rest), so it can run every second: during a creation burst
    /// the entries would otherwise pile up until the next [`Context::prune_departed`].
    pub fn forget_caught_up_writes(&self) {
        let now = Instant::now();
        let cached_rv = |k: &ObjectRef<Sandbox>| {
            let key = ObjectRef::<CachedSandbox>::new(&k.name)
                .within(k.namespace.as_deref().unwrap_or_default());
            self.stores
                .sandboxes
                .get(&key)
                .map(|cached| cached.metadata.resource_version.clone())
        };
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        if !written.is_empty() {
            written.retain(|k, w| cached_rv(k).is_some_and(|rv| w.ahead_of(rv.as_deref(), now)));
        }
        drop(written);
        let mut pod_names = self
            .pod_name_written
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !pod_names.is_empty() {
            pod_names.retain(|k, w| cached_rv(k).is_some_and(|rv| w.ahead_of(rv.as_deref(), now)));
        }
    }

    /// Drops the per-Sandbox memory of Sandboxes that no longer exist (deleted objects never
    /// reach the reconciler, so their entries would otherwise stay forever).
    pub fn prune_departed(&self) {
        let live = self.stores.sandboxes.state();
        let keys: HashSet<ObjectRef<Sandbox>> = live.iter().map(|s| s.object_ref()).collect();
        let uids: HashSet<u64> = live
            .iter()
            .filter_map(|s| s.metadata.uid.as_deref().map(uid_hash))
            .collect();
        self.forget_caught_up_writes();
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| keys.contains(k));
        self.latency_recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|u| uids.contains(u));
        self.progress.retain(|k| keys.contains(k));
        self.own_pod_writes.prune(ECHO_WAIT);
        self.created.prune(ECHO_WAIT);
        self.traces.prune(|uid| uids.contains(&uid_hash(uid)));
    }

    /// Number of Sandboxes this process holds per-Sandbox memory for (tests, debugging).
    pub fn remembered(&self) -> usize {
        self.written.lock().unwrap_or_else(|e| e.into_inner()).len()
            + self
                .failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
            + self
                .latency_recorded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
            + self.progress.len()
            + self
                .pod_name_written
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len()
    }

    /// True the first time it is called for `uid` in this process.
    pub fn first_ready(&self, uid: &str) -> bool {
        self.latency_recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid_hash(uid))
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
            note: Some(truncate_note(note)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(err) = recorder.publish(&ev, &sandbox.object_ref(&())).await {
            tracing::warn!(error = %err, reason, "failed to publish event");
        }
    }
}

/// Event notes are limited to 1 kB by the API server.
fn truncate_note(mut note: String) -> String {
    const MAX: usize = 1024;
    if note.len() > MAX {
        let mut cut = MAX - 3;
        while !note.is_char_boundary(cut) {
            cut -= 1;
        }
        note.truncate(cut);
        note.push_str("...");
    }
    note
}

/// A context over a Sandbox cache holding `cached` and empty child caches, with a client that
/// is never used: for tests that call no API.
#[cfg(test)]
pub(crate) fn offline_context(cached: impl IntoIterator<Item = CachedSandbox>) -> Context {
    use kube::runtime::watcher;
    let (sandboxes, mut writer) = kube::runtime::reflector::store::<CachedSandbox>();
    for c in cached {
        writer.apply_watcher_event(&watcher::Event::Apply(c));
    }
    let (pods, _) = kube::runtime::reflector::store();
    let (services, _) = kube::runtime::reflector::store();
    let (pvcs, _) = kube::runtime::reflector::store();
    let client = Client::try_from(kube::Config::new(
        "http://127.0.0.1:1".parse().expect("a valid URL"),
    ))
    .expect("a client");
    let mut registry = prometheus_client::registry::Registry::default();
    Context::new(
        client,
        Stores {
            sandboxes,
            pods,
            pod_index: PodIndex::default(),
            services,
            pvcs,
        },
        Settings::default(),
        Metrics::register(&mut registry, None),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_event_notes_are_cut_at_a_char_boundary() {
        assert_eq!(truncate_note("short".into()), "short");
        let long = "é".repeat(800);
        let cut = truncate_note(long);
        assert!(cut.len() <= 1024 && cut.ends_with("..."));
    }
}

#[cfg(test)]
mod memory_tests {
    use super::*;
    use api_types::SandboxSpec;

    fn sandbox(name: &str) -> Sandbox {
        let mut sb = Sandbox::new(name, SandboxSpec::default());
        sb.metadata.namespace = Some("ns".into());
        sb.metadata.uid = Some(format!("uid-{name}"));
        sb
    }

    fn context(live: &[&Sandbox]) -> Context {
        offline_context(live.iter().map(|sb| CachedSandbox::from_sandbox(sb)))
    }

    #[tokio::test]
    async fn memory_of_deleted_sandboxes_is_pruned() {
        let (live, gone) = (sandbox("live"), sandbox("gone"));
        let ctx = context(&[&live]);
        for sb in [&live, &gone] {
            ctx.remember_written(sb, Some("5"), SandboxStatus::default());
            ctx.next_backoff(
                ObjectRef::from_obj(sb),
                "create pod",
                Duration::from_millis(5),
            );
            ctx.first_ready(sb.metadata.uid.as_deref().unwrap());
        }
        assert_eq!(ctx.remembered(), 6);
        ctx.prune_departed();
        assert_eq!(ctx.remembered(), 3);
    }

    #[tokio::test]
    async fn retry_backoff_doubles_per_failure_caps_and_resets() {
        let sb = sandbox("flaky");
        let ctx = context(&[&sb]);
        let key = ObjectRef::from_obj(&sb);
        let base = Duration::from_millis(100);
        let delays: Vec<Duration> = (0..4)
            .map(|_| ctx.next_backoff(key.clone(), "update status", base))
            .collect();
        assert_eq!(delays, [100, 200, 400, 800].map(Duration::from_millis));
        for _ in 0..30 {
            ctx.next_backoff(key.clone(), "update status", base);
        }
        assert_eq!(
            ctx.next_backoff(key.clone(), "update status", base),
            MAX_BACKOFF
        );
        ctx.reset_backoff(&key);
        assert_eq!(ctx.next_backoff(key, "update status", base), base);
    }

    #[tokio::test]
    async fn a_failure_at_another_step_starts_the_backoff_again() {
        let sb = sandbox("unlucky");
        let ctx = context(&[&sb]);
        let key = ObjectRef::from_obj(&sb);
        let base = Duration::from_secs(1);
        let delays: Vec<Duration> = [
            "create pod",
            "create pod",
            "create service",
            "update status",
        ]
        .iter()
        .chain(["update status"; 3].iter())
        .map(|step| ctx.next_backoff(key.clone(), step, base))
        .collect();
        assert_eq!(delays, [1, 2, 1, 1, 2, 4, 8].map(Duration::from_secs));
    }

    #[tokio::test]
    async fn seven_server_errors_in_a_row_at_one_step_cost_well_under_a_minute() {
        let sb = sandbox("unlucky");
        let ctx = context(&[&sb]);
        let key = ObjectRef::from_obj(&sb);
        let mut status = kube::core::Status::failure("injected", "InternalError");
        status.code = 500;
        let err = crate::Error::api("create pod \"unlucky\"", kube::Error::Api(Box::new(status)));
        let total: Duration = (0..7)
            .map(|_| ctx.next_backoff(key.clone(), err.retry_step(), err.base_backoff()))
            .sum();
        assert!(total <= Duration::from_secs(13), "{total:?}");
    }

    #[tokio::test]
    async fn remembered_writes_are_dropped_once_the_cache_holds_them() {
        let mut caught_up = sandbox("caught-up");
        caught_up.metadata.resource_version = Some("20".into());
        let mut lagging = sandbox("lagging");
        lagging.metadata.resource_version = Some("20".into());
        let ctx = context(&[&caught_up, &lagging]);
        ctx.remember_written(&caught_up, Some("20"), SandboxStatus::default());
        ctx.remember_written(&lagging, Some("21"), SandboxStatus::default());
        ctx.prune_departed();
        assert_eq!(ctx.remembered(), 1, "only the write the cache lacks stays");
    }

    #[tokio::test]
    async fn the_frequent_pass_forgets_caught_up_and_departed_writes_only() {
        let mut caught_up = sandbox("caught-up");
        caught_up.metadata.resource_version = Some("20".into());
        let mut lagging = sandbox("lagging");
        lagging.metadata.resource_version = Some("20".into());
        let gone = sandbox("gone");
        let ctx = context(&[&caught_up, &lagging]);
        ctx.remember_written(&caught_up, Some("20"), SandboxStatus::default());
        ctx.remember_written(&lagging, Some("21"), SandboxStatus::default());
        ctx.remember_written(&gone, Some("3"), SandboxStatus::default());
        ctx.remember_pod_name(&caught_up, Some("19"), Some("caught-up".into()));
        ctx.remember_pod_name(&lagging, Some("22"), Some("lagging".into()));
        // The watch delivered the pod-name write (19), then the status write (20).
        for rv in ["19", "20"] {
            let mut delivered = CachedSandbox::from_sandbox(&caught_up);
            delivered.metadata.resource_version = Some(rv.into());
            ctx.delivered(&delivered);
        }
        ctx.forget_caught_up_writes();
        assert_eq!(
            ctx.remembered(),
            2,
            "the lagging Sandbox's status and pod-name writes stay"
        );
        let seen = ctx.with_own_writes(&lagging);
        assert_eq!(
            seen.metadata
                .annotations
                .as_ref()
                .map(|a| a[POD_NAME_ANNOTATION].as_str()),
            Some("lagging")
        );
    }

    #[tokio::test]
    async fn a_pass_before_the_cache_caught_up_sees_the_pod_name_it_wrote() {
        let mut sb = sandbox("annotated");
        sb.metadata.resource_version = Some("10".into());
        let ctx = context(&[&sb]);
        ctx.remember_pod_name(&sb, Some("11"), Some("annotated".into()));
        let seen = ctx.with_own_writes(&sb);
        assert_eq!(
            seen.metadata
                .annotations
                .as_ref()
                .map(|a| a[POD_NAME_ANNOTATION].as_str()),
            Some("annotated")
        );
        sb.metadata.resource_version = Some("11".into());
        assert!(
            matches!(ctx.with_own_writes(&sb), Cow::Borrowed(_)),
            "the cache caught up: it wins"
        );
        assert_eq!(ctx.remembered(), 0);
    }

    /// resourceVersion is opaque: the write is ahead until the watch delivers that very
    /// version, whatever the strings look like (a numeric comparison took a cache showing
    /// "b" for caught up with a write producing "a", or ignored versions that are not numbers).
    #[tokio::test]
    async fn versions_are_compared_for_equality_only() {
        // A pass's copy, taken before the write was delivered.
        let mut sb = sandbox("opaque");
        sb.metadata.resource_version = Some("xyz-b".into());
        let ctx = context(&[&sb]);
        let written = SandboxStatus {
            node_name: "ours".into(),
            ..Default::default()
        };
        ctx.remember_written(&sb, Some("xyz-a"), written.clone());
        assert_eq!(
            ctx.base_status(&sb),
            written,
            "xyz-b is not known to hold xyz-a"
        );
        let deliver = |rv: &str| {
            let mut echo = CachedSandbox::from_sandbox(&sb);
            echo.metadata.resource_version = Some(rv.into());
            ctx.delivered(&echo);
        };
        deliver("xyz-a");
        deliver("xyz-c");
        assert_eq!(
            ctx.base_status(&sb),
            written,
            "a pass that started before the delivery still sees the write"
        );
        let mut later = sb.clone();
        later.metadata.resource_version = Some("xyz-c".into());
        later.status = Some(SandboxStatus {
            node_name: "theirs".into(),
            ..Default::default()
        });
        assert_eq!(
            ctx.base_status(&later).node_name,
            "theirs",
            "delivered after ours: the copy holds the write"
        );
        assert_eq!(ctx.remembered(), 0, "and the entry is done");
    }

    #[tokio::test]
    async fn a_pass_before_the_cache_caught_up_starts_from_the_last_write() {
        let mut sb = sandbox("racy");
        sb.metadata.resource_version = Some("10".into());
        let ctx = context(&[&sb]);
        let written = SandboxStatus {
            node_name: "node-1".into(),
            ..Default::default()
        };
        ctx.remember_written(&sb, Some("12"), written.clone());
        assert_eq!(
            ctx.base_status(&sb),
            written,
            "cache at rv 10 is older than our write at 12"
        );
        sb.metadata.resource_version = Some("12".into());
        sb.status = Some(SandboxStatus {
            node_name: "node-2".into(),
            ..Default::default()
        });
        assert_eq!(
            ctx.base_status(&sb).node_name,
            "node-2",
            "the cache caught up: it wins"
        );
    }
}
