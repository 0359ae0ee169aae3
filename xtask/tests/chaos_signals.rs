//! `cargo xtask chaos` stops on Ctrl-C (SIGINT) and SIGTERM: it exits at once with an error
//! naming the signal, and the processes it started (devcluster, the controllers) are gone with
//! it. Before, a signal left the run going (a kill storm replaced the controllers the signal had
//! stopped) and its processes outlived an interrupted run.

#[path = "dev_support/harness.rs"]
mod harness;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::{BUILD_DEADLINE, KillOnDrop, is_alive};
use rustix::process::{Pid, Signal, kill_process};

/// Live processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(parent)
        })
        .filter(|pid| is_alive(*pid))
        .collect()
}

fn interrupted_run_stops_everything(signal: Signal, name: &str) {
    let out = tempfile::tempdir().unwrap();
    let stderr_path = out.path().join("chaos.stderr");
    let child = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["chaos", "--quick", "--experiment", "kill-storm", "--out"])
        .arg(out.path().join("report"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&stderr_path).unwrap()))
        .spawn()
        .expect("start xtask chaos");
    let mut chaos = KillOnDrop(child);
    let pid = chaos.0.id();
    let stderr = || std::fs::read_to_string(&stderr_path).unwrap_or_default();
    // The build (cold on a fresh clone), then devcluster and both controllers.
    let deadline = Instant::now() + BUILD_DEADLINE;
    let started = loop {
        let children = children_of(pid);
        if stderr().contains("chaos: kill-storm ...") && children.len() >= 3 {
            break children;
        }
        if let Some(status) = chaos.0.try_wait().unwrap() {
            panic!(
                "xtask chaos exited ({status}) before its processes ran:\n{}",
                stderr()
            );
        }
        assert!(
            Instant::now() < deadline,
            "devcluster and the controllers did not start:\n{}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    kill_process(Pid::from_raw(pid as i32).unwrap(), signal).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = chaos.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "xtask chaos still running 30 s after {name}:\n{}",
            stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "an interrupted run is not a success");
    let text = stderr();
    assert!(text.contains(&format!("stopped by {name}")), "{text}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while started.iter().any(|pid| is_alive(*pid)) {
        assert!(
            Instant::now() < deadline,
            "processes the run started outlived it: {:?}",
            started
                .iter()
                .filter(|pid| is_alive(**pid))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ctrl_c_stops_a_chaos_run_and_its_processes() {
    interrupted_run_stops_everything(Signal::INT, "SIGINT");
}

#[test]
fn sigterm_stops_a_chaos_run_and_its_processes() {
    interrupted_run_stops_everything(Signal::TERM, "SIGTERM");
}
