//! The Helm chart with the real `helm` (v3, built from the Go module proxy at the version
//! pinned in upstream/helm/go.mod): `helm lint`, and `helm template` of the packaged chart
//! compared object by object with the release manifests of the same version and registry, plus
//! what values do (every flag, the reference chart's keys, digests, monitoring objects).
//!
//! Needs Go (to build helm once; cached under target/upstream/); `XTASK_SKIP_HELM=1` skips.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;
use xtask::chart::flags::{controllers, value_key};
use xtask::chart::{ChartInputs, KEEP_ANNOTATION, chart_dir, drift, package, package_file_name};
use xtask::manifest::parse_documents;
use xtask::release::{ReleaseOptions, render_release};
use xtask::workspace::deploy_dir;

const VERSION: &str = "v1.2.3";
const REGISTRY: &str = "registry.test/agent-sandbox";

fn skipped() -> bool {
    if std::env::var_os("XTASK_SKIP_HELM").is_some() {
        eprintln!("XTASK_SKIP_HELM is set: helm tests skipped");
        return true;
    }
    false
}

fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| xtask::gotools::HELM.binary().expect("helm builds"))
}

/// The chart packaged for VERSION and REGISTRY, once per test binary, in Cargo's scratch
/// directory for integration tests (`target/tmp`, rewritten by each run): a temporary directory
/// held in a static is never dropped, and left one `.tmp*` directory in /tmp per run.
fn packaged() -> &'static Path {
    static PACKAGE: OnceLock<PathBuf> = OnceLock::new();
    PACKAGE.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("chart-test-package");
        std::fs::create_dir_all(&dir).unwrap();
        let options = ReleaseOptions::parse(VERSION, REGISTRY).unwrap();
        let bytes = package(&chart_dir(), &options.chart_inputs(), 1_700_000_000).unwrap();
        let path = dir.join(package_file_name(VERSION));
        std::fs::write(&path, bytes).unwrap();
        path
    })
}

fn helm_run(args: &[&str]) -> Output {
    Command::new(helm())
        .args(args)
        .env(
            "HELM_CACHE_HOME",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("xtask-helm-cache"),
        )
        .env(
            "HELM_CONFIG_HOME",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("xtask-helm-config"),
        )
        .output()
        .expect("helm runs")
}

/// `helm template` of the packaged chart with `args`; the rendered documents.
fn template(args: &[&str]) -> Vec<Value> {
    let chart = packaged().to_str().unwrap();
    let mut all = vec!["template", "agent-sandbox", chart];
    all.extend_from_slice(args);
    let output = helm_run(&all);
    assert!(
        output.status.success(),
        "helm {all:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    parse_documents(&String::from_utf8(output.stdout).unwrap(), "helm template").unwrap()
}

/// The error of a `helm template` that must fail.
fn template_error(args: &[&str]) -> String {
    let chart = packaged().to_str().unwrap();
    let mut all = vec!["template", "agent-sandbox", chart];
    all.extend_from_slice(args);
    let output = helm_run(&all);
    assert!(!output.status.success(), "helm {all:?} succeeded");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn key(object: &Value) -> String {
    format!(
        "{} {} {}/{}",
        object["apiVersion"].as_str().unwrap_or_default(),
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["namespace"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn by_key(objects: Vec<Value>) -> BTreeMap<String, Value> {
    let mut map = BTreeMap::new();
    for object in objects {
        let key = key(&object);
        assert!(map.insert(key.clone(), object).is_none(), "{key} twice");
    }
    map
}

/// The chart's objects with the one documented difference taken out: the CRDs' keep
/// annotation, which must be there.
fn without_keep(mut objects: BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    for (key, object) in objects.iter_mut() {
        if object["kind"] != "CustomResourceDefinition" {
            continue;
        }
        let annotations = object["metadata"]["annotations"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("{key} has no annotations"));
        assert_eq!(
            annotations.remove(KEEP_ANNOTATION.0),
            Some(Value::String(KEEP_ANNOTATION.1.into())),
            "{key}"
        );
        if annotations.is_empty() {
            object["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
    }
    objects
}

fn release_objects(file: &str) -> BTreeMap<String, Value> {
    let options = ReleaseOptions::parse(VERSION, REGISTRY).unwrap();
    let manifests = render_release(&deploy_dir(), &options).unwrap();
    let text = manifests
        .files()
        .into_iter()
        .find(|(name, _)| *name == file)
        .unwrap()
        .1
        .to_string();
    by_key(parse_documents(&text, file).unwrap())
}

fn assert_same_objects(chart: BTreeMap<String, Value>, release: BTreeMap<String, Value>) {
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        release.keys().collect::<Vec<_>>(),
        "the same set of objects"
    );
    for (key, expected) in &release {
        assert_eq!(&chart[key], expected, "{key}");
    }
}

#[test]
fn the_committed_chart_is_what_the_generator_writes() {
    let stale = drift(&chart_dir(), &ChartInputs::committed()).unwrap();
    assert!(stale.is_empty(), "run `cargo xtask chart`: {stale:?}");
}

#[test]
fn helm_lint_passes_for_the_source_and_the_package() {
    if skipped() {
        return;
    }
    for chart in [chart_dir(), packaged().to_path_buf()] {
        for extra in [&[][..], &["--set", "extensions.enabled=false"][..]] {
            let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
            args.extend_from_slice(extra);
            let output = helm_run(&args);
            assert!(
                output.status.success(),
                "helm {args:?}: {}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}

#[test]
fn default_rendering_is_sandbox_with_extensions_yaml() {
    if skipped() {
        return;
    }
    assert_same_objects(
        without_keep(by_key(template(&[]))),
        release_objects("sandbox-with-extensions.yaml"),
    );
}

#[test]
fn core_only_rendering_is_sandbox_yaml() {
    if skipped() {
        return;
    }
    assert_same_objects(
        without_keep(by_key(template(&["--set", "extensions.enabled=false"]))),
        release_objects("sandbox.yaml"),
    );
    // The reference's switch does the same.
    assert_same_objects(
        without_keep(by_key(template(&["--set", "controller.extensions=false"]))),
        release_objects("sandbox.yaml"),
    );
}

fn deployment<'a>(objects: &'a [Value], name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no Deployment {name}"))
}

fn args(objects: &[Value], name: &str) -> Vec<String> {
    deployment(objects, name)["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn values_file(dir: &Path, text: &str) -> String {
    let path = dir.join("values.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn every_flag_of_each_controller_is_settable_from_values() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    let controllers = controllers();
    for controller in &controllers {
        text.push_str(&format!("{}:\n  flags:\n", controller.key));
        for flag in controller.value_flags() {
            let key = value_key(&flag.long);
            text.push_str(&format!("    {key}: \"{}-{key}\"\n", controller.binary));
        }
    }
    let objects = template(&["--values", &values_file(dir.path(), &text)]);
    for controller in &controllers {
        let rendered = args(&objects, controller.binary);
        for flag in controller.value_flags() {
            let expected = format!(
                "{}={}-{}",
                flag.long,
                controller.binary,
                value_key(&flag.long)
            );
            assert_eq!(
                rendered.iter().filter(|a| **a == expected).count(),
                1,
                "{expected} in {rendered:?}"
            );
        }
        // The ports stay as the container ports say.
        assert!(rendered.contains(&"--metrics-bind-address=:8080".to_string()));
    }
}

#[test]
fn a_reference_values_file_keeps_working() {
    if skipped() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let values = values_file(
        dir.path(),
        "namespace:\n  create: true\n  name: agent-sandbox-system\n\
         image:\n  tag: v9.9.9\n  pullPolicy: Always\n\
         imagePullSecrets:\n  - name: my-registry-creds\n\
         replicaCount: 2\n\
         podAnnotations:\n  example.com/scrape: \"true\"\n\
         podLabels:\n  team: agents\n  app.kubernetes.io/name: not-me\n\
         resources:\n  limits:\n    cpu: 500m\n    memory: 128Mi\n\
         tolerations:\n  - key: dedicated\n    operator: Exists\n\
         controller:\n  leaderElect: true\n  extensions: true\n  kubeApiQps: -1.0\n\
         \x20 sandboxConcurrentWorkers: 200\n  sandboxWarmPoolMaxBatchSize: 1000000\n\
         \x20 sandboxWarmPoolReadinessGracePeriod: 10m\n  enableTracing: false\n\
         \x20 extraArgs:\n    - --zap-log-level=debug\n    - --sandbox-warm-pool-max-refill-rate=10\n\
         webhookServiceName: agent-sandbox-webhook-service\n\
         metrics:\n  serviceMonitor:\n    enabled: true\n    additionalLabels:\n      release: kube-prometheus-stack\n",
    );
    let objects = template(&["--values", &values]);
    let core = args(&objects, "sandbox-controller");
    let ext = args(&objects, "extensions-controller");
    for (args, flag) in [
        (&core, "--sandbox-concurrent-workers=200"),
        (&core, "--kube-api-qps=-1"),
        (&ext, "--kube-api-qps=-1"),
        (&ext, "--sandbox-warm-pool-max-batch-size=1000000"),
        (&ext, "--sandbox-warm-pool-readiness-grace-period=10m"),
        (&core, "--zap-log-level=debug"),
        (&ext, "--zap-log-level=debug"),
        (&ext, "--sandbox-warm-pool-max-refill-rate=10"),
        (&core, "--leader-elect=true"),
    ] {
        assert!(args.contains(&flag.to_string()), "{flag} in {args:?}");
    }
    assert!(
        !core.iter().any(|a| a.contains("max-refill-rate")),
        "{core:?}"
    );
    assert!(
        !ext.iter().any(|a| a.contains("sandbox-concurrent-workers")),
        "{ext:?}"
    );
    for name in ["sandbox-controller", "extensions-controller"] {
        let deployment = deployment(&objects, name);
        let pod = &deployment["spec"]["template"];
        assert_eq!(deployment["spec"]["replicas"], 2);
        assert_eq!(pod["metadata"]["annotations"]["example.com/scrape"], "true");
        assert_eq!(pod["metadata"]["labels"]["team"], "agents");
        assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], name);
        assert_eq!(
            pod["spec"]["imagePullSecrets"][0]["name"],
            "my-registry-creds"
        );
        assert_eq!(pod["spec"]["tolerations"][0]["key"], "dedicated");
        let container = &pod["spec"]["containers"][0];
        assert_eq!(container["image"], format!("{REGISTRY}/{name}:v9.9.9"));
        assert_eq!(container["imagePullPolicy"], "Always");
        assert_eq!(container["resources"]["limits"]["cpu"], "500m");
        assert!(container["resources"]["requests"].is_null());
    }
    let monitor = objects
        .iter()
        .find(|o| o["kind"] == "ServiceMonitor")
        .expect("ServiceMonitor");
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    // Both metrics Services carry the labels it selects.
    for service in [
        "sandbox-controller-metrics",
        "extensions-controller-metrics",
    ] {
        let object = objects
            .iter()
            .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == service)
            .unwrap();
        for (label, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(
                &object["metadata"]["labels"][label], value,
                "{service} {label}"
            );
        }
    }
}

#[test]
fn reference_keys_without_an_equivalent_fail_with_what_to_do() {
    if skipped() {
        return;
    }
    for (set, needle) in [
        (
            "image.repository=registry.k8s.io/agent-sandbox/agent-sandbox-controller",
            "set image.registry",
        ),
        (
            "controller.sandboxConcurentWorkers=5",
            "controller.sandboxConcurentWorkers is not a flag",
        ),
        ("controller.enableTracing=true", "set tracing.otlpEndpoint"),
        (
            "controller.extraArgs={--api-connections=4}",
            "--api-connections=4 is not a flag",
        ),
        (
            "sandboxController.flags.sandboxClaimConcurrentWorkers=3",
            "is not a flag of sandbox-controller",
        ),
        (
            "sandboxController.image.digest=sha256:abc",
            "is not a digest",
        ),
    ] {
        let error = template_error(&["--set", set]);
        assert!(error.contains(needle), "{set}: {error}");
    }
    // With an endpoint, enableTracing is accepted and the endpoint reaches both controllers.
    let objects = template(&[
        "--set",
        "controller.enableTracing=true",
        "--set",
        "tracing.otlpEndpoint=http://collector:4317",
    ]);
    for name in ["sandbox-controller", "extensions-controller"] {
        let env = &deployment(&objects, name)["spec"]["template"]["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .unwrap()
                .iter()
                .any(|e| e["name"] == "OTEL_EXPORTER_OTLP_ENDPOINT"
                    && e["value"] == "http://collector:4317"),
            "{env}"
        );
    }
}

#[test]
fn a_digest_pins_the_image_and_the_namespace_follows_the_values() {
    if skipped() {
        return;
    }
    let digest = format!("sha256:{}", "a".repeat(64));
    let objects = template(&[
        "--set",
        &format!("extensionsController.image.digest={digest}"),
        "--set",
        "namespace.create=false",
        "--set",
        "namespace.name=",
        "--namespace",
        "team-a",
    ]);
    let image =
        deployment(&objects, "extensions-controller")["spec"]["template"]["spec"]["containers"][0]
            ["image"]
            .clone();
    assert_eq!(
        image,
        format!("{REGISTRY}/extensions-controller:{VERSION}@{digest}")
    );
    assert!(!objects.iter().any(|o| o["kind"] == "Namespace"));
    // The conversion webhooks follow: each controller is told the namespace, and every CRD
    // points at its controller's Service there.
    for name in ["sandbox-controller", "extensions-controller"] {
        assert!(
            args(&objects, name).contains(&"--webhook-namespace=team-a".to_string()),
            "{name}"
        );
    }
    let crds: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
        .collect();
    assert_eq!(crds.len(), 4);
    for crd in crds {
        let service = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"];
        assert_eq!(service["namespace"], "team-a", "{}", key(crd));
        let expected = if crd["spec"]["group"] == "agents.x-k8s.io" {
            "sandbox-controller-webhook"
        } else {
            "extensions-controller-webhook"
        };
        assert_eq!(service["name"], expected, "{}", key(crd));
    }
    for object in &objects {
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, "team-a", "{}", key(object));
        }
        for subject in object["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["namespace"], "team-a", "{}", key(object));
        }
    }
}

#[test]
fn the_prometheus_rule_alerts_for_each_metrics_service() {
    if skipped() {
        return;
    }
    let objects = template(&["--set", "metrics.prometheusRule.enabled=true"]);
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .expect("PrometheusRule");
    let rules = rule["spec"]["groups"][0]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 2);
    for (rule, service) in rules.iter().zip([
        "sandbox-controller-metrics",
        "extensions-controller-metrics",
    ]) {
        assert_eq!(rule["alert"], "AgentSandboxControllerMetricsTargetsDown");
        assert!(
            rule["expr"].as_str().unwrap().contains(&format!(
                "namespace=\"agent-sandbox-system\", service=\"{service}\""
            )),
            "{rule}"
        );
    }
}

#[test]
fn a_webhook_service_name_and_port_reach_the_service_the_crds_and_the_container() {
    if skipped() {
        return;
    }
    let objects = template(&[
        "--set",
        "extensionsController.flags.webhookServiceName=ext-conversion",
        "--set",
        "extensionsController.flags.webhookPort=9555",
    ]);
    let ext = args(&objects, "extensions-controller");
    assert!(
        ext.contains(&"--webhook-service-name=ext-conversion".to_string()),
        "{ext:?}"
    );
    assert!(ext.contains(&"--webhook-port=9555".to_string()), "{ext:?}");
    let core = args(&objects, "sandbox-controller");
    assert!(
        core.contains(&"--webhook-service-name=sandbox-controller-webhook".to_string()),
        "{core:?}"
    );
    assert!(
        core.contains(&"--webhook-port=9443".to_string()),
        "{core:?}"
    );
    assert!(objects.iter().any(|o| o["kind"] == "Service"
        && o["metadata"]["name"] == "ext-conversion"
        && o["spec"]["ports"][0]["targetPort"] == "webhook"));
    assert!(
        !objects
            .iter()
            .any(|o| o["metadata"]["name"] == "extensions-controller-webhook")
    );
    let ports = &deployment(&objects, "extensions-controller")["spec"]["template"]["spec"]["containers"]
        [0]["ports"];
    assert!(
        ports
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "webhook" && p["containerPort"] == 9555),
        "{ports}"
    );
    for crd in objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let service = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"];
        let expected = if crd["spec"]["group"] == "agents.x-k8s.io" {
            "sandbox-controller-webhook"
        } else {
            "ext-conversion"
        };
        assert_eq!(service["name"], expected, "{}", key(crd));
    }
    // One name for both Services cannot work: the reference's single key fails, saying why.
    let error = template_error(&["--set", "controller.webhookServiceName=shared"]);
    assert!(error.contains("one name"), "{error}");
}

/// The Role that lets a controller read and renew its webhook certificate Secret, by name.
fn cert_role<'a>(objects: &'a [Value], binary: &str) -> &'a Value {
    let name = format!("{binary}-webhook-certs");
    objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == name.as_str())
        .unwrap_or_else(|| panic!("no Role {name}"))
}

/// The Secret names a certificate Role grants `get` on.
fn granted_secrets(role: &Value) -> Vec<String> {
    role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rule| rule["verbs"].as_array().unwrap().iter().any(|v| v == "get"))
        .flat_map(|rule| {
            rule["resourceNames"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|name| name.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_webhook_cert_secret_name_reaches_the_flag_and_the_role_that_grants_it() {
    if skipped() {
        return;
    }
    // Defaults: each Role grants its controller's default Secret, and no flag is passed.
    let objects = template(&[]);
    for binary in ["sandbox-controller", "extensions-controller"] {
        assert_eq!(
            granted_secrets(cert_role(&objects, binary)),
            [format!("{binary}-webhook-certs")],
            "{binary}"
        );
    }
    // A changed name reaches the controller's flag and its Role (else the controller cannot
    // read or renew the Secret it is told to use); the other controller keeps its own.
    let objects = template(&[
        "--set",
        "extensionsController.flags.webhookCertSecret=ext-certs",
    ]);
    let ext = args(&objects, "extensions-controller");
    assert!(
        ext.contains(&"--webhook-cert-secret=ext-certs".to_string()),
        "{ext:?}"
    );
    assert_eq!(
        granted_secrets(cert_role(&objects, "extensions-controller")),
        ["ext-certs"]
    );
    assert_eq!(
        granted_secrets(cert_role(&objects, "sandbox-controller")),
        ["sandbox-controller-webhook-certs"]
    );
    let objects = template(&[
        "--set",
        "sandboxController.flags.webhookCertSecret=core-certs",
    ]);
    assert_eq!(
        granted_secrets(cert_role(&objects, "sandbox-controller")),
        ["core-certs"]
    );
    // One Secret for both controllers cannot work (each writes a certificate for its own
    // Service into it): the shared key fails, saying why.
    let error = template_error(&["--set", "controller.webhookCertSecret=shared"]);
    assert!(error.contains("one Secret"), "{error}");
}
