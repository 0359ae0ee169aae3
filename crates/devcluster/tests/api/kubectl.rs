//! kubectl 1.32 against devcluster: apply of the reference CRDs and the example manifests, get
//! with printer columns, get -w, delete. Skipped with a note when kubectl is not on PATH.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{spec_dir, start};

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .expect("run kubectl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_watch_delete() {
    if !kubectl_available() {
        eprintln!("kubectl not on PATH: skipping kubectl_apply_get_watch_delete");
        return;
    }
    let dc = start().await;
    let kc = dc.kubeconfig_path().to_path_buf();
    let spec = spec_dir();
    let run = |args: Vec<String>| {
        let kc = kc.clone();
        async move {
            tokio::task::spawn_blocking(move || {
                let refs: Vec<&str> = args.iter().map(String::as_str).collect();
                kubectl(&kc, &refs)
            })
            .await
            .unwrap()
        }
    };
    let crds = spec.join("reference-crds").display().to_string();
    let (ok, out) = run(vec!["apply".into(), "-f".into(), crds]).await;
    assert!(ok, "{out}");
    for ns in [
        "sandbox-test",
        "hermes-demo",
        "hpa-test",
        "sandbox-agent-demo",
    ] {
        let file = std::env::temp_dir().join(format!("dc-ns-{ns}-{}.yaml", std::process::id()));
        std::fs::write(
            &file,
            format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
        )
        .unwrap();
        let (ok, out) = run(vec![
            "apply".into(),
            "-f".into(),
            file.display().to_string(),
        ])
        .await;
        assert!(ok, "{out}");
    }
    let mut examples: Vec<_> = std::fs::read_dir(spec.join("examples"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    examples.sort();
    let mut applied = 0;
    for (i, ex) in examples.iter().enumerate() {
        let text = std::fs::read_to_string(ex).unwrap();
        let placeholder_name = text.lines().any(|l| {
            let l = l.trim_start();
            (l.starts_with("name:") || l.starts_with("namespace:")) && l.contains("${")
        });
        if placeholder_name {
            continue; // templates whose names are placeholders are not manifests on their own
        }
        // Several examples reuse names: give each one without a namespace its own.
        let mut args = vec!["apply".to_string(), "-f".into(), ex.display().to_string()];
        if !text.contains("\n  namespace:") {
            let ns = format!("ex-{i}");
            let file = std::env::temp_dir().join(format!("dc-ns-{ns}-{}.yaml", std::process::id()));
            std::fs::write(
                &file,
                format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
            )
            .unwrap();
            let (ok, out) = run(vec![
                "apply".into(),
                "-f".into(),
                file.display().to_string(),
            ])
            .await;
            assert!(ok, "{out}");
            args.extend(["-n".to_string(), ns]);
        }
        let (ok, out) = run(args).await;
        assert!(ok, "kubectl apply -f {}: {out}", ex.display());
        applied += 1;
    }
    assert!(applied > 20, "applied {applied} examples");

    let hello = examples
        .iter()
        .position(|p| p.ends_with("hello-world-sandbox__hello-world.yaml"))
        .expect("hello-world example");
    let hello_ns = format!("ex-{hello}");
    let (ok, out) = run(vec![
        "get".into(),
        "sandboxes".into(),
        "-n".into(),
        hello_ns.clone(),
    ])
    .await;
    assert!(ok, "{out}");
    let header = out.lines().next().unwrap_or("");
    for col in ["NAME", "READY", "REASON", "AGE"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(out.contains("hello-world"), "{out}");
    let (ok, out) = run(vec!["get".into(), "swp".into(), "-A".into()]).await;
    assert!(ok && out.contains("DESIRED"), "{out}");

    // get -w sees a change made while it watches.
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", &kc)
        .args(["get", "configmaps", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("watched-later") {
                return true;
            }
            if Instant::now() > deadline {
                break;
            }
        }
        false
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (ok, out) = run(vec![
        "create".into(),
        "configmap".into(),
        "watched-later".into(),
        "--from-literal=a=b".into(),
        "--dry-run=client".into(),
        "-o".into(),
        "yaml".into(),
    ])
    .await;
    assert!(ok, "{out}");
    let file = std::env::temp_dir().join(format!("dc-cm-{}.yaml", std::process::id()));
    std::fs::write(&file, out).unwrap();
    let (ok, out) = run(vec![
        "apply".into(),
        "-f".into(),
        file.display().to_string(),
    ])
    .await;
    assert!(ok, "{out}");
    let seen = tokio::task::spawn_blocking(move || reader.join().unwrap_or(false))
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen, "kubectl get -w printed the new configmap");

    let (ok, out) = run(vec![
        "delete".into(),
        "sandbox".into(),
        "hello-world".into(),
        "-n".into(),
        hello_ns.clone(),
    ])
    .await;
    assert!(ok && out.contains("deleted"), "{out}");
    let (ok, out) = run(vec![
        "get".into(),
        "sandbox".into(),
        "hello-world".into(),
        "-n".into(),
        hello_ns,
    ])
    .await;
    assert!(!ok && out.contains("NotFound"), "{out}");
}
