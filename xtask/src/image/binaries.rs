//! The controller binaries of the images: built by Cargo for the image target, then split
//! into a stripped binary (in the image) and its debug information (beside it in `dist/`).
//!
//! Reproducibility: absolute paths that Cargo, rustc and the C compiler would embed (the Cargo
//! home with the crates' sources, the workspace) are remapped to fixed prefixes, and the build metadata the
//! binaries report (`agent_sandbox_build_info`) comes from the release's revision and
//! `SOURCE_DATE_EPOCH`, so the same sources, `Cargo.lock` and toolchain give the same bytes
//! wherever they are checked out.
//!
//! Splitting uses binutils' `objcopy` (present wherever Rust links for Linux, since the
//! linker driver needs binutils): `--only-keep-debug` writes the debug file and
//! `--strip-debug --add-gnu-debuglink` removes the DWARF sections from the binary and records
//! the debug file's name and CRC, which is how gdb, lldb and `debuginfod` find it. The symbol
//! table stays, so a panic's backtrace still names the functions.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::image::ImageError;

/// How the binaries are built.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// The workspace root.
    pub workspace: PathBuf,
    /// Rust target triple, e.g. `x86_64-unknown-linux-musl`.
    pub target: String,
    /// Cargo profile (`release` for a release).
    pub profile: String,
    /// Commit recorded in the binaries' build info.
    pub revision: String,
    /// The build time in seconds since 1970: the build date in the binaries' build info, and
    /// `SOURCE_DATE_EPOCH` for the build (build scripts using cc-rs, ring's, watch it: set by
    /// the caller or not, it must be the same for every build).
    pub source_date_epoch: u64,
}

impl BuildSettings {
    /// Where Cargo puts the binaries of this target and profile (under `CARGO_TARGET_DIR` when
    /// it is set: a CI run with a shared target directory failed to find them under
    /// `<workspace>/target`).
    pub fn output_dir(&self) -> PathBuf {
        let profile_dir = if self.profile == "dev" {
            "debug"
        } else {
            &self.profile
        };
        crate::workspace::target_dir_in(&self.workspace)
            .join(&self.target)
            .join(profile_dir)
    }
}

/// The Cargo home: `CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
}

/// The rustc flags of an image build: paths remapped to fixed prefixes.
pub fn rustflags(workspace: &Path) -> String {
    let mut flags = Vec::new();
    if let Some(home) = cargo_home() {
        flags.push(format!("--remap-path-prefix={}=/cargo", home.display()));
    }
    flags.push(format!(
        "--remap-path-prefix={}=/agent-sandbox",
        workspace.display()
    ));
    flags.join("\x1f")
}

/// The C compiler flags of an image build for crates with C code (ring): the same paths
/// remapped as [`rustflags`] remaps for rustc, which the C compiler never sees. Without them
/// the C objects' debug information names the Cargo home (`/root/.cargo/registry/src/...`, seen
/// with `strings` in the first musl build), which lands in the debug file, whose CRC the
/// stripped binary's `.gnu_debuglink` carries: two machines with different Cargo homes would
/// build different images. Any flags already set for the target (cc-rs reads
/// `CFLAGS_<target>`, then `TARGET_CFLAGS`, then `CFLAGS`) come first.
pub fn cflags(workspace: &Path, target: &str) -> (String, String) {
    let var = format!("CFLAGS_{}", target.replace('-', "_"));
    let mut flags: Vec<String> = [
        var.clone(),
        format!("CFLAGS_{target}"),
        "TARGET_CFLAGS".into(),
        "CFLAGS".into(),
    ]
    .iter()
    .find_map(|name| std::env::var(name).ok())
    .into_iter()
    .filter(|value| !value.trim().is_empty())
    .collect();
    if let Some(home) = cargo_home() {
        flags.push(format!("-ffile-prefix-map={}=/cargo", home.display()));
    }
    flags.push(format!(
        "-ffile-prefix-map={}=/agent-sandbox",
        workspace.display()
    ));
    (var, flags.join(" "))
}

/// Adds the Rust standard library of `target` with rustup when rustup manages the toolchain
/// and the target is missing (a one-time download, like `rustup target add` by hand). Without
/// rustup, Cargo's error says what is missing.
pub fn ensure_target(target: &str) -> Result<(), ImageError> {
    let Ok(output) = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
    else {
        return Ok(());
    };
    if !output.status.success()
        || String::from_utf8_lossy(&output.stdout)
            .lines()
            .any(|line| line.trim() == target)
    {
        return Ok(());
    }
    eprintln!("note: adding the Rust target {target} (rustup target add {target})");
    let status = Command::new("rustup")
        .args(["target", "add", target])
        .status()
        .map_err(|e| ImageError::Tool(format!("cannot run rustup: {e}")))?;
    if !status.success() {
        return Err(ImageError::Tool(format!(
            "rustup target add {target} failed ({status}); the images need it"
        )));
    }
    Ok(())
}

/// Runs `cargo build` for `packages` (each builds the binary of the same name).
pub fn cargo_build(settings: &BuildSettings, packages: &[&str]) -> Result<(), ImageError> {
    ensure_target(&settings.target)?;
    let mut command = build_command(settings, packages)?;
    let status = command
        .status()
        .map_err(|e| ImageError::Tool(format!("cannot run cargo build: {e}")))?;
    if !status.success() {
        return Err(ImageError::Tool(format!(
            "cargo build --target {} of {} failed ({status})",
            settings.target,
            packages.join(", ")
        )));
    }
    Ok(())
}

/// The `cargo build` of [`cargo_build`]: its environment is a function of `settings` alone,
/// whoever runs it (`cargo xtask release`, a test, a shell with `SOURCE_DATE_EPOCH` set or
/// not), so every caller shares one build instead of rebuilding for musl in turn.
pub fn build_command(settings: &BuildSettings, packages: &[&str]) -> Result<Command, ImageError> {
    let mut command = crate::workspace::nested_cargo(&settings.workspace);
    command
        .args(["build", "--locked", "--profile", &settings.profile])
        .args(["--target", &settings.target]);
    for package in packages {
        command.args(["-p", package]);
    }
    if let Some((var, cc)) = c_compiler(&settings.target)? {
        command.env(var, cc);
    }
    let (cflags_var, cflags) = cflags(&settings.workspace, &settings.target);
    command
        .env_remove("RUSTFLAGS")
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(&settings.workspace))
        .env(cflags_var, cflags)
        .env("AGENT_SANDBOX_GIT_SHA", &settings.revision)
        .env(
            "AGENT_SANDBOX_BUILD_DATE",
            crate::image::oci::rfc3339(settings.source_date_epoch)?,
        )
        .env("SOURCE_DATE_EPOCH", settings.source_date_epoch.to_string());
    Ok(command)
}

/// The C compiler of a musl target for the crates with C code (ring): cc-rs looks for
/// `x86_64-linux-musl-gcc`, which Debian does not have; its `musl-gcc` wrapper (package
/// `musl-tools`) is what builds for musl there. `CC_<target>` or `TARGET_CC`, when set, win.
/// Found missing by the first image build on a machine without it: ring's build script failed
/// with "failed to find tool x86_64-linux-musl-gcc".
fn c_compiler(target: &str) -> Result<Option<(String, String)>, ImageError> {
    if !target.ends_with("-linux-musl") {
        return Ok(None);
    }
    let var = format!("CC_{}", target.replace('-', "_"));
    if std::env::var_os(&var).is_some() || std::env::var_os("TARGET_CC").is_some() {
        return Ok(None);
    }
    let cross = format!(
        "{}-linux-musl-gcc",
        target.split('-').next().unwrap_or_default()
    );
    for cc in [cross.as_str(), "musl-gcc"] {
        if Command::new(cc).arg("--version").output().is_ok() {
            return Ok(Some((var, cc.to_string())));
        }
    }
    Err(ImageError::Tool(format!(
        "no C compiler for {target} (ring has C code): install musl-tools (Debian, Ubuntu: \
         apt-get install musl-tools), or set {var} to one"
    )))
}

fn objcopy(args: &[&std::ffi::OsStr]) -> Result<(), ImageError> {
    let output = Command::new("objcopy").args(args).output().map_err(|e| {
        ImageError::Tool(format!(
            "cannot run objcopy (binutils; install it with your package manager): {e}"
        ))
    })?;
    if !output.status.success() {
        return Err(ImageError::Tool(format!(
            "objcopy {:?} failed: {}",
            args,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}

/// Writes the debug information of `binary` to `debug_file` and returns the stripped binary,
/// which names `debug_file` (by its file name) in its `.gnu_debuglink` section.
pub fn split_debug_info(
    binary: &Path,
    debug_file: &Path,
    scratch: &Path,
) -> Result<Vec<u8>, ImageError> {
    objcopy(&[
        "--only-keep-debug".as_ref(),
        binary.as_os_str(),
        debug_file.as_os_str(),
    ])?;
    let stripped = scratch.join(format!(
        "{}.stripped",
        binary.file_name().unwrap_or_default().to_string_lossy()
    ));
    let link = format!("--add-gnu-debuglink={}", debug_file.display());
    objcopy(&[
        "--strip-debug".as_ref(),
        link.as_ref(),
        binary.as_os_str(),
        stripped.as_os_str(),
    ])?;
    let bytes =
        std::fs::read(&stripped).map_err(|e| ImageError::io("cannot read", &stripped, e))?;
    let _ = std::fs::remove_file(&stripped);
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of<'a>(command: &'a Command, name: &str) -> Option<Option<&'a std::ffi::OsStr>> {
        command
            .get_envs()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }

    #[test]
    fn the_image_build_sees_the_same_environment_from_a_test_as_from_xtask() {
        let settings = BuildSettings {
            workspace: PathBuf::from("/src/agent-sandbox"),
            target: "x86_64-unknown-linux-gnu".into(),
            profile: "release".into(),
            revision: "0123abc".into(),
            source_date_epoch: 1_796_256_000,
        };
        let command = build_command(&settings, &["sandbox-controller"]).unwrap();
        // Set for this test by `cargo test`, unset for `cargo xtask release` run from a shell
        // by hand: either way the nested build must not see it.
        assert_eq!(env_of(&command, "CARGO_MANIFEST_DIR"), Some(None));
        assert_eq!(
            env_of(&command, "SOURCE_DATE_EPOCH"),
            Some(Some(std::ffi::OsStr::new("1796256000")))
        );
        assert_eq!(
            env_of(&command, "AGENT_SANDBOX_GIT_SHA"),
            Some(Some(std::ffi::OsStr::new("0123abc")))
        );
    }
}
