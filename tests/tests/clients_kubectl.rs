//! The real kubectl against devcluster (with the core controller where a test needs it):
//! apply of our CRDs and of the users' example manifests, `get` with our printer columns and
//! short names, `get -w`, `describe`, `scale`, `delete` with cascading.

#[path = "clients_support/cargo.rs"]
mod cargo;
#[path = "clients_support/kubectl.rs"]
mod kubectl;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use e2e_tests::{DEADLINE, Env, EnvOptions, GC_DEADLINE, wait_for};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::Resource;
use kube::api::{Api, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kubectl::{Kubectl, headers, row};

fn crd_dir() -> String {
    cargo::workspace_root()
        .join("deploy/crds")
        .display()
        .to_string()
}

/// Applies `deploy/crds` and waits until kubectl can use them.
fn apply_crds(k: &Kubectl) {
    let out = k.ok(&["apply", "-f", &crd_dir()]);
    for plural in [
        "sandboxes",
        "sandboxclaims",
        "sandboxtemplates",
        "sandboxwarmpools",
    ] {
        assert!(out.contains(plural), "apply output names {plural}: {out}");
    }
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=20s",
        "crd/sandboxes.agents.x-k8s.io",
        "crd/sandboxclaims.extensions.agents.x-k8s.io",
        "crd/sandboxtemplates.extensions.agents.x-k8s.io",
        "crd/sandboxwarmpools.extensions.agents.x-k8s.io",
    ]);
}

/// `kubectl explain PATH`, retried until it succeeds or [`DEADLINE`] passes: kube-apiserver
/// publishes a new CRD's OpenAPI a moment after the CRD is Established (seen on the real ground:
/// `couldn't find resource for "extensions.agents.x-k8s.io/v1beta1, Resource=sandboxclaims"`
/// right after `kubectl wait --for=condition=Established`).
fn explain(k: &Kubectl, path: &str) -> String {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let out = k.run(&["explain", path]);
        if out.success {
            return out.stdout;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "kubectl explain {path} failed for {DEADLINE:?}\nstdout:\n{}\nstderr:\n{}",
            out.stdout,
            out.stderr
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

/// The value a user would give each `${VAR}` of the examples (they are applied after envsubst).
fn substitute(text: &str) -> String {
    [
        ("${SANDBOX_NAMESPACE}", "default"),
        ("${SANDBOX_TEMPLATE_NAME}", "python-sandbox-template"),
        ("${SANDBOX_WARMPOOL_NAME}", "python-sandbox-warmpool"),
        ("${PYTHON_VERSION}", "3.11"),
        ("${IMAGE}", "registry.example.invalid/sandbox:1"),
        ("${AGENT_IMAGE}", "registry.example.invalid/agent:1"),
    ]
    .iter()
    .fold(text.to_owned(), |t, (var, value)| t.replace(var, value))
}

/// The namespaces a manifest names (`namespace: X` lines).
fn declared_namespaces(manifest: &str) -> Vec<String> {
    manifest
        .lines()
        .filter_map(|l| {
            let l = l.split('#').next()?.trim();
            l.strip_prefix("namespace:").map(|ns| ns.trim().to_owned())
        })
        .collect()
}

/// `kind/name` -> (labels, spec, data) of every object of `manifest`, as the server has them.
fn specs(k: &Kubectl, ns: &str, manifest: &str) -> BTreeMap<String, serde_json::Value> {
    let out = k.ok_with_input(&["get", "-n", ns, "-f", "-", "-o", "json"], Some(manifest));
    let parsed: serde_json::Value = serde_json::from_str(&out).expect("kubectl get -o json");
    let items = match parsed.get("items") {
        Some(serde_json::Value::Array(items)) => items.clone(),
        _ => vec![parsed],
    };
    items
        .into_iter()
        .map(|o| {
            let key = format!("{}/{}", o["kind"], o["metadata"]["name"]);
            let value = serde_json::json!([o["metadata"]["labels"], o["spec"], o["data"]]);
            (key, value)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_crds_and_every_example_manifest() {
    let Some(examples) = reference_spec::examples() else {
        return;
    };
    let env = Env::start(EnvOptions {
        sandbox_controller: false,
        ..EnvOptions::default()
    })
    .await;
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    blocking(move || {
        let k = Kubectl::new(&kubeconfig);
        apply_crds(&k);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&examples)
            .unwrap_or_else(|e| panic!("examples at {}: {e}", examples.display()))
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        assert!(
            files.len() > 30,
            "expected the spec's examples, found {files:?}"
        );
        // Some examples reuse a name in `default` with different content (two Sandboxes
        // `sandbox-python-example`, whose volumeClaimTemplates are immutable), so each file
        // gets a namespace of its own in place of `default`.
        let manifests: Vec<(PathBuf, String, String)> = files
            .into_iter()
            .enumerate()
            .map(|(i, p)| {
                let text = std::fs::read_to_string(&p).expect("read example");
                let own = format!("example-{i}");
                let text =
                    substitute(&text).replace("namespace: default", &format!("namespace: {own}"));
                assert!(!text.contains("${"), "unknown variable in {}", p.display());
                // kubectl -n must match the namespace a manifest names, if any.
                let ns = declared_namespaces(&text).into_iter().next().unwrap_or(own);
                (p, ns, text)
            })
            .collect();
        // Users create the namespaces the examples live in first (kubectl sends these
        // requests as protobuf).
        let namespaces: BTreeSet<String> = manifests
            .iter()
            .flat_map(|(_, ns, t)| std::iter::once(ns.clone()).chain(declared_namespaces(t)))
            .collect();
        for ns in &namespaces {
            let made = k.ok(&["create", "namespace", ns]);
            assert_eq!(made.trim(), format!("namespace/{ns} created"));
        }
        for (path, ns, text) in &manifests {
            let out = k.ok_with_input(&["apply", "-n", ns, "-f", "-"], Some(text));
            assert!(
                !out.is_empty() && out.lines().all(|l| l.ends_with(" created")),
                "{}: apply creates every object: {out}",
                path.display()
            );
            // Applying the same manifest again leaves every object as it was. (kubectl may
            // still print "configured": it diffs client-side, and server-defaulted fields in
            // lists, such as a container port's protocol, always differ from the manifest.)
            let before = specs(&k, ns, text);
            let again = k.ok_with_input(&["apply", "-n", ns, "-f", "-"], Some(text));
            assert!(
                again
                    .lines()
                    .all(|l| l.ends_with(" unchanged") || l.ends_with(" configured")),
                "{}: second apply: {again}",
                path.display()
            );
            assert_eq!(
                specs(&k, ns, text),
                before,
                "{}: second apply changed objects",
                path.display()
            );
        }
        let pools = k.ok(&["get", "swp", "-A", "--no-headers"]);
        assert_eq!(pools.lines().count(), 8, "every example warm pool: {pools}");
    })
    .await;
    env.stop().await;
}

const SANDBOX: &str = r#"
apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: kc-box
  labels: {suite: kubectl}
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: busybox:1.36
"#;

const POOL: &str = r#"
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: kc-pool
spec:
  replicas: 2
  sandboxTemplateRef: {name: kc-template}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_shows_printer_columns_and_short_names() {
    let env = Env::start(EnvOptions::default()).await;
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    blocking(move || {
        let k = Kubectl::new(&kubeconfig);
        apply_crds(&k);
        k.ok_with_input(&["apply", "-f", "-"], Some(SANDBOX));
        k.ok_with_input(&["apply", "-f", "-"], Some(POOL));

        let sandboxes = k.ok(&["get", "sandboxes"]);
        assert_eq!(
            headers(&sandboxes),
            ["NAME", "READY", "REASON", "AGE"],
            "{sandboxes}"
        );
        // The core controller runs the pod on a simulated node; the row follows the condition.
        let start = std::time::Instant::now();
        loop {
            let table = k.ok(&["get", "sandbox", "kc-box"]);
            if row(&table, "kc-box")
                .is_some_and(|r| r["READY"] == "True" && r["REASON"] == "DependenciesReady")
            {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "kc-box never shown Ready: {table}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let pools = k.ok(&["get", "swp"]);
        assert_eq!(
            headers(&pools),
            ["NAME", "READY", "DESIRED", "AGE"],
            "{pools}"
        );
        let pool = row(&pools, "kc-pool").expect("kc-pool row");
        assert_eq!(pool["DESIRED"], "2", "DESIRED is spec.replicas: {pools}");
        assert_eq!(
            pool["READY"], "",
            "no controller counts members here: {pools}"
        );
        // Full resource names, singular names and short names resolve the same kinds.
        for name in [
            "sandboxwarmpools",
            "sandboxwarmpool",
            "swp",
            "sandboxwarmpools.extensions.agents.x-k8s.io",
        ] {
            assert!(
                row(&k.ok(&["get", name]), "kc-pool").is_some(),
                "kubectl get {name}"
            );
        }
        let templates = k.ok(&["get", "sandboxtemplates"]);
        assert!(templates.is_empty(), "no templates yet: {templates}");
        let claims = k.run(&["get", "sandboxclaims"]);
        assert!(claims.stderr.contains("No resources found"), "{claims:?}");
        // Selectors and output formats.
        let by_label = k.ok(&["get", "sandboxes", "-l", "suite=kubectl", "-o", "name"]);
        assert_eq!(by_label.trim(), "sandbox.agents.x-k8s.io/kc-box");
        let none = k.ok(&["get", "sandboxes", "-l", "suite=other", "-o", "name"]);
        assert_eq!(none.trim(), "");
        let by_field = k.ok(&[
            "get",
            "sandboxes",
            "--field-selector",
            "metadata.name=kc-box",
            "-o",
            "name",
        ]);
        assert_eq!(by_field.trim(), "sandbox.agents.x-k8s.io/kc-box");
        let replicas = k.ok(&["get", "swp", "kc-pool", "-o", "jsonpath={.spec.replicas}"]);
        assert_eq!(replicas, "2");
        let wide = k.ok(&["get", "sandboxes", "-o", "wide"]);
        assert_eq!(headers(&wide), ["NAME", "READY", "REASON", "AGE"], "{wide}");
        let missing = k.run(&["get", "sandbox", "no-such-box"]);
        assert!(!missing.success, "{missing:?}");
        assert!(
            missing
                .stderr
                .contains(r#"sandboxes.agents.x-k8s.io "no-such-box" not found"#),
            "{missing:?}"
        );
    })
    .await;
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_watch_prints_each_change() {
    let env = Env::start(EnvOptions {
        sandbox_controller: false,
        ..EnvOptions::default()
    })
    .await;
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    blocking(move || {
        let k = Kubectl::new(&kubeconfig);
        apply_crds(&k);
        k.ok_with_input(&["apply", "-f", "-"], Some(POOL));

        let mut plain = k.spawn_lines(&["get", "swp", "-w"]);
        let header = plain.wait_line("header", DEADLINE, |l| l.starts_with("NAME"));
        assert_eq!(headers(&header), ["NAME", "READY", "DESIRED", "AGE"]);
        plain.wait_line("the existing pool", DEADLINE, |l| l.starts_with("kc-pool "));
        let mut events = k.spawn_lines(&["get", "swp", "-w", "--output-watch-events"]);
        events.wait_line("ADDED of the existing pool", DEADLINE, |l| {
            l.starts_with("ADDED") && l.contains("kc-pool ")
        });

        k.ok(&["scale", "swp", "kc-pool", "--replicas=5"]);
        let line = plain.wait_line("the scaled pool", DEADLINE, |l| {
            row(&format!("{header}\n{l}"), "kc-pool").is_some_and(|r| r["DESIRED"] == "5")
        });
        assert!(line.starts_with("kc-pool"), "{line}");
        events.wait_line("MODIFIED", DEADLINE, |l| {
            l.starts_with("MODIFIED") && l.contains("kc-pool ")
        });

        k.ok_with_input(
            &["apply", "-f", "-"],
            Some(&POOL.replace("kc-pool", "kc-pool-2")),
        );
        plain.wait_line("the new pool", DEADLINE, |l| l.starts_with("kc-pool-2 "));
        events.wait_line("ADDED of the new pool", DEADLINE, |l| {
            l.starts_with("ADDED") && l.contains("kc-pool-2 ")
        });
        k.ok(&["delete", "swp", "kc-pool-2"]);
        events.wait_line("DELETED", DEADLINE, |l| {
            l.starts_with("DELETED") && l.contains("kc-pool-2 ")
        });
    })
    .await;
    env.stop().await;
}

/// Creates ConfigMap `owner` and `child` owned by it.
async fn owner_and_child(api: &Api<ConfigMap>, owner: &str, child: &str) {
    let made = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": owner}})).unwrap(),
        )
        .await
        .expect("owner created");
    let child_cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": child, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": owner,
            "uid": made.metadata.uid, "blockOwnerDeletion": true,
        }]},
    }))
    .unwrap();
    api.create(&PostParams::default(), &child_cm)
        .await
        .expect("child created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_describe_scale_and_cascading_delete() {
    let env = Env::start(EnvOptions::default()).await;
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    let k = blocking(move || {
        let k = Kubectl::new(&kubeconfig);
        apply_crds(&k);
        k.ok_with_input(&["apply", "-f", "-"], Some(SANDBOX));
        k.ok_with_input(&["apply", "-f", "-"], Some(POOL));
        k
    })
    .await;
    let pods: Api<Pod> = env.api("default");
    let pod_of_box = || async {
        pods.list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|p| {
                p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.kind == "Sandbox" && o.name == "kc-box")
            })
    };
    wait_for("the Sandbox's pod", DEADLINE, pod_of_box).await;
    // An event about the Sandbox as controllers write them: events.k8s.io/v1 through
    // kube-runtime's Recorder. kubectl describe reads core/v1 events by involvedObject.
    let sandbox = env
        .sandboxes("default")
        .get("kc-box")
        .await
        .expect("kc-box");
    let recorder = Recorder::new(
        env.client.clone(),
        Reporter {
            controller: "e2e-recorder".into(),
            instance: Some("e2e-0".into()),
        },
    );
    recorder
        .publish(
            &Event {
                type_: EventType::Warning,
                reason: "DescribeCheck".into(),
                note: Some("written through events.k8s.io/v1".into()),
                action: "Check".into(),
                secondary: None,
            },
            &sandbox.object_ref(&()),
        )
        .await
        .expect("event published");

    let k = blocking(move || {
        let described = k.ok(&["describe", "sandbox", "kc-box"]);
        let events = described
            .split_once("\nEvents:")
            .map(|(_, tail)| tail)
            .unwrap_or_else(|| panic!("describe has an Events section:\n{described}"));
        let row = events
            .lines()
            .find(|l| l.contains("DescribeCheck"))
            .unwrap_or_else(|| panic!("describe lists the event:\n{described}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells[0], "Warning", "{row}");
        assert!(
            cells.contains(&"e2e-recorder"),
            "From is the reporting controller: {row}"
        );
        assert!(
            row.ends_with("written through events.k8s.io/v1"),
            "Message is the note: {row}"
        );
        for needle in [
            "Name:",
            "kc-box",
            "Namespace:",
            "default",
            "API Version:",
            "agents.x-k8s.io/v1beta1",
            "Kind:",
            "Sandbox",
            "Pod Template:",
        ] {
            assert!(
                described.contains(needle),
                "describe shows {needle:?}:\n{described}"
            );
        }
        // Imperative create (protobuf on the wire) and jsonpath output of a built-in kind.
        k.ok(&["create", "configmap", "kc-cm", "--from-literal=a=b"]);
        assert_eq!(
            k.ok(&["get", "configmap", "kc-cm", "-o", "jsonpath={.data.a}"]),
            "b"
        );
        let scaled = k.ok(&["scale", "swp", "kc-pool", "--replicas=3"]);
        assert_eq!(
            scaled.trim(),
            "sandboxwarmpool.extensions.agents.x-k8s.io/kc-pool scaled"
        );
        assert_eq!(
            k.ok(&["get", "swp", "kc-pool", "-o", "jsonpath={.spec.replicas}"]),
            "3"
        );
        let bad = k.run(&["scale", "swp", "kc-pool", "--replicas=-1"]);
        assert!(!bad.success, "negative replicas rejected: {bad:?}");
        // kubectl delete waits for the object to be gone.
        let deleted = k.ok(&["delete", "sandbox", "kc-box"]);
        assert_eq!(
            deleted.trim(),
            r#"sandbox.agents.x-k8s.io "kc-box" deleted"#
        );
        k
    })
    .await;
    wait_for(
        "the pod collected with its Sandbox",
        GC_DEADLINE,
        || async { pod_of_box().await.is_none().then_some(()) },
    )
    .await;

    let cms: Api<ConfigMap> = env.api("default");
    owner_and_child(&cms, "fg-owner", "fg-child").await;
    owner_and_child(&cms, "or-owner", "or-child").await;
    blocking(move || {
        k.ok(&["delete", "configmap", "fg-owner", "--cascade=foreground"]);
        k.ok(&["delete", "configmap", "or-owner", "--cascade=orphan"]);
    })
    .await;
    wait_for("foreground delete removed the child", DEADLINE, || async {
        cms.get_opt("fg-child").await.ok()?.is_none().then_some(())
    })
    .await;
    let orphan = wait_for(
        "orphaned child loses its owner reference",
        DEADLINE,
        || async {
            cms.get_opt("or-child").await.ok()?.filter(|c| {
                c.metadata
                    .owner_references
                    .as_ref()
                    .is_none_or(|o| o.is_empty())
            })
        },
    )
    .await;
    assert_eq!(orphan.metadata.name.as_deref(), Some("or-child"));
    env.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_the_release_manifests() {
    // A bare cluster: no CRDs, no controllers, as a user's cluster before the install (on
    // either ground).
    let cluster = e2e_tests::Cluster::start(devcluster::Config::ephemeral()).await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    blocking(move || {
        let dist = tempfile::tempdir().expect("temp dir");
        let out = dist.path().display().to_string();
        cargo::cargo_ok(&[
            "run",
            "--quiet",
            "-p",
            "xtask",
            "--",
            "release",
            "--no-images",
            "--out",
            &out,
        ]);
        let k = Kubectl::new(&kubeconfig);
        let file = |name: &str| dist.path().join(name).display().to_string();
        // Core alone, then the extensions on top: every object is new (the namespace may
        // exist already: devcluster starts with agent-sandbox-system, a real cluster does not).
        for name in ["sandbox.yaml", "extensions.yaml"] {
            let applied = k.ok(&["apply", "-f", &file(name)]);
            for line in applied.lines() {
                assert!(
                    line.ends_with(" created") || line.starts_with("namespace/"),
                    "{name}: {line}\n{applied}"
                );
            }
        }
        // The combined manifest is the same objects.
        let combined = k.ok(&["apply", "-f", &file("sandbox-with-extensions.yaml")]);
        assert!(
            combined.lines().all(|l| l.ends_with(" unchanged")),
            "sandbox-with-extensions.yaml after the two parts: {combined}"
        );
        k.ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=20s",
            "crd",
            "--all",
        ]);
        let deployments = k.ok(&[
            "get",
            "deployments",
            "-n",
            "agent-sandbox-system",
            "-o",
            "name",
        ]);
        let names: BTreeSet<&str> = deployments.lines().collect();
        assert_eq!(
            names,
            BTreeSet::from([
                "deployment.apps/extensions-controller",
                "deployment.apps/sandbox-controller"
            ])
        );
        // The controllers' RBAC lets them do their work (SubjectAccessReview-free check:
        // the rules exist and name our resources).
        let roles = k.ok(&[
            "get",
            "clusterrole",
            "agent-sandbox-controller",
            "-o",
            "json",
        ]);
        assert!(roles.contains("sandboxes"), "{roles}");
        // And a user can create a Sandbox right away.
        k.ok_with_input(&["apply", "-f", "-"], Some(SANDBOX));
        assert_eq!(
            k.ok(&["get", "sandboxes", "-o", "name"]).trim(),
            "sandbox.agents.x-k8s.io/kc-box"
        );
    })
    .await;
    cluster.shutdown().await;
}

/// `kubectl explain` shows the descriptions generated from the API types' doc comments, for
/// every field of ours (the embedded core types are documented by `kubectl explain pod.spec`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_describes_every_field_of_ours() {
    let env = Env::start(EnvOptions {
        sandbox_controller: false,
        ..EnvOptions::default()
    })
    .await;
    let kubeconfig = env.cluster.kubeconfig_path().to_path_buf();
    blocking(move || {
        let k = Kubectl::new(&kubeconfig);
        apply_crds(&k);
        let root = explain(&k, "sandbox");
        assert!(
            root.contains("A Sandbox is one isolated, stateful Pod"),
            "{root}"
        );
        for (path, expected) in [
            ("sandbox.spec", "What the sandbox runs, and when it stops."),
            ("sandbox.status", "Observed state of the sandbox"),
            (
                "sandboxclaim.spec",
                "Which warm pool to take a sandbox from",
            ),
            ("sandboxclaim.spec.lifecycle", "When the claim expires"),
            ("sandboxwarmpool.spec", "How many ready sandboxes to keep"),
            (
                "sandboxtemplate.spec",
                "The sandboxes made from this template",
            ),
        ] {
            let out = explain(&k, path);
            assert!(out.contains(expected), "kubectl explain {path}:\n{out}");
            assert!(
                !out.contains("<no description>"),
                "a field of {path} has no description:\n{out}"
            );
        }
    })
    .await;
    env.stop().await;
}
