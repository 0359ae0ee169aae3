//! `cargo xtask bench --quick --cluster real`: the smoke run of every scenario on the real
//! control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok) works,
//! with each controller on a token of its own ServiceAccount, and the report says which
//! cluster and releases it ran on.
//!
//! With `--profile-apiserver`, kube-apiserver's CPU profile over each scenario's load is kept
//! and read by part.
//!
//! Needs Go (the first run builds the upstream binaries, minutes; see docs/cluster.md): without
//! it the test says so in one line and passes, except under CI or AGENT_SANDBOX_REQUIRE_GO=1.
//! About 3 minutes on 2 cores (186 s on an idle machine: a fresh control plane per scenario,
//! 10-50 s each).

use std::process::Command;

#[test]
fn quick_bench_runs_every_scenario_on_the_real_control_plane_with_the_controllers_as_themselves() {
    if !realcluster::go_or_skip("bench_real") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "bench",
            "--quick",
            "--cluster",
            "real",
            "--nodes",
            "3",
            "--profile-apiserver",
        ])
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("xtask runs");
    let report_path = out.path().join("report.json");
    let text = std::fs::read_to_string(&report_path)
        .unwrap_or_else(|e| panic!("{}: {e} (exit {status})", report_path.display()));
    let report: serde_json::Value = serde_json::from_str(&text).unwrap();
    let scenarios = report["scenarios"].as_object().expect("scenarios");
    let failed: Vec<String> = scenarios
        .iter()
        .filter(|(_, s)| s["status"] != "ok")
        .map(|(name, s)| format!("{name}: {}", s["error"]))
        .collect();
    assert!(failed.is_empty(), "failed scenarios: {failed:#?}");
    assert!(status.success(), "exit {status}");
    let every: Vec<&str> = xtask::bench::scenario::ScenarioName::ALL
        .iter()
        .map(|s| s.key())
        .collect();
    let ran: Vec<&str> = scenarios.keys().map(String::as_str).collect();
    let mut expected = every.clone();
    expected.sort_unstable();
    assert_eq!(
        ran, expected,
        "every scenario runs on the real control plane"
    );

    assert_eq!(report["cluster"]["kind"], "real");
    let kubernetes = report["cluster"]["upstream"]["kubernetes"]
        .as_str()
        .unwrap_or_default();
    assert!(kubernetes.starts_with("v1."), "{}", report["cluster"]);
    let markdown = std::fs::read_to_string(out.path().join("report.md")).unwrap();
    assert!(
        markdown.contains("cluster: **real** control plane"),
        "{markdown}"
    );
    assert!(markdown.contains("kube-apiserver creates/s"), "{markdown}");

    // The yardstick is kube-apiserver's own create rate.
    let yardstick = scenarios["devcluster"]["devcluster_writes_per_second"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(yardstick > 0.0, "{}", scenarios["devcluster"]);

    // Every claim of the gate became Ready, and the controllers' writes were the audited
    // requests of their own ServiceAccounts (the audit policy logs only those), none refused.
    let gate = &scenarios["gate"];
    assert_eq!(gate["details"]["claims_ready"], gate["claims"], "{gate}");
    let by_agent = &gate["requests"]["writes_by_agent"];
    for controller in ["extensions-controller", "sandbox-controller"] {
        let writes = by_agent[controller].as_object();
        assert!(
            writes.is_some_and(|w| !w.is_empty()),
            "no audited write of {controller}'s ServiceAccount: {by_agent}"
        );
    }
    let refused = gate["requests"]["failed_writes_by_verb_resource"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        !refused.keys().any(|k| k.ends_with(" 403")),
        "a controller was denied: {refused:?}"
    );
    // Where the CPU went: each component of the control plane is measured.
    let cpu = &gate["details"]["cpu_cores_other"];
    for process in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ] {
        assert!(cpu[process].is_number(), "{process} missing from {cpu}");
    }
    for controller in ["extensions-controller", "sandbox-controller"] {
        assert!(gate["cpu_cores"][controller].is_number(), "{gate}");
    }

    // Where kube-apiserver's CPU went: its own profile over the gate's load, read by part.
    let profile = &gate["details"]["kube_apiserver_cpu_profile"];
    assert!(
        out.path()
            .join("gate")
            .join("kube-apiserver.cpu.pb.gz")
            .is_file(),
        "no profile file: {}",
        gate["details"]
    );
    let share = |part: &str| {
        profile["activities"]
            .as_array()
            .and_then(|parts| parts.iter().find(|p| p["part"] == part))
            .and_then(|p| p["pct"].as_f64())
            .unwrap_or_else(|| panic!("{part} missing from {profile}"))
    };
    assert!(share("patch requests") > 0.0, "{profile}");
    assert!(share("create requests") > 0.0, "{profile}");
    let total: f64 = profile["activities"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["pct"].as_f64())
        .sum();
    assert!(
        (total - 100.0).abs() < 0.5,
        "the shares add up to {total}: {profile}"
    );
}
