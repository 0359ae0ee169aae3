//! Child processes started by `cargo xtask dev`: each runs in its own process group with its
//! output in a log file, and the whole group is killed when the handle is dropped (also on a
//! panic), so nothing the dev environment started outlives it.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal, kill_process_group};
use tokio::process::{Child, Command};

use crate::dev::DevError;

/// A running child process and its process group.
#[derive(Debug)]
pub struct ChildGroup {
    name: String,
    log: PathBuf,
    child: Child,
    pid: u32,
    exited: bool,
}

impl ChildGroup {
    /// Starts `program args` as the leader of a new process group, with stdout and stderr
    /// appended to `log` (created or truncated).
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
    ) -> Result<Self, DevError> {
        let log_file = File::create(log).map_err(|source| DevError::Io {
            action: "create log file",
            path: log.to_path_buf(),
            source,
        })?;
        let stderr = log_file.try_clone().map_err(|source| DevError::Io {
            action: "open log file",
            path: log.to_path_buf(),
            source,
        })?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(stderr)
            // Own process group: the terminal's Ctrl-C reaches only `cargo xtask dev`, which
            // then stops the children in order (controllers first, so they release their
            // Leases while the API server is still up).
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
        Ok(Self {
            name: name.to_owned(),
            log: log.to_path_buf(),
            child,
            pid,
            exited: false,
        })
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
