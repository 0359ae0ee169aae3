//! Data directories, and the clean-up of those an earlier run could not remove.
//!
//! A cluster's directory is `$TMPDIR/agent-sandbox-cluster-XXXXXX`, with an `owner` file naming
//! the process that started it (PID and start time, so a reused PID is not mistaken for it).
//! A normal stop, an error and a panic all remove it; a process killed outright (SIGKILL, or
//! a Ctrl-C of a test run whose components then die with it) cannot. So each start first
//! removes the directories whose owner is gone, after killing any process still running from
//! one (found by the directory's path on its command line: every component's has it).

use std::path::{Path, PathBuf};

use crate::Progress;
use crate::error::Error;

/// The prefix of every data directory under the temp dir.
pub const DIR_PREFIX: &str = "agent-sandbox-cluster-";
const OWNER_FILE: &str = "owner";

/// Creates a fresh data directory owned by this process.
pub fn create_data_dir() -> Result<PathBuf, Error> {
    let temp = std::env::temp_dir();
    let dir = tempfile::Builder::new()
        .prefix(DIR_PREFIX)
        .tempdir_in(&temp)
        .map_err(|source| Error::Io {
            action: "create a directory in",
            path: temp.clone(),
            source,
        })?
        .keep();
    let owner = dir.join(OWNER_FILE);
    std::fs::write(&owner, owner_line(std::process::id())).map_err(|source| Error::Io {
        action: "write",
        path: owner,
        source,
    })?;
    Ok(dir)
}

/// `<pid> <start time>` of a live process (empty start time when unreadable).
fn owner_line(pid: u32) -> String {
    format!("{pid} {}\n", start_time(pid).unwrap_or_default())
}

/// Field 22 of `/proc/<pid>/stat`: the process's start time in clock ticks since boot.
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(19).map(str::to_owned)
}

/// Whether the process recorded in `line` still runs.
fn owner_alive(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let Some(pid) = words.next().and_then(|p| p.parse::<u32>().ok()) else {
        return false;
    };
    match (words.next(), start_time(pid)) {
        (Some(recorded), Some(now)) => recorded == now,
        (None, Some(_)) => true,
        (_, None) => false,
    }
}

/// Removes the data directories of clusters whose owner is gone, killing what still runs
/// from them. Directories without an owner file are left alone (being created right now).
pub fn remove_stale_clusters(progress: &Progress) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let dir = entry.path();
        let Ok(owner) = std::fs::read_to_string(dir.join(OWNER_FILE)) else {
            continue;
        };
        if owner_alive(&owner) {
            continue;
        }
        let killed = kill_processes_using(&dir);
        progress(&format!(
            "removing {} left by an earlier run that was killed ({} process(es) of it stopped)",
            dir.display(),
            killed
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// SIGKILLs every process whose command line names `dir`; returns how many.
fn kill_processes_using(dir: &Path) -> usize {
    let needle = dir.as_os_str().as_encoded_bytes();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut killed = 0;
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle)
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
            && rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok()
        {
            killed += 1;
        }
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_changed_start_time_is_not() {
        let me = std::process::id();
        assert!(owner_alive(&owner_line(me)));
        assert!(!owner_alive(&format!("{me} 1")));
        assert!(!owner_alive("not-a-pid 1"));
    }

    #[test]
    fn a_dead_owners_directory_and_its_processes_go() {
        // A child that has exited and been reaped is a dead owner.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();

        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir_in(std::env::temp_dir())
            .unwrap()
            .keep();
        std::fs::write(dir.join(OWNER_FILE), format!("{dead} 12345\n")).unwrap();
        // A leftover component: its command line names the directory (as `$0` of a shell
        // loop, which a kill ends at once; its `sleep 1` child ends by itself).
        let mut leftover = std::process::Command::new("sh")
            .args(["-c", "while :; do sleep 1; done"])
            .arg(dir.join("marker"))
            .spawn()
            .unwrap();
        // Until it has exec'd, the forked child shows this test's command line.
        let cmdline = format!("/proc/{}/cmdline", leftover.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !std::fs::read_to_string(&cmdline).is_ok_and(|c| c.contains("marker")) {
            assert!(std::time::Instant::now() < deadline, "sh never started");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let live = create_data_dir().unwrap();

        let progress: Progress = std::sync::Arc::new(|_: &str| {});
        remove_stale_clusters(&progress);
        assert!(!dir.exists(), "the stale directory is removed");
        assert!(live.exists(), "a live owner's directory stays");
        let status = leftover.wait().unwrap();
        assert!(
            !status.success(),
            "the leftover process was killed: {status}"
        );
        std::fs::remove_dir_all(live).unwrap();
    }
}
