//! `values.yaml`: the chart's defaults. What the release Deployments set (replicas, ports,
//! resources, security contexts) is read from their pieces in `deploy/`, so a change there
//! changes the chart's defaults too.

use std::path::Path;

use serde_yaml::Value;

use crate::chart::flags::{Controller, PieceArgs, flags_comment, piece_args};
use crate::chart::{ChartError, ChartInputs};

/// The defaults one controller's Deployment piece holds.
pub struct PieceDefaults {
    /// Its container's flags, in order.
    pub args: PieceArgs,
    replicas: Value,
    metrics_port: Value,
    health_port: Value,
    resources: Value,
    pod_security_context: Value,
    container_security_context: Value,
}

pub fn deployment_defaults(
    deploy: &Path,
    controller: &Controller,
) -> Result<PieceDefaults, ChartError> {
    let relative = format!("{}/deployment.yaml", controller.binary);
    let path = deploy.join(&relative);
    let text = std::fs::read_to_string(&path).map_err(|source| ChartError::Io {
        action: "cannot read",
        path: path.clone(),
        source,
    })?;
    let documents = crate::manifest::parse_documents(&text, &format!("deploy/{relative}"))?;
    let [deployment] = documents.as_slice() else {
        return Err(ChartError::Generate(format!(
            "deploy/{relative}: expected exactly one Deployment"
        )));
    };
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let port = |name: &str| -> Result<Value, ChartError> {
        container["ports"]
            .as_array()
            .and_then(|ports| ports.iter().find(|p| p["name"] == name))
            .map(|p| yaml(&p["containerPort"]))
            .transpose()?
            .ok_or_else(|| ChartError::Generate(format!("deploy/{relative}: no port {name}")))
    };
    let args = container["args"].as_array().cloned().unwrap_or_default();
    Ok(PieceDefaults {
        args: piece_args(&args, &format!("deploy/{relative}")).map_err(ChartError::Generate)?,
        replicas: yaml(&deployment["spec"]["replicas"])?,
        metrics_port: port("metrics")?,
        health_port: port("health")?,
        resources: yaml(&container["resources"])?,
        pod_security_context: yaml(&pod["securityContext"])?,
        container_security_context: yaml(&container["securityContext"])?,
    })
}

fn yaml(json: &serde_json::Value) -> Result<Value, ChartError> {
    serde_yaml::to_value(json).map_err(|e| ChartError::Generate(e.to_string()))
}

/// `key: <value>` with the value's YAML indented under `indent`.
fn entry(indent: usize, key: &str, value: &Value) -> Result<String, ChartError> {
    let pad = " ".repeat(indent);
    let text = serde_yaml::to_string(value).map_err(|e| ChartError::Generate(e.to_string()))?;
    let is_block = matches!(value, Value::Mapping(m) if !m.is_empty())
        || matches!(value, Value::Sequence(s) if !s.is_empty());
    if is_block {
        let mut out = format!("{pad}{key}:\n");
        for line in text.lines() {
            out.push_str(&format!("{pad}  {line}\n"));
        }
        Ok(out)
    } else {
        Ok(format!("{pad}{key}: {}\n", text.trim_end()))
    }
}

fn controller_values(
    deploy: &Path,
    controller: &Controller,
    inputs: &ChartInputs,
) -> Result<String, ChartError> {
    let defaults = deployment_defaults(deploy, controller)?;
    let digest = inputs
        .digests
        .get(controller.binary)
        .cloned()
        .unwrap_or_default();
    let mut out = String::new();
    out.push_str(&format!("{}:\n", controller.key));
    out.push_str(&format!(
        "  image:\n\
         \x20   # Default: <image.registry>/{binary}.\n\
         \x20   repository: \"\"\n\
         \x20   # sha256:... pins the image (the reference becomes <repository>:<tag>@<digest>);\n\
         \x20   # `cargo xtask release --push` fills it in.\n\
         \x20   digest: {digest:?}\n",
        binary = controller.binary,
    ));
    out.push_str("  # Only the Lease holder reconciles; more replicas stand by. The reference's\n");
    out.push_str("  # replicaCount, when given, applies to both controllers.\n");
    out.push_str(&entry(2, "replicas", &defaults.replicas)?);
    out.push_str("  # Container ports of /metrics and of /healthz + /readyz (also passed as\n");
    out.push_str("  # --metrics-bind-address and --health-probe-bind-address).\n");
    out.push_str(&entry(2, "metricsPort", &defaults.metrics_port)?);
    out.push_str(&entry(2, "healthPort", &defaults.health_port)?);
    out.push_str(&format!(
        "  # Flags of {binary}, by name in camelCase (--kube-api-qps: kubeApiQps). A key here\n\
         \x20 # wins over the same key under `controller` (which sets it for both controllers).\n\
         \x20 # Every flag, with its default (docs/configuration.md says what each does):\n",
        binary = controller.binary
    ));
    out.push_str(&flags_comment(controller, &defaults.args, 2));
    out.push_str("  flags: {}\n");
    out.push_str("  # More arguments, appended after the flags above.\n");
    out.push_str("  extraArgs: []\n");
    out.push_str(
        "  # More environment variables (e.g. OTEL_* settings; see docs/observability.md).\n",
    );
    out.push_str("  env: []\n");
    out.push_str(
        "  # The reference's top-level resources / podSecurityContext / containerSecurityContext\n",
    );
    out.push_str(
        "  # / nodeSelector / tolerations / affinity, when given, win over these for both.\n",
    );
    out.push_str(&entry(2, "resources", &defaults.resources)?);
    out.push_str(&entry(
        2,
        "podSecurityContext",
        &defaults.pod_security_context,
    )?);
    out.push_str(&entry(
        2,
        "containerSecurityContext",
        &defaults.container_security_context,
    )?);
    out.push_str(
        "  podAnnotations: {}\n\
         \x20 podLabels: {}\n\
         \x20 nodeSelector: {}\n\
         \x20 tolerations: []\n\
         \x20 affinity: {}\n\
         \x20 priorityClassName: \"\"\n\
         \x20 extraVolumes: []\n\
         \x20 extraVolumeMounts: []\n\
         \x20 serviceAccount:\n\
         \x20   # e.g. a cloud workload-identity binding.\n\
         \x20   annotations: {}\n\
         \x20 metricsService:\n\
         \x20   # Service <name>-metrics (port `metrics`), scraped by the ServiceMonitor.\n\
         \x20   enabled: true\n",
    );
    Ok(out)
}

/// The text of `values.yaml`.
pub fn values_yaml(
    deploy: &Path,
    controllers: &[Controller],
    inputs: &ChartInputs,
) -> Result<String, ChartError> {
    let mut out = format!(
        "# Values of the agent-sandbox chart. Generated by `cargo xtask chart` from deploy/ and the\n\
         # controllers' flag definitions; README.md describes every key, and which keys of the\n\
         # reference chart (kubernetes-sigs/agent-sandbox helm/) are accepted.\n\
         #\n\
         # With these defaults the chart renders exactly the objects of sandbox-with-extensions.yaml\n\
         # (the CRDs also carry helm.sh/resource-policy: keep); with extensions.enabled=false, those\n\
         # of sandbox.yaml.\n\
         \n\
         namespace:\n\
         \x20 # Create the Namespace (with its Pod Security labels). Set false to install into an\n\
         \x20 # existing one (give it with `name`, or leave `name` empty for the release namespace).\n\
         \x20 create: true\n\
         \x20 name: agent-sandbox-system\n\
         \n\
         image:\n\
         \x20 # Images are <registry>/sandbox-controller:<tag> and <registry>/extensions-controller:<tag>.\n\
         \x20 registry: {registry}\n\
         \x20 # Default: the chart's appVersion ({version}).\n\
         \x20 tag: \"\"\n\
         \x20 pullPolicy: IfNotPresent\n\
         imagePullSecrets: []\n\
         \n\
         extensions:\n\
         \x20 # The extensions controller (SandboxTemplate, SandboxWarmPool, SandboxClaim) and its\n\
         \x20 # three CRDs. The reference's controller.extensions, when given, wins.\n\
         \x20 enabled: true\n\
         \n\
         crds:\n\
         \x20 # Install and upgrade the CRDs with the chart (helm uninstall keeps them). Set false\n\
         \x20 # when you manage them yourself (e.g. from the release's sandbox.yaml).\n\
         \x20 install: true\n\
         \n\
         # Flags for every controller that has them, by name in camelCase; the reference chart's\n\
         # `controller` keys are these names. <controller>.flags wins over a key here. extraArgs\n\
         # (reference) go to the controllers that know each flag; an unknown flag fails the\n\
         # rendering. Reference keys without an equivalent: README.md.\n\
         controller: {{}}\n\
         \n\
         tracing:\n\
         \x20 # OTLP endpoint of both controllers (OTEL_EXPORTER_OTLP_ENDPOINT), e.g.\n\
         \x20 # http://otel-collector.observability.svc:4317. Empty: no exporter.\n\
         \x20 otlpEndpoint: \"\"\n\
         \n",
        registry = inputs.registry,
        version = inputs.version,
    );
    for controller in controllers {
        out.push_str(&controller_values(deploy, controller, inputs)?);
        out.push('\n');
    }
    out.push_str(
        "metrics:\n\
         \x20 serviceMonitor:\n\
         \x20   # A prometheus-operator ServiceMonitor for both metrics Services (needs its CRDs).\n\
         \x20   enabled: false\n\
         \x20   additionalLabels: {}\n\
         \x20   interval: 30s\n\
         \x20   scrapeTimeout: \"\"\n\
         \x20 prometheusRule:\n\
         \x20   # A PrometheusRule alerting when a controller's metrics target is down.\n\
         \x20   enabled: false\n\
         \x20   additionalLabels: {}\n\
         \x20   additionalGroups: []\n",
    );
    Ok(out)
}
