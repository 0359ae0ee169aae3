//! What a cluster would get from the release manifests: each file is rendered into a temporary
//! directory through the library, read back, and every document parsed into the k8s-openapi
//! type its `kind` names. The checks are the install rules of design.md section 3.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::sync::OnceLock;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, ServiceAccount};
use k8s_openapi::api::rbac::v1::PolicyRule;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use xtask::crds::{CrdFile, all_crd_files, compare_crd_dir};
use xtask::manifest::{ObjectKey, TypedObject, parse_documents, parse_typed_manifest};
use xtask::release::{
    EXTENSIONS_FILE, ReleaseOptions, SANDBOX_FILE, SANDBOX_WITH_EXTENSIONS_FILE, render_release,
    write_release,
};
use xtask::workspace::{crds_dir, deploy_dir};

const NAMESPACE: &str = "agent-sandbox-system";
const REGISTRY: &str = "registry.test/agent-sandbox";
const VERSION: &str = "v1.2.3";

/// The three release files, written to and read back from a temporary directory.
struct Release {
    sandbox: Vec<TypedObject>,
    extensions: Vec<TypedObject>,
    combined: Vec<TypedObject>,
    texts: BTreeMap<&'static str, String>,
}

/// Rendered once per test binary (rendering ~1 MB of YAML is the slow part).
fn release() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(render)
}

fn render() -> Release {
    let options = ReleaseOptions::parse(VERSION, REGISTRY).expect("valid options");
    let manifests = render_release(&deploy_dir(), &options).expect("release renders");
    let out = tempfile::tempdir().expect("temp dir");
    write_release(out.path(), &manifests).expect("release is written");
    let mut texts = BTreeMap::new();
    for name in [SANDBOX_FILE, EXTENSIONS_FILE, SANDBOX_WITH_EXTENSIONS_FILE] {
        let text = fs::read_to_string(out.path().join(name)).expect("written file is readable");
        texts.insert(name, text);
    }
    let parse = |name: &str| parse_typed_manifest(&texts[name], name).expect("typed documents");
    Release {
        sandbox: parse(SANDBOX_FILE),
        extensions: parse(EXTENSIONS_FILE),
        combined: parse(SANDBOX_WITH_EXTENSIONS_FILE),
        texts,
    }
}

fn keys(objects: &[TypedObject]) -> Vec<String> {
    objects.iter().map(|o| o.key().to_string()).collect()
}

fn key_set(objects: &[TypedObject]) -> BTreeSet<ObjectKey> {
    objects.iter().map(TypedObject::key).collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

fn expected(names: &[&str]) -> Vec<String> {
    sorted(names.iter().map(|s| s.to_string()).collect())
}

#[test]
fn every_document_of_every_file_is_the_kubernetes_type_it_claims() {
    let release = release();
    for (name, text) in &release.texts {
        let documents = parse_documents(text, name).expect("valid YAML");
        let objects = parse_typed_manifest(text, name).expect("every document is typed");
        assert_eq!(documents.len(), objects.len(), "{name}");
        assert!(
            text.starts_with(&format!("# agent-sandbox {VERSION}: {name}\n")),
            "{name} starts with its header"
        );
    }
}

#[test]
fn sandbox_yaml_holds_exactly_the_core_objects() {
    let release = release();
    assert_eq!(
        sorted(keys(&release.sandbox)),
        expected(&[
            "Namespace agent-sandbox-system",
            "CustomResourceDefinition sandboxes.agents.x-k8s.io",
            "ServiceAccount agent-sandbox-system/sandbox-controller",
            "ClusterRole agent-sandbox-controller",
            "ClusterRoleBinding agent-sandbox-controller",
            "Role agent-sandbox-system/sandbox-controller-leader-election",
            "RoleBinding agent-sandbox-system/sandbox-controller-leader-election",
            "Role agent-sandbox-system/sandbox-controller-webhook-certs",
            "RoleBinding agent-sandbox-system/sandbox-controller-webhook-certs",
            "Service agent-sandbox-system/sandbox-controller-metrics",
            "Service agent-sandbox-system/sandbox-controller-webhook",
            "Deployment agent-sandbox-system/sandbox-controller",
        ])
    );
    // kubectl applies in file order: the Namespace and the CRD come before anything else.
    assert_eq!(
        keys(&release.sandbox)[..2],
        [
            "Namespace agent-sandbox-system",
            "CustomResourceDefinition sandboxes.agents.x-k8s.io"
        ]
    );
}

#[test]
fn extensions_yaml_holds_exactly_the_extension_objects() {
    let release = release();
    assert_eq!(
        sorted(keys(&release.extensions)),
        expected(&[
            "CustomResourceDefinition sandboxtemplates.extensions.agents.x-k8s.io",
            "CustomResourceDefinition sandboxwarmpools.extensions.agents.x-k8s.io",
            "CustomResourceDefinition sandboxclaims.extensions.agents.x-k8s.io",
            "ServiceAccount agent-sandbox-system/extensions-controller",
            "ClusterRole agent-sandbox-controller-extensions",
            "ClusterRoleBinding agent-sandbox-controller-extensions",
            "Role agent-sandbox-system/extensions-controller-leader-election",
            "RoleBinding agent-sandbox-system/extensions-controller-leader-election",
            "Role agent-sandbox-system/extensions-controller-webhook-certs",
            "RoleBinding agent-sandbox-system/extensions-controller-webhook-certs",
            "Service agent-sandbox-system/extensions-controller-metrics",
            "Service agent-sandbox-system/extensions-controller-webhook",
            "Deployment agent-sandbox-system/extensions-controller",
        ])
    );
    assert!(
        keys(&release.extensions)[..3]
            .iter()
            .all(|k| k.starts_with("CustomResourceDefinition ")),
        "the extension CRDs come first"
    );
}

#[test]
fn extensions_yaml_changes_nothing_of_core() {
    let release = release();
    let core = key_set(&release.sandbox);
    let overlap: Vec<_> = key_set(&release.extensions)
        .intersection(&core)
        .map(ToString::to_string)
        .collect();
    assert!(overlap.is_empty(), "shared objects: {overlap:?}");
    for object in &release.extensions {
        match object {
            TypedObject::Namespace(_) => panic!("extensions.yaml must not carry the Namespace"),
            TypedObject::CustomResourceDefinition(crd) => {
                assert_eq!(crd.spec.group, "extensions.agents.x-k8s.io")
            }
            _ => {}
        }
    }
    // No extension role mentions a name of the core install, and no binding names the core
    // ServiceAccount: the core controller's permissions stay what sandbox.yaml says.
    let text = &release.texts[EXTENSIONS_FILE];
    for core_name in [
        "name: sandbox-controller\n",
        "name: agent-sandbox-controller\n",
    ] {
        assert!(
            !text.contains(core_name),
            "extensions.yaml mentions {core_name:?}"
        );
    }
}

#[test]
fn sandbox_with_extensions_is_the_union_with_each_object_once() {
    let release = release();
    let combined = keys(&release.combined);
    let unique: BTreeSet<_> = combined.iter().collect();
    assert_eq!(unique.len(), combined.len(), "duplicates in {combined:?}");
    let mut union = keys(&release.sandbox);
    union.extend(keys(&release.extensions));
    assert_eq!(sorted(combined), sorted(union));
    // And each object is the same object as in the separate files.
    let separate: BTreeMap<ObjectKey, &TypedObject> = release
        .sandbox
        .iter()
        .chain(&release.extensions)
        .map(|o| (o.key(), o))
        .collect();
    for object in &release.combined {
        assert_eq!(
            Some(&object),
            separate.get(&object.key()),
            "{}",
            object.key()
        );
    }
}

/// Every (apiGroup, resource, verb, resourceName-or-empty) a set of rules grants.
fn grants(rules: &[PolicyRule]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for rule in rules {
        assert!(rule.non_resource_urls.is_none(), "nonResourceURLs granted");
        let names = rule.resource_names.clone().unwrap_or_default();
        let names = if names.is_empty() {
            vec![String::new()]
        } else {
            names
        };
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    for name in &names {
                        let group = if group.is_empty() { "core" } else { group };
                        let suffix = if name.is_empty() {
                            String::new()
                        } else {
                            format!(" ({name})")
                        };
                        out.insert(format!("{group} {resource} {verb}{suffix}"));
                    }
                }
            }
        }
    }
    out
}

fn expand(group: &str, resources: &[&str], verbs: &[&str], name: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for resource in resources {
        for verb in verbs {
            let suffix = name.map(|n| format!(" ({n})")).unwrap_or_default();
            out.push(format!("{group} {resource} {verb}{suffix}"));
        }
    }
    out
}

const ALL_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

fn role_grants(objects: &[TypedObject], cluster_role: &str, role: &str) -> [BTreeSet<String>; 2] {
    let mut cluster = None;
    let mut namespaced = None;
    for object in objects {
        match object {
            TypedObject::ClusterRole(r) if r.metadata.name.as_deref() == Some(cluster_role) => {
                cluster = Some(grants(r.rules.as_deref().unwrap_or_default()));
            }
            TypedObject::Role(r) if r.metadata.name.as_deref() == Some(role) => {
                assert_eq!(r.metadata.namespace.as_deref(), Some(NAMESPACE));
                namespaced = Some(grants(r.rules.as_deref().unwrap_or_default()));
            }
            _ => {}
        }
    }
    [
        cluster.expect("ClusterRole present"),
        namespaced.expect("Role present"),
    ]
}

#[test]
fn core_controller_rbac_is_exactly_what_it_needs() {
    let release = release();
    let [cluster, leases] = role_grants(
        &release.sandbox,
        "agent-sandbox-controller",
        "sandbox-controller-leader-election",
    );
    let mut want: BTreeSet<String> = BTreeSet::new();
    // Pods and PVCs are never replaced whole; PVCs are deleted by the garbage collector.
    want.extend(expand(
        "core",
        &["pods"],
        &["create", "delete", "get", "list", "patch", "watch"],
        None,
    ));
    want.extend(expand("core", &["services"], ALL_VERBS, None));
    want.extend(expand(
        "core",
        &["persistentvolumeclaims"],
        &["create", "get", "list", "patch", "watch"],
        None,
    ));
    want.extend(expand(
        "agents.x-k8s.io",
        &["sandboxes"],
        &["delete", "get", "list", "patch", "watch"],
        None,
    ));
    want.extend(expand(
        "agents.x-k8s.io",
        &["sandboxes/status"],
        &["patch"],
        None,
    ));
    want.extend(expand(
        "agents.x-k8s.io",
        &["sandboxes/finalizers"],
        &["update"],
        None,
    ));
    // Events are events.k8s.io/v1 only (create, then patch a series).
    want.extend(expand(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
        None,
    ));
    // The conversion webhook's caBundle, on this controller's CRD only.
    want.extend(expand(
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        &["get", "patch"],
        Some("sandboxes.agents.x-k8s.io"),
    ));
    assert_eq!(cluster, want);

    let mut want_leases: BTreeSet<String> = BTreeSet::new();
    want_leases.extend(expand(
        "coordination.k8s.io",
        &["leases"],
        &["create"],
        None,
    ));
    want_leases.extend(expand(
        "coordination.k8s.io",
        &["leases"],
        &["get", "update"],
        Some("a3317529.agent-sandbox.x-k8s.io"),
    ));
    assert_eq!(leases, want_leases);
    assert_eq!(
        webhook_certs_grants(&release.sandbox, "sandbox-controller-webhook-certs"),
        want_webhook_certs("sandbox-controller-webhook-certs")
    );
}

/// The grants of the Role that lets a controller keep its webhook certificate Secret.
fn webhook_certs_grants(objects: &[TypedObject], role: &str) -> BTreeSet<String> {
    objects
        .iter()
        .find_map(|object| match object {
            TypedObject::Role(r) if r.metadata.name.as_deref() == Some(role) => {
                assert_eq!(r.metadata.namespace.as_deref(), Some(NAMESPACE));
                Some(grants(r.rules.as_deref().unwrap_or_default()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("Role {role} present"))
}

/// Create any Secret (RBAC cannot limit create by name), read and replace only its own.
fn want_webhook_certs(secret: &str) -> BTreeSet<String> {
    let mut want: BTreeSet<String> = expand("core", &["secrets"], &["create"], None)
        .into_iter()
        .collect();
    want.extend(expand(
        "core",
        &["secrets"],
        &["get", "update"],
        Some(secret),
    ));
    want
}

#[test]
fn extensions_controller_rbac_is_exactly_what_it_needs() {
    let release = release();
    let [cluster, leases] = role_grants(
        &release.extensions,
        "agent-sandbox-controller-extensions",
        "extensions-controller-leader-election",
    );
    let group = "extensions.agents.x-k8s.io";
    let mut want: BTreeSet<String> = BTreeSet::new();
    want.extend(expand(
        "agents.x-k8s.io",
        &["sandboxes"],
        &["create", "delete", "get", "list", "patch", "watch"],
        None,
    ));
    // Read from the watch caches, never with a GET; written with merge patches only.
    want.extend(expand(
        group,
        &["sandboxtemplates"],
        &["list", "patch", "watch"],
        None,
    ));
    want.extend(expand(
        group,
        &["sandboxwarmpools"],
        &["list", "watch"],
        None,
    ));
    want.extend(expand(
        group,
        &["sandboxclaims"],
        &["delete", "list", "patch", "watch"],
        None,
    ));
    want.extend(expand(
        group,
        &["sandboxclaims/status", "sandboxwarmpools/status"],
        &["patch"],
        None,
    ));
    want.extend(expand(
        group,
        &[
            "sandboxclaims/finalizers",
            "sandboxtemplates/finalizers",
            "sandboxwarmpools/finalizers",
        ],
        &["update"],
        None,
    ));
    want.extend(expand(
        "networking.k8s.io",
        &["networkpolicies"],
        &["create", "delete", "list", "patch", "watch"],
        None,
    ));
    want.extend(expand("core", &["pods"], &["list", "watch"], None));
    want.extend(expand(
        "events.k8s.io",
        &["events"],
        &["create", "patch"],
        None,
    ));
    for crd in [
        "sandboxtemplates.extensions.agents.x-k8s.io",
        "sandboxwarmpools.extensions.agents.x-k8s.io",
        "sandboxclaims.extensions.agents.x-k8s.io",
    ] {
        want.extend(expand(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get", "patch"],
            Some(crd),
        ));
    }
    assert_eq!(cluster, want);
    assert_eq!(
        webhook_certs_grants(&release.extensions, "extensions-controller-webhook-certs"),
        want_webhook_certs("extensions-controller-webhook-certs")
    );

    let mut want_leases: BTreeSet<String> = BTreeSet::new();
    want_leases.extend(expand(
        "coordination.k8s.io",
        &["leases"],
        &["create"],
        None,
    ));
    want_leases.extend(expand(
        "coordination.k8s.io",
        &["leases"],
        &["get", "update"],
        Some("extensions.agent-sandbox.x-k8s.io"),
    ));
    assert_eq!(leases, want_leases);
}

#[test]
fn no_role_grants_a_wildcard() {
    let release = release();
    let mut checked = 0;
    for object in &release.combined {
        let rules = match object {
            TypedObject::ClusterRole(r) => {
                assert!(r.aggregation_rule.is_none(), "aggregated ClusterRole");
                r.rules.clone().unwrap_or_default()
            }
            TypedObject::Role(r) => r.rules.clone().unwrap_or_default(),
            _ => continue,
        };
        checked += 1;
        for rule in &rules {
            let fields = [
                rule.api_groups.clone().unwrap_or_default(),
                rule.resources.clone().unwrap_or_default(),
                rule.resource_names.clone().unwrap_or_default(),
                rule.verbs.clone(),
            ];
            for value in fields.iter().flatten() {
                assert!(!value.contains('*'), "{} grants {value:?}", object.key());
            }
        }
    }
    assert_eq!(checked, 6, "two ClusterRoles and four Roles");
}

#[test]
fn the_core_install_knows_nothing_of_the_extensions() {
    let release = release();
    let text = &release.texts[SANDBOX_FILE];
    assert!(!text.contains("extensions.agents.x-k8s.io"));
    assert!(!text.contains("extensions-controller"));
}

#[test]
fn each_install_is_self_contained() {
    let release = release();
    // sandbox.yaml alone: every reference resolves inside it. extensions.yaml: every reference
    // resolves inside it, except the Namespace, which sandbox.yaml creates.
    for (objects, outside) in [
        (&release.sandbox, BTreeSet::new()),
        (
            &release.extensions,
            BTreeSet::from([format!("Namespace {NAMESPACE}")]),
        ),
    ] {
        let mut present: BTreeSet<String> = keys(objects).into_iter().collect();
        present.extend(outside);
        let mut needed = BTreeSet::new();
        for object in objects {
            if let Some(namespace) = &object.key().namespace {
                needed.insert(format!("Namespace {namespace}"));
            }
            match object {
                TypedObject::ClusterRoleBinding(b) => {
                    needed.insert(format!("ClusterRole {}", b.role_ref.name));
                    for s in b.subjects.iter().flatten() {
                        let ns = s.namespace.clone().unwrap_or_default();
                        needed.insert(format!("{} {ns}/{}", s.kind, s.name));
                    }
                }
                TypedObject::RoleBinding(b) => {
                    let ns = b.metadata.namespace.clone().unwrap_or_default();
                    needed.insert(format!("{} {ns}/{}", b.role_ref.kind, b.role_ref.name));
                    for s in b.subjects.iter().flatten() {
                        let ns = s.namespace.clone().unwrap_or_default();
                        needed.insert(format!("{} {ns}/{}", s.kind, s.name));
                    }
                }
                TypedObject::Deployment(d) => {
                    let ns = d.metadata.namespace.clone().unwrap_or_default();
                    let pod = d.spec.as_ref().and_then(|s| s.template.spec.as_ref());
                    let sa = pod.and_then(|p| p.service_account_name.clone());
                    needed.insert(format!("ServiceAccount {ns}/{}", sa.unwrap_or_default()));
                }
                _ => {}
            }
        }
        let missing: Vec<_> = needed.difference(&present).collect();
        assert!(missing.is_empty(), "unresolved references: {missing:?}");
    }
}

fn deployments(objects: &[TypedObject]) -> Vec<&Deployment> {
    objects
        .iter()
        .filter_map(|o| match o {
            TypedObject::Deployment(d) => Some(d.as_ref()),
            _ => None,
        })
        .collect()
}

fn only_container(deployment: &Deployment) -> &Container {
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    assert_eq!(pod.containers.len(), 1);
    &pod.containers[0]
}

#[test]
fn deployments_run_the_released_images_with_the_agreed_flags() {
    let release = release();
    let found = deployments(&release.combined);
    let names: Vec<_> = found
        .iter()
        .map(|d| d.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["sandbox-controller", "extensions-controller"]);
    for deployment in found {
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        let container = only_container(deployment);
        assert_eq!(
            container.image.as_deref(),
            Some(format!("{REGISTRY}/{name}:{VERSION}").as_str())
        );
        assert_eq!(
            container.args.as_deref().unwrap_or_default(),
            [
                "--leader-elect=true",
                "--metrics-bind-address=:8080",
                "--health-probe-bind-address=:8081",
                "--enable-webhook=true",
                "--manage-webhook-certs=true",
                "--webhook-port=9443",
                &format!("--webhook-service-name={name}-webhook"),
                "--webhook-namespace=agent-sandbox-system",
            ]
        );
        let env: BTreeMap<_, _> = container
            .env
            .iter()
            .flatten()
            .map(|e| {
                let field = e
                    .value_from
                    .as_ref()
                    .and_then(|v| v.field_ref.as_ref())
                    .map(|f| f.field_path.clone());
                (e.name.clone(), field)
            })
            .collect();
        assert_eq!(
            env,
            BTreeMap::from([
                // Plain value "2": checked below.
                ("MALLOC_ARENA_MAX".to_string(), None),
                ("POD_NAME".to_string(), Some("metadata.name".to_string())),
                (
                    "POD_NAMESPACE".to_string(),
                    Some("metadata.namespace".to_string())
                ),
            ])
        );
        let arenas = container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "MALLOC_ARENA_MAX")
            .and_then(|e| e.value.as_deref());
        assert_eq!(arenas, Some("2"), "glibc heap arenas capped (footprint)");
        let ports: Vec<_> = container
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone().unwrap_or_default(), p.container_port))
            .collect();
        assert_eq!(
            ports,
            [
                ("metrics".to_string(), 8080),
                ("health".to_string(), 8081),
                ("webhook".to_string(), 9443)
            ]
        );
        let labels = deployment.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("app.kubernetes.io/version").map(String::as_str),
            Some(VERSION)
        );
    }
}

#[test]
fn deployments_are_probed_and_hardened() {
    let release = release();
    for deployment in deployments(&release.combined) {
        let name = deployment.metadata.name.clone().unwrap_or_default();
        let pod = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod spec");
        let container = only_container(deployment);

        for (probe, path) in [
            (&container.liveness_probe, "/healthz"),
            (&container.readiness_probe, "/readyz"),
        ] {
            let get = probe
                .as_ref()
                .and_then(|p| p.http_get.as_ref())
                .unwrap_or_else(|| panic!("{name}: {path} probe"));
            assert_eq!(get.path.as_deref(), Some(path), "{name}");
            assert_eq!(
                serde_json::to_value(&get.port).unwrap(),
                serde_json::json!("health"),
                "{name}"
            );
        }

        let resources = container.resources.as_ref().expect("resources");
        for (what, map) in [
            ("requests", &resources.requests),
            ("limits", &resources.limits),
        ] {
            let map = map.clone().unwrap_or_default();
            assert!(
                map.contains_key("cpu") && map.contains_key("memory"),
                "{name}: {what} has cpu and memory"
            );
        }

        let pod_security = pod.security_context.as_ref().expect("pod securityContext");
        assert_eq!(pod_security.run_as_non_root, Some(true), "{name}");
        assert_eq!(
            pod_security
                .seccomp_profile
                .as_ref()
                .map(|s| s.type_.as_str()),
            Some("RuntimeDefault"),
            "{name}"
        );
        let security = container
            .security_context
            .as_ref()
            .expect("container securityContext");
        assert_eq!(security.run_as_non_root, Some(true), "{name}");
        assert_eq!(security.allow_privilege_escalation, Some(false), "{name}");
        assert_eq!(security.read_only_root_filesystem, Some(true), "{name}");
        assert_ne!(security.privileged, Some(true), "{name}");
        let capabilities = security.capabilities.as_ref().expect("capabilities");
        assert_eq!(capabilities.drop.as_deref(), Some(&["ALL".to_string()][..]));
        assert!(capabilities.add.is_none(), "{name}: no capability added");

        // controller-common bounds in-flight work at 30 s on SIGTERM, then releases the Lease;
        // the kubelet must not kill the pod before that.
        assert!(
            pod.termination_grace_period_seconds.unwrap_or(30) > 30,
            "{name}: terminationGracePeriodSeconds leaves room for a clean shutdown"
        );

        // The token is mounted in the controller pod, which needs it, and nowhere else.
        assert_eq!(pod.automount_service_account_token, Some(true), "{name}");
        let account = pod.service_account_name.clone().unwrap_or_default();
        let service_account: &ServiceAccount = release
            .combined
            .iter()
            .find_map(|o| match o {
                TypedObject::ServiceAccount(sa)
                    if sa.metadata.name.as_deref() == Some(account.as_str()) =>
                {
                    Some(sa)
                }
                _ => None,
            })
            .expect("the pod's ServiceAccount ships with it");
        assert_eq!(service_account.automount_service_account_token, Some(false));
    }
}

#[test]
fn metrics_services_select_their_own_controller() {
    let release = release();
    let mut seen = Vec::new();
    for object in &release.combined {
        let TypedObject::Service(service) = object else {
            continue;
        };
        if !service
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .ends_with("-metrics")
        {
            continue;
        }
        let spec = service.spec.as_ref().expect("service spec");
        let selector = spec.selector.clone().unwrap_or_default();
        let port = &spec.ports.as_deref().unwrap_or_default()[0];
        assert_eq!((port.name.as_deref(), port.port), (Some("metrics"), 8080));
        let matching: Vec<_> = deployments(&release.combined)
            .into_iter()
            .filter(|d| {
                let labels = d
                    .spec
                    .as_ref()
                    .and_then(|s| s.template.metadata.as_ref())
                    .and_then(|m| m.labels.clone())
                    .unwrap_or_default();
                selector.iter().all(|(k, v)| labels.get(k) == Some(v))
            })
            .map(|d| d.metadata.name.clone().unwrap_or_default())
            .collect();
        assert!(!selector.is_empty());
        seen.push((service.metadata.name.clone().unwrap_or_default(), matching));
    }
    assert_eq!(
        seen,
        [
            (
                "sandbox-controller-metrics".to_string(),
                vec!["sandbox-controller".to_string()]
            ),
            (
                "extensions-controller-metrics".to_string(),
                vec!["extensions-controller".to_string()]
            ),
        ]
    );
}

/// Each CRD's conversion webhook is the Service of the controller that owns the CRD, in the
/// same file, on port 443 to the container port `webhook`, and the controller is told that
/// Service's name (it writes it into its certificate and the CRD).
#[test]
fn webhook_services_reach_the_controller_that_owns_the_crds() {
    let release = release();
    for (file, controller, crds) in [
        (&release.sandbox, "sandbox-controller", 1),
        (&release.extensions, "extensions-controller", 3),
    ] {
        let service_name = format!("{controller}-webhook");
        let service = file
            .iter()
            .find_map(|object| match object {
                TypedObject::Service(s) if s.metadata.name.as_deref() == Some(&service_name) => {
                    Some(s)
                }
                _ => None,
            })
            .unwrap_or_else(|| panic!("Service {service_name} in the {controller} file"));
        let spec = service.spec.as_ref().unwrap();
        let ports = spec.ports.as_deref().unwrap_or_default();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].port, 443);
        assert_eq!(ports[0].name.as_deref(), Some("webhook"));
        assert_eq!(
            ports[0].target_port,
            Some(IntOrString::String("webhook".into()))
        );
        let deployment = deployments(file)[0];
        let pod_labels = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        assert!(!selector.is_empty());
        assert!(selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)));
        let args = only_container(deployment).args.clone().unwrap_or_default();
        assert!(args.contains(&format!("--webhook-service-name={service_name}")));

        let mut pointing = 0;
        for object in file.iter() {
            let TypedObject::CustomResourceDefinition(crd) = object else {
                continue;
            };
            let service = crd
                .spec
                .conversion
                .as_ref()
                .and_then(|c| c.webhook.as_ref())
                .and_then(|w| w.client_config.as_ref())
                .and_then(|c| c.service.as_ref())
                .expect("webhook conversion");
            assert_eq!(service.name, service_name);
            assert_eq!(service.namespace, NAMESPACE);
            assert_eq!(service.path.as_deref(), Some("/convert"));
            pointing += 1;
        }
        assert_eq!(pointing, crds);
    }
}

#[test]
fn extensions_controller_mounts_the_optional_label_domain_config() {
    let release = release();
    let deployment = deployments(&release.extensions)[0];
    let pod = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "config")
        .expect("volume");
    let config_map = volume.config_map.as_ref().expect("configMap volume");
    assert_eq!(config_map.name, "agent-sandbox-config");
    assert_eq!(config_map.optional, Some(true));
    let mount = only_container(deployment)
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "config")
        .expect("mount");
    assert_eq!(mount.mount_path, "/etc/sandbox-config");
    assert_eq!(mount.read_only, Some(true));
}

#[test]
fn release_crds_equal_the_committed_deploy_crds() {
    let release = release();
    let committed: Vec<TypedObject> = all_crd_files()
        .expect("CRDs render")
        .iter()
        .map(|file: &CrdFile| {
            let path = crds_dir().join(&file.file_name);
            let text = fs::read_to_string(&path).expect("committed CRD file exists");
            let mut objects = parse_typed_manifest(&text, &file.file_name).expect("typed");
            assert_eq!(objects.len(), 1);
            objects.remove(0)
        })
        .collect();
    let released: Vec<&TypedObject> = release
        .combined
        .iter()
        .filter(|o| matches!(o, TypedObject::CustomResourceDefinition(_)))
        .collect();
    assert_eq!(released.len(), 4);
    assert_eq!(released, committed.iter().collect::<Vec<_>>());
    let drift = compare_crd_dir(&all_crd_files().unwrap(), &crds_dir()).unwrap();
    assert!(drift.is_clean(), "{drift:?}: run `cargo xtask crds`");
}

/// `kubectl apply` (client-side) stores the whole object as JSON in the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation, and annotations are limited
/// to 262144 bytes in total, so a bigger CRD can only be installed with `--server-side`.
#[test]
fn every_crd_fits_kubectls_last_applied_annotation() {
    for file in all_crd_files().unwrap() {
        let documents = parse_documents(&file.contents, &file.file_name).unwrap();
        let json = serde_json::to_string(&documents[0]).unwrap();
        assert!(
            json.len() < 262_144,
            "{} is {} bytes as JSON",
            file.file_name,
            json.len()
        );
    }
}

/// Every hand-written YAML file in deploy/ ships in a release: a piece added to the directory
/// but not to the release would silently never reach a cluster.
#[test]
fn every_piece_in_deploy_ships() {
    use xtask::release::pieces::{CORE_PIECES, EXTENSIONS_PIECES, NAMESPACE_PIECE};

    fn walk(dir: &std::path::Path, prefix: &str, out: &mut BTreeSet<String>) {
        for entry in fs::read_dir(dir).expect("deploy/ is readable") {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = format!("{prefix}{name}");
            if entry.file_type().unwrap().is_dir() {
                if relative != "crds" {
                    walk(&entry.path(), &format!("{relative}/"), out);
                }
            } else if name.ends_with(".yaml") || name.ends_with(".yml") {
                out.insert(relative);
            }
        }
    }
    let mut on_disk = BTreeSet::new();
    walk(&deploy_dir(), "", &mut on_disk);
    let shipped: BTreeSet<String> = std::iter::once(NAMESPACE_PIECE)
        .chain(CORE_PIECES.iter().copied())
        .chain(EXTENSIONS_PIECES.iter().copied())
        .map(String::from)
        .collect();
    assert_eq!(on_disk, shipped);
}
