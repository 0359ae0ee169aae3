//! `cargo xtask dev` survives restarts: devcluster keeps its address across runs in the same
//! directory (controllers started by hand against the kubeconfig reconnect to the new one), and
//! a controller that dies under `dev` is restarted, with a line and the end of its log.

#[path = "dev_support/harness.rs"]
mod harness;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use harness::*;
use rustix::process::{Pid, Signal, kill_process};

/// The port of the server URL in the kubeconfig `xtask dev` wrote.
fn kubeconfig_port(dir: &Path) -> u16 {
    let text = std::fs::read_to_string(dir.join("kubeconfig")).unwrap();
    text.lines()
        .find_map(|line| line.trim().strip_prefix("server: http://127.0.0.1:"))
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or_else(|| panic!("no loopback server in the kubeconfig:\n{text}"))
}

/// Starts `xtask dev ARGS` in `dir` and waits for its banner; returns it, its lines and its
/// progress output.
fn start_ready(dir: &Path, args: &[&str]) -> (DevProcess, Vec<String>, String) {
    let mut dev = DevProcess::start_with(dir, args);
    dev.wait_built(dir);
    let mut banner = dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + READY_DEADLINE,
        dir,
    );
    banner.extend(dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        dir,
    ));
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    dev.child_pids = started_pids(&stderr).iter().map(|(_, pid)| *pid).collect();
    (dev, banner, stderr)
}

fn stop(mut dev: DevProcess) {
    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(status.success(), "exit status {status}");
}

/// The last lines of the logs of the controllers the test started by hand.
fn hand_started_logs(dir: &Path) -> String {
    (0..2)
        .map(|i| {
            let text =
                std::fs::read_to_string(dir.join(format!("by-hand-{i}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(15)..].join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

fn wait_pool_ready(dir: &Path) {
    let env = vec![
        (
            "KUBECONFIG".to_owned(),
            dir.join("kubeconfig").display().to_string(),
        ),
        (
            "KUBECACHEDIR".to_owned(),
            dir.join("kube-cache").display().to_string(),
        ),
    ];
    let cwd = std::env::current_dir().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let ready = shell(
            "kubectl get sandboxwarmpool python-quickstart -o jsonpath={.status.readyReplicas}",
            &env,
            &cwd,
        )
        .output()
        .unwrap();
        if String::from_utf8_lossy(&ready.stdout).trim() == "3" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the pool never got 3 ready sandboxes; controllers started by hand:\n{}",
            hand_started_logs(dir)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn devcluster_keeps_its_address_so_controllers_started_by_hand_reconnect() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (dev, banner, stderr) = start_ready(&dir, &["dev", "--no-controllers"]);
    let port = kubeconfig_port(&dir);
    assert!(
        stderr.contains(&format!(
            "devcluster pid {} at http://127.0.0.1:{port} (first run in this directory",
            dev.child_pids[0]
        )),
        "{stderr}"
    );

    // The controllers as printed, started by hand from the repository root (the printed
    // paths are relative to it); they outlive the devcluster restart.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let controllers: Vec<KillOnDrop> = banner
        .iter()
        .map(|line| line.trim())
        .filter(|line| line.contains("-controller --kubeconfig="))
        .enumerate()
        .map(|(i, command)| {
            let log = std::fs::File::create(dir.join(format!("by-hand-{i}.log"))).unwrap();
            KillOnDrop(
                shell(&format!("exec {command}"), &[], root)
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    assert_eq!(controllers.len(), 2, "{}", banner.join("\n"));
    if kubectl_available() {
        wait_pool_ready(&dir);
    }
    stop(dev);

    let (dev, _, stderr) = start_ready(&dir, &["dev", "--no-controllers"]);
    assert_eq!(kubeconfig_port(&dir), port, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "at http://127.0.0.1:{port} (the same address as the last run in this directory)"
        )),
        "{stderr}"
    );
    // The same controller processes serve the new, empty devcluster: the pool fills again.
    if kubectl_available() {
        wait_pool_ready(&dir);
    }
    drop(controllers);
    stop(dev);
}

#[test]
fn a_controller_that_dies_under_dev_is_restarted_with_the_end_of_its_log_shown() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let (mut dev, _, stderr) = start_ready(&dir, &["dev"]);
    let pids = started_pids(&stderr);
    let (_, old_pid) = pids
        .iter()
        .find(|(name, _)| name == "sandbox-controller")
        .cloned()
        .unwrap_or_else(|| panic!("no sandbox-controller pid in:\n{stderr}"));
    kill_process(Pid::from_raw(old_pid as i32).unwrap(), Signal::KILL).unwrap();

    let deadline = Instant::now() + Duration::from_secs(60);
    let (stderr, new_pid) = loop {
        let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
        let new_pid = started_pids(&stderr)
            .into_iter()
            .filter(|(name, pid)| name == "sandbox-controller" && *pid != old_pid)
            .map(|(_, pid)| pid)
            .next();
        if let Some(pid) = new_pid {
            break (stderr, pid);
        }
        assert!(
            Instant::now() < deadline,
            "sandbox-controller was not restarted:\n{stderr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    dev.child_pids.push(new_pid);
    assert!(
        stderr.contains("==> sandbox-controller exited (signal: 9 (SIGKILL))"),
        "{stderr}"
    );
    assert!(
        stderr.contains("; last lines of ") && stderr.contains("sandbox-controller.log:"),
        "{stderr}"
    );
    assert!(
        stderr.contains("==> restarting sandbox-controller in 1s (restart 1 of at most 5"),
        "{stderr}"
    );
    assert!(is_alive(new_pid), "the restarted controller is running");
    let log = std::fs::read_to_string(dir.join("sandbox-controller.log")).unwrap();
    assert!(
        log.contains("==> restarted by cargo xtask dev after it exited (signal: 9 (SIGKILL))"),
        "the log keeps both runs:\n{log}"
    );
    // The run goes on: still up after the restart, and Ctrl-C still stops everything.
    assert!(dev.child.try_wait().unwrap().is_none(), "xtask dev exited");
    let pids = dev.child_pids.clone();
    stop(dev);
    for pid in pids {
        assert!(!is_alive(pid), "pid {pid} survived Ctrl-C");
    }
}
