//! What `kubectl` and the API server see of our CRDs besides the schema: names, scope, short
//! names, versions, printer columns, subresources, scale paths, the CEL rule, the conversion
//! webhook, and the install order.

use std::sync::LazyLock;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use serde_json::{Value, json};

/// Generated once per test binary; every test reads the same CRDs.
static CORE: LazyLock<Vec<CustomResourceDefinition>> = LazyLock::new(api_types::core_crds);
static EXTENSIONS: LazyLock<Vec<CustomResourceDefinition>> =
    LazyLock::new(api_types::extension_crds);

fn core_crds() -> Vec<CustomResourceDefinition> {
    CORE.clone()
}

fn extension_crds() -> Vec<CustomResourceDefinition> {
    EXTENSIONS.clone()
}

fn v1beta1(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    let names: Vec<&str> = crd.spec.versions.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        ["v1beta1", "v1alpha1"],
        "v1beta1 first, then v1alpha1"
    );
    let version = &crd.spec.versions[0];
    assert!(version.served && version.storage);
    version
}

fn v1alpha1(crd: &CustomResourceDefinition) -> &CustomResourceDefinitionVersion {
    v1beta1(crd);
    &crd.spec.versions[1]
}

fn columns(crd: &CustomResourceDefinition) -> Vec<(String, String, String)> {
    v1beta1(crd)
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.type_.clone(), c.json_path.clone()))
        .collect()
}

fn owned(rows: &[(&str, &str, &str)]) -> Vec<(String, String, String)> {
    rows.iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

fn schema(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(
        v1beta1(crd)
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

#[test]
fn core_has_exactly_the_sandbox_crd_and_extensions_come_in_install_order() {
    let core: Vec<_> = core_crds()
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(core, ["sandboxes.agents.x-k8s.io"]);
    let extensions: Vec<_> = extension_crds()
        .into_iter()
        .map(|c| c.metadata.name.unwrap())
        .collect();
    assert_eq!(
        extensions,
        [
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "sandboxwarmpools.extensions.agents.x-k8s.io",
            "sandboxclaims.extensions.agents.x-k8s.io",
        ]
    );
}

#[test]
fn names_and_scope_match_the_reference() {
    let expected = [
        (
            "agents.x-k8s.io",
            "Sandbox",
            "SandboxList",
            "sandboxes",
            "sandbox",
            "sandbox",
        ),
        (
            "extensions.agents.x-k8s.io",
            "SandboxTemplate",
            "SandboxTemplateList",
            "sandboxtemplates",
            "sandboxtemplate",
            "sandboxtemplate",
        ),
        (
            "extensions.agents.x-k8s.io",
            "SandboxWarmPool",
            "SandboxWarmPoolList",
            "sandboxwarmpools",
            "sandboxwarmpool",
            "swp",
        ),
        (
            "extensions.agents.x-k8s.io",
            "SandboxClaim",
            "SandboxClaimList",
            "sandboxclaims",
            "sandboxclaim",
            "sandboxclaim",
        ),
    ];
    let crds: Vec<_> = core_crds().into_iter().chain(extension_crds()).collect();
    for (crd, (group, kind, list_kind, plural, singular, short)) in crds.iter().zip(expected) {
        let names = &crd.spec.names;
        assert_eq!(crd.spec.group, group);
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(names.kind, kind);
        assert_eq!(names.list_kind.as_deref(), Some(list_kind));
        assert_eq!(names.plural, plural);
        assert_eq!(names.singular.as_deref(), Some(singular));
        assert_eq!(names.short_names.as_deref(), Some(&[short.to_string()][..]));
        assert_eq!(
            names.categories, None,
            "{kind}: the reference defines no categories"
        );
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.{group}").as_str())
        );
    }
}

#[test]
fn v1alpha1_is_served_deprecated_and_not_stored_with_the_reference_warning() {
    let crds: Vec<_> = core_crds().into_iter().chain(extension_crds()).collect();
    for crd in &crds {
        let alpha = v1alpha1(crd);
        let (group, kind) = (&crd.spec.group, &crd.spec.names.kind);
        assert!(alpha.served && !alpha.storage, "{kind}");
        assert_eq!(alpha.deprecated, Some(true), "{kind}");
        assert_eq!(
            alpha.deprecation_warning.as_deref(),
            Some(
                format!(
                    "{group}/v1alpha1 {kind} is deprecated; use {group}/v1beta1 {kind} instead"
                )
                .as_str()
            )
        );
        let beta = v1beta1(crd);
        assert_eq!(beta.deprecated, None, "{kind}: v1beta1 is not deprecated");
    }
}

#[test]
fn each_crd_is_converted_by_the_webhook_of_the_controller_that_owns_it() {
    let owners = core_crds()
        .into_iter()
        .map(|crd| (crd, "sandbox-controller-webhook"))
        .chain(
            extension_crds()
                .into_iter()
                .map(|crd| (crd, "extensions-controller-webhook")),
        );
    for (crd, service) in owners {
        let conversion = serde_json::to_value(crd.spec.conversion.as_ref().unwrap()).unwrap();
        assert_eq!(
            conversion,
            json!({
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1", "v1beta1"],
                    "clientConfig": {"service": {
                        "name": service,
                        "namespace": "agent-sandbox-system",
                        "path": "/convert",
                    }},
                },
            }),
            "{:?}: no caBundle (the controller patches it in), port 443 by default",
            crd.metadata.name
        );
    }
}

#[test]
fn v1alpha1_keeps_its_own_subresources_and_columns() {
    let core = core_crds();
    let ext = extension_crds();
    let sandbox = v1alpha1(&core[0]);
    let scale = sandbox
        .subresources
        .as_ref()
        .and_then(|s| s.scale.as_ref())
        .expect("v1alpha1 Sandbox has the scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert!(
        sandbox.additional_printer_columns.is_none(),
        "v1alpha1 Sandbox has no printer columns"
    );
    assert!(v1alpha1(&ext[0]).subresources.is_none());
    assert_eq!(
        v1alpha1(&ext[1])
            .additional_printer_columns
            .as_ref()
            .map(Vec::len),
        Some(3),
        "the pool's columns are the same in both versions"
    );
    assert!(v1alpha1(&ext[2]).additional_printer_columns.is_none());
}

#[test]
fn printer_columns_match_the_reference() {
    let core = core_crds();
    let ext = extension_crds();
    assert_eq!(
        columns(&core[0]),
        owned(&[
            (
                "Ready",
                "string",
                ".status.conditions[?(@.type=='Ready')].status"
            ),
            (
                "Reason",
                "string",
                ".status.conditions[?(@.type=='Ready')].reason"
            ),
            ("Age", "date", ".metadata.creationTimestamp"),
        ])
    );
    assert!(
        columns(&ext[0]).is_empty(),
        "SandboxTemplate has no printer columns"
    );
    assert_eq!(
        columns(&ext[1]),
        owned(&[
            ("Ready", "integer", ".status.readyReplicas"),
            ("Desired", "integer", ".spec.replicas"),
            ("Age", "date", ".metadata.creationTimestamp"),
        ])
    );
    assert_eq!(
        columns(&ext[2]),
        owned(&[
            (
                "Ready",
                "string",
                ".status.conditions[?(@.type=='Ready')].status"
            ),
            ("Sandbox", "string", ".status.sandbox.name"),
            (
                "Reason",
                "string",
                ".status.conditions[?(@.type=='Ready')].reason"
            ),
            ("Age", "date", ".metadata.creationTimestamp"),
        ])
    );
}

#[test]
fn subresources_status_everywhere_but_template_and_scale_only_on_warm_pool() {
    let core = core_crds();
    let ext = extension_crds();
    let sandbox = v1beta1(&core[0])
        .subresources
        .as_ref()
        .expect("Sandbox has subresources");
    assert!(sandbox.status.is_some());
    assert!(
        sandbox.scale.is_none(),
        "Sandbox lost its scale subresource in v1beta1"
    );

    assert!(
        v1beta1(&ext[0]).subresources.is_none(),
        "SandboxTemplate has no subresources"
    );
    assert!(
        schema(&ext[0]).pointer("/properties/status").is_none(),
        "SandboxTemplate has no status"
    );

    let pool = v1beta1(&ext[1])
        .subresources
        .as_ref()
        .expect("SandboxWarmPool has subresources");
    assert!(pool.status.is_some());
    let scale = pool
        .scale
        .as_ref()
        .expect("SandboxWarmPool has a scale subresource");
    assert_eq!(scale.spec_replicas_path, ".spec.replicas");
    assert_eq!(scale.status_replicas_path, ".status.replicas");
    assert_eq!(
        scale.label_selector_path.as_deref(),
        Some(".status.selector")
    );

    let claim = v1beta1(&ext[2])
        .subresources
        .as_ref()
        .expect("SandboxClaim has subresources");
    assert!(claim.status.is_some());
    assert!(claim.scale.is_none());
}

#[test]
fn sandbox_volume_claim_templates_are_immutable_by_cel_and_nothing_else_has_rules() {
    let sandbox = schema(&core_crds()[0]);
    assert_eq!(
        sandbox.pointer("/properties/spec/x-kubernetes-validations"),
        Some(&json!([{
            "rule": "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)",
            "message": "volumeClaimTemplates is immutable",
        }]))
    );
    for crd in extension_crds() {
        let text = schema(&crd).to_string();
        assert!(
            !text.contains("x-kubernetes-validations"),
            "{:?} must have no CEL rule",
            crd.metadata.name
        );
    }
}

/// Where a field of ours holds an embedded Kubernetes type: the field is described, nothing
/// inside it is (`kubectl explain pod.spec` documents those). Paths ending in `[]` are the items
/// of a list of ours.
const EMBEDDED: &[&str] = &[
    ".spec.podTemplate.spec",
    ".spec.volumeClaimTemplates[].spec",
    ".spec.networkPolicy.ingress[]",
    ".spec.networkPolicy.egress[]",
    ".status.conditions[]",
];

/// Checks `node` at `path`: every schema of ours has a one-sentence description; embedded
/// Kubernetes types have none.
fn check_descriptions(path: &str, node: &serde_json::Value, problems: &mut Vec<String>) {
    if path == ".metadata" {
        // kube-apiserver allows nothing but the type here (see the test below).
        return;
    }
    let description = node.get("description").and_then(|d| d.as_str());
    let embedded_items = path.ends_with("[]") && EMBEDDED.contains(&path);
    if embedded_items {
        if node.to_string().contains("\"description\"") {
            problems.push(format!(
                "{path}: an embedded Kubernetes type carries descriptions"
            ));
        }
        return;
    }
    match description {
        None => problems.push(format!("{path}: no description")),
        Some(text) if text.contains('\n') || !text.ends_with('.') || text.len() > 250 => {
            problems.push(format!("{path}: not one short sentence: {text:?}"))
        }
        Some(_) => {}
    }
    let properties = node.get("properties").and_then(|p| p.as_object());
    if EMBEDDED.contains(&path) {
        if properties.is_some_and(|p| {
            p.values()
                .any(|v| v.to_string().contains("\"description\""))
        }) {
            problems.push(format!(
                "{path}: an embedded Kubernetes type carries descriptions"
            ));
        }
        return;
    }
    for (name, child) in properties.into_iter().flatten() {
        check_descriptions(&format!("{path}.{name}"), child, problems);
    }
    // Items of a list of ours are described when they are objects (not for lists of strings).
    if let Some(items) = node.get("items").filter(|items| {
        items.get("properties").is_some() || EMBEDDED.contains(&&*format!("{path}[]"))
    }) {
        check_descriptions(&format!("{path}[]"), items, problems);
    }
}

/// kube-apiserver refuses a CRD whose root `metadata` schema carries anything but
/// `type: object` ("must not specify anything other than name and generateName"), a
/// description included; devcluster did not, and the real control plane's tests caught it.
#[test]
fn the_root_metadata_schema_is_only_its_type_in_every_version() {
    for crd in core_crds().into_iter().chain(extension_crds()) {
        for version in &crd.spec.versions {
            let schema = serde_json::to_value(
                version
                    .schema
                    .as_ref()
                    .unwrap()
                    .open_api_v3_schema
                    .as_ref()
                    .unwrap(),
            )
            .unwrap();
            assert_eq!(
                schema.pointer("/properties/metadata"),
                Some(&json!({"type": "object"})),
                "{:?} {}",
                crd.metadata.name,
                version.name
            );
        }
    }
}

#[test]
fn every_field_of_ours_has_a_one_sentence_description_and_nothing_is_nullable() {
    for crd in core_crds().into_iter().chain(extension_crds()) {
        let schema = schema(&crd);
        let mut problems = Vec::new();
        check_descriptions("", &schema, &mut problems);
        assert!(
            problems.is_empty(),
            "{:?}:\n{}",
            crd.metadata.name,
            problems.join("\n")
        );
        let text = schema.to_string();
        assert!(
            !text.contains("\"nullable\""),
            "{:?} marks fields nullable",
            crd.metadata.name
        );
        assert!(
            !text.contains("$ref"),
            "{:?} has unresolved references",
            crd.metadata.name
        );
    }
}

#[test]
fn crds_serialize_to_yaml_that_reads_back_identically() {
    for crd in core_crds().into_iter().chain(extension_crds()) {
        let yaml = serde_yaml::to_string(&crd).unwrap();
        let back: CustomResourceDefinition = serde_yaml::from_str(&yaml).unwrap();
        assert_eq!(back, crd);
    }
}
