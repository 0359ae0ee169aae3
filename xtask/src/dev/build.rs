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
    let mut command = tokio::process::Command::from(crate::workspace::nested_cargo(root));
    command.arg("build");
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
            program: PathBuf::from(command.as_std().get_program()),
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
