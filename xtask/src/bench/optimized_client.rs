//! The benchmark client in the release profile.
//!
//! `cargo xtask` runs a debug build of xtask, and the benchmark's own client (claim creation, its
//! watch, the counters) lives in it: at 200 claims/s a debug client costs about a fifth of a core
//! that the processes under test could have had. So a release-profile run started from a debug
//! xtask builds xtask in release too and hands the whole run over to it, with the same
//! arguments. `--quick` and `--build-profile dev` stay in process: they check the harness, not
//! a figure.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::cluster::BuildProfile;
use super::error::BenchError;

/// Set in the environment of the release xtask this module starts, so it never hands over again.
const HANDED_OVER: &str = "AGENT_SANDBOX_BENCH_HANDED_OVER";

/// The profile the running benchmark client was built with.
pub fn running_profile() -> BuildProfile {
    if cfg!(debug_assertions) {
        BuildProfile::Dev
    } else {
        BuildProfile::Release
    }
}

/// Whether a run of `profile` should hand over to a release xtask.
fn should_hand_over(profile: BuildProfile) -> bool {
    profile == BuildProfile::Release
        && running_profile() == BuildProfile::Dev
        && std::env::var_os(HANDED_OVER).is_none()
}

/// Runs the benchmark in a release xtask when that is what a figure needs. `None`: go on in this
/// process (already optimized, a dev-profile run, or `--no-build` without a release xtask at
/// hand, which is said on stderr).
pub fn hand_over(profile: BuildProfile, build: bool) -> Option<Result<(), BenchError>> {
    if !should_hand_over(profile) {
        return None;
    }
    let xtask = release_xtask_path();
    if build {
        if let Err(error) = build_release_xtask() {
            return Some(Err(error));
        }
    } else if !xtask.is_file() {
        eprintln!(
            "bench: {} does not exist, so the benchmark client runs in this debug build \
             (about 1 ms of CPU per claim more); build it with `cargo build --release -p xtask`",
            xtask.display()
        );
        return None;
    }
    Some(run_release_xtask(
        &xtask,
        std::env::args_os().skip(1).collect(),
    ))
}

fn release_xtask_path() -> PathBuf {
    super::cluster::profile_dir(BuildProfile::Release).join("xtask")
}

/// `cargo build --release -p xtask`, on its own so that the benchmarked binaries are built with
/// exactly the features they have when built alone.
fn build_release_xtask() -> Result<(), BenchError> {
    super::cluster::cargo_build(BuildProfile::Release, &["xtask"])
}

fn run_release_xtask(xtask: &Path, args: Vec<OsString>) -> Result<(), BenchError> {
    eprintln!("bench: running the benchmark in {}", xtask.display());
    let status = std::process::Command::new(xtask)
        .args(args)
        .env(HANDED_OVER, "1")
        .status()
        .map_err(|source| BenchError::Process {
            what: format!("running {}", xtask.display()),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Unavailable(format!(
            "the benchmark run in {} failed ({status}); its messages are above",
            xtask.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_release_runs_from_a_debug_build_hand_over() {
        // The test binary is a debug build unless the tests run with --release.
        let debug = running_profile() == BuildProfile::Dev;
        assert!(!should_hand_over(BuildProfile::Dev));
        assert_eq!(should_hand_over(BuildProfile::Release), debug);
    }
}
