//! The `cargo xtask` binary as a user runs it: exit codes, one-line errors, defaults,
//! reproducible output.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use xtask::release::DEFAULT_REGISTRY;

fn xtask(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_xtask"));
    command.args(args);
    // These tests are about the manifests and the command line; the images (a musl release
    // build) are tests/images.rs's business.
    if args.first() == Some(&"release") {
        command.arg("--no-images");
    }
    command.output().expect("xtask binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A failed run: non-zero exit, exactly one line on stderr that mentions `needle`, no panic.
fn assert_one_line_error(output: &Output, needle: &str) {
    let err = stderr(output);
    assert!(!output.status.success(), "expected failure, stderr: {err}");
    assert_eq!(output.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains(needle), "{err:?} mentions {needle:?}");
    assert!(!err.contains("panicked"), "{err}");
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

const FILES: [&str; 3] = [
    "sandbox.yaml",
    "extensions.yaml",
    "sandbox-with-extensions.yaml",
];

#[test]
fn release_output_is_byte_for_byte_reproducible() {
    let first = tempfile::tempdir().unwrap();
    let second = tempfile::tempdir().unwrap();
    for dir in [&first, &second] {
        let out = dir.path().to_str().unwrap();
        let run = xtask(&[
            "release",
            "--version",
            "v2.0.0",
            "--registry",
            "r.test/x",
            "--out",
            out,
        ]);
        assert!(run.status.success(), "{}", stderr(&run));
    }
    for name in FILES {
        let a = read(first.path(), name);
        assert!(!a.is_empty());
        assert_eq!(a, read(second.path(), name), "{name} differs between runs");
    }
}

#[test]
fn version_and_registry_reach_the_images() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let run = xtask(&[
        "release",
        "--version",
        "v0.9.1-rc.2",
        "--registry",
        "localhost:5000/team",
        "--out",
        out,
    ]);
    assert!(run.status.success(), "{}", stderr(&run));
    let combined = String::from_utf8(read(dir.path(), "sandbox-with-extensions.yaml")).unwrap();
    assert!(combined.contains("image: localhost:5000/team/sandbox-controller:v0.9.1-rc.2\n"));
    assert!(combined.contains("image: localhost:5000/team/extensions-controller:v0.9.1-rc.2\n"));
    assert!(!combined.contains("${"), "no placeholder left");
}

#[test]
fn release_defaults_to_the_workspace_version_and_a_placeholder_registry() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("nested/dist");
    let run = xtask(&["release", "--out", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let sandbox = String::from_utf8(read(&out, "sandbox.yaml")).unwrap();
    assert!(sandbox.starts_with(&format!("# agent-sandbox {version}: sandbox.yaml\n")));
    assert!(sandbox.contains(&format!(
        "image: {DEFAULT_REGISTRY}/sandbox-controller:{version}\n"
    )));
    assert!(
        stderr(&run).contains("placeholder registry"),
        "{}",
        stderr(&run)
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    for name in FILES {
        assert!(stdout.contains(name), "{stdout}");
    }
}

#[test]
fn versions_that_are_not_v_semver_are_refused() {
    for bad in ["1.2.3", "v1.2", "latest", "v1.2.3+git.abc"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("dist");
        let run = xtask(&["release", "--version", bad, "--out", out.to_str().unwrap()]);
        assert_one_line_error(&run, &format!("invalid --version {bad:?}"));
        assert!(!out.exists(), "nothing is written for {bad}");
    }
}

#[test]
fn a_bad_registry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dist");
    let run = xtask(&[
        "release",
        "--registry",
        "https://Ghcr.io/x",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_one_line_error(&run, "invalid --registry \"https://Ghcr.io/x\"");
    assert!(!out.exists());
}

#[test]
fn an_unwritable_out_dir_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    // A regular file where a directory is needed fails even for root.
    let blocker = dir.path().join("not-a-dir");
    fs::write(&blocker, "x").unwrap();
    let out = blocker.join("dist");
    let run = xtask(&["release", "--out", out.to_str().unwrap()]);
    assert_one_line_error(
        &run,
        &format!("cannot create output directory {}", out.display()),
    );
}

#[test]
fn crds_check_passes_on_the_committed_files() {
    let run = xtask(&["crds", "--check"]);
    assert!(
        run.status.success(),
        "deploy/crds is stale; run `cargo xtask crds`: {}",
        stderr(&run)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("up to date"));
}

#[test]
fn unknown_arguments_are_usage_errors() {
    let run = xtask(&["release", "--versoin", "v1.0.0"]);
    assert_eq!(run.status.code(), Some(2), "{}", stderr(&run));
    assert!(stderr(&run).contains("--versoin"));
}
