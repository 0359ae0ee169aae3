//! Where the repository's files are, independent of the directory `cargo xtask` runs in.

use std::path::{Path, PathBuf};

/// The workspace root (the directory holding the top-level `Cargo.toml`).
///
/// xtask lives in `<root>/xtask`, so the root is the parent of this crate's manifest directory,
/// which Cargo records at compile time.
pub fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest_dir.to_path_buf())
}

/// The directory Cargo builds into for the workspace at `root`: `CARGO_TARGET_DIR` (relative
/// to `root` when relative), else `<root>/target`.
pub fn target_dir_in(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// `cargo` (the one running xtask, from `CARGO`, else the one on `PATH`) in `root`, for a build
/// nested in `cargo run` or `cargo test`, without the variables Cargo set for the package it runs.
///
/// Those variables describe xtask or a test (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...), and
/// build scripts that watch them (ring's watches `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) see a
/// change whenever the caller changes: the release images built by `cargo xtask release` (run
/// from xtask) and by the image tests (run from a test) rebuilt ring and everything above it for
/// musl each time, about five minutes on 2 cores, found with `CARGO_LOG` in a CI run that spent
/// seven minutes in the push test.
pub fn nested_cargo(root: &Path) -> std::process::Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command.current_dir(root);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(is_package_env) {
            command.env_remove(name);
        }
    }
    command
}

/// Variables Cargo sets for the package it runs, which a nested `cargo` must not see.
pub fn is_package_env(name: &str) -> bool {
    const EXACT: [&str; 7] = [
        "CARGO_MANIFEST_DIR",
        "CARGO_MANIFEST_PATH",
        "CARGO_CRATE_NAME",
        "CARGO_BIN_NAME",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "OUT_DIR",
    ];
    EXACT.contains(&name) || name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_BIN_EXE_")
}

/// `<root>/deploy`: the hand-written manifest pieces and the generated CRDs.
pub fn deploy_dir() -> PathBuf {
    workspace_root().join("deploy")
}

/// `<root>/deploy/crds`: one generated file per CRD.
pub fn crds_dir() -> PathBuf {
    deploy_dir().join("crds")
}

/// `<root>/dist`: the default output directory of `cargo xtask release` (git-ignored).
pub fn default_dist_dir() -> PathBuf {
    workspace_root().join("dist")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_running_package_description_is_hidden_from_the_nested_build() {
        for name in [
            "CARGO_MANIFEST_DIR",
            "CARGO_PKG_NAME",
            "CARGO_BIN_EXE_xtask",
            "CARGO_TARGET_TMPDIR",
            "OUT_DIR",
        ] {
            assert!(is_package_env(name), "{name}");
        }
        for name in [
            "CARGO_HOME",
            "CARGO_TARGET_DIR",
            "RUSTFLAGS",
            "CARGO_BUILD_JOBS",
            "PATH",
        ] {
            assert!(!is_package_env(name), "{name}");
        }
    }

    #[test]
    fn a_nested_cargo_does_not_see_the_package_cargo_test_runs() {
        // `cargo test` runs this test with CARGO_MANIFEST_DIR set to xtask's directory.
        assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
        let command = nested_cargo(Path::new("/"));
        let removed: Vec<_> = command
            .get_envs()
            .filter(|(_, value)| value.is_none())
            .map(|(name, _)| name.to_string_lossy().into_owned())
            .collect();
        assert!(
            removed.iter().any(|name| name == "CARGO_MANIFEST_DIR"),
            "{removed:?}"
        );
        assert!(
            removed.iter().any(|name| name == "CARGO_PKG_NAME"),
            "{removed:?}"
        );
        assert!(
            removed.iter().all(|name| is_package_env(name)),
            "{removed:?}"
        );
    }
}
