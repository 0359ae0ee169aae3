//! `cargo xtask dev --claims 2` end to end, as a newcomer would use it: wait for the readiness
//! line, check the claims it timed, run the printed "try next" commands literally with the
//! real kubectl, check the claim binds and its deletion cascades, then Ctrl-C (SIGINT) and
//! check the exit status is 0 and none of the processes it started survives.
//!
//! The first run builds devcluster and both controllers, so the readiness deadline is
//! generous; on a warm build readiness takes a few seconds. Needs `kubectl` on PATH; with
//! `XTASK_SKIP_KUBECTL=1` the kubectl commands are skipped (the rest still runs).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// Readiness includes a possible cold build of three binaries on a 2-core machine.
const READY_DEADLINE: Duration = Duration::from_secs(20 * 60);

/// A running `xtask dev`; dropping it (e.g. when an assertion fails) stops it and its
/// children so a failing test leaks nothing.
struct DevProcess {
    child: Child,
    lines: Receiver<String>,
    child_pids: Vec<u32>,
}

impl DevProcess {
    fn start(dir: &Path) -> Self {
        Self::start_with(dir, &["dev", "--claims", "2"])
    }

    fn start_with(dir: &Path, args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(args)
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("xtask-dev.stderr")).unwrap(),
            ))
            .spawn()
            .expect("start xtask dev");
        let stdout = child.stdout.take().unwrap();
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            child_pids: Vec::new(),
        }
    }

    /// Lines up to and including the first one containing `needle`.
    fn read_until(&self, needle: &str, deadline: Instant, dir: &Path) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(remaining) {
                Ok(line) => {
                    let done = line.contains(needle);
                    seen.push(line);
                    if done {
                        return seen;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "no line containing {needle:?}; stdout so far:\n{}\nstderr:\n{}",
                        seen.join("\n"),
                        std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap_or_default()
                    )
                }
            }
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, signal);
        }
    }

    fn wait_exit(&mut self, deadline: Instant) -> Option<std::process::ExitStatus> {
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal(Signal::INT);
            if self
                .wait_exit(Instant::now() + Duration::from_secs(30))
                .is_none()
            {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
        for pid in &self.child_pids {
            if let Some(pid) = Pid::from_raw(*pid as i32)
                && is_alive(pid.as_raw_nonzero().get() as u32)
            {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }
}

/// A child process killed when dropped (also when an assertion fails).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a process exists and is not a zombie.
fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state is the first field after the parenthesised command name.
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .unwrap_or("");
            state != "Z" && state != "X"
        }
        Err(_) => false,
    }
}

/// `devcluster pid 123` style lines of xtask's progress output.
fn started_pids(stderr: &str) -> Vec<(String, u32)> {
    stderr
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            (words.next()? == "pid").then_some(())?;
            let pid = words.next()?.parse().ok()?;
            Some((name.to_owned(), pid))
        })
        .collect()
}

fn kubectl_available() -> bool {
    std::env::var_os("XTASK_SKIP_KUBECTL").is_none()
}

/// Runs one printed command literally with `sh -c`, in the directory xtask ran in.
fn shell(command: &str, env: &[(String, String)], cwd: &Path) -> Command {
    let mut shell = Command::new("sh");
    shell.arg("-c").arg(command).current_dir(cwd);
    for (key, value) in env {
        shell.env(key, value);
    }
    shell
}

fn run_ok(command: &str, env: &[(String, String)], cwd: &Path) -> String {
    let output = shell(command, env, cwd).output().expect("run sh");
    assert!(
        output.status.success(),
        "`{command}` failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs the watch command until a line shows the claim Ready with a Sandbox; returns the
/// Sandbox's name.
fn watch_until_bound(command: &str, env: &[(String, String)], cwd: &Path, claim: &str) -> String {
    let mut watch = shell(&format!("exec {command}"), env, cwd)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the watch");
    let stdout = watch.stdout.take().unwrap();
    let (sender, lines) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let sandbox = loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = lines.recv_timeout(remaining) else {
            let _ = watch.kill();
            panic!(
                "`{command}` never showed {claim} Ready; it printed:\n{}",
                seen.join("\n")
            );
        };
        // Columns: NAME READY SANDBOX REASON AGE
        let columns: Vec<&str> = line.split_whitespace().collect();
        if columns.first() == Some(&claim) && columns.get(1) == Some(&"True") {
            break columns.get(2).map(|s| (*s).to_owned()).unwrap_or_default();
        }
        seen.push(line);
    };
    let _ = watch.kill();
    let _ = watch.wait();
    sandbox
}

#[test]
fn dev_starts_everything_prints_working_next_steps_and_stops_cleanly_on_ctrl_c() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let cwd: PathBuf = std::env::current_dir().unwrap();
    let mut dev = DevProcess::start(&dir);

    let start = Instant::now();
    dev.read_until("agent-sandbox is ready", start + READY_DEADLINE, &dir);
    let banner = dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dir,
    );
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    let pids = started_pids(&stderr);
    dev.child_pids = pids.iter().map(|(_, pid)| *pid).collect();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["devcluster", "sandbox-controller", "extensions-controller"],
        "progress output:\n{stderr}"
    );
    for (name, pid) in &pids {
        assert!(is_alive(*pid), "{name} (pid {pid}) is not running");
    }

    // --claims 2: both claims bound, each with its time.
    let claims: Vec<&String> = banner
        .iter()
        .filter(|line| line.starts_with("claim dev-claim-"))
        .collect();
    assert_eq!(claims.len(), 2, "banner:\n{}", banner.join("\n"));
    for line in &claims {
        assert!(
            line.contains(" bound to sandbox python-quickstart-") && line.ends_with(" ms"),
            "{line}"
        );
    }

    // The kubeconfig and logs it points at exist.
    let kubeconfig = dir.join("kubeconfig");
    assert!(
        banner
            .iter()
            .any(|l| l == &format!("kubeconfig: {}", kubeconfig.display()))
    );
    for log in [
        "devcluster.log",
        "sandbox-controller.log",
        "extensions-controller.log",
    ] {
        assert!(dir.join(log).is_file(), "{log} missing");
    }

    // The printed next steps, literally.
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
    assert_eq!(Path::new(export), kubeconfig);
    assert!(commands[1].starts_with("kubectl apply -f "), "{commands:?}");
    assert_eq!(commands[2], "kubectl get sandboxclaims -w");
    assert!(
        commands[3].starts_with("kubectl delete -f "),
        "{commands:?}"
    );

    if kubectl_available() {
        let env = vec![
            ("KUBECONFIG".to_owned(), export.to_owned()),
            (
                "KUBECACHEDIR".to_owned(),
                dir.join("kube-cache").display().to_string(),
            ),
        ];
        let applied = run_ok(&commands[1], &env, &cwd);
        assert!(
            applied.contains("sandboxclaim.extensions.agents.x-k8s.io/my-first-sandbox"),
            "{applied}"
        );
        let sandbox = watch_until_bound(&commands[2], &env, &cwd, "my-first-sandbox");
        assert!(
            sandbox.starts_with("python-quickstart-"),
            "bound to {sandbox:?}"
        );
        let deleted = run_ok(&commands[3], &env, &cwd);
        assert!(deleted.contains("deleted"), "{deleted}");
        // Deleting the claim deletes its sandbox.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = shell(
                &format!("kubectl get sandbox {sandbox} -o name"),
                &env,
                &cwd,
            )
            .output()
            .unwrap();
            if String::from_utf8_lossy(&output.stderr).contains("NotFound") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sandbox {sandbox} still exists after its claim was deleted"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        eprintln!("XTASK_SKIP_KUBECTL set: not running the printed kubectl commands");
    }

    // Ctrl-C: exit 0, nothing left running.
    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(
        status.success(),
        "exit status {status}; progress output:\n{stderr}"
    );
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} (pid {pid}) survived Ctrl-C");
    }
}

#[test]
fn no_controllers_runs_devcluster_alone_and_says_how_to_start_them() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let mut dev = DevProcess::start_with(&dir, &["dev", "--no-controllers"]);
    let mut banner = dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + READY_DEADLINE,
        &dir,
    );
    banner.extend(dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dir,
    ));
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    let pids = started_pids(&stderr);
    dev.child_pids = pids.iter().map(|(_, pid)| *pid).collect();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["devcluster"], "progress output:\n{stderr}");
    let text = banner.join("\n");
    assert!(text.contains("controllers not started"), "{text}");
    assert!(!dir.join("sandbox-controller.log").exists());

    // The printed controller commands, run literally, bring the quickstart pool up.
    let start_commands: Vec<String> = banner
        .iter()
        .map(|line| line.trim())
        .filter(|line| line.contains("-controller --kubeconfig="))
        .map(str::to_owned)
        .collect();
    assert_eq!(start_commands.len(), 2, "{text}");
    let cwd = std::env::current_dir().unwrap();
    let controllers: Vec<KillOnDrop> = start_commands
        .iter()
        .map(|command| {
            KillOnDrop(
                shell(&format!("exec {command}"), &[], &cwd)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    if kubectl_available() {
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
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = shell(
                "kubectl get sandboxwarmpool python-quickstart -o jsonpath={.status.readyReplicas}",
                &env,
                &cwd,
            )
            .output()
            .unwrap();
            if String::from_utf8_lossy(&ready.stdout).trim() == "3" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the pool never got 3 ready sandboxes"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(controllers);

    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(status.success(), "exit status {status}");
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} (pid {pid}) survived Ctrl-C");
    }
}

#[test]
fn claims_and_no_controllers_are_exclusive() {
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dev", "--no-controllers", "--claims", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--no-controllers") && stderr.contains("--claims"),
        "{stderr}"
    );
}
