//! Child processes started by `cargo xtask dev`: each runs in its own process group with its
//! output in a log file, and the whole group is killed when the handle is dropped (also on a
//! panic), so nothing the dev environment started outlives it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

use crate::dev::DevError;

/// A running child process and its process group.
#[derive(Debug)]
pub struct ChildGroup {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    child: Child,
    pid: u32,
    started: Instant,
    exited: bool,
}

impl ChildGroup {
    /// Starts `program args` as the leader of a new process group, with `env` added to the
    /// environment and stdout and stderr written to `log` (created or truncated).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
        log: &Path,
    ) -> Result<Self, DevError> {
        let log_file = File::create(log).map_err(|source| DevError::Io {
            action: "create log file",
            path: log.to_path_buf(),
            source,
        })?;
        let (child, pid) = start(program, args, env, log, log_file)?;
        Ok(Self {
            name: name.to_owned(),
            program: program.to_path_buf(),
            args: args.to_vec(),
            env: env.to_vec(),
            log: log.to_path_buf(),
            child,
            pid,
            started: Instant::now(),
            exited: false,
        })
    }

    /// Starts the same program again once it has exited, its output appended to the same log
    /// after a line `==> {why}`.
    pub fn respawn(&mut self, why: &str) -> Result<(), DevError> {
        let mut log_file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.log)
            .map_err(|source| DevError::Io {
                action: "open log file",
                path: self.log.clone(),
                source,
            })?;
        let _ = writeln!(log_file, "==> {why}");
        let (child, pid) = start(&self.program, &self.args, &self.env, &self.log, log_file)?;
        self.child = child;
        self.pid = pid;
        self.started = Instant::now();
        self.exited = false;
        Ok(())
    }

    /// How long the current process has been running (or ran, once it exited).
    pub fn running_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// What this child is (`devcluster`, `sandbox-controller`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's process id (also its process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where its output goes.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Waits until the child exits (for `select!` against signals).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait().await;
        if status.is_ok() {
            self.exited = true;
        }
        status
    }

    /// Whether the child has exited (without blocking); its status if so.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.exited = true;
                Some(status)
            }
            _ => None,
        }
    }

    /// Sends SIGTERM to the group, waits up to `grace` for the child to exit, then kills the
    /// group. Also kills anything left in the group after a clean exit.
    pub async fn stop(&mut self, grace: Duration) {
        if !self.exited {
            self.signal_group(Signal::TERM);
            if tokio::time::timeout(grace, self.wait()).await.is_err() {
                self.signal_group(Signal::KILL);
                let _ = self.wait().await;
            }
        }
        // Grandchildren, if any, share the group.
        self.signal_group(Signal::KILL);
    }

    fn signal_group(&self, signal: Signal) {
        let Ok(raw) = i32::try_from(self.pid) else {
            return;
        };
        if let Some(pgid) = Pid::from_raw(raw) {
            // ESRCH (group already gone) is the expected outcome after a clean exit.
            let _ = kill_process_group(pgid, signal);
        }
    }
}

/// Spawns `program args` as the leader of a new process group with both output streams in
/// `log_file`; returns the child and its pid.
fn start(
    program: &Path,
    args: &[String],
    env: &[(String, String)],
    log: &Path,
    log_file: File,
) -> Result<(Child, u32), DevError> {
    let stderr = log_file.try_clone().map_err(|source| DevError::Io {
        action: "open log file",
        path: log.to_path_buf(),
        source,
    })?;
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log_file)
        .stderr(stderr)
        // Own process group: the terminal's Ctrl-C reaches only `cargo xtask dev`, which then
        // stops the children in order (controllers first, so they release their Leases while
        // the API server is still up).
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| DevError::Spawn {
            program: program.to_path_buf(),
            source,
        })?;
    let pid = child.id().ok_or_else(|| DevError::Spawn {
        program: program.to_path_buf(),
        source: std::io::Error::other("the child exited before its pid could be read"),
    })?;
    Ok((child, pid))
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        // Reached without `stop` only on an error path or a panic: kill the whole group now.
        // (Once the child has been reaped its pid may be reused, so only while it is ours.)
        if !self.exited && self.child.try_wait().ok().flatten().is_none() {
            self.signal_group(Signal::KILL);
        }
    }
}

/// The last `lines` lines of a log file, for error messages (empty when unreadable).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}
