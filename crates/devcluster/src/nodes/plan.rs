//! The next thing the simulated scheduler or kubelet does for a pod (pure).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use super::config::{FailureMode, NodeConfig};
use super::fate::PodFate;
use super::kubelet::{self, Run, Termination};
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
    /// Its containers changed (exited, restarted, stopped): report them, and the terminal phase
    /// when the pod is over.
    Containers {
        runs: Vec<Run>,
        terminal: Option<&'static str>,
    },
    /// Look again once this much more time has passed (a container's program ends, a back-off
    /// ends, a terminating container stops).
    WaitFor(Duration),
    /// Finish its deletion once this much more time has passed.
    DeleteAfter(Duration),
    /// Delete it now with `gracePeriodSeconds=0` and a uid precondition.
    Delete,
}

/// What the agent remembers of a pod: how long it has known it bound to one of its nodes (the
/// startup delay counts from there), when it first saw its `deletionTimestamp` (the termination
/// counts from the deletion request, which is no earlier than that), and the precise start of
/// each container's current run (container name, restart count; the status has whole seconds).
pub struct Memory<'a> {
    pub since_bound: Duration,
    pub seen_terminating: Option<Timestamp>,
    pub started: &'a dyn Fn(&str, i32) -> Option<Timestamp>,
}

impl Memory<'_> {
    /// Nothing remembered beyond these two clocks.
    pub fn clocks(since_bound: Duration, seen_terminating: Option<Timestamp>) -> Memory<'static> {
        Memory {
            since_bound,
            seen_terminating,
            started: &|_, _| None,
        }
    }
}

/// Decides the next step.
pub fn next_step(
    pod: &Pod,
    cfg: &NodeConfig,
    fate: &PodFate,
    memory: &Memory<'_>,
    now: Timestamp,
) -> PodStep {
    let since_bound = memory.since_bound;
    let seen_terminating = memory.seen_terminating;
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
        let grace = grace.min(
            deleted_at
                .0
                .duration_since(requested)
                .try_into()
                .unwrap_or_default(),
        );
        let runs = (status::is_started(pod) && !status::is_terminal(pod))
            .then(|| kubelet::observe(pod, memory.started))
            .flatten();
        let Some(runs) = runs else {
            if status::is_terminal(pod) {
                // Its containers have stopped and the status says so: it goes.
                return PodStep::Delete;
            }
            // Never started: it goes once the delay is over.
            let due = requested
                .checked_add(grace.min(cfg.termination_delay))
                .unwrap_or(requested);
            return match due.duration_since(now).try_into() {
                Ok(remaining) if remaining > Duration::ZERO => PodStep::DeleteAfter(remaining),
                _ => PodStep::Delete,
            };
        };
        // As a kubelet does: the containers stop in order, the status reports them stopped and
        // the terminal phase, then the pod goes.
        let how = Termination {
            requested,
            grace,
            stop_delay: cfg.termination_delay,
        };
        let stopped = kubelet::terminate(pod, &runs, now, &how);
        return if stopped.runs != runs || kubelet::terminal_phase(&runs).is_some() {
            let terminal = kubelet::terminal_phase(&stopped.runs);
            PodStep::Containers {
                runs: stopped.runs,
                terminal,
            }
        } else {
            wait_until(stopped.next, now)
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
        // A failing fate keeps the status it started with (failed, or crash-looping for ever).
        if fate.fails {
            return PodStep::Ignore;
        }
        let Some(runs) = kubelet::observe(pod, memory.started) else {
            return PodStep::Ignore;
        };
        let advanced = kubelet::advance(pod, &runs, now);
        return if advanced.runs != runs {
            let terminal = kubelet::terminal_phase(&advanced.runs);
            PodStep::Containers {
                runs: advanced.runs,
                terminal,
            }
        } else {
            wait_until(advanced.next, now)
        };
    }
    if since_bound < fate.startup_delay {
        return PodStep::StartAfter(fate.startup_delay - since_bound);
    }
    PodStep::Start {
        node_index,
        outcome: outcome(pod, cfg, fate),
    }
}

/// Wait until `due`, or for a change when nothing is due.
fn wait_until(due: Option<Timestamp>, now: Timestamp) -> PodStep {
    match due.map(|due| due.duration_since(now).try_into()) {
        None => PodStep::Ignore,
        Some(Ok(wait)) if wait > Duration::ZERO => PodStep::WaitFor(wait),
        // Due already (cannot happen: what is due is applied first); look again soon.
        Some(_) => PodStep::WaitFor(Duration::from_millis(1)),
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

    fn step(
        p: &Pod,
        cfg: &NodeConfig,
        fate: &PodFate,
        since_bound: Duration,
        seen_terminating: Option<Timestamp>,
        now: Timestamp,
    ) -> PodStep {
        next_step(
            p,
            cfg,
            fate,
            &Memory::clocks(since_bound, seen_terminating),
            now,
        )
    }

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
            step(&p, &cfg, &fate(), Duration::ZERO, None, now()),
            PodStep::Bind {
                node: "devcluster-node-1".into()
            }
        );
        let stuck = PodFate {
            unschedulable: true,
            ..fate()
        };
        assert_eq!(
            step(&p, &cfg, &stuck, Duration::ZERO, None, now()),
            PodStep::MarkUnschedulable
        );

        let mut marked = base(json!({}));
        marked["status"] = json!({ "phase": "Pending", "conditions": [
            { "type": "PodScheduled", "status": "False", "reason": "Unschedulable" }
        ]});
        assert_eq!(
            step(&pod(marked), &cfg, &stuck, Duration::ZERO, None, now()),
            PodStep::Ignore
        );

        let other_scheduler = pod(base(json!({ "schedulerName": "volcano" })));
        assert_eq!(
            step(&other_scheduler, &cfg, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );
        let default_scheduler = pod(base(json!({ "schedulerName": "default-scheduler" })));
        assert!(matches!(
            step(
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
            step(&p, &cfg, &fate(), Duration::from_millis(200), None, now()),
            PodStep::StartAfter(Duration::from_millis(300))
        );
        assert_eq!(
            step(&p, &cfg, &fate(), Duration::from_millis(500), None, now()),
            PodStep::Start {
                node_index: 2,
                outcome: Outcome::Running
            }
        );
        let foreign = pod(base(json!({ "nodeName": "worker-7" })));
        assert_eq!(
            step(&foreign, &cfg, &fate(), Duration::from_secs(9), None, now()),
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
            step(
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
            step(
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
        let step =
            |p: &Pod, cfg: &NodeConfig| step(p, cfg, &failing, Duration::from_secs(1), None, now());
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
            step(&p, &cfg, &fate(), Duration::ZERO, Some(ts(seen)), ts(at))
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
            step(&p, &fast, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );
        let slow = NodeConfig {
            termination_delay: Duration::from_secs(20),
            ..NodeConfig::default()
        };
        assert_eq!(
            step(&p, &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::DeleteAfter(Duration::from_secs(10))
        );
        let slower_than_grace = NodeConfig {
            termination_delay: Duration::from_secs(600),
            ..NodeConfig::default()
        };
        assert_eq!(
            step(&p, &slower_than_grace, &fate(), Duration::ZERO, None, now()),
            PodStep::DeleteAfter(Duration::from_secs(20)),
            "the grace period caps the termination delay"
        );

        let mut started = v.clone();
        started["status"] = json!({ "phase": "Running", "startTime": "2026-01-01T00:00:00Z",
            "containerStatuses": [{ "name": "c", "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
                "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } } }] });
        let stopped = step(
            &pod(started.clone()),
            &fast,
            &fate(),
            Duration::ZERO,
            None,
            now(),
        );
        let PodStep::Containers { runs, terminal } = stopped else {
            panic!("a running pod reports its containers stopped first: {stopped:?}");
        };
        assert_eq!(terminal, Some("Succeeded"));
        assert!(
            matches!(&runs[0].state, kubelet::State::Exited(e) if e.code == 0
            && e.finished == "2026-01-01T00:00:50Z".parse::<Timestamp>().unwrap())
        );
        started["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            step(&pod(started), &fast, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );

        v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        assert_eq!(
            step(&pod(v.clone()), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );

        let mut unbound = base(json!({}));
        unbound["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:01:20Z");
        unbound["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        assert_eq!(
            step(&pod(unbound), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Delete
        );

        v["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        v["spec"]["nodeName"] = json!("worker-7");
        assert_eq!(
            step(&pod(v), &slow, &fate(), Duration::ZERO, None, now()),
            PodStep::Ignore
        );
    }
}
