use super::*;
use serde_json::json;

use crate::process::Supervisor;

const STARTED: &str = "2026-01-01T00:00:00Z";

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// A Pod as kwok's `pod-ready` Stage leaves it on `kwok-node-1`, its one container running
/// `command` since [`STARTED`].
fn kwok_pod(policy: &str, command: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "job", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "nodeName": "kwok-node-1",
            "restartPolicy": policy,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": command}],
        },
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.64.0.7",
            "startTime": STARTED,
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": STARTED},
                {"type": "Initialized", "status": "True", "lastTransitionTime": STARTED},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": STARTED},
                {"type": "Ready", "status": "True", "lastTransitionTime": STARTED},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": STARTED},
            ],
            "containerStatuses": [{
                "name": "main", "image": "busybox:1.36", "ready": true, "started": true,
                "restartCount": 0, "state": {"running": {"startedAt": STARTED}},
            }],
        },
    }))
    .unwrap()
}

fn at(pod: &Pod, now: &str) -> Step {
    step(pod, &|node| node == "kwok-node-1", &|_, _| None, ts(now))
}

fn patched(step: Step) -> serde_json::Value {
    match step {
        Step::Patch { patch, .. } => patch["status"].clone(),
        other => panic!("expected a status patch, got {other:?}"),
    }
}

/// The Pod with `status` written over its own (the patch carries every list it changes whole).
fn with_status(pod: &Pod, status: &serde_json::Value) -> Pod {
    let mut value = serde_json::to_value(pod).unwrap();
    for (key, field) in status.as_object().unwrap() {
        value["status"][key] = field.clone();
    }
    serde_json::from_value(value).unwrap()
}

fn condition<'a>(status: &'a serde_json::Value, type_: &str) -> &'a serde_json::Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap()
}

#[test]
fn a_command_that_ends_finishes_the_pod_at_its_time() {
    let pod = kwok_pod("Never", json!(["sh", "-c", "sleep 1; exit 0"]));
    assert_eq!(
        at(&pod, "2026-01-01T00:00:00.5Z"),
        Step::WakeAt(ts("2026-01-01T00:00:01Z")),
        "it wakes up when the sleep ends"
    );
    let status = patched(at(&pod, "2026-01-01T00:00:01Z"));
    assert_eq!(status["phase"], "Succeeded");
    let terminated = &status["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (&terminated["exitCode"], &terminated["reason"]),
        (&json!(0), &json!("Completed"))
    );
    assert_eq!(terminated["finishedAt"], "2026-01-01T00:00:01Z");
    assert_eq!(status["containerStatuses"][0]["image"], "busybox:1.36");
    let ready = condition(&status, "Ready");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("PodCompleted"))
    );
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "PodScheduled"),
        "the scheduler's condition is kept"
    );
    let done = with_status(&pod, &status);
    assert_eq!(
        at(&done, "2026-01-01T00:05:00Z"),
        Step::Ignore,
        "over: left alone"
    );
}

#[test]
fn a_failing_command_fails_the_pod_with_its_exit_code() {
    let pod = kwok_pod("Never", json!(["sh", "-c", "exit 2"]));
    let status = patched(at(&pod, "2026-01-01T00:00:00.2Z"));
    assert_eq!(status["phase"], "Failed");
    let terminated = &status["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (&terminated["exitCode"], &terminated["reason"]),
        (&json!(2), &json!("Error"))
    );
    assert_eq!(condition(&status, "Ready")["reason"], "PodFailed");
}

#[test]
fn restart_always_crash_loops_with_back_off_and_never_finishes() {
    let pod = kwok_pod("Always", json!(["sh", "-c", "exit 0"]));
    let step = at(&pod, "2026-01-01T00:00:00.2Z");
    let Step::Patch { runs, .. } = &step else {
        panic!("expected a patch, got {step:?}");
    };
    assert_eq!(
        runs[0].state,
        State::BackOff {
            until: ts("2026-01-01T00:00:10Z")
        }
    );
    let status = patched(step);
    assert_eq!(status["phase"], "Running");
    let cs = &status["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 1, "restarted at once, then back-off");
    assert_eq!(cs["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert_eq!(cs["lastState"]["terminated"]["exitCode"], 0);
    assert_eq!(condition(&status, "Ready")["status"], "False");

    // Seen again as written, nothing changes until the back-off ends: no second write.
    let looping = with_status(&pod, &status);
    assert_eq!(
        at(&looping, "2026-01-01T00:00:05Z"),
        Step::WakeAt(ts("2026-01-01T00:00:10Z"))
    );
    let status = patched(at(&looping, "2026-01-01T00:00:10Z"));
    let cs = &status["containerStatuses"][0];
    assert_eq!(cs["restartCount"], 2);
    assert_eq!(status["phase"], "Running");
}

#[test]
fn pods_that_are_not_the_finishers_are_left_alone() {
    let ending = json!(["sh", "-c", "exit 1"]);
    let other_node = {
        let mut pod = kwok_pod("Never", ending.clone());
        pod.spec.as_mut().unwrap().node_name = Some("worker-7".into());
        pod
    };
    let not_started = {
        // kwok's pod-ready Stage has not run: no podIP (the Stage matches only such Pods).
        let mut pod = kwok_pod("Never", ending.clone());
        pod.status = Some(Default::default());
        pod
    };
    let deleting = {
        // kwok's pod-delete Stage removes it.
        let mut pod = kwok_pod("Never", ending.clone());
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(ts(STARTED)),
        );
        pod
    };
    let forever = kwok_pod("Never", json!(["sleep", "infinity"]));
    let server = kwok_pod("Always", json!(["nginx", "-g", "daemon off;"]));
    for (what, pod) in [
        ("on another node", other_node),
        ("not started by kwok", not_started),
        ("being deleted", deleting),
        ("sleep infinity", forever),
        ("outside the grammar", server),
    ] {
        assert_eq!(at(&pod, "2026-01-01T01:00:00Z"), Step::Ignore, "{what}");
    }
}

#[test]
fn a_remembered_start_is_more_precise_than_the_status() {
    // The status says :10 (whole seconds); the finisher restarted it at :10.6.
    let pod = kwok_pod("Always", json!(["sleep", "2"]));
    let mut pod = with_status(
        &pod,
        &json!({"containerStatuses": [{
            "name": "main", "image": "busybox:1.36", "ready": true, "started": true,
            "restartCount": 1, "state": {"running": {"startedAt": "2026-01-01T00:00:10Z"}},
            "lastState": {"terminated": {"exitCode": 0, "reason": "Completed",
                "startedAt": "2026-01-01T00:00:08Z", "finishedAt": "2026-01-01T00:00:10Z"}},
        }]}),
    );
    pod.metadata.name = Some("loop".into());
    let precise = |name: &str, restarts: i32| {
        (name == "main" && restarts == 1).then(|| ts("2026-01-01T00:00:10.6Z"))
    };
    assert_eq!(
        step(&pod, &|_| true, &precise, ts("2026-01-01T00:00:12.1Z")),
        Step::WakeAt(ts("2026-01-01T00:00:12.6Z"))
    );
}

#[test]
fn a_run_kwok_started_counts_from_when_it_can_have_begun_at_the_latest() {
    // kwok's status says :00 (rounded down); the finisher sees the container at :00.8.
    let pod = kwok_pod("Never", json!(["sh", "-c", "sleep 1; exit 0"]));
    let seen = starts_for(&pod, &Starts::new(), ts("2026-01-01T00:00:00.8Z"));
    assert_eq!(
        seen.get(&("main".to_owned(), 0)),
        Some(&ts("2026-01-01T00:00:00.8Z"))
    );
    let from = |name: &str, restarts: i32| seen.get(&(name.to_owned(), restarts)).copied();
    assert_eq!(
        step(&pod, &|_| true, &from, ts("2026-01-01T00:00:01Z")),
        Step::WakeAt(ts("2026-01-01T00:00:01.8Z")),
        "not over a second after :00, but a second after it can have started"
    );
    // Seen only later (a finisher started after kwok): the run began before :01.
    let late = starts_for(&pod, &Starts::new(), ts("2026-01-01T00:00:05Z"));
    assert_eq!(
        late.get(&("main".to_owned(), 0)),
        Some(&ts("2026-01-01T00:00:01Z"))
    );
    // What it remembers wins.
    let known = Starts::from([(("main".to_owned(), 0), ts("2026-01-01T00:00:00.3Z"))]);
    assert_eq!(starts_for(&pod, &known, ts("2026-01-01T00:00:09Z")), known);
}

#[test]
fn a_finisher_that_ends_is_reported_and_a_stopped_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("pod-finisher.log");
    std::fs::write(&log, "watching Pods\n").unwrap();
    let supervisor = Supervisor::new(true);
    let finisher = Finisher::spawn(
        async { panic!("lost the plot") },
        log.clone(),
        supervisor.exit_reporter(),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while supervisor.exited().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(finisher);
    let exit = supervisor.exited().expect("the end is reported");
    assert_eq!(exit.component, NAME);
    assert_eq!(exit.status, "panicked: lost the plot");
    assert_eq!(
        exit.tail,
        "watching Pods\npod-finisher panicked: lost the plot"
    );

    let quiet = Supervisor::new(true);
    let running = Finisher::spawn(std::future::pending(), log, quiet.exit_reporter()).unwrap();
    drop(running);
    assert_eq!(
        quiet.exited(),
        None,
        "stopped with the cluster: not an exit"
    );
}
