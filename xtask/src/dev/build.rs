//! Building the binaries `cargo xtask dev` runs, with a plain nested `cargo build`.

use std::path::{Path, PathBuf};

use crate::dev::DevError;
use crate::workspace::workspace_root;

/// The target directory Cargo builds into.
pub fn target_dir() -> PathBuf {
    crate::workspace::target_dir_in(&workspace_root())
}

/// `cargo build -p ...`, with Cargo's own progress on the terminal.
pub async fn build(root: &Path, packages: &[&str], release: bool) -> Result<(), DevError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = tokio::process::Command::new(&cargo);
    command.current_dir(root).arg("build");
    // `cargo run` and `cargo test` describe the running package in the environment; build
    // scripts that watch those variables (ring's does) would otherwise rebuild every time.
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if is_package_env(name) {
            command.env_remove(name);
        }
    }
    for package in packages {
        command.args(["-p", package]);
    }
    if release {
        command.arg("--release");
    }
    let status = command
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| DevError::Spawn {
            program: PathBuf::from(&cargo),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(DevError::Build {
            status: status.to_string(),
        })
    }
}

/// Variables Cargo sets for the package it runs, which a nested `cargo build` must not see.
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
}
