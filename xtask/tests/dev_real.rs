//! `cargo xtask dev --cluster real --claims 1` end to end: the same demo on the real control
//! plane (built with Go on first use, see docs/cluster.md), each controller running with a
//! token of its own ServiceAccount. Waits for the readiness line, checks the claim it timed and
//! that each controller was started with its own kubeconfig (a ServiceAccount token, no admin
//! certificate), runs the printed "try next" commands literally with the real kubectl, then
//! Ctrl-C: exit 0, no component or controller left running, the control plane's data removed.
//!
//! Without Go the test skips with one line (fails under `CI` or `AGENT_SANDBOX_REQUIRE_GO=1`);
//! `XTASK_SKIP_KUBECTL=1` skips the kubectl commands.

#[path = "dev_support/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harness::*;
use rustix::process::Signal;

/// The progress line once the binaries are built (the control plane's start follows).
const REAL_START_LINE: &str = "==> starting the real control plane";
/// From the build's end to the readiness line: the first start compiles the control plane
/// with Go (minutes on 2 cores); a cached one starts in seconds.
const REAL_READY_DEADLINE: Duration = Duration::from_secs(40 * 60);

#[test]
fn dev_on_the_real_control_plane_runs_each_controller_as_its_service_account() {
    if !realcluster::go_or_skip(
        "dev_on_the_real_control_plane_runs_each_controller_as_its_service_account",
    ) {
        return;
    }
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let cwd: PathBuf = std::env::current_dir().unwrap();
    let mut dev = DevProcess::start_with(&dir, &["dev", "--cluster", "real", "--claims", "1"]);
    dev.wait_for_line(&dir, REAL_START_LINE, BUILD_DEADLINE);
    dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + REAL_READY_DEADLINE,
        &dir,
    );
    let banner = dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dir,
    );
    let text = banner.join("\n");
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    let pids = started_pids(&stderr);
    dev.child_pids = pids.iter().map(|(_, pid)| *pid).collect();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "sandbox-controller",
        "extensions-controller",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} in {names:?}:\n{stderr}"
        );
    }
    assert!(!names.contains(&"devcluster"), "{names:?}");
    for (name, pid) in &pids {
        assert!(is_alive(*pid), "{name} (pid {pid}) is not running");
    }

    // --claims 1: bound, with its time.
    let claims: Vec<&String> = banner
        .iter()
        .filter(|line| line.starts_with("claim dev-claim-"))
        .collect();
    assert_eq!(claims.len(), 1, "{text}");
    assert!(
        claims[0].contains(" bound to sandbox python-quickstart-"),
        "{text}"
    );

    // Each controller runs with its own ServiceAccount's kubeconfig: a token, no certificate.
    let admin = dir.join("kubeconfig");
    assert!(
        text.contains(&format!("kubeconfig: {} (admin)", admin.display())),
        "{text}"
    );
    for name in ["sandbox-controller", "extensions-controller"] {
        let own = dir.join(format!("{name}.kubeconfig"));
        assert!(text.contains(&own.display().to_string()), "{text}");
        let config: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&own).unwrap()).unwrap();
        let users = config["users"].as_sequence().unwrap();
        assert_eq!(users.len(), 1, "{config:?}");
        assert_eq!(
            users[0]["name"].as_str(),
            Some(format!("system:serviceaccount:agent-sandbox-system:{name}").as_str())
        );
        assert!(
            users[0]["user"]["token"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
        );
        assert!(users[0]["user"]["client-key-data"].is_null(), "{config:?}");
        let pid = pids.iter().find(|(n, _)| n == name).unwrap().1;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains(&format!("--kubeconfig={}", own.display())),
            "{name}: {cmdline}"
        );
    }
    for log in ["sandbox-controller.log", "extensions-controller.log"] {
        assert!(dir.join(log).is_file(), "{log} missing");
    }
    let control_plane_logs = banner
        .iter()
        .find_map(|line| line.strip_prefix("Control plane logs: "))
        .and_then(|rest| rest.split(" (").next())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no control plane logs line:\n{text}"));
    assert!(
        control_plane_logs.is_dir(),
        "{}",
        control_plane_logs.display()
    );

    // The printed next steps, literally, as admin.
    let try_next = banner
        .iter()
        .position(|line| line.starts_with("Try next"))
        .expect("a Try next section");
    let commands: Vec<String> = banner[try_next + 1..]
        .iter()
        .take_while(|line| line.starts_with("  "))
        .map(|line| line.trim().to_owned())
        .collect();
    assert_eq!(commands.len(), 4, "{commands:?}");
    let export = commands[0]
        .strip_prefix("export KUBECONFIG=")
        .expect("first: export KUBECONFIG=...");
    assert_eq!(Path::new(export), admin);
    if kubectl_available() {
        let env = kubectl_env(export, &dir);
        claim_with_printed_commands(&commands, &env, &cwd);
    } else {
        eprintln!("XTASK_SKIP_KUBECTL set: not running the printed kubectl commands");
    }

    // Ctrl-C: exit 0, nothing left running, the control plane's data removed.
    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(90))
        .expect("xtask dev did not exit within 90 s of SIGINT");
    assert!(status.success(), "exit status {status}:\n{stderr}");
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} (pid {pid}) survived Ctrl-C");
    }
    assert!(
        !control_plane_logs.exists(),
        "{} left after Ctrl-C",
        control_plane_logs.display()
    );
}
