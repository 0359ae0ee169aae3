//! Every manifest users already apply (`<spec>/examples/`) must be accepted as-is: each
//! document of one of our kinds must deserialize into our Rust type without losing a field,
//! and must validate against our generated CRD schema (both as written and as our types
//! serialize it back). Skipped with a printed line where the examples are absent
//! (`reference-spec`).

use std::path::{Path, PathBuf};

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn schema_of(crds: &[CustomResourceDefinition], kind: &str) -> Value {
    let crd = crds
        .iter()
        .find(|c| c.spec.names.kind == kind)
        .unwrap_or_else(|| panic!("no CRD for {kind}"));
    let schema = crd.spec.versions[0]
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap_or_else(|| panic!("CRD for {kind} has no schema"));
    serde_json::to_value(schema).unwrap()
}

/// Paths (JSON pointers) of `original` whose value is missing or different in `round_tripped`.
/// Empty maps and lists count as absent (the Go types omit them too).
fn lost_fields(
    pointer: &str,
    original: &Value,
    round_tripped: Option<&Value>,
    out: &mut Vec<String>,
) {
    match original {
        Value::Object(map) => {
            for (key, value) in map {
                let child = format!("{pointer}/{key}");
                let other = round_tripped.and_then(|r| r.get(key));
                lost_fields(&child, value, other, out);
            }
        }
        Value::Array(items) => {
            for (i, value) in items.iter().enumerate() {
                let other = round_tripped.and_then(|r| r.get(i));
                lost_fields(&format!("{pointer}/{i}"), value, other, out);
            }
        }
        Value::Null => {}
        leaf => {
            let same = match (leaf, round_tripped) {
                (Value::Number(a), Some(Value::Number(b))) => a.as_f64() == b.as_f64(),
                // A resource.Quantity written as a number is kept as its string form (Go does
                // the same).
                (Value::Number(a), Some(Value::String(b))) => b.parse::<f64>().ok() == a.as_f64(),
                (a, Some(b)) => a == b,
                (_, None) => false,
            };
            if !same {
                out.push(format!(
                    "{pointer}: {leaf} became {}",
                    round_tripped.map_or("<absent>".into(), Value::to_string)
                ));
            }
        }
    }
}

fn check<K: DeserializeOwned + serde::Serialize>(document: &Value, schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let validator = jsonschema::validator_for(schema).expect("our CRD schema compiles");
    for error in validator.iter_errors(document) {
        problems.push(format!(
            "as written, schema rejects {}: {error}",
            error.instance_path()
        ));
    }
    let typed: K = match serde_json::from_value(document.clone()) {
        Ok(typed) => typed,
        Err(e) => {
            problems.push(format!("does not deserialize into our type: {e}"));
            return problems;
        }
    };
    let round_tripped = serde_json::to_value(&typed).unwrap();
    let mut lost = Vec::new();
    lost_fields("", document, Some(&round_tripped), &mut lost);
    problems.extend(lost.into_iter().map(|l| format!("lost in round trip: {l}")));
    for error in validator.iter_errors(&round_tripped) {
        problems.push(format!(
            "as we serialize it, schema rejects {}: {error}",
            error.instance_path()
        ));
    }
    problems
}

fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|document| {
            Value::deserialize(document)
                .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", file.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn every_example_manifest_of_our_kinds_is_accepted() {
    let Some(dir) = reference_spec::examples() else {
        return;
    };
    let crds: Vec<_> = api_types::core_crds()
        .into_iter()
        .chain(api_types::extension_crds())
        .collect();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();

    let mut checked = 0;
    let mut failures = Vec::new();
    for file in &files {
        for (index, document) in documents(file).iter().enumerate() {
            let api_version = document
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let kind = document.get("kind").and_then(Value::as_str).unwrap_or("");
            let group = api_version.split('/').next().unwrap_or("");
            let problems = match (group, kind) {
                ("agents.x-k8s.io", "Sandbox") => {
                    check::<Sandbox>(document, &schema_of(&crds, kind))
                }
                ("extensions.agents.x-k8s.io", "SandboxTemplate") => {
                    check::<SandboxTemplate>(document, &schema_of(&crds, kind))
                }
                ("extensions.agents.x-k8s.io", "SandboxWarmPool") => {
                    check::<SandboxWarmPool>(document, &schema_of(&crds, kind))
                }
                ("extensions.agents.x-k8s.io", "SandboxClaim") => {
                    check::<SandboxClaim>(document, &schema_of(&crds, kind))
                }
                _ => continue,
            };
            checked += 1;
            let mut problems = problems;
            if !api_version.ends_with("/v1beta1") {
                problems.push(format!(
                    "apiVersion {api_version} is not served (only v1beta1)"
                ));
            }
            let name = file.file_name().unwrap().to_string_lossy();
            failures.extend(
                problems
                    .into_iter()
                    .map(|p| format!("{name} document {index} ({kind}): {p}")),
            );
        }
    }
    assert!(
        checked > 0,
        "no manifest of our kinds found in {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} problem(s) in {checked} manifests:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!("{checked} manifests of our kinds accepted");
}
