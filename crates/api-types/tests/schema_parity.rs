//! Schema parity with the reference implementation's CRDs.
//!
//! Walks the `openAPIV3Schema` of every version (`v1beta1` and `v1alpha1`) of every reference CRD
//! in `<spec>/reference-crds/` next to ours and fails on every property path whose schema
//! keywords differ (type, format, enum, default, required, nullable, validation limits, CEL rules
//! and the `x-kubernetes-*` markers), and on properties that exist on only one side.
//! Descriptions are ignored: the reference is generated with `maxDescLen=0`. Intentional
//! differences live in [`ALLOWED_DIFFERENCES`].
//!
//! The other tests compare what the API server does with each version (served, storage,
//! deprecation, printer columns, subresources), the version order, and the conversion block.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// `(crd name, version, property path, what differs, one-line reason)`. Paths look like
/// `.spec.podTemplate.spec.containers[].ports[].protocol`; `what` is a schema keyword, or
/// `missing` (only the reference has the property) / `extra` (only ours has it).
const ALLOWED_DIFFERENCES: &[(&str, &str, &str, &str, &str)] = &[];

/// The versions every CRD serves, in the order the CRDs list them.
const VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];

/// `$AGENT_SANDBOX_SPEC_DIR`, else `<CARGO_MANIFEST_DIR>/../../../shared/spec` (CI layout), else
/// the nearest `shared/spec` above the crate (a git worktree nested deeper).
fn spec_dir() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = match std::env::var_os("AGENT_SANDBOX_SPEC_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => manifest_dir
            .ancestors()
            .skip(3)
            .map(|ancestor| ancestor.join("shared/spec"))
            .find(|candidate| candidate.is_dir())
            .unwrap_or_else(|| manifest_dir.join("../../../shared/spec")),
    };
    assert!(
        dir.join("reference-crds").is_dir(),
        "spec directory {} has no reference-crds/; set AGENT_SANDBOX_SPEC_DIR to the folder holding api.md, examples/ and reference-crds/",
        dir.display()
    );
    dir
}

/// Keywords that are recursed into rather than compared directly.
const STRUCTURAL: &[&str] = &["properties", "items", "additionalProperties", "description"];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    path: String,
    what: String,
    reference: String,
    ours: String,
}

fn show(v: Option<&Value>) -> String {
    match v {
        None => "<absent>".to_owned(),
        Some(v) => v.to_string(),
    }
}

/// JSON equality that treats `0` and `0.0` as the same number and `required` as a set.
fn same_value(key: &str, a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) if key == "required" => {
            let x: BTreeSet<String> = x.iter().map(Value::to_string).collect();
            let y: BTreeSet<String> = y.iter().map(Value::to_string).collect();
            x == y
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same_value("", x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, xv)| y.get(k).is_some_and(|yv| same_value(k, xv, yv)))
        }
        _ => a == b,
    }
}

fn walk(path: &str, reference: &Value, ours: &Value, out: &mut Vec<Difference>) {
    let empty = serde_json::Map::new();
    let r = reference.as_object().unwrap_or(&empty);
    let o = ours.as_object().unwrap_or(&empty);
    let keys: BTreeSet<&String> = r.keys().chain(o.keys()).collect();
    for key in keys {
        if STRUCTURAL.contains(&key.as_str()) {
            continue;
        }
        let (rv, ov) = (r.get(key), o.get(key));
        let same = match (rv, ov) {
            (Some(a), Some(b)) => same_value(key, a, b),
            (None, None) => true,
            _ => false,
        };
        if !same {
            out.push(Difference {
                path: path.to_owned(),
                what: key.clone(),
                reference: show(rv),
                ours: show(ov),
            });
        }
    }
    let rp = r
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let op = o
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let names: BTreeSet<&String> = rp.keys().chain(op.keys()).collect();
    for name in names {
        let child = format!("{path}.{name}");
        match (rp.get(name), op.get(name)) {
            (Some(a), Some(b)) => walk(&child, a, b, out),
            (Some(_), None) => out.push(Difference {
                path: child,
                what: "missing".into(),
                reference: "present".into(),
                ours: "<absent>".into(),
            }),
            (None, Some(_)) => out.push(Difference {
                path: child,
                what: "extra".into(),
                reference: "<absent>".into(),
                ours: "present".into(),
            }),
            (None, None) => {}
        }
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        match (r.get(key), o.get(key)) {
            (Some(a @ Value::Object(_)), Some(b @ Value::Object(_))) => {
                walk(&format!("{path}{suffix}"), a, b, out)
            }
            (None, None) => {}
            (a, b) if a.is_some() && b.is_some() && a == b => {}
            (a, b) => out.push(Difference {
                path: path.to_owned(),
                what: key.to_owned(),
                reference: show(a),
                ours: show(b),
            }),
        }
    }
}

fn version_of(crd: &Value, version: &str) -> Option<Value> {
    crd.pointer("/spec/versions")?
        .as_array()?
        .iter()
        .find(|v| v.get("name").and_then(Value::as_str) == Some(version))
        .cloned()
}

fn schema_of(crd: &Value, version: &str) -> Option<Value> {
    version_of(crd, version)?
        .pointer("/schema/openAPIV3Schema")
        .cloned()
}

/// The four reference CRDs as JSON, by name.
fn reference_crds() -> BTreeMap<String, Value> {
    let dir = spec_dir().join("reference-crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        4,
        "expected the four reference CRDs in {}",
        dir.display()
    );
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).unwrap();
            let reference: Value = serde_yaml::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
            let name = reference
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap()
                .to_owned();
            (name, reference)
        })
        .collect()
}

fn our_crds() -> BTreeMap<String, CustomResourceDefinition> {
    api_types::core_crds()
        .into_iter()
        .chain(api_types::extension_crds())
        .map(|crd| (crd.metadata.name.clone().unwrap_or_default(), crd))
        .collect()
}

#[test]
fn schemas_of_both_versions_match_the_reference_crds_path_by_path() {
    let ours = our_crds();
    let mut report = Vec::new();
    let mut used_allowances = BTreeSet::new();
    for (name, reference) in reference_crds() {
        let Some(crd) = ours.get(&name) else {
            report.push(format!("{name}: we generate no such CRD"));
            continue;
        };
        let ours = serde_json::to_value(crd).unwrap();
        for version in VERSIONS {
            let reference_schema = schema_of(&reference, version)
                .unwrap_or_else(|| panic!("reference {name} has no {version} schema"));
            let Some(our_schema) = schema_of(&ours, version) else {
                report.push(format!("{name}: we have no {version} openAPIV3Schema"));
                continue;
            };
            let mut diffs = Vec::new();
            walk("", &reference_schema, &our_schema, &mut diffs);
            for d in diffs {
                let allowed = ALLOWED_DIFFERENCES
                    .iter()
                    .position(|(crd, v, path, what, _)| {
                        *crd == name && *v == version && *path == d.path && *what == d.what
                    });
                match allowed {
                    Some(i) => {
                        used_allowances.insert(i);
                    }
                    None => report.push(format!(
                        "{name} {version}: {} [{}] reference={} ours={}",
                        if d.path.is_empty() { "<root>" } else { &d.path },
                        d.what,
                        d.reference,
                        d.ours
                    )),
                }
            }
        }
    }
    for (i, (crd, version, path, what, reason)) in ALLOWED_DIFFERENCES.iter().enumerate() {
        if !used_allowances.contains(&i) {
            report.push(format!(
                "stale allow-list entry ({crd} {version}, {path}, {what}: {reason}): no longer differs"
            ));
        }
    }
    assert!(
        report.is_empty(),
        "{} schema difference(s) from the reference CRDs:\n{}",
        report.len(),
        report.join("\n")
    );
}

/// Everything of each version and the CRD names except the schema: printer columns,
/// subresources (status, scale paths), served/storage, deprecation and its warning, the order of
/// the versions, and names, scope and group.
#[test]
fn versions_names_columns_and_subresources_match_the_reference_crds() {
    let ours = our_crds();
    let mut report = Vec::new();
    for (name, reference) in reference_crds() {
        let Some(crd) = ours.get(&name) else {
            report.push(format!("{name}: we generate no such CRD"));
            continue;
        };
        let ours = serde_json::to_value(crd).unwrap();
        for pointer in ["/spec/group", "/spec/scope", "/spec/names"] {
            if reference.pointer(pointer) != ours.pointer(pointer) {
                report.push(format!(
                    "{name}: {pointer} reference={} ours={}",
                    show(reference.pointer(pointer)),
                    show(ours.pointer(pointer))
                ));
            }
        }
        let names = |crd: &Value| -> Vec<String> {
            crd.pointer("/spec/versions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|v| v.get("name").and_then(Value::as_str).map(String::from))
                .collect()
        };
        if names(&reference) != names(&ours) {
            report.push(format!(
                "{name}: versions reference={:?} ours={:?}",
                names(&reference),
                names(&ours)
            ));
        }
        for version in VERSIONS {
            let (reference_version, our_version) =
                (version_of(&reference, version), version_of(&ours, version));
            for key in [
                "additionalPrinterColumns",
                "subresources",
                "served",
                "storage",
                "deprecated",
                "deprecationWarning",
                "selectableFields",
            ] {
                let r = reference_version.as_ref().and_then(|v| v.get(key));
                let o = our_version.as_ref().and_then(|v| v.get(key));
                if r != o {
                    report.push(format!(
                        "{name}: {version} {key} reference={} ours={}",
                        show(r),
                        show(o)
                    ));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "differences from the reference CRDs:\n{}",
        report.join("\n")
    );
}

/// The reference's conversion block, except that each CRD points at the Service of the
/// controller that owns it (the reference has one controller and one Service for all four).
#[test]
fn conversion_blocks_match_the_reference_but_name_each_controllers_service() {
    let ours = our_crds();
    let mut report = Vec::new();
    for (name, reference) in reference_crds() {
        let Some(crd) = ours.get(&name) else {
            report.push(format!("{name}: we generate no such CRD"));
            continue;
        };
        let ours = serde_json::to_value(crd).unwrap();
        let mut expected = reference
            .pointer("/spec/conversion")
            .cloned()
            .unwrap_or_else(|| panic!("reference {name} has no conversion block"));
        let service = if name == "sandboxes.agents.x-k8s.io" {
            "sandbox-controller-webhook"
        } else {
            "extensions-controller-webhook"
        };
        expected["webhook"]["clientConfig"]["service"]["name"] = Value::from(service);
        if ours.pointer("/spec/conversion") != Some(&expected) {
            report.push(format!(
                "{name}: conversion expected={expected} ours={}",
                show(ours.pointer("/spec/conversion"))
            ));
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}
