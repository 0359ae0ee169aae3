//! What `kubectl` and the API server see of our CRDs besides the schema: names, scope, short
//! names, printer columns, subresources, scale paths, the CEL rule, and the install order.

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
    assert_eq!(crd.spec.versions.len(), 1, "we serve only v1beta1");
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, "v1beta1");
    assert!(version.served && version.storage);
    version
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
        assert!(
            crd.spec.conversion.is_none(),
            "{kind}: no conversion webhook (v1beta1 only)"
        );
    }
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
