//! The Python interpreter with `tests/python/requirements.txt` installed, and running the
//! scripts of `tests/python/` with a deadline.
//!
//! `$AGENT_SANDBOX_PYTHON` (set by `.ci/run`) wins; otherwise a venv is created once under the
//! cargo target dir (`target/tmp/agent-sandbox-python`) with pip, and reused while the
//! requirements file is unchanged.

// Shared by several test binaries; each uses a part.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `tests/python` in the source tree.
pub fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("python")
}

/// The CRDs the release ships (`deploy/crds`).
pub fn crd_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds")
}

/// The interpreter to run the scripts with; panics with what to do when none can be made.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("AGENT_SANDBOX_PYTHON") {
        return PathBuf::from(p);
    }
    // Tests of one binary run in parallel threads: build the venv once.
    static VENV: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut guard = VENV.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = guard.as_ref() {
        return p.clone();
    }
    let made = make_venv().unwrap_or_else(|why| {
        panic!(
            "cannot prepare Python for the client tests: {why}\n\
             Either set AGENT_SANDBOX_PYTHON to a python with tests/python/requirements.txt \
             installed, or make python3 (with venv) and PyPI reachable."
        )
    });
    *guard = Some(made.clone());
    made
}

fn make_venv() -> Result<PathBuf, String> {
    let requirements_path = scripts_dir().join("requirements.txt");
    let requirements = std::fs::read_to_string(&requirements_path)
        .map_err(|e| format!("cannot read {}: {e}", requirements_path.display()))?;
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let venv = base.join("agent-sandbox-python");
    let marker = venv.join("installed-requirements.txt");
    if std::fs::read_to_string(&marker).is_ok_and(|m| m == requirements) {
        return Ok(venv.join("bin/python"));
    }
    // Build in a private directory, then move it into place, so a concurrent test binary
    // never sees a half-installed venv.
    let staging = base.join(format!("agent-sandbox-python.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    run_checked(Command::new("python3").arg("-m").arg("venv").arg(&staging))?;
    run_checked(
        Command::new(staging.join("bin/pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&requirements_path),
    )?;
    std::fs::write(staging.join("installed-requirements.txt"), &requirements)
        .map_err(|e| format!("cannot write the venv marker: {e}"))?;
    let _ = std::fs::remove_dir_all(&venv);
    if std::fs::rename(&staging, &venv).is_err() {
        // Another process won the race; its venv is as good as ours.
        let _ = std::fs::remove_dir_all(&staging);
    }
    // A venv's scripts hard-code its path, so use the interpreter of the final location.
    Ok(venv.join("bin/python"))
}

fn run_checked(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// What a finished script printed.
pub struct ScriptRun {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tests/python/<script>` with `args`, killing it after `deadline`. Blocking: call from
/// `spawn_blocking`.
pub fn run_script(script: &str, args: &[&std::ffi::OsStr], deadline: Duration) -> ScriptRun {
    let python = python();
    let mut child = Command::new(&python)
        .arg(scripts_dir().join(script))
        .args(args)
        // In-cluster config must not be picked up by the clients.
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("PYTHONUNBUFFERED", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break Some(status);
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    assert!(
        status.is_some(),
        "{script} did not finish within {deadline:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    ScriptRun {
        success: status.is_some_and(|s| s.success()),
        stdout,
        stderr,
    }
}
