//! Shared by the `dev_*` tests: a running `xtask dev` that is stopped when dropped, and
//! helpers to run printed commands literally.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};

/// The build of the three binaries `xtask dev` runs first: cold on a fresh clone, on 2 cores
/// shared with the other test binaries' builds (each with its own feature set). It shows
/// Cargo's progress meanwhile; [`DevProcess::wait_built`] waits for its end.
pub const BUILD_DEADLINE: Duration = Duration::from_secs(60 * 60);
/// From the end of the build to the readiness line.
pub const READY_DEADLINE: Duration = Duration::from_secs(5 * 60);
/// The progress line `xtask dev` prints once its build is done.
pub const BUILT_LINE: &str = "==> starting devcluster";

/// A running `xtask dev`; dropping it (e.g. when an assertion fails) stops it and its
/// children so a failing test leaks nothing.
pub struct DevProcess {
    pub child: Child,
    pub lines: Receiver<String>,
    pub child_pids: Vec<u32>,
}

impl DevProcess {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, &["dev", "--claims", "2"])
    }

    pub fn start_with(dir: &Path, args: &[&str]) -> Self {
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

    /// Waits until `xtask dev` has built its binaries (its progress shows [`BUILT_LINE`]).
    pub fn wait_built(&mut self, dir: &Path) {
        self.wait_for_line(dir, BUILT_LINE, BUILD_DEADLINE);
    }

    /// Waits until `xtask dev`'s stderr (in `dir`) shows `needle`, for at most `deadline`.
    pub fn wait_for_line(&mut self, dir: &Path, needle: &str, deadline: Duration) {
        let until = Instant::now() + deadline;
        loop {
            let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap_or_default();
            if stderr.contains(needle) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("xtask dev exited ({status}) before {needle:?}:\n{stderr}");
            }
            assert!(
                Instant::now() < until,
                "no {needle:?} within {deadline:?}:\n{stderr}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Lines up to and including the first one containing `needle`.
    pub fn read_until(&self, needle: &str, deadline: Instant, dir: &Path) -> Vec<String> {
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

    pub fn signal(&self, signal: Signal) {
        if let Some(pid) = Pid::from_raw(self.child.id() as i32) {
            let _ = kill_process(pid, signal);
        }
    }

    pub fn wait_exit(&mut self, deadline: Instant) -> Option<std::process::ExitStatus> {
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
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a process exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
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
pub fn started_pids(stderr: &str) -> Vec<(String, u32)> {
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

pub fn kubectl_available() -> bool {
    std::env::var_os("XTASK_SKIP_KUBECTL").is_none()
}

/// Runs one printed command literally with `sh -c`, in the directory xtask ran in.
pub fn shell(command: &str, env: &[(String, String)], cwd: &Path) -> Command {
    let mut shell = Command::new("sh");
    shell.arg("-c").arg(command).current_dir(cwd);
    for (key, value) in env {
        shell.env(key, value);
    }
    shell
}

pub fn run_ok(command: &str, env: &[(String, String)], cwd: &Path) -> String {
    let output = shell(command, env, cwd).output().expect("run sh");
    assert!(
        output.status.success(),
        "`{command}` failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The environment the printed kubectl commands run in: the printed `KUBECONFIG`, and a
/// discovery cache of the test's own under `dir`.
pub fn kubectl_env(kubeconfig: &str, dir: &Path) -> Vec<(String, String)> {
    vec![
        ("KUBECONFIG".to_owned(), kubeconfig.to_owned()),
        (
            "KUBECACHEDIR".to_owned(),
            dir.join("kube-cache").display().to_string(),
        ),
    ]
}

/// Runs the banner's three claim commands as printed (`commands[1..=3]`: apply the quickstart
/// claim, watch it, delete it): the claim binds to a quickstart Sandbox and is deleted.
/// Returns the Sandbox's name.
pub fn claim_with_printed_commands(
    commands: &[String],
    env: &[(String, String)],
    cwd: &Path,
) -> String {
    let applied = run_ok(&commands[1], env, cwd);
    assert!(
        applied.contains("sandboxclaim.extensions.agents.x-k8s.io/my-first-sandbox"),
        "{applied}"
    );
    let sandbox = watch_until_bound(
        &format!("exec {}", commands[2]),
        env,
        cwd,
        "my-first-sandbox",
    );
    assert!(
        sandbox.starts_with("python-quickstart-"),
        "bound to {sandbox:?}"
    );
    let deleted = run_ok(&commands[3], env, cwd);
    assert!(deleted.contains("deleted"), "{deleted}");
    sandbox
}

/// Runs the watch script (which should `exec` the watching command, so killing the shell
/// stops it) until a line shows the claim Ready with a Sandbox; returns the
/// Sandbox's name.
pub fn watch_until_bound(
    command: &str,
    env: &[(String, String)],
    cwd: &Path,
    claim: &str,
) -> String {
    let mut watch = shell(command, env, cwd)
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
