//! Discovery: `/version`, `/api`, `/apis`, `/apis/GROUP`, `/api/v1` and `/apis/GROUP/VERSION`
//! built from the registry (built-in kinds and CRD-served kinds alike). The OpenAPI documents
//! are in `openapi.rs`.

use std::collections::BTreeMap;

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::api_error::ApiError;
use crate::registry::ResourceInfo;
use crate::server::{SharedState, json_response};

/// The Kubernetes version devcluster reports (the API level of k8s-openapi's `v1_36`).
pub const KUBE_MAJOR: &str = "1";
pub const KUBE_MINOR: &str = "36";

pub fn version() -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "major": KUBE_MAJOR,
            "minor": KUBE_MINOR,
            "gitVersion": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-devcluster"),
            "gitCommit": "devcluster",
            "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": "n/a",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
        }),
    )
}

pub fn core_versions(_state: &SharedState, _headers: &HeaderMap) -> Response {
    json_response(
        StatusCode::OK,
        &json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        }),
    )
}

/// Groups (except the core group) with their served versions, preferred first.
fn group_versions(state: &SharedState) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for info in state.registry.all() {
        if info.group.is_empty() {
            continue;
        }
        let versions = out.entry(info.group.clone()).or_default();
        for v in &info.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    for versions in out.values_mut() {
        versions.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
    }
    out
}

/// Kubernetes version ordering: GA > beta > alpha, higher numbers first.
fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let major: u32 = digits.parse().unwrap_or(0);
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    (level, major, num.parse().unwrap_or(0))
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

pub fn groups(state: &SharedState, _headers: &HeaderMap) -> Response {
    let groups: Vec<Value> = group_versions(state)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
    )
}

pub fn group(state: &SharedState, name: &str) -> Result<Response, ApiError> {
    let all = group_versions(state);
    let versions = all.get(name).ok_or_else(ApiError::not_found_path)?;
    let mut body = group_json(name, versions);
    body["kind"] = json!("APIGroup");
    body["apiVersion"] = json!("v1");
    Ok(json_response(StatusCode::OK, &body))
}

fn resource_entries(info: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({
        "name": info.plural,
        "singularName": info.singular,
        "namespaced": info.namespaced,
        "kind": info.kind,
        "verbs": info.verbs(),
    });
    if !info.short_names.is_empty() {
        main["shortNames"] = json!(info.short_names);
    }
    if !info.categories.is_empty() {
        main["categories"] = json!(info.categories);
    }
    let mut out = vec![main];
    if info.has_status {
        out.push(json!({
            "name": format!("{}/status", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "kind": info.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if info.scale.is_some() {
        out.push(json!({
            "name": format!("{}/scale", info.plural),
            "singularName": "",
            "namespaced": info.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    if info.group.is_empty() && info.plural == "pods" {
        out.push(json!({"name": "pods/binding", "singularName": "", "namespaced": true, "kind": "Binding", "verbs": ["create"]}));
    }
    if info.group.is_empty() && info.plural == "namespaces" {
        out.push(json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace", "verbs": ["update"]}));
    }
    out
}

pub fn resources(state: &SharedState, group: &str, version: &str) -> Result<Response, ApiError> {
    let infos: Vec<_> = state
        .registry
        .all()
        .into_iter()
        .filter(|i| i.group == group && i.versions.iter().any(|v| v == version))
        .collect();
    if infos.is_empty() {
        return Err(ApiError::not_found_path());
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = infos
        .iter()
        .flat_map(|i| resource_entries(&i.at_version(version)))
        .collect();
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": group_version,
            "resources": resources,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_like_kubernetes() {
        let mut vs = vec!["v1alpha1", "v1beta1", "v1", "v2beta1", "v1beta2"];
        vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        assert_eq!(vs, vec!["v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1"]);
    }
}
