//! The next thing the simulated scheduler or kubelet does for a pod (pure).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::config::{FailureMode, NodeConfig};
use super::fate::PodFate;
use super::status::{self, Outcome};

/// The scheduler name this agent answers for (pods naming another scheduler are left alone).
pub const DEFAULT_SCHEDULER: &str = "default-scheduler";

/// One step for one pod.
#[derive(Debug, Clone, PartialEq)]
pub enum PodStep {
    /// Nothing to do now (not ours, already done, or waiting on someone else).
    Ignore,
    /// Post a binding to this node.
    Bind { node: String },
    /// Patch `PodScheduled=False/Unschedulable` and keep it Pending.
    MarkUnschedulable,
    /// Start it (patch status) once this much more time has passed.
    StartAfter(Duration),
    /// Patch its status now.
    Start { node_index: u32, outcome: Outcome },
    /// Its containers have stopped: report them terminated and the terminal phase.
    Terminate,
    /// Finish its deletion once this much more time has passed.
    DeleteAfter(Duration),
    /// Delete it now with `gracePeriodSeconds=0` and a uid precondition.
    Delete,
}

/// Decides the next step. `since_bound` is how long the agent has known the pod bound to one of
/// its nodes (the startup delay counts from there); `seen_terminating` is when the agent first
/// saw the pod's `deletionTimestamp` (the termination delay counts from the deletion request,
/// which is no earlier than that).
pub fn next_step(
    pod: &Pod,
    cfg: &NodeConfig,
    fate: &PodFate,
    since_bound: Duration,
    seen_terminating: Option<Timestamp>,
    now: Timestamp,
) -> PodStep {
    let spec = pod.spec.as_ref();
    let node_name = spec
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty());
    let node_index = node_name.and_then(|n| cfg.node_index(n));

    if let Some(deleted_at) = &pod.metadata.deletion_timestamp {
        if pod.metadata.deletion_grace_period_seconds == Some(0) {
            // Already asked to go; what remains (finalizers) is not the kubelet's business.
            return PodStep::Ignore;
        }
        if node_name.is_some() && node_index.is_none() {
            return PodStep::Ignore;
        }
        if node_name.is_none() {
            // Never ran anywhere: nothing to stop.
            return PodStep::Delete;
        }
        let grace = Duration::from_secs(
            pod.metadata
                .deletion_grace_period_seconds
                .unwrap_or(0)
                .max(0)
                .unsigned_abs(),
        );
        // The server sets deletionTimestamp to "requested + grace period", in whole seconds
        // (cut, not rounded): the request may have come up to a second later than that says,
        // and no earlier than the agent saw it.
        let stamped = deleted_at.0.checked_sub(grace).unwrap_or(deleted_at.0);
        let requested = seen_terminating.map_or(stamped, |seen| seen.max(stamped));
        // Never past the grace period.
        let due = requested
            .checked_add(grace.min(cfg.termination_delay))
            .unwrap_or(requested)
            .min(deleted_at.0);
        return match due.duration_since(now).try_into() {
            Ok(remaining) if remaining > Duration::ZERO => PodStep::DeleteAfter(remaining),
            // As a kubelet does, report the stopped containers before the pod goes.
            _ if status::is_started(pod) && !status::is_terminal(pod) => PodStep::Terminate,
            _ => PodStep::Delete,
        };
    }

    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return PodStep::Ignore;
    }

    let Some(node_name) = node_name else {
        let scheduler = spec.and_then(|s| s.scheduler_name.as_deref());
        if scheduler.is_some_and(|s| !s.is_empty() && s != DEFAULT_SCHEDULER) {
            return PodStep::Ignore;
        }
        if fate.unschedulable {
            return if status::is_marked_unschedulable(pod) {
                PodStep::Ignore
            } else {
                PodStep::MarkUnschedulable
            };
        }
        return PodStep::Bind {
            node: NodeConfig::node_name(fate.node_index.min(cfg.nodes.saturating_sub(1))),
        };
    };
    let Some(node_index) = node_index else {
        // Bound to a node that does not exist here: it stays Pending, as on a real cluster.
        let _ = node_name;
        return PodStep::Ignore;
    };
    if status::is_started(pod) {
        return PodStep::Ignore;
    }
    if since_bound < fate.startup_delay {
        return PodStep::StartAfter(fate.startup_delay - since_bound);
    }
    PodStep::Start {
        node_index,
        outcome: outcome(pod, cfg, fate),
    }
}

fn outcome(pod: &Pod, cfg: &NodeConfig, fate: &PodFate) -> Outcome {
    if !fate.fails {
        return Outcome::Running;
    }
    match cfg.failure_mode {
        FailureMode::Failed => Outcome::Failed,
        FailureMode::CrashLoop => Outcome::CrashLoop,
        FailureMode::ByRestartPolicy => {
            let policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
            if policy == Some("Never") {
                Outcome::Failed
            } else {
                Outcome::CrashLoop
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn fate() -> PodFate {
        PodFate {
            node_index: 1,
            unschedulable: false,
            fails: false,
            startup_delay: Duration::from_millis(500),
        }
    }

    fn now() -> Timestamp {
        "2026-01-01T00:01:00Z".parse().unwrap()
    }

    fn base(extra_spec: serde_json::Value) -> serde_json::Value {
        let mut spec = json!({ "containers": [{ "name": "c", "image": "busybox" }] });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(e.clone());
        }
        json!({ "metadata": { "name": "p", "namespace": "d", "uid": "u1" }, "spec": spec })
    }

    #[test]
    fn unbound_pods_are_bound_or_marked_unschedulable() {
        let cfg = NodeConfig::default();
        let p = pod(base(json!({})));
        assert_eq!(
            next_step(&p, &cfg, &fate(), Duration::ZERO, None, now()),
            PodStep::Bind {
                node: "devcluster-node-1".into()
            }
        );
        let stuck = PodFate {
            unschedulable: true,
            ..fate()
        };
        assert_eq!(
            next_step(&p, &cfg, &stuck, Duration::ZERO, None, now()),
            PodStep::MarkUnschedulable
        );

        let mut marked = base(json!({}));
        marked["status"] = json!({ "phase": "Pending", "conditions": [
            { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" }
        ]});
        assert_eq!(
            next_step(&pod(marked), &cfg, &stuck, Duration::ZERO, None, now()),
            PodStep::Ignore
        );

        let other_scheduler = pod(base(json!({ "schedulerName": "volcano" })));
        assert_eq!(
            next_step(&other_scheduler, &cfg, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );
        let default_scheduler = pod(base(json!({ "schedulerName": "default-scheduler" })));
        assert!(matches!(
            next_step(
                &default_scheduler,
                &cfg,
                &fate(),
                Duration::ZERO,
                None,
                now()
            ),
            PodStep::Bind { .. }
        ));
    }

    #[test]
    fn bound_pods_start_after_the_startup_delay() {
        let cfg = NodeConfig::default();
        let p = pod(base(json!({ "nodeName": "devcluster-node-2" })));
        assert_eq!(
            next_step(&p, &cfg, &fate(), Duration::from_millis(200), None, now()),
            PodStep::StartAfter(Duration::from_millis(300))
        );
        assert_eq!(
            next_step(&p, &cfg, &fate(), Duration::from_millis(500), None, now()),
            PodStep::Start {
                node_index: 2,
                outcome: Outcome::Running
            }
        );
        let foreign = pod(base(json!({ "nodeName": "worker-7" })));
        assert_eq!(
            next_step(&foreign, &cfg, &fate(), Duration::from_secs(9), None, now()),
            PodStep::Ignore
        );
    }

    #[test]
    fn started_and_finished_pods_are_left_alone() {
        let cfg = NodeConfig::default();
        let mut running = base(json!({ "nodeName": "devcluster-node-0" }));
        running["status"] = json!({ "phase": "Running", "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [{ "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0 }] });
        assert_eq!(
            next_step(
                &pod(running),
                &cfg,
                &fate(),
                Duration::from_secs(9),
                None,
                now()
            ),
            PodStep::Ignore
        );
        let mut failed = base(json!({ "nodeName": "devcluster-node-0" }));
        failed["status"] = json!({ "phase": "Failed" });
        assert_eq!(
            next_step(
                &pod(failed),
                &cfg,
                &fate(),
                Duration::from_secs(9),
                None,
                now()
            ),
            PodStep::Ignore
        );
    }

    #[test]
    fn failing_pods_follow_the_restart_policy() {
        let failing = PodFate {
            fails: true,
            ..fate()
        };
        let cfg = NodeConfig::default();
        let never = pod(base(
            json!({ "nodeName": "devcluster-node-0", "restartPolicy": "Never" }),
        ));
        let always = pod(base(
            json!({ "nodeName": "devcluster-node-0", "restartPolicy": "Always" }),
        ));
        let step = |p: &Pod, cfg: &NodeConfig| {
            next_step(p, cfg, &failing, Duration::from_secs(1), None, now())
        };
        assert_eq!(
            step(&never, &cfg),
            PodStep::Start {
                node_index: 0,
                outcome: Outcome::Failed
            }
        );
        assert_eq!(
            step(&always, &cfg),
            PodStep::Start {
                node_index: 0,
                outcome: Outcome::CrashLoop
            }
        );
        let forced = NodeConfig {
            failure_mode: FailureMode::Failed,
            ..NodeConfig::default()
        };
        assert_eq!(
            step(&always, &forced),
            PodStep::Start {
                node_index: 0,
                outcome: Outcome::Failed
            }
        );
    }

    #[test]
    fn the_termination_delay_counts_from_when_the_deletion_was_seen_within_its_second() {
        // deletionTimestamp is whole seconds, cut: the request came at 00:00:50.9, not :50.
        let mut v = base(json!({ "nodeName": "devcluster-node-0" }));
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:20Z");
        v["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let p = pod(v);
        let cfg = NodeConfig {
            termination_delay: Duration::from_millis(800),
            ..NodeConfig::default()
        };
        // Seen terminating at `seen`, looked at `at`.
        let step = |seen: &str, at: &str| {
            let ts = |t: &str| t.parse::<Timestamp>().unwrap();
            next_step(&p, &cfg, &fate(), Duration::ZERO, Some(ts(seen)), ts(at))
        };
        assert_eq!(
            step("2026-01-01T00:00:50.9Z", "2026-01-01T00:00:51Z"),
            PodStep::DeleteAfter(Duration::from_millis(700)),
            "0.8 s after it was seen, not after the stamp's second"
        );
        assert_eq!(
            step("2026-01-01T00:01:00Z", "2026-01-01T00:01:00Z"),
            PodStep::DeleteAfter(Duration::from_millis(800)),
            "a later sighting (a restarted agent) waits the delay from then"
        );
        assert_eq!(
            step("2026-01-01T00:01:30Z", "2026-01-01T00:01:30Z"),
            PodStep::Delete,
            "but never past the grace period"
        );
    }

    #[test]
    fn terminating_pods_go_after_the_shorter_of_grace_and_termination_delay() {
        let mut v = base(json!({ "nodeName": "devcluster-node-0" }));
        // Deletion requested at 00:00:50 with 30 s grace.
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:20Z");
        v["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        let p = pod(v.clone());
        let fast = NodeConfig::default();
        assert_eq!(
            next_step(&p, &fast, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );
        let slow = NodeConfig {
            termination_delay: Duration::from_secs(20),
            ..NodeConfig::default()
        };
        assert_eq!(
            next_step(&p, &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::DeleteAfter(Duration::from_secs(10))
        );
        let slower_than_grace = NodeConfig {
            termination_delay: Duration::from_secs(600),
            ..NodeConfig::default()
        };
        assert_eq!(
            next_step(&p, &slower_than_grace, &fate(), Duration::ZERO, None, now()),
            PodStep::DeleteAfter(Duration::from_secs(20)),
            "the grace period caps the termination delay"
        );

        let mut started = v.clone();
        started["status"] = json!({ "phase": "Running", "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [{ "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0 }] });
        assert_eq!(
            next_step(
                &pod(started.clone()),
                &fast,
                &fate(),
                Duration::ZERO,
                None,
                now()
            ),
            PodStep::Terminate,
            "a running pod reports its containers stopped first"
        );
        started["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            next_step(&pod(started), &fast, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );

        v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert_eq!(
            next_step(&pod(v.clone()), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );

        let mut unbound = base(json!({}));
        unbound["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:20Z");
        unbound["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert_eq!(
            next_step(&pod(unbound), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );

        v["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        v["spec"]["nodeName"] = json!("worker-7");
        assert_eq!(
            next_step(&pod(v), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );
    }
}
