//! A pool whose template does not exist says so (a Warning Event naming the template), shows
//! `0` ready rather than a blank, and fills once the template appears.

use crate::harness;

use api_types::SandboxWarmPool;
use e2e_tests::{DEADLINE, wait_for};
use extensions_controller::Options;
use harness::ExtEnv;
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use kube::core::{ApiResource, DynamicObject};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_without_its_template_warns_shows_zero_and_fills_once_it_exists() {
    let ext = ExtEnv::start(Options::default()).await;
    ext.create_pool("orphan", "absent", 2).await;

    let events = ext.api::<Event>();
    let event = wait_for("TemplateNotFound event on the pool", DEADLINE, || async {
        let listed = events.list(&ListParams::default()).await.ok()?;
        listed.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("TemplateNotFound")
                && e.involved_object.name.as_deref() == Some("orphan")
        })
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let message = event.message.unwrap_or_default();
    assert!(
        message.contains("SandboxTemplate \"absent\" not found in namespace \"default\""),
        "{message}"
    );

    // The counts are on the wire as 0 (what `kubectl get swp` prints as READY), not absent.
    let resource = ApiResource::erase::<SandboxWarmPool>(&());
    let raw: Api<DynamicObject> =
        Api::namespaced_with(ext.env.client.clone(), "default", &resource);
    let status = wait_for("the pool's status", DEADLINE, || async {
        let pool = raw.get("orphan").await.ok()?;
        let status = pool.data.get("status")?.clone();
        status.get("readyReplicas").is_some().then_some(status)
    })
    .await;
    assert_eq!(status["readyReplicas"], json!(0), "{status}");
    assert_eq!(status["replicas"], json!(0), "{status}");
    // What a user sees: READY 0, not a blank (where kubectl is installed).
    let kubeconfig = ext.env.cluster.kubeconfig_path().to_path_buf();
    let table = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "swp", "orphan"])
            .output()
    })
    .await
    .unwrap();
    match table {
        Ok(out) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let row: Vec<&str> = text
                .lines()
                .find(|l| l.starts_with("orphan "))
                .unwrap_or_else(|| panic!("no row for the pool:\n{text}"))
                .split_whitespace()
                .collect();
            assert_eq!(
                &row[..3],
                ["orphan", "0", "2"],
                "NAME READY DESIRED:\n{text}"
            );
        }
        Ok(out) => panic!(
            "kubectl get swp failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(error) => eprintln!("kubectl not available ({error}): READY column not checked"),
    }

    ext.create_template("absent", json!({})).await;
    ext.wait_pool_ready("orphan", 2).await;
    ext.stop().await;
}
