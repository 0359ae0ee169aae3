//! kubectl 1.32 against devcluster: apply of the reference CRDs and the example manifests, get
//! with printer columns, get -w, create (protobuf bodies), delete. Skipped with a note when
//! kubectl is not on PATH, or the reference files are absent (`reference-spec`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::start;

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs kubectl on a blocking thread; returns success and stdout+stderr.
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String) {
    let kubeconfig = kubeconfig.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(&args)
            .output()
            .expect("run kubectl");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

/// Whether the manifest's name or namespace is a `${PLACEHOLDER}` (a template, not a manifest).
fn has_placeholder_name(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        (l.starts_with("name:") || l.starts_with("namespace:")) && l.contains("${")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_get_watch_delete() {
    if !kubectl_available() {
        eprintln!("kubectl not on PATH: skipping kubectl_apply_get_watch_delete");
        return;
    }
    let Some(examples_dir) = reference_spec::examples() else {
        return;
    };
    let Some(crds) = reference_spec::reference_crds() else {
        return;
    };
    let dc = start().await;
    let kc = dc.kubeconfig_path().to_path_buf();
    let crds = crds.display().to_string();
    let (ok, out) = kubectl(&kc, &["apply", "-f", &crds]).await;
    assert!(ok, "{out}");
    // `kubectl create namespace` sends a protobuf body.
    for ns in [
        "sandbox-test",
        "hermes-demo",
        "hpa-test",
        "sandbox-agent-demo",
    ] {
        let (ok, out) = kubectl(&kc, &["create", "namespace", ns]).await;
        assert!(ok && out.contains("created"), "{out}");
    }
    let mut examples: Vec<PathBuf> = std::fs::read_dir(&examples_dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    examples.sort();
    let mut applied = 0;
    for (i, ex) in examples.iter().enumerate() {
        let text = std::fs::read_to_string(ex).unwrap();
        if has_placeholder_name(&text) {
            continue;
        }
        let file = ex.display().to_string();
        let mut args = vec!["apply", "-f", &file];
        // Several examples reuse names: each one without a namespace gets its own.
        let ns = format!("ex-{i}");
        if !text.contains("\n  namespace:") {
            let (ok, out) = kubectl(&kc, &["create", "namespace", &ns]).await;
            assert!(ok, "{out}");
            args.extend(["-n", &ns]);
        }
        let (ok, out) = kubectl(&kc, &args).await;
        assert!(ok, "kubectl apply -f {file}: {out}");
        applied += 1;
    }
    assert!(applied > 20, "applied {applied} examples");

    let hello = examples
        .iter()
        .position(|p| p.ends_with("hello-world-sandbox__hello-world.yaml"))
        .expect("hello-world example");
    let hello_ns = format!("ex-{hello}");
    let (ok, out) = kubectl(&kc, &["get", "sandboxes", "-n", &hello_ns]).await;
    assert!(ok, "{out}");
    let header = out.lines().next().unwrap_or("");
    for col in ["NAME", "READY", "REASON", "AGE"] {
        assert!(header.contains(col), "{header}");
    }
    assert!(out.contains("hello-world"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "swp", "-A"]).await;
    assert!(ok && out.contains("DESIRED"), "{out}");

    // get -w lists what exists, then sees a change made while it watches. The second object
    // is created only once the list part has been printed (no sleeping for luck).
    let (ok, out) = kubectl(
        &kc,
        &[
            "create",
            "configmap",
            "watched-before",
            "--from-literal=a=b",
        ],
    )
    .await;
    assert!(ok, "{out}");
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", &kc)
        .args(["get", "configmaps", "-w", "-o", "name"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (listed_tx, listed_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains("watched-before") {
                let _ = listed_tx.send(());
            }
            if line.contains("watched-later") {
                return true;
            }
            if Instant::now() > deadline {
                break;
            }
        }
        false
    });
    let listed = tokio::task::spawn_blocking(move || {
        listed_rx.recv_timeout(Duration::from_secs(15)).is_ok()
    })
    .await
    .unwrap();
    assert!(listed, "kubectl get -w listed the existing configmap");
    let (ok, out) = kubectl(
        &kc,
        &["create", "configmap", "watched-later", "--from-literal=a=b"],
    )
    .await;
    assert!(ok, "{out}");
    let seen = tokio::task::spawn_blocking(move || reader.join().unwrap_or(false))
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(seen, "kubectl get -w printed the new configmap");

    let (ok, out) = kubectl(&kc, &["delete", "sandbox", "hello-world", "-n", &hello_ns]).await;
    assert!(ok && out.contains("deleted"), "{out}");
    let (ok, out) = kubectl(&kc, &["get", "sandbox", "hello-world", "-n", &hello_ns]).await;
    assert!(!ok && out.contains("NotFound"), "{out}");
}

/// The first line's words (a table's column headers).
fn header_words(table: &str) -> Vec<&str> {
    table
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_node_table_and_replica_sets() {
    if !kubectl_available() {
        eprintln!("kubectl not on PATH: skipping kubectl_explain_node_table_and_replica_sets");
        return;
    }
    let dc = start().await;
    let kc = dc.kubeconfig_path().to_path_buf();
    // The repository's own CRDs (the same schemas as the reference's, checked by
    // api-types' schema_parity test), so this test runs on a fresh clone too.
    let crds = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/crds")
        .display()
        .to_string();
    let (ok, out) = kubectl(&kc, &["apply", "-f", &crds]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd",
            "--all",
        ],
    )
    .await;
    assert!(ok, "{out}");

    // kubectl explain reads the CRD's schema from /openapi/v3, which kube-apiserver publishes
    // a moment after the CRD is Established (devcluster at once).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let (ok, out) = kubectl(&kc, &["explain", "sandbox.spec"]).await;
        if ok {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{out}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    };
    assert!(out.contains("KIND:       Sandbox"), "{out}");
    assert!(out.contains("GROUP:      agents.x-k8s.io"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("podTemplate") && l.contains("-required-")),
        "{out}"
    );
    let (ok, out) = kubectl(
        &kc,
        &["explain", "sandboxwarmpool.spec.sandboxTemplateRef.name"],
    )
    .await;
    assert!(ok && out.contains("FIELD: name <string>"), "{out}");
    let (ok, out) = kubectl(&kc, &["explain", "sandbox.spec.nothing"]).await;
    assert!(
        !ok && out.contains("field \"nothing\" does not exist"),
        "{out}"
    );

    // kubectl get nodes: NAME STATUS ROLES AGE VERSION.
    let (ok, out) = kubectl(&kc, &["get", "nodes"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        header_words(&out),
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("no node row: {out}"))
        .split_whitespace()
        .collect();
    assert_eq!((row[1], row[2]), ("Ready", "<none>"), "{out}");
    // The version is the simulated kubelet's: devcluster's says v1.x, kwok's "fake".
    if super::devcluster_only("the nodes' kubelet version", "kwok's nodes report `fake`") {
        assert!(row[0].starts_with("devcluster-node-"), "{out}");
        assert!(row[4].starts_with("v1."), "{out}");
    }
    let (ok, out) = kubectl(&kc, &["get", "nodes", "-o", "wide"]).await;
    assert!(ok && header_words(&out).contains(&"INTERNAL-IP"), "{out}");

    // ReplicaSets are stored (no controller on devcluster), so get all and describe deployment
    // find them. The ReplicaSet selects other Pods than the Deployment: on a real cluster the
    // Deployment controller would adopt a matching one and set its replicas.
    let manifest = std::env::temp_dir().join(format!("rs-{}.yaml", std::process::id()));
    std::fs::write(
        &manifest,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: nginx}]}\n---\napiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: web-1, labels: {app: solo}}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: solo}}\n  template:\n    metadata: {labels: {app: solo}}\n    spec: {containers: [{name: c, image: nginx}]}\n",
    )
    .unwrap();
    let (ok, out) = kubectl(&kc, &["apply", "-f", &manifest.display().to_string()]).await;
    let _ = std::fs::remove_file(&manifest);
    assert!(ok, "{out}");
    let (ok, out) = kubectl(&kc, &["get", "rs"]).await;
    assert!(ok, "{out}");
    assert_eq!(
        header_words(&out),
        ["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        "{out}"
    );
    let (ok, out) = kubectl(&kc, &["get", "all"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("replicaset.apps/web-1"), "{out}");
    assert!(out.contains("deployment.apps/web"), "{out}");
    let (ok, out) = kubectl(&kc, &["describe", "deployment", "web"]).await;
    assert!(
        ok && out.contains("Selector:") && out.contains("app=web"),
        "{out}"
    );
    let (ok, out) = kubectl(&kc, &["scale", "rs", "web-1", "--replicas=3"]).await;
    assert!(ok, "{out}");
    let (ok, out) = kubectl(
        &kc,
        &["get", "rs", "web-1", "-o", "jsonpath={.spec.replicas}"],
    )
    .await;
    assert!(ok && out == "3", "{out}");
}
