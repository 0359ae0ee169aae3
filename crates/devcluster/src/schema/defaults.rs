//! Structural defaulting, and the CRD-time check that every `default` is itself valid.

use serde_json::Value;

use super::FieldError;
use super::node::{Additional, Node};

/// Applies defaults to a whole object (see [`crate::schema::StructuralSchema::apply_defaults`]).
pub(crate) fn apply_root(root: &Node, obj: &mut Value) {
    apply(root, obj);
}

fn wants_default(node: &Node, value: Option<&Value>) -> bool {
    node.default.is_some()
        && match value {
            None => true,
            Some(Value::Null) => !node.nullable,
            Some(_) => false,
        }
}

fn apply(node: &Node, value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (name, child) in &node.properties {
                if wants_default(child, map.get(name))
                    && let Some(d) = &child.default
                {
                    map.insert(name.clone(), d.clone());
                }
            }
            let additional = match &node.additional {
                Some(Additional::Schema(n)) => Some(n.as_ref()),
                _ => None,
            };
            for (key, v) in map.iter_mut() {
                let child = match node.properties.get(key) {
                    Some(c) => Some(c),
                    None => additional,
                };
                if let Some(child) = child {
                    if v.is_null()
                        && !child.nullable
                        && let Some(d) = &child.default
                    {
                        *v = d.clone();
                    }
                    apply(child, v);
                }
            }
            // Non-nullable nulls without a default are dropped, as the real server does before
            // validation.
            map.retain(|key, v| {
                if !v.is_null() {
                    return true;
                }
                let child = match node.properties.get(key) {
                    Some(c) => Some(c),
                    None => additional,
                };
                match child {
                    Some(c) => c.nullable || c.default.is_some(),
                    None => true,
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for item in items.iter_mut() {
                    if item.is_null()
                        && !item_node.nullable
                        && let Some(d) = &item_node.default
                    {
                        *item = d.clone();
                    }
                    apply(item_node, item);
                }
            }
        }
        _ => {}
    }
}

/// The CRD-time checks of every `default`, as the real server makes them: none inside the
/// top-level `metadata`; each must be pruned already (`must not have unknown fields`) and must
/// validate against its own schema.
pub(crate) fn check_defaults_root(root: &Node, path: &str, errors: &mut Vec<FieldError>) {
    for (name, child) in &root.properties {
        let child_path = format!("{path}.properties[{name}]");
        if name == "metadata" {
            forbid_defaults(child, &child_path, errors);
        } else {
            check_defaults(child, &child_path, errors);
        }
    }
    if let Some(items) = &root.items {
        check_defaults(items, &format!("{path}.items"), errors);
    }
}

fn forbid_defaults(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    if node.default.is_some() {
        errors.push(FieldError::new(
            &format!("{path}.default"),
            super::FieldErrorKind::Forbidden,
            None,
            "must not be set in top-level metadata",
        ));
    }
    for (name, child) in &node.properties {
        forbid_defaults(child, &format!("{path}.properties[{name}]"), errors);
    }
}

fn check_defaults(node: &Node, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(d) = &node.default {
        let default_path = format!("{path}.default");
        let mut pruned = d.clone();
        super::prune::prune_value(node, &mut pruned);
        if &pruned != d {
            errors.push(FieldError::new(
                &default_path,
                super::FieldErrorKind::Invalid,
                Some(d.clone()),
                "must not have unknown fields",
            ));
        } else {
            for mut e in super::validate::validate_value(node, d, "", None) {
                e.path = if e.path.is_empty() || e.path == "<nil>" {
                    default_path.clone()
                } else {
                    format!("{default_path}.{}", e.path.trim_start_matches('.'))
                };
                errors.push(e);
            }
        }
    }
    for (name, child) in &node.properties {
        check_defaults(child, &format!("{path}.properties[{name}]"), errors);
    }
    if let Some(Additional::Schema(child)) = &node.additional {
        check_defaults(child, &format!("{path}.additionalProperties"), errors);
    }
    if let Some(items) = &node.items {
        check_defaults(items, &format!("{path}.items"), errors);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::schema::StructuralSchema;

    fn schema(v: serde_json::Value) -> StructuralSchema {
        StructuralSchema::from_openapi(&v).unwrap()
    }

    #[test]
    fn defaults_apply_only_where_the_parent_exists() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "mode": {"type": "string", "default": "Running"},
                    "nested": {"type": "object", "properties": {"x": {"type": "integer", "default": 3}}}
                }}
            }
        }));
        let mut without_spec = json!({"metadata": {"name": "a"}});
        s.apply_defaults(&mut without_spec);
        assert_eq!(without_spec, json!({"metadata": {"name": "a"}}));

        let mut with_spec = json!({"spec": {}});
        s.apply_defaults(&mut with_spec);
        assert_eq!(with_spec, json!({"spec": {"mode": "Running"}}));

        let mut with_nested = json!({"spec": {"mode": "Suspended", "nested": {}}});
        s.apply_defaults(&mut with_nested);
        assert_eq!(
            with_nested,
            json!({"spec": {"mode": "Suspended", "nested": {"x": 3}}})
        );
    }

    #[test]
    fn an_object_default_is_itself_defaulted() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "default": {}, "properties": {
                    "a": {"type": "string", "default": "x"}
                }}
            }
        }));
        let mut obj = json!({});
        s.apply_defaults(&mut obj);
        assert_eq!(obj, json!({"spec": {"a": "x"}}));
    }

    #[test]
    fn nulls_take_the_default_or_are_dropped_unless_nullable() {
        let s = schema(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "d": {"type": "string", "default": "dv"},
                "n": {"type": "string", "nullable": true},
                "p": {"type": "string"}
            }}}
        }));
        let mut obj = json!({"spec": {"d": null, "n": null, "p": null}});
        s.apply_defaults(&mut obj);
        assert_eq!(obj, json!({"spec": {"d": "dv", "n": null}}));
    }

    #[test]
    fn map_values_and_list_items_are_defaulted() {
        let s = schema(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "ports": {"type": "array", "items": {"type": "object", "properties": {
                    "protocol": {"type": "string", "default": "TCP"}
                }}},
                "byName": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "on": {"type": "boolean", "default": false}
                }}}
            }}}
        }));
        let mut obj = json!({"spec": {"ports": [{}, {"protocol": "UDP"}], "byName": {"a": {}}}});
        s.apply_defaults(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"ports": [{"protocol": "TCP"}, {"protocol": "UDP"}], "byName": {"a": {"on": false}}}})
        );
    }

    #[test]
    fn defaults_with_unknown_fields_or_in_metadata_reject_the_schema() {
        let err = StructuralSchema::from_openapi(&json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string", "default": "x"}}},
                "spec": {"type": "object", "default": {"a": "1", "zzz": 2}, "properties": {"a": {"type": "string"}}}
            }
        }))
        .unwrap_err();
        let msgs: Vec<String> = err.field_errors().iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "openAPIV3Schema.properties[metadata].properties[name].default: Forbidden: must not be set in top-level metadata",
                "openAPIV3Schema.properties[spec].default: Invalid value: map[string]interface {}{\"a\":\"1\", \"zzz\":2}: must not have unknown fields",
            ]
        );
    }

    #[test]
    fn an_invalid_default_rejects_the_schema() {
        let err = StructuralSchema::from_openapi(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "mode": {"type": "string", "enum": ["A", "B"], "default": "C"}
            }}}
        }))
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "openAPIV3Schema.properties[spec].properties[mode].default: Unsupported value: \"C\": supported values: \"A\", \"B\""
        );
    }
}
