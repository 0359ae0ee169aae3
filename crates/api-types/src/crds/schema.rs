//! Turns the schemars output for our Rust types into a CRD structural schema shaped like the
//! reference's controller-gen output.
//!
//! Steps: generate with named definitions (not inlined); inline every `$ref`, giving each named
//! type its [`markers`](super::markers) (Kubernetes list/map markers, defaults and validations
//! that k8s-openapi's schemas do not carry); drop `null` from optional types (the reference
//! marks nothing `nullable`); turn enums with documented variants into plain `enum` lists.
//!
//! Descriptions (what `kubectl explain` shows) come from the doc comments of this crate's types
//! and fields: the first paragraph of each, as one line without Markdown code marks; later
//! paragraphs are notes for developers and stay out of the CRD. The descriptions of the embedded
//! Kubernetes types (`PodSpec`, `Condition`, ...) are dropped: they are long (a Sandbox CRD with
//! them would not fit kubectl's last-applied annotation) and documented upstream. Titles are
//! dropped. The reference's CRDs carry no descriptions (`maxDescLen=0`); the schema-parity test
//! ignores them.

use std::collections::HashMap;

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

use super::markers;

/// The `openAPIV3Schema` of a kind whose spec is `Spec` and whose status (if any) is `Status`,
/// described as `description` (what `kubectl explain <kind>` shows first).
pub(crate) fn kind_schema<Spec: JsonSchema, Status: JsonSchema>(
    with_status: bool,
    description: &str,
) -> Value {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.inline_subschemas = false;
        s.meta_schema = None;
        s.transforms.clear();
    });
    let mut generator = SchemaGenerator::new(settings);
    let spec = generator.subschema_for::<Spec>().to_value();
    let status = with_status.then(|| generator.subschema_for::<Status>().to_value());
    let definitions = generator.take_definitions(false);

    let mut properties = Map::new();
    properties.insert(
        "apiVersion".into(),
        json!({"type": "string", "description": "The API group and version of this object."}),
    );
    properties.insert(
        "kind".into(),
        json!({"type": "string", "description": "The kind of this object."}),
    );
    // kube-apiserver refuses a CRD whose root `metadata` schema says anything but its type
    // (not even a description): "must not specify anything other than name and generateName".
    properties.insert("metadata".into(), json!({"type": "object"}));
    properties.insert("spec".into(), spec);
    if let Some(status) = status {
        properties.insert("status".into(), status);
    }
    let mut root = json!({
        "type": "object",
        "description": description,
        "properties": properties,
        "required": ["spec"],
    });
    inline_refs(&mut root, &definitions, &mut HashMap::new(), 0);
    normalize(&mut root);
    root
}

/// Replaces `{"$ref": "#/…/Name", …}` by the definition of `Name` (itself fully inlined, then
/// given its [`markers`]); sibling keywords of the `$ref` (a field's own `default`,
/// `x-kubernetes-*`, …) win over the definition's. `inlined` caches finished definitions.
fn inline_refs(
    schema: &mut Value,
    definitions: &Map<String, Value>,
    inlined: &mut HashMap<String, Map<String, Value>>,
    depth: usize,
) {
    // Kubernetes schemas are not recursive except JSONSchemaProps, which we do not embed.
    assert!(
        depth < 64,
        "schema nesting too deep: a recursive type cannot be a CRD schema"
    );
    match schema {
        Value::Object(object) => {
            for value in object.values_mut() {
                inline_refs(value, definitions, inlined, depth + 1);
            }
            if let Some(Value::String(reference)) = object.remove("$ref") {
                let name = reference.rsplit('/').next().unwrap_or_default().to_owned();
                if !inlined.contains_key(&name) {
                    let Some(definition) = definitions.get(&name) else {
                        panic!("schema refers to unknown definition {reference}");
                    };
                    let mut definition = definition.clone();
                    if name.starts_with(KUBERNETES_DEFINITIONS) {
                        strip_descriptions(&mut definition);
                    }
                    inline_refs(&mut definition, definitions, inlined, depth + 1);
                    markers::apply(&name, &mut definition);
                    let Value::Object(definition) = definition else {
                        panic!("definition {name} is not a schema object");
                    };
                    inlined.insert(name.clone(), definition);
                }
                let siblings = std::mem::take(object);
                *object = inlined[&name].clone();
                for (key, value) in siblings {
                    object.insert(key, value);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                inline_refs(item, definitions, inlined, depth + 1);
            }
        }
        _ => {}
    }
}

/// Prefix of the schemars names of k8s-openapi's types.
const KUBERNETES_DEFINITIONS: &str = "io.k8s.";

/// Removes every `description` (and `title`) of `schema` and of the schemas below it.
fn strip_descriptions(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    object.remove("description");
    object.remove("title");
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                properties.values_mut().for_each(strip_descriptions)
            }
            ("items" | "additionalProperties" | "not", value) => strip_descriptions(value),
            ("anyOf" | "oneOf" | "allOf", Value::Array(alternatives)) => {
                alternatives.iter_mut().for_each(strip_descriptions)
            }
            // `default`, `enum`, `x-kubernetes-*`, ... hold values, not schemas.
            _ => {}
        }
    }
}

/// The user-facing description of a doc comment: its first paragraph on one line, without
/// Markdown code marks and intra-doc link brackets; `None` when that leaves nothing.
pub(crate) fn user_description(doc: &str) -> Option<String> {
    let paragraph = doc
        .trim()
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let text = paragraph
        .replace("[`", "")
        .replace("`]", "")
        .replace('`', "");
    (!text.is_empty()).then_some(text)
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type") == Some(&Value::from("null"))
        || schema.get("const") == Some(&Value::Null)
        || schema.get("enum") == Some(&json!([null]))
}

/// The values of a `oneOf` whose alternatives are all single string constants (what schemars
/// emits for a unit-only enum whose variants carry doc comments).
fn enum_constants(one_of: &Value) -> Option<Vec<Value>> {
    let alternatives = one_of.as_array()?;
    alternatives
        .iter()
        .map(|alternative| {
            let value = match alternative.get("const") {
                Some(value) => value.clone(),
                None => match alternative.get("enum")?.as_array()?.as_slice() {
                    [value] => value.clone(),
                    _ => return None,
                },
            };
            value.is_string().then_some(value)
        })
        .collect()
}

/// Removes `null` alternatives (`Option<T>`), `nullable` and titles, and turns descriptions into
/// their [`user_description`], recursively.
fn normalize(schema: &mut Value) {
    let Value::Object(object) = schema else {
        if let Value::Array(items) = schema {
            items.iter_mut().for_each(normalize);
        }
        return;
    };
    if let Some(Value::Array(alternatives)) = object.get_mut("anyOf") {
        alternatives.retain(|alternative| !is_null_schema(alternative));
        if alternatives.len() == 1 {
            let Some(Value::Object(only)) = alternatives.pop() else {
                unreachable!("anyOf alternatives are schemas")
            };
            object.remove("anyOf");
            for (key, value) in only {
                object.entry(key).or_insert(value);
            }
        }
    }
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let single = types.remove(0);
            object.insert("type".into(), single);
        }
    }
    if let Some(Value::String(doc)) = object.remove("description")
        && let Some(text) = user_description(&doc)
    {
        object.insert("description".into(), Value::String(text));
    }
    object.remove("title");
    object.remove("nullable");
    if let Some(values) = object.get("oneOf").and_then(enum_constants) {
        object.remove("oneOf");
        object.insert("type".into(), Value::from("string"));
        object.insert("enum".into(), Value::Array(values));
    }
    if let Some(Value::Array(values)) = object.get_mut("enum") {
        values.retain(|v| !v.is_null());
    }
    for (key, value) in object.iter_mut() {
        match (key.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                properties.values_mut().for_each(normalize)
            }
            ("items" | "additionalProperties" | "not", value) => normalize(value),
            ("anyOf" | "oneOf" | "allOf", Value::Array(alternatives)) => {
                alternatives.iter_mut().for_each(normalize)
            }
            // Everything else (`default`, `enum`, `x-kubernetes-*`, ...) holds values, not schemas.
            _ => {}
        }
    }
}
