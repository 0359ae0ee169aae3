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
