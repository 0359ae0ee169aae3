//! `cargo xtask cluster` in the foreground: it writes the kubeconfig once ready, a component
//! that dies ends it with status 1 naming the component and its last log lines, and SIGTERM
//! stops everything, removing the data directory and the kubeconfig.
//!
//! The first run builds the upstream binaries (minutes; see docs/cluster.md).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// The first start may build the binaries: give it time (the build prints its progress).
const START_DEADLINE: Duration = Duration::from_secs(1800);
const EXIT_DEADLINE: Duration = Duration::from_secs(60);

struct Running {
    child: Child,
    stdout: String,
    stderr: mpsc::Receiver<String>,
}

impl Running {
    /// Starts the command and reads its stdout up to the end of the ready banner.
    fn start(kubeconfig: &Path) -> Running {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["cluster", "--nodes", "2", "--kubeconfig"])
            .arg(kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (lines, stdout_lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        let (errors, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("[xtask cluster] {line}");
                if errors.send(line).is_err() {
                    break;
                }
            }
        });
        let start = Instant::now();
        let mut text = String::new();
        loop {
            let left = START_DEADLINE.saturating_sub(start.elapsed());
            match stdout_lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.starts_with("Ctrl-C stops");
                    text.push_str(&line);
                    text.push('\n');
                    if done {
                        break;
                    }
                }
                Err(error) => panic!("no ready banner ({error}); stdout so far:\n{text}"),
            }
        }
        assert!(text.contains(xtask::cluster::READY_LINE), "{text}");
        Running {
            child,
            stdout: text,
            stderr,
        }
    }

    /// The PID the banner gives for `component`.
    fn pid(&self, component: &str) -> u32 {
        self.stdout
            .lines()
            .map(str::trim)
            .find_map(|line| {
                let rest = line.strip_prefix(component)?.trim();
                rest.strip_prefix("pid ")?.trim().parse().ok()
            })
            .unwrap_or_else(|| panic!("no pid of {component} in:\n{}", self.stdout))
    }

    /// The value printed after `label`.
    fn field(&self, label: &str) -> PathBuf {
        let line = self
            .stdout
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no {label} in:\n{}", self.stdout));
        let value = line[label.len()..].split_whitespace().next().unwrap();
        PathBuf::from(value)
    }

    /// Waits for the exit; returns the code and everything it wrote to stderr.
    fn wait(mut self) -> (Option<i32>, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < EXIT_DEADLINE,
                "cargo xtask cluster did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(5)) {
            stderr.push_str(&line);
            stderr.push('\n');
        }
        (status.code(), stderr)
    }
}

fn signal(pid: u32, signal: Signal) {
    kill_process(Pid::from_raw(pid as i32).unwrap(), signal).unwrap();
}

fn gone(pid: u32) -> bool {
    // A stopped component is reaped by the command, so its /proc entry is gone.
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_component_that_dies_ends_the_command_with_its_name_and_log() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let running = Running::start(&kubeconfig);
    assert!(kubeconfig.is_file(), "the kubeconfig is written once ready");
    let scheduler = running.pid("kube-scheduler");
    let apiserver = running.pid("kube-apiserver");
    let data = running.field("logs:").parent().unwrap().to_path_buf();

    signal(scheduler, Signal::KILL);
    let (code, stderr) = running.wait();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("error: kube-scheduler exited unexpectedly (signal: 9 (SIGKILL))"),
        "{stderr}"
    );
    // The last lines of its log follow, whole (kube-scheduler logs in klog format).
    let tail: Vec<&str> = stderr
        .lines()
        .skip_while(|l| !l.contains("the last lines of its log:"))
        .skip(1)
        .collect();
    assert!(!tail.is_empty(), "{stderr}");
    assert!(
        tail.iter()
            .all(|l| l.starts_with(['I', 'W', 'E']) || l.trim().is_empty()),
        "{tail:?}"
    );
    assert!(gone(apiserver), "the other components are stopped");
    assert!(!data.exists(), "the data directory is removed");
    assert!(!kubeconfig.exists(), "the kubeconfig is removed");
}

#[test]
fn sigterm_stops_every_component_and_removes_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let running = Running::start(&kubeconfig);
    let pids: Vec<u32> = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kwok",
    ]
    .iter()
    .map(|c| running.pid(c))
    .collect();
    let audit = running.field(xtask::cluster::AUDIT_LOG_LABEL);
    assert!(audit.is_file(), "the audit log {} exists", audit.display());
    let data = running.field("logs:").parent().unwrap().to_path_buf();
    assert!(data.is_dir());

    signal(running.child.id(), Signal::TERM);
    let (code, stderr) = running.wait();
    assert_eq!(code, Some(0), "{stderr}");
    for pid in pids {
        assert!(gone(pid), "pid {pid} is stopped");
    }
    assert!(!data.exists(), "the data directory is removed");
    assert!(!kubeconfig.exists(), "the kubeconfig is removed");
}
