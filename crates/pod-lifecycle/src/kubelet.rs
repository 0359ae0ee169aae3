//! The simulated kubelet's container lifecycle (pure): containers whose program ends exit with
//! its code at its time, are restarted by the pod's `restartPolicy` with the kubelet's back-off,
//! and a terminating pod's containers stop in the kubelet's order (`preStop`, then TERM, then
//! KILL at the grace period's end).
//!
//! Each call looks at the containers as the pod's status reports them (with the precise start
//! times the agent remembers) and works out their state now and when the next change is due; the
//! caller writes the status when it changed and wakes up at that time.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::program::{Program, hook_duration, program_of};

/// The first back-off between restarts of a failing container; it doubles up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(10);
/// The longest back-off between restarts (the kubelet's five minutes).
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The one-off extension of the grace period when a `preStop` hook outruns it.
pub const PRE_STOP_EXTENSION: Duration = Duration::from_secs(2);
/// The exit code of a process killed with SIGKILL.
pub const KILLED_EXIT_CODE: i32 = 137;

/// How a run of a container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    pub code: i32,
    /// `Completed` (code 0) or `Error`.
    pub reason: &'static str,
    pub started: Timestamp,
    pub finished: Timestamp,
}

impl Exit {
    fn new(code: i32, started: Timestamp, finished: Timestamp) -> Exit {
        Exit {
            code,
            reason: if code == 0 { "Completed" } else { "Error" },
            started,
            finished,
        }
    }
}

/// A container's state, as the kubelet reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Running {
        since: Timestamp,
    },
    /// Waiting in `CrashLoopBackOff` until the restart.
    BackOff {
        until: Timestamp,
    },
    Exited(Exit),
}

/// One container as far as its lifecycle goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub name: String,
    pub restart_count: i32,
    pub state: State,
    /// The previous run's end (`lastState.terminated`).
    pub last: Option<Exit>,
}

/// The deletion a terminating pod is going through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Termination {
    /// When the deletion was requested (the grace period and the hooks count from here).
    pub requested: Timestamp,
    pub grace: Duration,
    /// How long a container takes to exit after TERM (`--pod-termination-delay`).
    pub stop_delay: Duration,
}

/// The containers' states now, and when the next change is due (`None`: nothing is due; they run
/// until something else happens).
#[derive(Debug, Clone, PartialEq)]
pub struct Advanced {
    pub runs: Vec<Run>,
    pub next: Option<Timestamp>,
}

/// Reads the containers' states from the pod's status; `started` gives the precise start of a
/// container's current run (name, restart count) when the agent remembers it (the status has
/// whole seconds). `None` when a container has no status the lifecycle understands (not
/// started by this kubelet).
pub fn observe(pod: &Pod, started: &dyn Fn(&str, i32) -> Option<Timestamp>) -> Option<Vec<Run>> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().map(|cs| observe_one(cs, started)).collect()
}

fn observe_one(
    cs: &ContainerStatus,
    started: &dyn Fn(&str, i32) -> Option<Timestamp>,
) -> Option<Run> {
    let last = cs
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .map(|t| {
            let finished = t.finished_at.as_ref().map(|f| f.0);
            let begun = t.started_at.as_ref().map(|s| s.0);
            Exit::new(
                t.exit_code,
                begun.or(finished).unwrap_or(Timestamp::UNIX_EPOCH),
                finished.or(begun).unwrap_or(Timestamp::UNIX_EPOCH),
            )
        });
    let state = cs.state.as_ref()?;
    let state = if let Some(running) = &state.running {
        let since = started(&cs.name, cs.restart_count)
            .or_else(|| running.started_at.as_ref().map(|t| t.0))?;
        State::Running { since }
    } else if let Some(t) = &state.terminated {
        let finished = t.finished_at.as_ref().map(|f| f.0)?;
        let begun = t.started_at.as_ref().map_or(finished, |s| s.0);
        let mut exit = Exit::new(t.exit_code, begun, finished);
        if let Some(reason) = t
            .reason
            .as_deref()
            .filter(|r| *r == "Completed" || *r == "Error")
        {
            exit.reason = if reason == "Completed" {
                "Completed"
            } else {
                "Error"
            };
        }
        State::Exited(exit)
    } else if state
        .waiting
        .as_ref()
        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"))
    {
        let after = last.as_ref()?.finished;
        State::BackOff {
            until: after + backoff(cs.restart_count),
        }
    } else {
        return None;
    };
    Some(Run {
        name: cs.name.clone(),
        restart_count: cs.restart_count,
        state,
        last,
    })
}

/// The back-off before the restart that follows `restart_count` restarts (the first restart is
/// immediate; then 10 s, doubling, at most 5 min).
pub fn backoff(restart_count: i32) -> SignedDuration {
    let doublings = restart_count.saturating_sub(1).clamp(0, 16).unsigned_abs();
    let wait = INITIAL_BACKOFF
        .saturating_mul(1u32 << doublings)
        .min(MAX_BACKOFF);
    SignedDuration::try_from(wait).unwrap_or(SignedDuration::MAX)
}

fn after(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Whether the pod's restart policy restarts a container that exited with `code`.
fn restarts(pod: &Pod, code: i32) -> bool {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => false,
        Some("OnFailure") => code != 0,
        _ => true,
    }
}

fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == name)
}

/// Runs the pod's containers forward to `now` (no termination: exits and restarts only).
pub fn advance(pod: &Pod, runs: &[Run], now: Timestamp) -> Advanced {
    let mut next: Option<Timestamp> = None;
    let mut due = |t: Timestamp| next = Some(next.map_or(t, |n: Timestamp| n.min(t)));
    let runs = runs
        .iter()
        .map(|run| {
            let program = container(pod, &run.name).map_or(Program::Runs, program_of);
            let mut run = run.clone();
            // Each turn moves time forward by a run or a back-off of at least 10 s (only the
            // first restart is immediate), so this ends; the bound is a guard.
            for _ in 0..1024 {
                match run.state {
                    State::Running { since } => {
                        let Program::Exits { after: lasts, code } = program else {
                            break;
                        };
                        let end = after(since, lasts);
                        if end > now {
                            due(end);
                            break;
                        }
                        let exit = Exit::new(code, since, end);
                        if !restarts(pod, code) {
                            run.state = State::Exited(exit);
                            break;
                        }
                        run.state = if run.restart_count == 0 {
                            run.restart_count = 1;
                            State::Running { since: end }
                        } else {
                            State::BackOff {
                                until: end + backoff(run.restart_count),
                            }
                        };
                        run.last = Some(exit);
                    }
                    State::BackOff { until } => {
                        if until > now {
                            due(until);
                            break;
                        }
                        run.restart_count = run.restart_count.saturating_add(1);
                        run.state = State::Running { since: until };
                    }
                    State::Exited(_) => break,
                }
            }
            run
        })
        .collect();
    Advanced { runs, next }
}

/// Stops a terminating pod's containers in the kubelet's order, as of `now`: each running
/// container's `preStop` hook runs first (its time by the grammar; a `sleep` action's seconds),
/// then TERM, after which it exits (code 0) once `stop_delay` has passed, unless the grace period
/// ends first (KILL: code 137). A hook still running when the grace period ends gets a one-off
/// 2 s extension, then TERM and KILL. A container whose own program ends before all that exits
/// with its own code then. A container waiting to restart does not start again: its last run's
/// end stands.
pub fn terminate(pod: &Pod, runs: &[Run], now: Timestamp, how: &Termination) -> Advanced {
    let mut next: Option<Timestamp> = None;
    let runs = runs
        .iter()
        .map(|run| {
            let mut run = run.clone();
            match &run.state {
                State::Exited(_) => {}
                State::BackOff { .. } => {
                    let exit = run.last.clone().unwrap_or_else(|| Exit::new(1, now, now));
                    run.state = State::Exited(exit);
                }
                State::Running { since } => {
                    let since = *since;
                    let spec = container(pod, &run.name);
                    let program = spec.map_or(Program::Runs, program_of);
                    let hook = spec
                        .and_then(|c| c.lifecycle.as_ref())
                        .and_then(|l| l.pre_stop.as_ref())
                        .map(hook_duration);
                    // `None`: no hook; `Some(None)`: a hook that never ends by itself.
                    let hook_time = match hook {
                        None => Duration::ZERO,
                        Some(d) => d.unwrap_or(Duration::MAX),
                    };
                    let (term, kill) = if hook_time > how.grace {
                        let extended = how.grace.saturating_add(PRE_STOP_EXTENSION);
                        (how.grace, extended)
                    } else {
                        (hook_time, how.grace)
                    };
                    let stopped_by_term = term.saturating_add(how.stop_delay);
                    let (stop, code) = if stopped_by_term < kill {
                        (after(how.requested, stopped_by_term), 0)
                    } else {
                        (after(how.requested, kill), KILLED_EXIT_CODE)
                    };
                    let (end, code) = match program {
                        Program::Exits {
                            after: lasts,
                            code: own,
                        } if after(since, lasts) < stop => (after(since, lasts), own),
                        _ => (stop, code),
                    };
                    if end <= now {
                        run.state = State::Exited(Exit::new(code, since, end));
                    } else {
                        next = Some(next.map_or(end, |n: Timestamp| n.min(end)));
                    }
                }
            }
            run
        })
        .collect();
    Advanced { runs, next }
}

/// The pod's phase when every container has ended for good: `Succeeded` when each exited 0,
/// else `Failed`; `None` while one runs or will run again.
pub fn terminal_phase(runs: &[Run]) -> Option<&'static str> {
    let mut failed = false;
    for run in runs {
        match &run.state {
            State::Exited(exit) => failed |= exit.code != 0,
            _ => return None,
        }
    }
    Some(if failed { "Failed" } else { "Succeeded" })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn pod(policy: &str, containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "d", "uid": "u" },
            "spec": { "restartPolicy": policy, "containers": containers },
        }))
        .unwrap()
    }

    fn running(name: &str, since: &str) -> Run {
        Run {
            name: name.into(),
            restart_count: 0,
            state: State::Running { since: ts(since) },
            last: None,
        }
    }

    const T0: &str = "2026-01-01T00:00:00Z";

    #[test]
    fn a_program_that_ends_exits_with_its_code_at_its_time() {
        let p = pod(
            "Never",
            json!([{ "name": "c", "image": "i", "command": ["sh", "-c", "sleep 2; exit 3"] }]),
        );
        let runs = [running("c", T0)];
        let early = advance(&p, &runs, ts("2026-01-01T00:00:01.5Z"));
        assert_eq!(early.runs, runs);
        assert_eq!(early.next, Some(ts("2026-01-01T00:00:02Z")));
        let done = advance(&p, &runs, ts("2026-01-01T00:00:02Z"));
        assert_eq!(
            done.runs[0].state,
            State::Exited(Exit::new(3, ts(T0), ts("2026-01-01T00:00:02Z")))
        );
        assert_eq!(done.next, None);
        assert_eq!(terminal_phase(&done.runs), Some("Failed"));
        assert_eq!(done.runs[0].restart_count, 0);
    }

    #[test]
    fn restart_policies_decide_what_follows_an_exit() {
        let ok = json!([{ "name": "c", "image": "i", "command": ["true"] }]);
        let bad = json!([{ "name": "c", "image": "i", "command": ["false"] }]);
        let at = ts("2026-01-01T00:00:01Z");
        let runs = [running("c", T0)];
        let after_exit = |policy: &str, containers: &serde_json::Value| {
            advance(&pod(policy, containers.clone()), &runs, at)
        };
        assert_eq!(
            terminal_phase(&after_exit("Never", &ok).runs),
            Some("Succeeded")
        );
        assert_eq!(
            terminal_phase(&after_exit("OnFailure", &ok).runs),
            Some("Succeeded")
        );
        // A failing container under OnFailure, and any under Always, is restarted: at once the
        // first time, then after 10 s, 20 s, ...
        for (policy, containers) in [("OnFailure", &bad), ("Always", &ok), ("Always", &bad)] {
            let a = after_exit(policy, containers);
            assert_eq!(terminal_phase(&a.runs), None, "{policy}");
            let run = &a.runs[0];
            assert_eq!(run.restart_count, 1, "{policy}");
            assert_eq!(
                run.state,
                State::BackOff {
                    until: ts("2026-01-01T00:00:10Z")
                }
            );
            assert_eq!(a.next, Some(ts("2026-01-01T00:00:10Z")));
            let later = advance(
                &pod(policy, containers.clone()),
                &a.runs,
                ts("2026-01-01T00:00:31Z"),
            );
            // Restarted at :10 (count 2), exited, back-off 20 s until :30, restarted (count 3),
            // exited, back-off 40 s.
            assert_eq!(later.runs[0].restart_count, 3, "{policy}");
            assert_eq!(
                later.runs[0].state,
                State::BackOff {
                    until: ts("2026-01-01T00:01:10Z")
                }
            );
        }
        assert_eq!(
            backoff(9),
            SignedDuration::from_secs(300),
            "capped at 5 min"
        );
    }

    #[test]
    fn a_program_outside_the_grammar_runs_until_stopped() {
        let p = pod("Never", json!([{ "name": "c", "image": "nginx" }]));
        let a = advance(&p, &[running("c", T0)], ts("2030-01-01T00:00:00Z"));
        assert_eq!(a.runs[0].state, State::Running { since: ts(T0) });
        assert_eq!(a.next, None);
    }

    #[test]
    fn termination_runs_pre_stop_then_term_then_kill() {
        let how = |grace: u64, delay: u64| Termination {
            requested: ts("2026-01-01T00:01:00Z"),
            grace: Duration::from_secs(grace),
            stop_delay: Duration::from_secs(delay),
        };
        let containers = json!([
            { "name": "plain", "image": "nginx" },
            { "name": "hooked", "image": "nginx",
              "lifecycle": { "preStop": { "sleep": { "seconds": 5 } } } },
            { "name": "ending", "image": "busybox", "command": ["sh", "-c", "sleep 62"] },
        ]);
        let p = pod("Always", containers);
        let runs = [
            running("plain", T0),
            running("hooked", T0),
            running("ending", T0),
        ];
        let ended = |a: &Advanced, name: &str| -> Option<(i32, Timestamp)> {
            a.runs
                .iter()
                .find(|r| r.name == name)
                .and_then(|r| match &r.state {
                    State::Exited(e) => Some((e.code, e.finished)),
                    _ => None,
                })
        };
        // Grace 30 s, TERM takes 3 s: plain at +3 s, hooked at +5+3 s, ending by itself at +2 s.
        let a = terminate(&p, &runs, ts("2026-01-01T00:01:02Z"), &how(30, 3));
        assert_eq!(ended(&a, "ending"), Some((0, ts("2026-01-01T00:01:02Z"))));
        assert_eq!(ended(&a, "plain"), None);
        assert_eq!(a.next, Some(ts("2026-01-01T00:01:03Z")));
        let a = terminate(&p, &a.runs, ts("2026-01-01T00:01:08Z"), &how(30, 3));
        assert_eq!(ended(&a, "plain"), Some((0, ts("2026-01-01T00:01:03Z"))));
        assert_eq!(ended(&a, "hooked"), Some((0, ts("2026-01-01T00:01:08Z"))));
        assert_eq!(terminal_phase(&a.runs), Some("Succeeded"));

        // Grace 4 s: the hook outruns it (TERM at +4 s, KILL at +6 s); plain is killed at +4 s
        // when TERM would take 10 s.
        let a = terminate(&p, &runs, ts("2026-01-01T00:02:00Z"), &how(4, 10));
        assert_eq!(
            ended(&a, "plain"),
            Some((KILLED_EXIT_CODE, ts("2026-01-01T00:01:04Z")))
        );
        assert_eq!(
            ended(&a, "hooked"),
            Some((KILLED_EXIT_CODE, ts("2026-01-01T00:01:06Z")))
        );
        assert_eq!(terminal_phase(&a.runs), Some("Failed"));
        let a = terminate(&p, &runs, ts("2026-01-01T00:01:04.5Z"), &how(4, 1));
        assert_eq!(ended(&a, "hooked"), None, "TERM at +4 s, 1 s to exit");
        assert_eq!(a.next, Some(ts("2026-01-01T00:01:05Z")));
    }
}
