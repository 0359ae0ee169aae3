//! The Python `kubernetes` package (what the agent-sandbox SDK uses) against devcluster.
//!
//! Creates (once, under the cargo target dir) a virtualenv with `pip install kubernetes`, then
//! runs `tests/python/client_check.py` against an in-process cluster with the Sandbox CRD of `deploy/crds`.
//! Skipped with a printed note when python3 or the package index is not available.

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// A venv with the `kubernetes` package, or why there is none.
fn python_with_kubernetes() -> Result<PathBuf, String> {
    // .ci/run installs tests/python/requirements.txt (pinned `kubernetes`) once for every test.
    if let Some(python) = std::env::var_os("AGENT_SANDBOX_PYTHON") {
        return Ok(PathBuf::from(python));
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("devcluster-python-venv");
    let python = venv.join("bin/python");
    let has_package = |py: &Path| {
        Command::new(py)
            .args(["-c", "import kubernetes"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if python.exists() && has_package(&python) {
        return Ok(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .map_err(|e| format!("python3 not available: {e}"))?;
    if !made.success() {
        return Err("python3 -m venv failed".into());
    }
    let pip = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "kubernetes"])
        .status()
        .map_err(|e| format!("pip not available: {e}"))?;
    if !pip.success() || !has_package(&python) {
        return Err("pip install kubernetes failed (no package index?)".into());
    }
    Ok(python)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_kubernetes_client_works_unmodified() {
    let python = match tokio::task::spawn_blocking(python_with_kubernetes)
        .await
        .unwrap()
    {
        Ok(p) => p,
        // In CI the interpreter is provided, so a missing one is a failure, never a skip.
        Err(why) if std::env::var_os("CI").is_some() => {
            panic!("no Python with `kubernetes`: {why}")
        }
        Err(why) => {
            eprintln!("skipping python_kubernetes_client_works_unmodified: {why}");
            return;
        }
    };
    let dc = devcluster::DevCluster::start(devcluster::Config::ephemeral())
        .await
        .expect("devcluster starts");
    let crds: Api<CustomResourceDefinition> = Api::all(dc.client());
    // The repository's own Sandbox CRD: the reference's schema (api-types' schema_parity test),
    // and present in a fresh clone.
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/crds/agents.x-k8s.io_sandboxes.yaml"),
    )
    .expect("deploy/crds Sandbox CRD");
    let crd: CustomResourceDefinition = serde_yaml::from_str(&text).expect("parse CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create CRD");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/client_check.py");
    let kubeconfig = dc.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python).arg(script).arg(kubeconfig).output()
    })
    .await
    .unwrap()
    .expect("run python");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("python client check passed"), "{text}");
}
