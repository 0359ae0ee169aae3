//! The published Python SDK (`k8s-agent-sandbox`, pinned in `tests/python/requirements.txt`)
//! against devcluster with both controllers: the core controller in-process (harness), the
//! extensions controller as its binary (the tests crate does not link it). The SDK creates
//! claims from a warm pool (adoption) and from an empty pool (cold start), waits for Ready, and
//! deletes them; see `tests/python/sdk_claim_flow.py`.

#[path = "clients_support/cargo.rs"]
mod cargo;
#[path = "clients_support/python.rs"]
mod python;

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use api_types::SandboxWarmPool;
use e2e_tests::{DEADLINE, Env, EnvOptions, create_template_and_pools, install_crds, wait_for};
use kube::Api;

/// The extensions controller binary of this build, built first if needed (cheap when fresh).
fn extensions_controller_binary() -> PathBuf {
    cargo::cargo_ok(&[
        "build",
        "--quiet",
        "-p",
        "extensions-controller",
        "--bin",
        "extensions-controller",
    ]);
    // target/<profile>/deps/<this test> -> target/<profile>/extensions-controller
    let exe = std::env::current_exe().expect("test binary path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps");
    profile_dir.join("extensions-controller")
}

/// Kills the child when dropped (also when the test panics).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_claims_from_warm_and_cold_pools_then_deletes() {
    let binary = tokio::task::spawn_blocking(extensions_controller_binary)
        .await
        .expect("build task");
    // Prepare the venv before starting anything that runs on timers.
    tokio::task::spawn_blocking(python::python)
        .await
        .expect("venv task");
    let env = Env::start(EnvOptions::default()).await;
    install_crds(&env.client, api_types::extension_crds()).await;
    let controller = Command::new(&binary)
        .env("KUBECONFIG", env.cluster.kubeconfig_path())
        .args([
            "--leader-elect=false",
            "--enable-webhook=false",
            "--metrics-bind-address=0",
            "--health-probe-bind-address=0",
            "--log-format=text",
        ])
        .env(
            "RUST_LOG",
            std::env::var("E2E_EXT_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));
    let _controller = KillOnDrop(controller);

    create_template_and_pools(
        &env,
        "python-sandbox-template",
        serde_json::json!([{
            "name": "python-runtime",
            "image": "registry.example.invalid/python-runtime-sandbox:latest",
            "ports": [{"containerPort": 8888}],
        }]),
        &[("python-sandbox-warmpool", 1), ("python-cold-pool", 0)],
    )
    .await;
    let pools: Api<SandboxWarmPool> = env.api("default");
    wait_for("a Ready member in the warm pool", DEADLINE, || async {
        let pool = pools.get_opt("python-sandbox-warmpool").await.ok()??;
        let ready = serde_json::to_value(&pool).ok()?["status"]["readyReplicas"].as_i64()?;
        (ready >= 1).then_some(())
    })
    .await;

    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    let run = tokio::task::spawn_blocking(move || {
        let args: Vec<&OsStr> = vec![
            kubeconfig.as_os_str(),
            OsStr::new("python-sandbox-warmpool"),
            OsStr::new("python-cold-pool"),
        ];
        python::run_script("sdk_claim_flow.py", &args, Duration::from_secs(120))
    })
    .await
    .expect("script task");
    assert!(
        run.success,
        "SDK flow failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    for step in [
        "warm create Ready",
        "list and re-attach",
        "warm delete removes claim, sandbox and pod",
        "4 concurrent claims on a 1-member pool each get their own Ready sandbox",
        "cold create Ready with pod labels",
        "cold delete removes claim, sandbox and pod",
        "missing pool raises SandboxWarmPoolNotFoundError",
        "missing template raises SandboxTemplateNotFoundError",
        "shutdown_after_seconds deletes claim, sandbox and pod",
    ] {
        assert!(
            run.stdout
                .lines()
                .any(|l| l.starts_with(&format!("ok {step}"))),
            "step {step:?} missing:\n{}",
            run.stdout
        );
    }
    // After the concurrent claims drained it, the warm pool refills to one Ready member that
    // no claim owns (a pool woken before its cache saw an adoption once stayed empty here).
    wait_for(
        "the warm pool refilled to one Ready member",
        DEADLINE,
        || async {
            let pool = pools.get_opt("python-sandbox-warmpool").await.ok()??;
            let status = serde_json::to_value(&pool).ok()?["status"].clone();
            let sandboxes: Api<api_types::Sandbox> = env.api("default");
            let members = sandboxes
                .list(&kube::api::ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|s| {
                    s.metadata.deletion_timestamp.is_none()
                        && s.metadata.owner_references.iter().flatten().any(|o| {
                            o.controller == Some(true)
                                && o.kind == "SandboxWarmPool"
                                && o.name == "python-sandbox-warmpool"
                        })
                })
                .count();
            (members == 1 && status["readyReplicas"].as_i64() == Some(1)).then_some(())
        },
    )
    .await;
    env.stop().await;
}
