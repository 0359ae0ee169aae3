//! The OpenAPI v3 documents kubectl reads: the `/openapi/v3` index and one document per
//! group-version (`/openapi/v3/api/v1`, `/openapi/v3/apis/G/V`).
//!
//! Each document lists every resource's paths and operations (with `x-kubernetes-action` and
//! `x-kubernetes-group-version-kind`, and the `fieldValidation` parameter so kubectl uses
//! server-side field validation). Custom resources also get their schema, taken from the CRD's
//! `openAPIV3Schema` for that version and named like a real server names it (the group's
//! domain reversed: `io.x-k8s.agents.v1beta1.Sandbox`), so `kubectl explain` works for them.
//! Built-in kinds get theirs from the k8s-openapi types (`openapi/builtin_schemas.rs`).
//! `/openapi/v2` is not served.

use std::sync::Arc;

use axum::response::Response;
use http::{HeaderMap, StatusCode};
use serde_json::{Map, Value, json};

use crate::api_error::ApiError;
use crate::discovery::{KUBE_MAJOR, KUBE_MINOR};
use crate::registry::ResourceInfo;
use crate::server::{SharedState, json_response};

mod builtin_schemas;

pub fn serve(
    state: &SharedState,
    rest: &[&str],
    _headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let infos = state.registry.all();
    let body = match rest {
        ["v3"] => index(&infos, state.store.current_rv()),
        ["v3", "api", v] => document(&infos, "", v).ok_or_else(ApiError::not_found_path)?,
        ["v3", "apis", g, v] => document(&infos, g, v).ok_or_else(ApiError::not_found_path)?,
        _ => return Err(ApiError::not_found_path()),
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// `{"paths": {"apis/G/V": {"serverRelativeURL": ...}}}`. The hash changes with every write,
/// so kubectl's on-disk cache never serves a schema older than the CRDs.
fn index(infos: &[Arc<ResourceInfo>], hash: u64) -> Value {
    let mut paths = Map::new();
    for info in infos {
        for v in &info.versions {
            let key = if info.group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{}/{v}", info.group)
            };
            paths.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash:016X}")}),
            );
        }
    }
    json!({"paths": paths})
}

/// The document of one group-version, or `None` when nothing is served there.
fn document(infos: &[Arc<ResourceInfo>], group: &str, version: &str) -> Option<Value> {
    let served: Vec<&Arc<ResourceInfo>> = infos
        .iter()
        .filter(|i| i.group == group && i.versions.iter().any(|v| v == version))
        .collect();
    if served.is_empty() {
        return None;
    }
    let mut paths = Map::new();
    let builtin_kinds: Vec<String> = served
        .iter()
        .filter(|i| !i.is_custom())
        .map(|i| i.kind.clone())
        .collect();
    let mut schemas = if builtin_kinds.is_empty() {
        Map::new()
    } else {
        (*builtin_schemas::schemas(group, version, &builtin_kinds)).clone()
    };
    if served.iter().any(|i| i.is_custom()) {
        for (name, schema) in builtin_schemas::object_meta().iter() {
            schemas.insert(name.clone(), schema.clone());
        }
    }
    for info in served {
        for (path, item) in resource_paths(info, version) {
            paths.insert(path, item);
        }
        for (name, schema) in custom_resource_schemas(info, version) {
            schemas.insert(name, schema);
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": format!("v{KUBE_MAJOR}.{KUBE_MINOR}.0-devcluster")},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

fn query_parameter(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// The paths of one resource: the collection, the items, and for namespaced resources the
/// list across namespaces (`kubectl explain` finds a kind's GVK on that path).
fn resource_paths(info: &ResourceInfo, version: &str) -> Vec<(String, Value)> {
    let prefix = if info.group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{}/{version}", info.group)
    };
    let gvk = json!({"group": info.group, "version": version, "kind": info.kind});
    let op = |action: &str, params: &[&str]| {
        json!({
            "operationId": format!("{action}{}", info.kind),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params.iter().map(|p| query_parameter(p)).collect::<Vec<_>>(),
            "responses": {"200": {"description": "OK"}},
        })
    };
    let json_body =
        json!({"content": {"application/json": {"schema": {"type": "object"}}}, "required": true});
    let mut patch_types = Map::new();
    for ct in [
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ] {
        patch_types.insert(ct.into(), json!({"schema": {"type": "object"}}));
    }
    let mut patch = op(
        "patch",
        &["dryRun", "fieldManager", "fieldValidation", "force"],
    );
    patch["requestBody"] = json!({"content": patch_types, "required": true});
    let mut put = op("put", &["dryRun", "fieldManager", "fieldValidation"]);
    put["requestBody"] = json_body.clone();
    let mut post = op("post", &["dryRun", "fieldManager", "fieldValidation"]);
    post["requestBody"] = json_body;
    let list = op("list", &["labelSelector", "fieldSelector"]);
    let item = json!({
        "get": op("get", &[]),
        "put": put,
        "patch": patch,
        "delete": op("delete", &["dryRun", "gracePeriodSeconds", "propagationPolicy"]),
    });
    let all_namespaces = format!("{prefix}/{}", info.plural);
    let base = if info.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        all_namespaces.clone()
    };
    let mut out = vec![
        (base.clone(), json!({"get": list, "post": post})),
        (format!("{base}/{{name}}"), item),
    ];
    if info.namespaced {
        out.push((
            all_namespaces,
            json!({"get": op("list", &["labelSelector", "fieldSelector"])}),
        ));
    }
    out
}

/// A group's name in schema names: its domain reversed (`agents.x-k8s.io` ->
/// `io.x-k8s.agents`).
fn reversed_group(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// The name a real server gives a custom resource's schema: `io.x-k8s.agents.v1beta1.Sandbox`.
pub fn schema_name(group: &str, version: &str, kind: &str) -> String {
    format!("{}.{version}.{kind}", reversed_group(group))
}

/// The schemas of a custom resource at `version` (the kind and its list), from the CRD's
/// `openAPIV3Schema`; none for built-in kinds or a version without a schema.
fn custom_resource_schemas(info: &ResourceInfo, version: &str) -> Vec<(String, Value)> {
    let Some(crd) = &info.crd else {
        return Vec::new();
    };
    let Some(declared) = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["name"] == version))
        .and_then(|v| v.pointer("/schema/openAPIV3Schema"))
        .filter(|s| s.is_object())
    else {
        return Vec::new();
    };
    let gvk = |kind: &str| json!([{"group": info.group, "version": version, "kind": kind}]);
    let mut schema = declared.clone();
    if let Some(o) = schema.as_object_mut() {
        o.entry("type").or_insert_with(|| json!("object"));
        let props = o.entry("properties").or_insert_with(|| json!({}));
        if let Some(props) = props.as_object_mut() {
            props.entry("apiVersion").or_insert_with(|| {
                json!({"type": "string", "description": "The group and version of the schema this object is written in."})
            });
            props.entry("kind").or_insert_with(|| {
                json!({"type": "string", "description": "The kind of the object (its REST resource is derived from it)."})
            });
            props.insert(
                "metadata".into(),
                json!({
                    "allOf": [{"$ref": format!("#/components/schemas/{}", builtin_schemas::OBJECT_META)}],
                    "description": "The object's metadata: name, namespace, labels, annotations, owner references and the fields the server maintains.",
                }),
            );
        }
        o.insert("x-kubernetes-group-version-kind".into(), gvk(&info.kind));
    }
    let name = schema_name(&info.group, version, &info.kind);
    let list = json!({
        "type": "object",
        "description": format!("A list of {}.", info.plural),
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object", "description": "The list's metadata: resourceVersion and continue token."},
            "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{name}")}},
        },
        "x-kubernetes-group-version-kind": gvk(&info.list_kind),
    });
    vec![
        (schema_name(&info.group, version, &info.list_kind), list),
        (name, schema),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "metadata": {"type": "object"},
                        "spec": {"type": "object", "description": "What the widget should be.",
                                 "properties": {"size": {"type": "integer", "description": "How big."}}},
                    }}},
                }],
            },
        })
    }

    fn infos() -> Vec<Arc<ResourceInfo>> {
        let crd_info = crate::crd::resource_info(&widget_crd()).expect("valid CRD");
        let reg = crate::registry::Registry::with_builtins();
        reg.insert(crd_info);
        reg.all()
    }

    #[test]
    fn schema_names_reverse_the_group_domain() {
        assert_eq!(
            schema_name("agents.x-k8s.io", "v1beta1", "Sandbox"),
            "io.x-k8s.agents.v1beta1.Sandbox"
        );
    }

    #[test]
    fn a_custom_resource_document_carries_its_schema_by_gvk() {
        let doc = document(&infos(), "example.com", "v1").expect("served");
        let schema = &doc["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            json!([{"group": "example.com", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(
            schema["properties"]["spec"]["properties"]["size"]["type"],
            "integer"
        );
        assert_eq!(schema["properties"]["kind"]["type"], "string");
        assert_eq!(
            doc["components"]["schemas"]["com.example.v1.WidgetList"]["properties"]["items"]["items"]
                ["$ref"],
            "#/components/schemas/com.example.v1.Widget"
        );
        // The all-namespaces list path names the kind, where kubectl explain looks for it.
        assert_eq!(
            doc["paths"]["/apis/example.com/v1/widgets"]["get"]["x-kubernetes-group-version-kind"]
                ["kind"],
            "Widget"
        );
        assert!(
            doc["paths"]["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"]
                .is_object()
        );
        assert!(document(&infos(), "example.com", "v2").is_none());
        assert_eq!(
            schema["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(
            doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
                .is_object()
        );
    }

    #[test]
    fn built_in_documents_have_paths_and_the_kinds_schemas() {
        let doc = document(&infos(), "", "v1").expect("core served");
        assert!(doc["paths"]["/api/v1/namespaces/{namespace}/pods"]["post"].is_object());
        let schemas = &doc["components"]["schemas"];
        for kind in ["Pod", "Namespace", "ConfigMap", "Event", "Node"] {
            assert_eq!(
                schemas[format!("io.k8s.api.core.v1.{kind}")]["x-kubernetes-group-version-kind"][0]
                    ["kind"],
                kind
            );
        }
        let index = index(&infos(), 7);
        assert_eq!(
            index["paths"]["apis/example.com/v1"]["serverRelativeURL"],
            "/openapi/v3/apis/example.com/v1?hash=0000000000000007"
        );
    }
}
