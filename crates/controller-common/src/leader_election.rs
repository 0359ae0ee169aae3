//! Leader election on a `coordination.k8s.io/v1` Lease with client-go's semantics.
//!
//! - The Lease records `holderIdentity`, `leaseDurationSeconds`, `acquireTime`, `renewTime` and
//!   `leaseTransitions`.
//! - A candidate may take the Lease when it does not exist, when its holder is empty (released),
//!   or when the record has not changed for `leaseDurationSeconds` as measured on the
//!   candidate's own clock since it last saw the record change (no cross-node clock comparison).
//! - Every write is a create or a replace carrying the `resourceVersion` that was read, so when
//!   two candidates race the API server answers 409 to one of them: that decides who leads.
//! - The leader renews every `retry_period`; if no renewal succeeds within `renew_deadline`,
//!   or another holder is seen, leadership is lost.
//! - On clean shutdown the leader releases the Lease (empty holder, 1 s duration), so a
//!   successor takes over at its next retry instead of waiting the full lease duration.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub mod fence;

use fence::Fence;

/// client-go/controller-runtime default lease duration.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go/controller-runtime default renew deadline.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go/controller-runtime default retry period.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);

/// Timing of the election. Keep `lease_duration > renew_deadline > retry_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a non-renewed Lease keeps others out (written to `leaseDurationSeconds`,
    /// whole seconds, at least 1).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before giving up leadership.
    pub renew_deadline: Duration,
    /// Pause between attempts (acquire and renew).
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
        }
    }
}

/// Which Lease to contend for, as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name (each binary has its own).
    pub name: String,
    /// This replica's identity, unique per process (see [`default_identity`]).
    pub identity: String,
    /// Durations.
    pub timings: LeaseTimings,
}

/// `<POD_NAME or hostname>_<random uuid>`, as controller-runtime builds it.
pub fn default_identity() -> String {
    let base = std::env::var("POD_NAME")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .or_else(|| {
            hostname::get()
                .ok()
                .map(|h| h.to_string_lossy().trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{base}_{}", uuid::Uuid::new_v4())
}

/// How the renewal loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewOutcome {
    /// The cancellation token fired while still leading; call [`LeaderElector::release`].
    Cancelled,
    /// Leadership was lost: renewal failed for the whole renew deadline, or another holder
    /// was observed. The message says which.
    Lost(String),
}

/// The Lease record in the form the election reasons about.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    holder: String,
    lease_duration_seconds: i32,
    acquire_time: Option<Timestamp>,
    renew_time: Option<Timestamp>,
    transitions: i32,
}

impl Record {
    fn from_lease(lease: &Lease) -> Record {
        let spec = lease.spec.clone().unwrap_or_default();
        Record {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.map(|t| t.0),
            renew_time: spec.renew_time.map(|t| t.0),
            transitions: spec.lease_transitions.unwrap_or(0),
        }
    }

    fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What this candidate last saw of the Lease, and when (on its own clock).
#[derive(Debug, Clone)]
struct Observed {
    lease: Lease,
    record: Record,
    changed_at: Instant,
}

/// Contends for one Lease. Not shared between tasks: one elector per process.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<Observed>,
    /// Start of the last successful acquire or renewal plus the renew deadline: until then
    /// this candidate may act as the leader.
    valid_until: Option<Instant>,
    /// Extended on each success, closed on a loss or release (see [`fence`]).
    fence: Fence,
}

fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == code)
}

fn lease_seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs()).unwrap_or(i32::MAX).max(1)
}

impl LeaderElector {
    /// An elector for `config`, using `client` (which may be rate limited; Lease traffic is a
    /// couple of requests per retry period).
    pub fn new(client: Client, config: LeaderElectionConfig) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        LeaderElector {
            api,
            config,
            observed: None,
            valid_until: None,
            fence: Fence::closed_until_leading(),
        }
    }

    /// Keeps `fence` in step with this candidate's leadership: extended to
    /// [`LeaderElector::valid_until`] by every successful acquire or renewal, closed when
    /// leadership is lost or released. The fence of a candidate without this call is its own.
    #[must_use]
    pub fn with_fence(mut self, fence: Fence) -> Self {
        self.fence = fence;
        self
    }

    /// Until when this candidate may act as the leader: the start of its last successful
    /// acquire or renewal plus the renew deadline (monotonic clock).
    pub fn valid_until(&self) -> Option<Instant> {
        self.valid_until
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// The configuration.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// Whether the last observed record names this candidate as holder.
    pub fn is_leader(&self) -> bool {
        self.observed
            .as_ref()
            .is_some_and(|o| o.record.holder == self.config.identity)
    }

    fn observe(&mut self, lease: Lease) {
        let record = Record::from_lease(&lease);
        let changed = self.observed.as_ref().is_none_or(|o| o.record != record);
        let changed_at = match &self.observed {
            Some(o) if !changed => o.changed_at,
            _ => Instant::now(),
        };
        self.observed = Some(Observed {
            lease,
            record,
            changed_at,
        });
    }

    fn desired_record(&self, current: Option<&Record>) -> Record {
        let now = Timestamp::now();
        let duration = lease_seconds(self.config.timings.lease_duration);
        match current {
            Some(cur) if cur.holder == self.config.identity => Record {
                holder: self.config.identity.clone(),
                lease_duration_seconds: duration,
                acquire_time: cur.acquire_time.or(Some(now)),
                renew_time: Some(now),
                transitions: cur.transitions,
            },
            Some(cur) => Record {
                holder: self.config.identity.clone(),
                lease_duration_seconds: duration,
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: cur.transitions.saturating_add(1),
            },
            None => Record {
                holder: self.config.identity.clone(),
                lease_duration_seconds: duration,
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: 0,
            },
        }
    }

    /// Replaces the Lease guarded by the resourceVersion of `base`. `Ok(false)` on 409.
    async fn replace_from(&mut self, base: &Lease, record: &Record) -> Result<bool, kube::Error> {
        let mut lease = base.clone();
        lease.spec = Some(record.to_spec());
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(written);
                Ok(true)
            }
            Err(e) if is_status(&e, 409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One client-go style attempt: create the Lease, renew it, or take it over when free or
    /// expired. Returns whether this candidate holds the Lease afterwards; on success, this
    /// candidate may lead until the attempt's start plus the renew deadline.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let started = Instant::now();
        let leading = self.attempt().await?;
        if leading {
            let until = started + self.config.timings.renew_deadline;
            self.valid_until = Some(self.valid_until.map_or(until, |v| v.max(until)));
            self.fence.extend(until);
        }
        Ok(leading)
    }

    async fn attempt(&mut self) -> Result<bool, kube::Error> {
        // Fast path: the leader renews from its last write without reading first. Any
        // failure (conflict, deleted Lease, transient error) falls back to reading the Lease.
        if self.is_leader()
            && let Some(observed) = self.observed.clone()
        {
            let record = self.desired_record(Some(&observed.record));
            match self.replace_from(&observed.lease, &record).await {
                Ok(true) => return Ok(true),
                Ok(false) => {}
                Err(e) => tracing::debug!(error = %e, "lease renewal without read failed; reading"),
            }
        }

        let Some(current) = self.api.get_opt(&self.config.name).await? else {
            let record = self.desired_record(None);
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(record.to_spec()),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(written) => {
                    self.observe(written);
                    Ok(true)
                }
                // Another candidate created it first.
                Err(e) if is_status(&e, 409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        self.observe(current.clone());
        let Some(observed) = self.observed.clone() else {
            return Ok(false);
        };
        let record = &observed.record;
        let held_by_other = !record.holder.is_empty() && record.holder != self.config.identity;
        if held_by_other {
            let valid_for = Duration::from_secs(
                u64::try_from(record.lease_duration_seconds.max(0)).unwrap_or(0),
            );
            if observed.changed_at + valid_for > Instant::now() {
                return Ok(false);
            }
        }
        let desired = self.desired_record(Some(record));
        self.replace_from(&current, &desired).await
    }

    /// Retries [`Self::try_acquire_or_renew`] every retry period until this candidate leads
    /// (`true`) or `cancel` fires (`false`). API errors are logged and retried; an attempt
    /// that gets no answer within the renew deadline counts as an error.
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        let LeaseTimings {
            retry_period: retry,
            renew_deadline,
            ..
        } = self.config.timings;
        loop {
            // A hung request must neither block shutdown nor stall the retries.
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return false,
                r = tokio::time::timeout(renew_deadline, self.try_acquire_or_renew()) => r,
            };
            let attempt = attempt.unwrap_or_else(|_elapsed| {
                Err(kube::Error::Service(
                    format!("no answer within {renew_deadline:?}").into(),
                ))
            });
            match attempt {
                Ok(true) => {
                    tracing::info!(
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        identity = %self.config.identity,
                        "acquired leader lease"
                    );
                    return true;
                }
                Ok(false) => {
                    tracing::debug!(
                        lease = %format!("{}/{}", self.config.namespace, self.config.name),
                        holder = %self.observed.as_ref().map(|o| o.record.holder.as_str()).unwrap_or(""),
                        "lease held by another replica; standing by"
                    );
                }
                Err(e) => tracing::warn!(
                    lease = %format!("{}/{}", self.config.namespace, self.config.name),
                    error = %e,
                    "error while trying to acquire the leader lease"
                ),
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// Keeps renewing while leading. Returns [`RenewOutcome::Cancelled`] when `cancel` fires
    /// (the Lease is still held: release it), or [`RenewOutcome::Lost`] (the fence is closed
    /// first) when another holder is seen or no renewal succeeded by
    /// [`LeaderElector::valid_until`]: the start of the last successful one plus the renew
    /// deadline, measured on the monotonic clock, so a replica that was paused past it gives
    /// up as soon as it runs again.
    pub async fn renew(&mut self, cancel: &CancellationToken) -> RenewOutcome {
        let outcome = self.renew_until_lost(cancel).await;
        if matches!(outcome, RenewOutcome::Lost(_)) {
            self.fence.close();
        }
        outcome
    }

    async fn renew_until_lost(&mut self, cancel: &CancellationToken) -> RenewOutcome {
        let LeaseTimings {
            renew_deadline,
            retry_period,
            ..
        } = self.config.timings;
        let lost = |last_error: &str| {
            RenewOutcome::Lost(format!(
                "could not renew within {renew_deadline:?}: {last_error}"
            ))
        };
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return RenewOutcome::Cancelled,
                _ = tokio::time::sleep(retry_period) => {}
            }
            let mut last_error = String::from("no renewal attempt finished");
            loop {
                let deadline = self.valid_until.unwrap_or_else(Instant::now);
                if Instant::now() >= deadline {
                    return lost(&last_error);
                }
                let attempt = tokio::select! {
                    _ = cancel.cancelled() => return RenewOutcome::Cancelled,
                    r = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(Ok(true)) => break,
                    Ok(Ok(false)) => {
                        let holder = self
                            .observed
                            .as_ref()
                            .map(|o| o.record.holder.clone())
                            .unwrap_or_default();
                        if !holder.is_empty() && holder != self.config.identity {
                            return RenewOutcome::Lost(format!("lease is now held by {holder}"));
                        }
                        last_error = "renewal conflicted with another write".to_owned();
                    }
                    Ok(Err(e)) => last_error = e.to_string(),
                    Err(_elapsed) => return lost(&last_error),
                }
                if Instant::now() + retry_period >= deadline {
                    return lost(&last_error);
                }
                tokio::select! {
                    _ = cancel.cancelled() => return RenewOutcome::Cancelled,
                    _ = tokio::time::sleep(retry_period) => {}
                }
            }
        }
    }

    /// Gives the Lease up if this candidate holds it: empty holder, 1 s duration, written with
    /// the observed resourceVersion. On a 409 the Lease is read again: if this candidate is
    /// still the holder (its own last renewal landed but the answer was lost, e.g. cut off by
    /// shutdown) the release is retried; if someone else holds it, there is nothing to do.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        const ATTEMPTS: usize = 3;
        // Whatever the release's outcome, this replica no longer acts as the leader.
        self.fence.close();
        self.valid_until = None;
        for _ in 0..ATTEMPTS {
            let Some(observed) = self.observed.clone() else {
                return Ok(());
            };
            if observed.record.holder != self.config.identity {
                return Ok(());
            }
            let now = Timestamp::now();
            let record = Record {
                holder: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                transitions: observed.record.transitions,
            };
            if self.replace_from(&observed.lease, &record).await? {
                tracing::info!(
                    lease = %format!("{}/{}", self.config.namespace, self.config.name),
                    "released leader lease"
                );
                return Ok(());
            }
            match self.api.get_opt(&self.config.name).await? {
                Some(current) => self.observe(current),
                None => return Ok(()),
            }
        }
        tracing::warn!(
            lease = %format!("{}/{}", self.config.namespace, self.config.name),
            "lease kept changing while releasing it; it will expire instead"
        );
        Ok(())
    }
}

#[cfg(test)]
#[path = "leader_election/tests.rs"]
mod tests;
