//! Reporting a pass: the guarded status write, and at first Ready the latency metrics and the
//! observability annotations.

use super::*;
use controller_common::metrics::current_trace_exemplar;

/// The guarded merge patch of a claim's status: the resourceVersion it is guarded by, the
/// conditions and the bound Sandbox, `null` for what must be cleared. Serialized straight from
/// the status it borrows (no intermediate `serde_json::Value` tree).
pub(super) fn claim_status_patch<'a>(
    resource_version: Option<&'a str>,
    next: &'a SandboxClaimStatus,
) -> ClaimStatusPatch<'a> {
    ClaimStatusPatch {
        metadata: GuardedMetadata { resource_version },
        status: ClaimStatusFields {
            conditions: (!next.conditions.is_empty()).then_some(next.conditions.as_slice()),
            sandbox: ClaimSandboxFields {
                name: (!next.sandbox.name.is_empty()).then_some(next.sandbox.name.as_str()),
                pod_ips: (!next.sandbox.pod_ips.is_empty())
                    .then_some(next.sandbox.pod_ips.as_slice()),
            },
        },
    }
}

/// See [`claim_status_patch`]; `None` is written as `null`.
#[derive(Debug, serde::Serialize)]
pub(super) struct ClaimStatusPatch<'a> {
    metadata: GuardedMetadata<'a>,
    status: ClaimStatusFields<'a>,
}

#[derive(Debug, serde::Serialize)]
struct GuardedMetadata<'a> {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<&'a str>,
}

#[derive(Debug, serde::Serialize)]
struct ClaimStatusFields<'a> {
    conditions: Option<&'a [k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]>,
    sandbox: ClaimSandboxFields<'a>,
}

#[derive(Debug, serde::Serialize)]
struct ClaimSandboxFields<'a> {
    name: Option<&'a str>,
    #[serde(rename = "podIPs")]
    pod_ips: Option<&'a [String]>,
}

impl Pass<'_> {
    /// Writes the status when it changed, guarded by the claim's resourceVersion. Returns
    /// whether the new status is now stored.
    pub(super) async fn write_status(
        &self,
        current: &SandboxClaimStatus,
        next: &SandboxClaimStatus,
    ) -> Result<bool, Error> {
        if current == next {
            return Ok(true);
        }
        let rv = self.rv.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let patch = claim_status_patch(rv.as_deref(), next);
        let claims =
            Api::<Lean<SandboxClaim>>::namespaced(self.ctx.client.clone(), &self.namespace);
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match claims
            .patch_status(&self.name, &params, &Patch::Merge(&patch))
            .instrument(tracing::info_span!("updateClaimStatus"))
            .await
        {
            Ok(stored) => {
                self.ctx.claim.status_written(
                    &self.uid,
                    stored.0.metadata.resource_version.as_deref(),
                    next,
                );
                Ok(true)
            }
            // Stale view (our own status writes do not re-trigger the claim): look again soon.
            Err(e) if is_conflict(&e) => {
                self.stale.store(true, std::sync::atomic::Ordering::Relaxed);
                Ok(false)
            }
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => Err(Error::kube(
                format!(
                    "patch status of SandboxClaim {}/{}",
                    self.namespace, self.name
                ),
                e,
            )),
        }
    }

    /// First Ready: latency metrics once, and the observability annotations in one patch.
    pub(super) async fn after_status_write(
        &self,
        old: &SandboxClaimStatus,
        new: &mut SandboxClaimStatus,
        sandbox: Option<&Sandbox>,
        first_seen: Timestamp,
    ) -> Result<(), Error> {
        let is_ready = |s: &SandboxClaimStatus| {
            find_condition(&s.conditions, READY).is_some_and(|c| c.status == STATUS_TRUE)
        };
        if !is_ready(new) {
            return Ok(());
        }
        let annotations = self.claim.metadata.annotations.clone().unwrap_or_default();
        if annotations.contains_key(CLAIM_FIRST_READY_AT_ANNOTATION) {
            return Ok(());
        }
        // Once per claim and process: a later pass may still read a cached claim without the
        // annotation we wrote.
        if !self.ctx.claim.mark_recorded(&self.uid) {
            return Ok(());
        }
        // Ready was persisted before this process saw the transition (e.g. across a restart):
        // the latency is unknown; record nothing and mark it so.
        let first_time = !is_ready(old);
        // When Ready was stored (just now), not when this pass started: a pass that adopts and
        // reports in one go would otherwise record 0 ms whatever its requests cost.
        let ready_at = Timestamp::now();
        if first_time {
            self.record_latencies(&annotations, sandbox, first_seen, ready_at);
        }
        // `claim-to-bound` ends when Ready was stored (the instant `claim-first-ready-at`
        // records); after a restart that missed the transition, at the stored Ready transition
        // time (only while the first-ready annotation marks which
        // claims were already reported, else every restart would report them all again).
        let bound_at = if first_time {
            Some(ready_at)
        } else if self.ctx.claim.settings.observability_annotations {
            find_condition(&new.conditions, READY).map(|c| c.last_transition_time.0)
        } else {
            None
        };
        if let (Some(end), Some(trace)) = (bound_at, &self.trace)
            && !new.sandbox.name.is_empty()
        {
            self.emit_claim_to_bound(trace, sandbox, &new.sandbox.name, end);
        }
        if !self.ctx.claim.settings.observability_annotations {
            return Ok(());
        }
        let mut stamp = BTreeMap::new();
        stamp.insert(
            CLAIM_FIRST_READY_AT_ANNOTATION.to_owned(),
            if first_time {
                rfc3339_nano(ready_at)
            } else {
                "unknown".to_owned()
            },
        );
        if !annotations.contains_key(CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION) {
            stamp.insert(
                CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION.to_owned(),
                rfc3339_nano(first_seen),
            );
        }
        // A claim created without a trace context records the one its spans went to.
        if self.lacks_trace
            && let Some(trace) = self
                .trace
                .as_ref()
                .and_then(super::super::trace::ClaimTrace::bound_annotation)
        {
            stamp.insert(TRACE_CONTEXT_ANNOTATION.to_owned(), trace);
        }
        // In the background: the claim is Ready already, and a failed stamp is not retried
        // anyway (the metrics are recorded once per process).
        let ctx = self.ctx.clone();
        let (namespace, name, uid) = (self.namespace.clone(), self.name.clone(), self.uid.clone());
        let patch = json!({"metadata": {"annotations": stamp}});
        tokio::spawn(async move {
            let claims = Api::<Lean<SandboxClaim>>::namespaced(ctx.client.clone(), &namespace);
            match claims
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(Lean(stamped)) => {
                    ctx.claim.own_writes.record(&stamped.metadata);
                    // The stamp moved the claim's resourceVersion: a later pass on a cache
                    // that has not seen it must guard its status write with the new one, not
                    // send a doomed 409.
                    ctx.claim.status_written(
                        &uid,
                        stamped.metadata.resource_version.as_deref(),
                        &stamped.status.clone().unwrap_or_default(),
                    );
                }
                Err(e) if is_not_found(&e) => {}
                Err(e) => tracing::warn!(
                    claim = %format!("{namespace}/{name}"),
                    error = %e,
                    "cannot stamp the claim's first-ready annotations"
                ),
            }
        });
        Ok(())
    }

    fn emit_claim_to_bound(
        &self,
        trace: &super::super::trace::ClaimTrace,
        sandbox: Option<&Sandbox>,
        sandbox_name: &str,
        end: Timestamp,
    ) {
        let launch_type = launch_type_of(sandbox);
        let template = sandbox
            .and_then(|sb| sb.metadata.annotations.as_ref())
            .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
            .map_or(UNKNOWN_TEMPLATE, String::as_str);
        let created_by = normalize_created_by(claim_created_by(self.claim));
        trace.emit_bound(
            self.claim,
            &super::super::trace::Bound {
                sandbox: sandbox_name,
                template,
                launch_type,
                created_by,
            },
            std::time::SystemTime::from(end),
        );
    }

    pub(super) fn record_latencies(
        &self,
        annotations: &BTreeMap<String, String>,
        sandbox: Option<&Sandbox>,
        first_seen: Timestamp,
        ready_at: Timestamp,
    ) {
        let launch_type = launch_type_of(sandbox);
        let template = sandbox
            .and_then(|sb| sb.metadata.annotations.as_ref())
            .and_then(|a| a.get(SANDBOX_TEMPLATE_REF_ANNOTATION))
            .cloned()
            .unwrap_or_else(|| UNKNOWN_TEMPLATE.into());
        let labels = StartupLabels {
            launch_type: launch_type.into(),
            sandbox_template: template.clone(),
        };
        let since = |ts: Timestamp| -> Option<f64> {
            let ms = ready_at.as_millisecond() - ts.as_millisecond();
            (ms >= 0).then_some(ms as f64)
        };
        let parsed = |key: &str| {
            annotations
                .get(key)
                .and_then(|v| v.parse::<Timestamp>().ok())
        };
        let metrics = &self.ctx.claim.metrics;
        if let Some(ms) = parsed(WEBHOOK_FIRST_OBSERVED_AT_ANNOTATION).and_then(since) {
            metrics
                .claim_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        let observed = parsed(CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION).unwrap_or(first_seen);
        if let Some(ms) = since(observed) {
            metrics
                .controller_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        if let Some(ms) = parsed(CLIENT_FIRST_REQUESTED_AT_ANNOTATION).and_then(since) {
            metrics
                .client_startup_latency
                .get_or_create(&labels)
                .observe(ms, current_trace_exemplar(), None);
        }
        if let Some(sb) = sandbox
            && let (Some(ready), Some(created)) = (
                sb.status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, READY))
                    .filter(|c| c.status == STATUS_TRUE),
                sb.metadata.creation_timestamp.as_ref(),
            )
        {
            let ms = ready.last_transition_time.0.as_millisecond() - created.0.as_millisecond();
            if ms >= 0 {
                metrics
                    .creation_latency
                    .get_or_create(&CreationLatencyLabels {
                        namespace: self.namespace.clone(),
                        launch_type: launch_type.into(),
                        sandbox_template: template,
                    })
                    .observe(ms as f64, current_trace_exemplar(), None);
            }
        }
    }
}

/// `warm` when the Sandbox carries `launch-type=warm`, `cold` otherwise, `unknown` without one.
fn launch_type_of(sandbox: Option<&Sandbox>) -> &'static str {
    match sandbox {
        None => "unknown",
        Some(sb)
            if sb
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SANDBOX_LAUNCH_TYPE_LABEL))
                .map(String::as_str)
                == Some(SANDBOX_LAUNCH_TYPE_WARM) =>
        {
            "warm"
        }
        Some(_) => "cold",
    }
}

/// RFC 3339 with nanoseconds, trailing zeros trimmed (Go's `RFC3339Nano`).
pub fn rfc3339_nano(ts: Timestamp) -> String {
    ts.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    /// The body as it was built before it was serialized directly (the oracle).
    fn as_value_tree(rv: Option<&str>, next: &SandboxClaimStatus) -> Value {
        let sandbox = json!({
            "name": if next.sandbox.name.is_empty() { Value::Null } else { json!(next.sandbox.name) },
            "podIPs": if next.sandbox.pod_ips.is_empty() { Value::Null } else { json!(next.sandbox.pod_ips) },
        });
        json!({
            "metadata": {"resourceVersion": rv.map(str::to_owned)},
            "status": {
                "conditions": if next.conditions.is_empty() { Value::Null } else { json!(next.conditions) },
                "sandbox": sandbox,
            },
        })
    }

    #[test]
    fn the_serialized_status_patch_is_the_value_tree_it_replaced() {
        let mut rng = fastrand::Rng::with_seed(9);
        let word = |rng: &mut fastrand::Rng| -> String {
            match rng.u8(..4) {
                0 => String::new(),
                1 => "a \"quoted\" \\ value".into(),
                2 => "ünïcode-\u{1F600}".into(),
                _ => format!("v{}", rng.u32(..)),
            }
        };
        for _ in 0..500 {
            let next = SandboxClaimStatus {
                conditions: (0..rng.usize(..3))
                    .map(|i| Condition {
                        type_: ["Ready", "Finished", "Other"][i].into(),
                        status: ["True", "False", "Unknown"][rng.usize(..3)].into(),
                        reason: word(&mut rng),
                        message: word(&mut rng),
                        last_transition_time: Time(
                            Timestamp::from_second(rng.i64(0..1_000_000)).unwrap(),
                        ),
                        observed_generation: rng.bool().then(|| rng.i64(..)),
                    })
                    .collect(),
                sandbox: api_types::ClaimSandboxStatus {
                    name: word(&mut rng),
                    pod_ips: (0..rng.usize(..3)).map(|_| word(&mut rng)).collect(),
                },
            };
            let rv = rng.bool().then(|| word(&mut rng));
            assert_eq!(
                serde_json::to_value(claim_status_patch(rv.as_deref(), &next)).unwrap(),
                as_value_tree(rv.as_deref(), &next),
                "{next:?}"
            );
        }
    }
}
