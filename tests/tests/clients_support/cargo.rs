//! Running cargo from a test (to build a binary this crate does not link, or run xtask).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// `cargo ARGS` in the workspace root, with the cargo that runs this test.
pub fn cargo(args: &[&str]) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(args).current_dir(workspace_root());
    // Variables cargo sets for this test process would make the nested build look different
    // from the outer one, and each would rebuild dependencies the other just built.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        let set_by_cargo = (key.starts_with("CARGO_")
            && !matches!(key.as_str(), "CARGO_HOME" | "CARGO_TARGET_DIR"))
            || matches!(
                key.as_str(),
                "OUT_DIR" | "LD_LIBRARY_PATH" | "RUSTC" | "RUSTDOC"
            );
        if set_by_cargo {
            cmd.env_remove(&key);
        }
    }
    cmd
}

/// Runs `cargo ARGS`, panicking with its output unless it succeeds; returns stdout.
pub fn cargo_ok(args: &[&str]) -> String {
    let out = cargo(args).output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo {args:?} failed\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Builds both controller binaries (and the packages `also`, e.g. `xtask`) in this test's
/// profile; returns the directory that holds them.
#[allow(dead_code)] // not every test that includes this module runs the controller binaries
pub fn build_controllers(also: &[&str]) -> PathBuf {
    let mut args = vec![
        "build",
        "--quiet",
        "-p",
        "sandbox-controller",
        "--bin",
        "sandbox-controller",
        "-p",
        "extensions-controller",
        "--bin",
        "extensions-controller",
    ];
    for package in also {
        args.extend(["-p", package]);
    }
    cargo_ok(&args);
    e2e_tests::controller_process::profile_dir()
}
