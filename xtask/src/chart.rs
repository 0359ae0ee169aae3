//! `cargo xtask chart`: the Helm chart `charts/agent-sandbox`, generated from the same pieces
//! and CRDs as the release manifests.
//!
//! Generated (never edit; `--check` fails when they lag behind their sources):
//! - `templates/<controller>/*.yaml` and `templates/namespace.yaml`: the `deploy/` pieces with
//!   holes for what values change ([`holes`]); with default values they render the pieces;
//! - `templates/crds.yaml` and `files/crds/*.yaml`: the CRDs of the Rust types, marked
//!   `helm.sh/resource-policy: keep` so `helm uninstall` never deletes them (and with them
//!   every Sandbox);
//! - `templates/_flags.tpl`: every controller flag as a value ([`flags`]);
//! - `values.yaml`: defaults taken from the pieces, and the flag keys;
//! - `Chart.yaml`: version and appVersion of the workspace.
//!
//! Written by hand: `templates/_helpers.tpl`, `templates/servicemonitor.yaml`,
//! `templates/prometheusrule.yaml`, `templates/NOTES.txt`, `README.md`, `.helmignore`.
//!
//! `cargo xtask release` packages the chart ([`package`]) with the release's version and
//! registry (and the images' digests after `--push`) as `agent-sandbox-<version>.tgz`.

pub mod flags;
pub mod holes;
pub mod values;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml::Value;

use crate::image::layer::{Entry, Tree, gzip, tar_bytes};
use crate::release::pieces::{CORE_PIECES, EXTENSIONS_PIECES, NAMESPACE_PIECE};
use crate::workspace::{deploy_dir, workspace_root};
use flags::{
    Controller, PORT_FLAGS, WEBHOOK_CERT_SECRET, arg_template, controllers, flags_template,
};
use holes::{Holed, Index, Key, Step, pad, with_block, with_items};

/// Name of the chart, its directory under `charts/` and the prefix of its package.
pub const CHART_NAME: &str = "agent-sandbox";

/// What can go wrong while generating, checking or packaging the chart.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("chart generation: {0}")]
    Generate(String),
    #[error(transparent)]
    Release(#[from] crate::error::XtaskError),
    #[error(
        "charts/agent-sandbox is out of date ({0}); run `cargo xtask chart` and commit the result"
    )]
    OutOfDate(String),
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ChartError {
    let path = path.to_path_buf();
    move |source| ChartError::Io {
        action,
        path,
        source,
    }
}

/// `<root>/charts/agent-sandbox`.
pub fn chart_dir() -> PathBuf {
    workspace_root().join("charts").join(CHART_NAME)
}

/// Arguments of `cargo xtask chart`.
#[derive(Debug, clap::Args)]
pub struct ChartArgs {
    /// Do not write anything; fail (exit 1) when the generated files of charts/agent-sandbox
    /// differ from what deploy/, the CRDs and the controllers' flags give. CI runs this.
    #[arg(long)]
    pub check: bool,
}

/// What the generated files depend on besides the repository: the release's version and
/// registry, and the images' digests once pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartInputs {
    /// `v1.2.3`: appVersion and default image tag; the chart version is `1.2.3`.
    pub version: String,
    pub registry: String,
    /// Image digests by binary name (`sandbox-controller` → `sha256:...`).
    pub digests: BTreeMap<String, String>,
}

impl ChartInputs {
    /// What the committed chart is generated with: the workspace version and the placeholder
    /// registry of `cargo xtask release`.
    pub fn committed() -> Self {
        ChartInputs {
            version: crate::release::default_version(),
            registry: crate::release::DEFAULT_REGISTRY.to_string(),
            digests: BTreeMap::new(),
        }
    }
}

/// Every generated file, by path relative to the chart directory.
pub fn generated_files(inputs: &ChartInputs) -> Result<BTreeMap<String, String>, ChartError> {
    let deploy = deploy_dir();
    let controllers = controllers();
    let mut files = BTreeMap::new();
    files.insert("Chart.yaml".to_string(), chart_yaml(&inputs.version));
    files.insert(
        "values.yaml".to_string(),
        values::values_yaml(&deploy, &controllers, inputs)?,
    );
    let piece_args = controllers
        .iter()
        .map(|controller| Ok(values::deployment_defaults(&deploy, controller)?.args))
        .collect::<Result<Vec<_>, ChartError>>()?;
    files.insert(
        "templates/_flags.tpl".to_string(),
        flags_template(&controllers, &piece_args),
    );
    files.insert(
        "templates/namespace.yaml".to_string(),
        piece_template(&deploy, NAMESPACE_PIECE, None)?,
    );
    for (controller, pieces) in controllers.iter().zip([CORE_PIECES, EXTENSIONS_PIECES]) {
        for piece in pieces {
            files.insert(
                format!("templates/{piece}"),
                piece_template(&deploy, piece, Some(controller))?,
            );
        }
    }
    let (crd_files, crds_template) = crds()?;
    files.extend(crd_files);
    files.insert("templates/crds.yaml".to_string(), crds_template);
    Ok(files)
}

/// `Chart.yaml` for release `version` (`v1.2.3`).
pub fn chart_yaml(version: &str) -> String {
    format!(
        "# Generated by `cargo xtask chart`; `cargo xtask release` sets the version.\n\
         apiVersion: v2\n\
         name: {CHART_NAME}\n\
         description: Agent Sandbox controllers (Sandbox core and the SandboxTemplate, SandboxWarmPool and SandboxClaim extensions), a Rust implementation of the Kubernetes Agent Sandbox API\n\
         type: application\n\
         version: {chart_version}\n\
         appVersion: {version:?}\n\
         kubeVersion: \">=1.30.0-0\"\n\
         keywords:\n  - agent\n  - sandbox\n  - kubernetes\n\
         home: {home}\n\
         sources:\n  - {home}\n\
         annotations:\n  artifacthub.io/license: Apache-2.0\n",
        chart_version = version.trim_start_matches('v'),
        home = env!("CARGO_PKG_REPOSITORY"),
    )
}

/// Which chart values a piece's objects read.
fn controller_prefix(controller: &Controller) -> String {
    format!("{{{{- $c := .Values.{} }}}}\n", controller.key)
}

/// The template of one `deploy/` piece (a file of one or more objects).
fn piece_template(
    deploy: &Path,
    relative: &str,
    controller: Option<&Controller>,
) -> Result<String, ChartError> {
    let path = deploy.join(relative);
    let text = std::fs::read_to_string(&path).map_err(io("cannot read", &path))?;
    // The placeholders become markers that must all end up inside a hole.
    let text = crate::release::pieces::substitute(
        &text,
        &format!("deploy/{relative}"),
        &[
            ("REGISTRY", "PLACEHOLDER-REGISTRY"),
            ("VERSION", "PLACEHOLDER-VERSION"),
        ],
    )?;
    // Parsed as YAML (not through JSON) so every mapping keeps the piece's field order.
    crate::manifest::parse_documents(&text, &format!("deploy/{relative}"))?;
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let yaml = serde::Deserialize::deserialize(document).map_err(|e: serde_yaml::Error| {
            ChartError::Generate(format!("deploy/{relative}: {e}"))
        })?;
        let mut doc = Holed::new(yaml);
        punch(&mut doc, controller, relative)?;
        documents.push(doc.render()?);
    }
    let body = documents.join("---\n");
    if body.contains("PLACEHOLDER-") {
        return Err(ChartError::Generate(format!(
            "deploy/{relative}: a ${{REGISTRY}} or ${{VERSION}} placeholder is outside every hole"
        )));
    }
    let mut out = format!(
        "{{{{- /* Generated by `cargo xtask chart` from deploy/{relative}; do not edit. */}}}}\n"
    );
    match controller {
        None => {
            out.push_str("{{- if .Values.namespace.create }}\n");
            out.push_str(&body);
            out.push_str("{{- end }}\n");
        }
        Some(controller) => {
            out.push_str(&controller_prefix(controller));
            let extensions = controller.key != "sandboxController";
            let gate = match (extensions, relative.ends_with("metrics-service.yaml")) {
                (true, true) => Some(
                    "{{- if and (include \"agent-sandbox.extensions.enabled\" .) $c.metricsService.enabled }}\n",
                ),
                (true, false) => Some("{{- if include \"agent-sandbox.extensions.enabled\" . }}\n"),
                (false, true) => Some("{{- if $c.metricsService.enabled }}\n"),
                (false, false) => None,
            };
            if !extensions && relative.ends_with("deployment.yaml") {
                out.push_str("{{- include \"agent-sandbox.checkValues\" . }}\n");
            }
            if let Some(gate) = gate {
                out.push_str(gate);
            }
            out.push_str(&body);
            if gate.is_some() {
                out.push_str("{{- end }}\n");
            }
        }
    }
    Ok(out)
}

fn kind_of(doc: &Holed) -> String {
    doc.get(&[Key("kind")])
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Puts the holes into one object of a piece.
fn punch(doc: &mut Holed, controller: Option<&Controller>, origin: &str) -> Result<(), ChartError> {
    let kind = kind_of(doc);
    let namespace = "{{ include \"agent-sandbox.namespace\" $ }}";
    if kind == "Namespace" {
        doc.scalar(&[Key("metadata"), Key("name")], namespace)?;
        return Ok(());
    }
    let controller = controller.ok_or_else(|| {
        ChartError::Generate(format!("{origin}: {kind} outside a controller's pieces"))
    })?;
    let key = controller.key;
    if doc.get(&[Key("metadata"), Key("namespace")]).is_some() {
        let name = doc
            .get(&[Key("metadata"), Key("name")])
            .and_then(Value::as_str)
            .unwrap_or_default();
        let lease = (kind == "Role" || kind == "RoleBinding") && name.ends_with("-leader-election");
        let certs = (kind == "Role" || kind == "RoleBinding") && name.ends_with("-webhook-certs");
        let text = if lease {
            format!("{{{{ include \"agent-sandbox.leaseNamespace\" (list $ \"{key}\") }}}}")
        } else if certs {
            // Where the controller keeps its webhook certificate Secret.
            format!(
                "{{{{ include {:?} $ }}}}",
                arg_template(controller, WEBHOOK_NAMESPACE_FLAG)
            )
        } else {
            namespace.to_string()
        };
        doc.scalar(&[Key("metadata"), Key("namespace")], text)?;
        if certs && kind == "Role" {
            punch_cert_secret(doc, controller, origin)?;
        }
    }
    if kind == "ClusterRoleBinding" || kind == "RoleBinding" {
        let count = doc
            .get(&[Key("subjects")])
            .and_then(Value::as_sequence)
            .map_or(0, Vec::len);
        for index in 0..count {
            doc.scalar(
                &[Key("subjects"), Index(index), Key("namespace")],
                namespace,
            )?;
        }
    }
    match kind.as_str() {
        "ServiceAccount" => {
            doc.block(
                &[Key("metadata")],
                "annotations",
                with_block("annotations", "$c.serviceAccount.annotations"),
            )?;
        }
        "Deployment" => punch_deployment(doc, controller)?,
        "Service" if origin.ends_with("webhook-service.yaml") => {
            // The name the controller is told (--webhook-service-name), and the CRDs point at.
            doc.scalar(
                &[Key("metadata"), Key("name")],
                format!(
                    "{{{{ include {:?} $ }}}}",
                    arg_template(controller, WEBHOOK_SERVICE_FLAG)
                ),
            )?;
        }
        _ => {}
    }
    Ok(())
}

/// The certificate Role grants the Secret the controller is told to use
/// (`--webhook-cert-secret`), not only its default name: every `resourceNames` entry naming
/// the default follows the flag's value.
fn punch_cert_secret(
    doc: &mut Holed,
    controller: &Controller,
    origin: &str,
) -> Result<(), ChartError> {
    let default = controller
        .flags
        .iter()
        .find(|flag| flag.long == WEBHOOK_CERT_SECRET)
        .map(|flag| flag.default.clone())
        .ok_or_else(|| {
            ChartError::Generate(format!(
                "{origin}: {} has no {WEBHOOK_CERT_SECRET}",
                controller.binary
            ))
        })?;
    let text = format!(
        "{{{{ include {:?} $ }}}}",
        arg_template(controller, WEBHOOK_CERT_SECRET)
    );
    let rules = doc
        .get(&[Key("rules")])
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default();
    let mut found = false;
    for (rule_index, rule) in rules.iter().enumerate() {
        let names = rule
            .get("resourceNames")
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default();
        for (index, name) in names.iter().enumerate() {
            if name.as_str() == Some(default.as_str()) {
                doc.scalar(
                    &[
                        Key("rules"),
                        Index(rule_index),
                        Key("resourceNames"),
                        Index(index),
                    ],
                    text.clone(),
                )?;
                found = true;
            }
        }
    }
    if !found {
        return Err(ChartError::Generate(format!(
            "{origin}: the certificate Role grants no Secret named {default} ({WEBHOOK_CERT_SECRET}'s default)"
        )));
    }
    Ok(())
}

/// Labels the chart may not override on a pod (its selector and identity).
fn label_keys(doc: &Holed, path: &[Step<'_>]) -> Vec<String> {
    doc.get(path)
        .and_then(Value::as_mapping)
        .map(|labels| {
            labels
                .keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn punch_deployment(doc: &mut Holed, controller: &Controller) -> Result<(), ChartError> {
    let key = controller.key;
    let binary = controller.binary;
    doc.scalar(
        &[
            Key("metadata"),
            Key("labels"),
            Key("app.kubernetes.io/version"),
        ],
        "{{ include \"agent-sandbox.version\" $ | quote }}",
    )?;
    doc.scalar(
        &[Key("spec"), Key("replicas")],
        format!("{{{{ include \"agent-sandbox.replicas\" (list $ \"{key}\") }}}}"),
    )?;

    let template_meta = [Key("spec"), Key("template"), Key("metadata")];
    let protected = label_keys(
        doc,
        &[Key("spec"), Key("template"), Key("metadata"), Key("labels")],
    );
    let omit = protected
        .iter()
        .map(|k| format!("{k:?}"))
        .collect::<Vec<_>>()
        .join(" ");
    doc.block(
        &[Key("spec"), Key("template"), Key("metadata"), Key("labels")],
        "pod-labels",
        move |indent| {
            format!(
                "{{{{- with omit (merge (dict) ($.Values.podLabels | default dict) ($c.podLabels | default dict)) {omit} }}}}\n{p}{{{{- toYaml . | nindent {indent} }}}}\n{{{{- end }}}}",
                p = pad(indent)
            )
        },
    )?;
    doc.block(
        &template_meta,
        "annotations",
        with_block(
            "annotations",
            "merge (dict) ($.Values.podAnnotations | default dict) ($c.podAnnotations | default dict)",
        ),
    )?;

    let pod = [Key("spec"), Key("template"), Key("spec")];
    doc.block(
        &pod,
        "securityContext",
        with_block(
            "securityContext",
            "$.Values.podSecurityContext | default $c.podSecurityContext",
        ),
    )?;
    for (field, expr) in [
        ("imagePullSecrets", "$.Values.imagePullSecrets"),
        ("priorityClassName", "$c.priorityClassName"),
        (
            "nodeSelector",
            "$.Values.nodeSelector | default $c.nodeSelector",
        ),
        ("affinity", "$.Values.affinity | default $c.affinity"),
        (
            "tolerations",
            "$.Values.tolerations | default $c.tolerations",
        ),
    ] {
        if field == "priorityClassName" {
            doc.block(&pod, field, move |indent| {
                format!(
                    "{{{{- with {expr} }}}}\n{p}priorityClassName: {{{{ . }}}}\n{{{{- end }}}}",
                    p = pad(indent)
                )
            })?;
        } else {
            doc.block(&pod, field, with_block(field, expr))?;
        }
    }
    if doc
        .get(&[Key("spec"), Key("template"), Key("spec"), Key("volumes")])
        .is_some()
    {
        doc.items(
            &[Key("spec"), Key("template"), Key("spec"), Key("volumes")],
            with_items("$c.extraVolumes"),
        )?;
    } else {
        doc.block(&pod, "volumes", with_block("volumes", "$c.extraVolumes"))?;
    }

    let container = [
        Key("spec"),
        Key("template"),
        Key("spec"),
        Key("containers"),
        Index(0),
    ];
    let at = |field: &'static str| -> Vec<Step<'static>> {
        let mut path = container.to_vec();
        path.push(Key(field));
        path
    };
    doc.scalar(
        &at("image"),
        format!("{{{{ include \"agent-sandbox.image\" (list $ \"{key}\" \"{binary}\") }}}}"),
    )?;
    doc.scalar(&at("imagePullPolicy"), "{{ $.Values.image.pullPolicy }}")?;
    doc.block(&container, "args", move |indent| {
        format!(
            "{p}args:\n{p}  {{{{- include \"agent-sandbox.args.{key}\" $ | nindent {indent} }}}}",
            p = pad(indent)
        )
    })?;
    doc.items(&at("env"), |indent| {
        let p = pad(indent);
        format!(
            "{{{{- with $.Values.tracing.otlpEndpoint }}}}\n{p}- name: OTEL_EXPORTER_OTLP_ENDPOINT\n{p}  value: {{{{ . | quote }}}}\n{{{{- end }}}}\n{{{{- with $c.env }}}}\n{p}{{{{- toYaml . | nindent {indent} }}}}\n{{{{- end }}}}"
        )
    })?;
    let ports = doc
        .get(&at("ports"))
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default();
    for (index, port) in ports.iter().enumerate() {
        let name = port.get("name").and_then(Value::as_str).unwrap_or_default();
        let text = match name {
            "metrics" => format!(
                "{{{{ include \"agent-sandbox.flagValue\" $c.{} }}}}",
                PORT_FLAGS[0].1
            ),
            "health" => format!(
                "{{{{ include \"agent-sandbox.flagValue\" $c.{} }}}}",
                PORT_FLAGS[1].1
            ),
            "webhook" => format!(
                "{{{{ include {:?} $ }}}}",
                arg_template(controller, WEBHOOK_PORT_FLAG)
            ),
            _ => continue,
        };
        let mut path = at("ports");
        path.push(Index(index));
        path.push(Key("containerPort"));
        doc.scalar(&path, text)?;
    }
    doc.block(
        &container,
        "resources",
        with_block("resources", "$.Values.resources | default $c.resources"),
    )?;
    doc.block(
        &container,
        "securityContext",
        with_block(
            "securityContext",
            "$.Values.containerSecurityContext | default $c.containerSecurityContext",
        ),
    )?;
    if doc.get(&at("volumeMounts")).is_some() {
        doc.items(&at("volumeMounts"), with_items("$c.extraVolumeMounts"))?;
    } else {
        doc.block(
            &container,
            "volumeMounts",
            with_block("volumeMounts", "$c.extraVolumeMounts"),
        )?;
    }
    Ok(())
}

/// The flag naming a controller's conversion webhook Service.
const WEBHOOK_SERVICE_FLAG: &str = "--webhook-service-name";
/// The flag naming the namespace of that Service.
const WEBHOOK_NAMESPACE_FLAG: &str = "--webhook-namespace";
/// The flag of the webhook's container port.
const WEBHOOK_PORT_FLAG: &str = "--webhook-port";

/// What a CRD's conversion webhook Service name and namespace become in `files/crds/`; the
/// template replaces them with the owning controller's `--webhook-service-name` and
/// `--webhook-namespace`, so the CRDs follow the chart's namespace and values.
const CRD_SERVICE_MARKER: &str = "PLACEHOLDER-WEBHOOK-SERVICE";
const CRD_NAMESPACE_MARKER: &str = "PLACEHOLDER-WEBHOOK-NAMESPACE";

/// The annotation that keeps the CRDs (and every custom resource) through `helm uninstall`.
pub const KEEP_ANNOTATION: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// `files/crds/*.yaml` (the CRDs with [`KEEP_ANNOTATION`]) and `templates/crds.yaml`.
fn crds() -> Result<(BTreeMap<String, String>, String), ChartError> {
    let mut files = BTreeMap::new();
    let mut template = String::from(
        "{{- /* Generated by `cargo xtask chart`: the CRDs of crates/api-types, installed and upgraded\n\
         with the chart and kept by `helm uninstall` (helm.sh/resource-policy: keep). */}}\n\
         {{- if .Values.crds.install }}\n",
    );
    let [core, ext] = controllers();
    for (crds, extensions, owner) in [
        (api_types::crds::core_crds(), false, &core),
        (api_types::crds::extension_crds(), true, &ext),
    ] {
        if extensions {
            template.push_str("{{- if include \"agent-sandbox.extensions.enabled\" . }}\n");
        }
        for mut crd in crds {
            crd.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(KEEP_ANNOTATION.0.to_string(), KEEP_ANNOTATION.1.to_string());
            let name = format!(
                "files/crds/{}_{}.yaml",
                crd.spec.group, crd.spec.names.plural
            );
            let service = api_types::conversion_service_mut(&mut crd).ok_or_else(|| {
                ChartError::Generate(format!("{name}: no conversion webhook Service"))
            })?;
            service.name = CRD_SERVICE_MARKER.to_string();
            service.namespace = CRD_NAMESPACE_MARKER.to_string();
            let yaml = serde_yaml::to_string(&crd)
                .map_err(|e| ChartError::Generate(format!("{name}: {e}")))?;
            files.insert(
                name.clone(),
                format!(
                    "# Generated by `cargo xtask chart` from crates/api-types. Do not edit.\n{yaml}"
                ),
            );
            template.push_str(&format!(
                "---\n{{{{ .Files.Get {name:?} | replace {CRD_SERVICE_MARKER:?} (include {service:?} $) | replace {CRD_NAMESPACE_MARKER:?} (include {namespace:?} $) }}}}\n",
                service = arg_template(owner, WEBHOOK_SERVICE_FLAG),
                namespace = arg_template(owner, WEBHOOK_NAMESPACE_FLAG),
            ));
        }
        if extensions {
            template.push_str("{{- end }}\n");
        }
    }
    template.push_str("{{- end }}\n");
    Ok((files, template))
}

/// Files of the chart directory that are written by hand (everything not generated).
fn hand_written(
    dir: &Path,
    generated: &BTreeMap<String, String>,
) -> Result<Vec<String>, ChartError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).map_err(io("cannot list", &current))? {
            let entry = entry.map_err(io("cannot list", &current))?;
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(dir)
                .map_err(|e| ChartError::Generate(e.to_string()))?
                .to_string_lossy()
                .replace('\\', "/");
            if !generated.contains_key(&relative) {
                out.push(relative);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Files of the chart directory that would be generated but are missing or different, and
/// generated-looking files nothing generates (`templates/<controller>/`, `files/crds/`).
pub fn drift(dir: &Path, inputs: &ChartInputs) -> Result<Vec<String>, ChartError> {
    let generated = generated_files(inputs)?;
    let mut stale = Vec::new();
    for (relative, contents) in &generated {
        match std::fs::read_to_string(dir.join(relative)) {
            Ok(existing) if &existing == contents => {}
            Ok(_) => stale.push(format!("{relative} differs")),
            Err(_) => stale.push(format!("{relative} is missing")),
        }
    }
    for relative in hand_written(dir, &generated)? {
        if relative.starts_with("files/crds/")
            || relative.starts_with("templates/sandbox-controller/")
            || relative.starts_with("templates/extensions-controller/")
        {
            stale.push(format!("{relative} is generated by nothing"));
        }
    }
    Ok(stale)
}

/// Writes the generated files into `dir` (and removes generated files nothing makes any more).
pub fn write(dir: &Path, inputs: &ChartInputs) -> Result<Vec<PathBuf>, ChartError> {
    let generated = generated_files(inputs)?;
    let mut written = Vec::new();
    for (relative, contents) in &generated {
        let path = dir.join(relative);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(contents.as_str()) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        }
        std::fs::write(&path, contents).map_err(io("cannot write", &path))?;
        written.push(path);
    }
    for relative in drift(dir, inputs)?
        .iter()
        .filter_map(|line| line.strip_suffix(" is generated by nothing"))
    {
        let path = dir.join(relative);
        std::fs::remove_file(&path).map_err(io("cannot remove", &path))?;
    }
    Ok(written)
}

/// `cargo xtask chart [--check]`.
pub fn run(args: &ChartArgs) -> Result<(), ChartError> {
    let dir = chart_dir();
    let inputs = ChartInputs::committed();
    if args.check {
        let stale = drift(&dir, &inputs)?;
        if !stale.is_empty() {
            return Err(ChartError::OutOfDate(stale.join(", ")));
        }
        return Ok(());
    }
    for path in write(&dir, &inputs)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// File name of the packaged chart: `agent-sandbox-1.2.3.tgz` (the chart version, as
/// `helm package` names it).
pub fn package_file_name(version: &str) -> String {
    format!("{CHART_NAME}-{}.tgz", version.trim_start_matches('v'))
}

/// The chart packaged like `helm package` does (a gzipped tar of `agent-sandbox/...`): the
/// hand-written files of `dir` and the files generated for `inputs`, every entry stamped with
/// `mtime`. Fails when the committed chart is out of date, so a release never ships templates
/// that differ from the repository's.
pub fn package(dir: &Path, inputs: &ChartInputs, mtime: u64) -> Result<Vec<u8>, ChartError> {
    let stale = drift(dir, &ChartInputs::committed())?;
    if !stale.is_empty() {
        return Err(ChartError::OutOfDate(stale.join(", ")));
    }
    let generated = generated_files(inputs)?;
    let mut tree = Tree::default();
    for relative in hand_written(dir, &generated)? {
        let path = dir.join(&relative);
        let contents = std::fs::read(&path).map_err(io("cannot read", &path))?;
        tree.insert(
            &format!("{CHART_NAME}/{relative}"),
            Entry::file(contents, 0o644),
        );
    }
    for (relative, contents) in generated {
        tree.insert(
            &format!("{CHART_NAME}/{relative}"),
            Entry::file(contents.into_bytes(), 0o644),
        );
    }
    let tar = tar_bytes(&tree, mtime).map_err(|e| ChartError::Generate(e.to_string()))?;
    gzip(&tar).map_err(|e| ChartError::Generate(e.to_string()))
}
