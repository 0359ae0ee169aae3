//! `cargo xtask ...` says so when it waits for another build's lock on the target directory,
//! instead of hanging without a word (the alias ran `cargo run --quiet`, which hides Cargo's
//! "Blocking waiting for file lock" line).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::fs::{FlockOperation, flock};

#[test]
fn cargo_xtask_says_it_is_waiting_for_the_build_lock() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // The profile directory this test's xtask was built in holds Cargo's build lock.
    let profile_dir = Path::new(env!("CARGO_BIN_EXE_xtask")).parent().unwrap();
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(profile_dir.join(".cargo-lock"))
        .unwrap();
    flock(&lock, FlockOperation::LockExclusive).unwrap();

    // As `cargo xtask dev` does for its nested build: the test's package variables would make
    // build scripts that watch them rebuild.
    let mut command = xtask::workspace::nested_cargo(root);
    command
        .args(["xtask", "--help"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines, seen) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });

    let deadline = Instant::now() + Duration::from_secs(120);
    let mut output = Vec::new();
    let said = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match seen.recv_timeout(left) {
            Ok(line) => {
                let waiting = line.contains("Blocking waiting for file lock");
                output.push(line);
                if waiting {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    // Let it go on either way, so the child finishes and nothing is left running.
    flock(&lock, FlockOperation::Unlock).unwrap();
    let status = child.wait().unwrap();
    output.extend(seen.iter());
    assert!(
        said,
        "cargo xtask waited on the build lock without saying so; its stderr:\n{}",
        output.join("\n")
    );
    assert!(status.success(), "{status}:\n{}", output.join("\n"));
}
