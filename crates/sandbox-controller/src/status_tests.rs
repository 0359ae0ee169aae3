//! Condition and status rules (core-controller.md section 4.1: TestComputeConditions, expiry,
//! node-name coalescing, no accumulation).

use super::*;
use k8s_openapi::api::core::v1::{PodCondition, PodIP, PodStatus};

fn pod(phase: &str, conditions: &[(&str, &str, &str, &str)], ips: &[&str]) -> Pod {
    Pod {
        status: Some(PodStatus {
            phase: (!phase.is_empty()).then(|| phase.to_string()),
            conditions: Some(
                conditions
                    .iter()
                    .map(|(t, s, r, m)| PodCondition {
                        type_: t.to_string(),
                        status: s.to_string(),
                        reason: (!r.is_empty()).then(|| r.to_string()),
                        message: (!m.is_empty()).then(|| m.to_string()),
                        ..Default::default()
                    })
                    .collect(),
            ),
            pod_ips: Some(ips.iter().map(|ip| PodIP { ip: ip.to_string() }).collect()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn summary(conds: &[Condition]) -> Vec<(String, String, String, String)> {
    conds
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
            )
        })
        .collect()
}

fn c(t: &str, s: &str, r: &str, m: &str) -> (String, String, String, String) {
    (t.into(), s.into(), r.into(), m.into())
}

fn obs<'a>() -> Observation<'a> {
    Observation {
        generation: Some(1),
        ..Default::default()
    }
}

const NOT_SUSPENDED: (&str, &str, &str, &str) = (
    "Suspended",
    "False",
    "NotSuspended",
    "Sandbox is not suspended",
);

fn ns() -> (String, String, String, String) {
    c(
        NOT_SUSPENDED.0,
        NOT_SUSPENDED.1,
        NOT_SUSPENDED.2,
        NOT_SUSPENDED.3,
    )
}

#[test]
fn requested_service_missing_and_no_pod() {
    let o = Observation {
        service_field: Some(true),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            ns(),
            c(
                "Ready",
                "False",
                "DependenciesNotReady",
                "Pod does not exist; Service does not exist"
            )
        ]
    );
    assert!(
        compute_conditions(&o)
            .iter()
            .all(|c| c.observed_generation == Some(1))
    );
}

#[test]
fn unrequested_existing_service_is_reported() {
    let o = Observation {
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[1],
        c(
            "Ready",
            "False",
            "DependenciesNotReady",
            "Pod does not exist; Service Exists"
        )
    );
}

#[test]
fn pending_pod_without_scheduling_report() {
    let p = pod("Pending", &[], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            ns(),
            c(
                "PodScheduled",
                "Unknown",
                "PodSchedulingUnknown",
                "Pod has not reported a PodScheduled condition yet"
            ),
            c(
                "Ready",
                "False",
                "DependenciesNotReady",
                "Pod exists with phase: Pending; Service Exists"
            ),
        ]
    );
}

#[test]
fn running_pod_not_ready_and_ready_without_ips() {
    let p = pod(
        "Running",
        &[("PodScheduled", "True", "", ""), ("Ready", "False", "", "")],
        &["10.0.0.1"],
    );
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[1..],
        [
            c("PodScheduled", "True", "PodScheduled", ""),
            c(
                "Ready",
                "False",
                "DependenciesNotReady",
                "Pod is Running but not Ready; Service Exists"
            )
        ]
    );
    let p = pod("Running", &[("Ready", "True", "", "")], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[2],
        c(
            "Ready",
            "False",
            "DependenciesNotReady",
            "Pod is Ready but has no podIPs yet; Service Exists"
        )
    );
}

#[test]
fn ready_pod_with_ip_is_ready() {
    let p = pod(
        "Running",
        &[("PodScheduled", "True", "", ""), ("Ready", "True", "", "")],
        &["10.244.0.5", "fd00::5"],
    );
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_field: Some(true),
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[2],
        c(
            "Ready",
            "True",
            "DependenciesReady",
            "Pod is Ready; Service Exists"
        )
    );
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[2],
        c("Ready", "True", "DependenciesReady", "Pod is Ready")
    );
    // A requested Service that is missing holds Ready back.
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_field: Some(true),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[2],
        c(
            "Ready",
            "False",
            "DependenciesNotReady",
            "Pod is Ready; Service does not exist"
        )
    );
}

#[test]
fn suspended_with_owned_pod_is_suspending() {
    let p = pod("Running", &[], &[]);
    let o = Observation {
        suspended: true,
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            c(
                "Suspended",
                "False",
                "PodTerminating",
                "Pod is terminating. Sandbox is suspending"
            ),
            c(
                "PodScheduled",
                "Unknown",
                "PodSchedulingUnknown",
                "Pod has not reported a PodScheduled condition yet"
            ),
            c(
                "Ready",
                "False",
                "SandboxSuspended",
                "Sandbox is suspending"
            ),
        ]
    );
}

#[test]
fn suspended_with_foreign_pod_refuses() {
    let p = pod("Succeeded", &[], &[]);
    let o = Observation {
        suspended: true,
        pod: Some(ObservedPod {
            pod: &p,
            owned: false,
        }),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            c(
                "Suspended",
                "False",
                "PodNotOwned",
                "Refused to delete pod because it is not owned by this sandbox"
            ),
            c(
                "Ready",
                "False",
                "SandboxSuspended",
                "Sandbox is suspending"
            ),
        ]
    );
}

#[test]
fn suspended_delete_failure_stays_terminating_with_error() {
    let p = pod("Running", &[], &[]);
    let o = Observation {
        suspended: true,
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        pod_step_failed: true,
        errors: vec!["failed to delete pod: boom".into()],
        ..obs()
    };
    let got = summary(&compute_conditions(&o));
    assert_eq!(got[0].2, "PodTerminating");
    assert_eq!(got[1].2, "PodSchedulingUnknown");
    assert_eq!(
        got[2],
        c(
            "Ready",
            "False",
            "ReconcilerError",
            "Error seen: failed to delete pod: boom"
        )
    );
}

#[test]
fn suspended_and_pod_gone_is_suspended() {
    let o = Observation {
        suspended: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            c(
                "Suspended",
                "True",
                "PodTerminated",
                "Pod has been terminated. Sandbox is suspended"
            ),
            c("Ready", "False", "SandboxSuspended", "Sandbox is suspended"),
        ]
    );
}

#[test]
fn pod_lookup_failure_makes_state_unknown() {
    let o = Observation {
        suspended: true,
        pod_step_failed: true,
        errors: vec!["pod get failed".into()],
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            c(
                "Suspended",
                "Unknown",
                "PodStateUnknown",
                "Pod state is unknown. Sandbox suspension cannot be confirmed"
            ),
            c(
                "PodScheduled",
                "Unknown",
                "PodSchedulingUnknown",
                "Pod state is unknown. Pod scheduling cannot be determined"
            ),
            c(
                "Ready",
                "False",
                "ReconcilerError",
                "Error seen: pod get failed"
            ),
        ]
    );
    let o = Observation {
        pod_step_failed: true,
        errors: vec!["pod list failed".into()],
        ..obs()
    };
    let got = summary(&compute_conditions(&o));
    assert_eq!(got[0], ns());
    assert_eq!(got[1].2, "PodSchedulingUnknown");
    assert_eq!(got[2].2, "ReconcilerError");
}

#[test]
fn terminal_pods_finish_the_sandbox() {
    let p = pod("Failed", &[("PodScheduled", "True", "", "")], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)),
        vec![
            ns(),
            c("Finished", "True", "PodFailed", "Pod failed"),
            c("PodScheduled", "True", "PodScheduled", ""),
            c("Ready", "False", "PodFailed", "Pod failed"),
        ]
    );
    let p = pod("Succeeded", &[], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    let got = summary(&compute_conditions(&o));
    assert_eq!(
        got[1],
        c(
            "Finished",
            "True",
            "PodSucceeded",
            "Pod completed successfully"
        )
    );
    assert_eq!(
        got[3],
        c(
            "Ready",
            "False",
            "PodSucceeded",
            "Pod completed successfully"
        )
    );
}

#[test]
fn unknown_phase_is_reported() {
    let p = pod("Unknown", &[], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_present: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[2],
        c(
            "Ready",
            "False",
            "DependenciesNotReady",
            "Pod exists with phase: Unknown; Service Exists"
        )
    );
}

#[test]
fn an_error_beats_everything() {
    let o = Observation {
        errors: vec!["something went wrong".into()],
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[1],
        c(
            "Ready",
            "False",
            "ReconcilerError",
            "Error seen: something went wrong"
        )
    );
}

#[test]
fn scheduling_conditions_are_mirrored_verbatim() {
    for (reason, message) in [
        (
            "Unschedulable",
            "0/3 nodes are available: 3 Insufficient cpu.",
        ),
        (
            "SchedulingGated",
            "Scheduling is blocked due to non-empty scheduling gates",
        ),
    ] {
        let p = pod(
            "Pending",
            &[("PodScheduled", "False", reason, message)],
            &[],
        );
        let o = Observation {
            pod: Some(ObservedPod {
                pod: &p,
                owned: true,
            }),
            ..obs()
        };
        assert_eq!(
            summary(&compute_conditions(&o))[1],
            c("PodScheduled", "False", reason, message)
        );
    }
    let p = pod("Pending", &[("PodScheduled", "False", "", "")], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o))[1],
        c("PodScheduled", "False", "PodSchedulingUnknown", "")
    );
}

#[test]
fn multiple_pods_message_excludes_other_errors() {
    let msg =
        "multiple Pods (2) are controlled by this Sandbox; refusing to choose or create a Pod";
    let o = Observation {
        errors: vec![
            "failed to reconcile PVC: temporary error".into(),
            msg.into(),
        ],
        multiple_pods: Some(msg.into()),
        pod_step_failed: true,
        ..obs()
    };
    assert_eq!(
        summary(&compute_conditions(&o)).last().unwrap(),
        &c("Ready", "False", "MultiplePods", msg)
    );
}

fn ts(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).unwrap()
}

#[test]
fn transition_time_changes_only_with_status_and_optional_conditions_go() {
    let p = pod(
        "Pending",
        &[("PodScheduled", "False", "Unschedulable", "no nodes")],
        &[],
    );
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    let first = merge_conditions(&[], compute_conditions(&o), &[], ts(100));
    assert!(
        first
            .iter()
            .all(|c| c.last_transition_time == Time(ts(100)))
    );
    // Same statuses later: times kept, message may change in place.
    let second = merge_conditions(&first, compute_conditions(&o), &[], ts(200));
    assert_eq!(second, first);
    // Suspended with the Pod gone: PodScheduled removed, Suspended flips and gets a new time.
    let o = Observation {
        suspended: true,
        ..obs()
    };
    let third = merge_conditions(&second, compute_conditions(&o), &[], ts(300));
    assert_eq!(
        third.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["Suspended", "Ready"]
    );
    assert_eq!(third[0].last_transition_time, Time(ts(300)));
    assert_eq!(
        third[1].last_transition_time,
        Time(ts(100)),
        "Ready stayed False"
    );
}

#[test]
fn conditions_do_not_accumulate() {
    let p = pod(
        "Running",
        &[("PodScheduled", "True", "", ""), ("Ready", "True", "", "")],
        &["10.0.0.8"],
    );
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        service_present: true,
        ..obs()
    };
    let mut conds = Vec::new();
    for i in 0..20 {
        conds = merge_conditions(&conds, compute_conditions(&o), &[], ts(i));
    }
    assert_eq!(
        conds.iter().map(|c| c.type_.as_str()).collect::<Vec<_>>(),
        ["Suspended", "PodScheduled", "Ready"]
    );
}

#[test]
fn retain_expiry_resets_status_to_conditions_only() {
    let p = pod("Succeeded", &[("PodScheduled", "True", "", "")], &[]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    let current = SandboxStatus {
        conditions: merge_conditions(&[], compute_conditions(&o), &[], ts(1)),
        service: "sb".into(),
        service_fqdn: "sb.ns.svc.cluster.local".into(),
        label_selector: "x=y".into(),
        pod_ips: vec!["10.0.0.1".into()],
        node_name: "node-1".into(),
    };
    let expired = expired_status(&current, Some(2), ts(10));
    assert!(
        expired.service.is_empty()
            && expired.label_selector.is_empty()
            && expired.pod_ips.is_empty()
    );
    assert_eq!(
        expired
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.reason.as_str()))
            .collect::<Vec<_>>(),
        [
            ("Suspended", "NotSuspended"),
            ("Finished", "PodSucceeded"),
            ("Ready", "SandboxExpired")
        ]
    );
    assert!(is_marked_expired(&expired));
    assert_eq!(
        ready_condition_of(&expired).unwrap().message,
        "Sandbox has expired"
    );
}

#[test]
fn expiry_is_exact() {
    let now = ts(1_000);
    assert_eq!(check_expiry(None, now), Expiry::Never);
    assert_eq!(
        check_expiry(Some(&Time(ts(1_000 + 7200))), now),
        Expiry::In(Duration::from_secs(7200))
    );
    assert_eq!(check_expiry(Some(&Time(now)), now), Expiry::Expired);
    assert_eq!(check_expiry(Some(&Time(ts(990))), now), Expiry::Expired);
    let soon = now
        .checked_add(k8s_openapi::jiff::SignedDuration::from_millis(500))
        .unwrap();
    assert_eq!(
        check_expiry(Some(&Time(soon)), now),
        Expiry::In(Duration::from_millis(500))
    );
}

#[test]
fn node_name_alone_is_written_only_when_ready() {
    let base = SandboxStatus::default();
    let moved = SandboxStatus {
        node_name: "node-1".into(),
        ..Default::default()
    };
    assert!(!needs_write(&base, &base));
    assert!(!needs_write(&base, &moved));
    let p = pod("Running", &[("Ready", "True", "", "")], &["10.0.0.8"]);
    let o = Observation {
        pod: Some(ObservedPod {
            pod: &p,
            owned: true,
        }),
        ..obs()
    };
    let ready = SandboxStatus {
        conditions: merge_conditions(&[], compute_conditions(&o), &[], ts(1)),
        ..Default::default()
    };
    let ready_moved = SandboxStatus {
        node_name: "node-2".into(),
        ..ready.clone()
    };
    assert!(needs_write(&ready, &ready_moved));
}

#[test]
fn status_patch_clears_empty_fields_explicitly() {
    let patch = serde_json::to_value(status_patch(&SandboxStatus {
        service: "sb".into(),
        ..Default::default()
    }))
    .unwrap();
    assert_eq!(patch["status"]["service"], "sb");
    assert_eq!(patch["status"]["podIPs"], serde_json::Value::Null);
    assert!(
        patch["status"]
            .as_object()
            .unwrap()
            .contains_key("nodeName")
    );
}

#[test]
fn pod_ips_fall_back_to_pod_ip() {
    let mut p = pod("Running", &[], &[]);
    p.status.as_mut().unwrap().pod_ip = Some("10.1.1.1".into());
    assert_eq!(pod_ips(&p), vec!["10.1.1.1".to_string()]);
    let p = pod("Running", &[], &["10.0.0.1", "fd00::1"]);
    assert_eq!(
        pod_ips(&p),
        vec!["10.0.0.1".to_string(), "fd00::1".to_string()]
    );
}

#[test]
fn huge_error_text_is_capped_to_the_schema_limit() {
    let o = Observation {
        errors: vec!["x".repeat(40_000)],
        ..obs()
    };
    let ready = compute_conditions(&o).pop().unwrap();
    assert_eq!(ready.reason, "ReconcilerError");
    assert!(ready.message.len() <= MAX_MESSAGE_BYTES && ready.message.ends_with("..."));
}

/// The patch body as it was built before it was serialized directly: a `serde_json::Value`
/// tree (the oracle for the generated test below).
fn status_patch_as_value_tree(status: &SandboxStatus) -> serde_json::Value {
    let opt_str = |s: &str| {
        if s.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::Value::String(s.to_string())
        }
    };
    serde_json::json!({
        "status": {
            "conditions": if status.conditions.is_empty() { serde_json::Value::Null } else { serde_json::to_value(&status.conditions).unwrap() },
            "service": opt_str(&status.service),
            "serviceFQDN": opt_str(&status.service_fqdn),
            "selector": opt_str(&status.label_selector),
            "podIPs": if status.pod_ips.is_empty() { serde_json::Value::Null } else { serde_json::to_value(&status.pod_ips).unwrap() },
            "nodeName": opt_str(&status.node_name),
        }
    })
}

#[test]
fn the_serialized_status_patch_is_the_value_tree_it_replaced() {
    let mut rng = fastrand::Rng::with_seed(42);
    let word = |rng: &mut fastrand::Rng| -> String {
        match rng.u8(..4) {
            0 => String::new(),
            1 => "a \"quoted\" \\ value".into(),
            2 => "ünïcode-\u{1F600}".into(),
            _ => format!("v{}", rng.u32(..)),
        }
    };
    for _ in 0..500 {
        let conditions = (0..rng.usize(..4))
            .map(|i| Condition {
                type_: ["Ready", "Suspended", "PodScheduled", "Finished"][i].into(),
                status: ["True", "False", "Unknown"][rng.usize(..3)].into(),
                reason: word(&mut rng),
                message: word(&mut rng),
                last_transition_time: Time(ts(rng.i64(0..1_000_000))),
                observed_generation: rng.bool().then(|| rng.i64(..)),
            })
            .collect();
        let status = SandboxStatus {
            service_fqdn: word(&mut rng),
            service: word(&mut rng),
            conditions,
            label_selector: word(&mut rng),
            pod_ips: (0..rng.usize(..3)).map(|_| word(&mut rng)).collect(),
            node_name: word(&mut rng),
        };
        assert_eq!(
            serde_json::to_value(status_patch(&status)).unwrap(),
            status_patch_as_value_tree(&status),
            "{status:?}"
        );
    }
}
