//! The published Python SDK (`k8s-agent-sandbox`, pinned) against devcluster and both
//! controllers: create a claim from a warm pool and from an empty pool, wait Ready, delete.
//! The venv is created on first use under the target directory (needs PyPI access once).

use crate::harness;

use std::path::PathBuf;
use std::process::Command;

use api_types::{Sandbox, SandboxClaim};
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::ExtEnv;
use serde_json::{Value, json};

const SDK: &str = "k8s-agent-sandbox==1.0.8";

fn venv_python() -> PathBuf {
    // .ci/run installs tests/python/requirements.txt (which pins this SDK) once for every test.
    if let Some(python) = std::env::var_os("AGENT_SANDBOX_PYTHON") {
        return PathBuf::from(python);
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("py-sdk-1.0.8");
    let python = dir.join("bin/python");
    let ready = dir.join(".installed");
    if !ready.exists() {
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&dir)
            .status()
            .expect("python3 runs");
        assert!(status.success(), "python3 -m venv failed");
        let out = Command::new(&python)
            .args(["-m", "pip", "install", "-q", SDK])
            .output()
            .expect("pip runs");
        assert!(
            out.status.success(),
            "pip install {SDK} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(&ready, SDK).expect("marker written");
    }
    python
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_creates_waits_and_deletes() {
    let python = venv_python();
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_template("python-sandbox-template", json!({}))
        .await;
    ext.create_pool("warm-pool", "python-sandbox-template", 1)
        .await;
    ext.create_pool("cold-pool", "python-sandbox-template", 0)
        .await;
    ext.wait_pool_ready("warm-pool", 1).await;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_roundtrip.py");
    let kubeconfig = ext.env.cluster.kubeconfig_path().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .args(["warm-pool", "cold-pool"])
            .env("KUBECONFIG", kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "SDK script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(results.len(), 2, "{stdout}");
    for r in &results {
        let claim = r["claim"].as_str().unwrap();
        assert!(claim.starts_with("sandbox-claim-"), "{r}");
        assert_eq!(r["status"], "SandboxReady", "{r}");
        assert!(r["pod_ip"].as_str().is_some_and(|ip| !ip.is_empty()), "{r}");
        assert_eq!(r["listed"], true, "{r}");
    }
    let (warm, cold) = (&results[0], &results[1]);
    assert_ne!(
        warm["sandbox"], warm["claim"],
        "warm: a pool member was adopted ({warm})"
    );
    assert!(warm["sandbox"].as_str().unwrap().starts_with("warm-pool-"));
    assert_eq!(
        cold["sandbox"], cold["claim"],
        "cold: the Sandbox is named after the claim ({cold})"
    );

    // terminate() deleted the claims; their Sandboxes go with them.
    let claims = ext.api::<SandboxClaim>();
    let sandboxes = ext.api::<Sandbox>();
    for r in &results {
        let (claim, sandbox) = (
            r["claim"].as_str().unwrap().to_owned(),
            r["sandbox"].as_str().unwrap().to_owned(),
        );
        wait_for(&format!("{claim} and {sandbox} gone"), DEADLINE, || async {
            let c = claims.get_opt(&claim).await.ok()?;
            let s = sandboxes.get_opt(&sandbox).await.ok()?;
            (c.is_none() && s.is_none()).then_some(())
        })
        .await;
    }
    ext.stop().await;
}
