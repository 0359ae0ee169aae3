//! Pruning: dropping the fields a structural schema does not specify.

use serde_json::Value;

use super::node::{Additional, Node};

/// The fields of `ObjectMeta`; the metadata of an embedded resource keeps only these.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Prunes a whole object. `apiVersion`, `kind` and `metadata` at the top level are always kept;
/// `metadata` (top level and embedded) keeps the fields of ObjectMeta.
pub(crate) fn prune_root(root: &Node, obj: &mut Value) {
    prune_object(root, obj, true);
}

fn prune_object(node: &Node, value: &mut Value, is_resource_root: bool) {
    match value {
        Value::Object(map) => {
            let keep_all = node.preserve_unknown;
            let mut to_remove = Vec::new();
            for (key, child) in map.iter_mut() {
                if is_resource_root && (key == "apiVersion" || key == "kind") {
                    continue;
                }
                if is_resource_root && key == "metadata" {
                    // Not pruned by the schema, but read as an ObjectMeta, which drops what
                    // ObjectMeta does not have.
                    prune_object_meta(child);
                    continue;
                }
                if let Some(child_node) = node.properties.get(key) {
                    prune_value(child_node, child);
                } else {
                    match &node.additional {
                        Some(Additional::Schema(child_node)) => prune_value(child_node, child),
                        Some(Additional::Any) => {}
                        None if keep_all => {}
                        None => to_remove.push(key.clone()),
                    }
                }
            }
            for key in to_remove {
                map.remove(&key);
            }
        }
        Value::Array(items) => {
            if let Some(item_node) = &node.items {
                for item in items {
                    prune_value(item_node, item);
                }
            }
        }
        _ => {}
    }
}

pub(crate) fn prune_value(node: &Node, value: &mut Value) {
    prune_object(node, value, node.embedded);
}

fn prune_object_meta(meta: &mut Value) {
    if let Value::Object(map) = meta {
        map.retain(|k, _| OBJECT_META_FIELDS.contains(&k.as_str()));
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
    fn unknown_fields_are_dropped_and_metadata_keeps_object_meta_fields() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {"a": {"type": "string"}}}
            }
        }));
        let mut obj = json!({
            "apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "n", "labels": {"a": "b"}, "whatever": 1},
            "spec": {"a": "x", "b": "gone"},
            "extra": true
        });
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "x/v1", "kind": "K",
                "metadata": {"name": "n", "labels": {"a": "b"}},
                "spec": {"a": "x"}
            })
        );
    }

    #[test]
    fn preserve_unknown_fields_keeps_unknown_but_prunes_known_children() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "known": {"type": "object", "properties": {"a": {"type": "string"}}}
                    }
                }
            }
        }));
        let mut obj = json!({"spec": {"free": {"x": 1}, "known": {"a": "1", "b": 2}}});
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"free": {"x": 1}, "known": {"a": "1"}}})
        );
    }

    #[test]
    fn embedded_resources_keep_type_meta_and_object_meta_fields_only() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "template": {
                        "type": "object",
                        "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object", "properties": {"x": {"type": "integer"}}}}
                    }
                }}
            }
        }));
        let mut obj = json!({"spec": {"template": {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"x": 1, "y": 2},
            "status": {}
        }}});
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({"spec": {"template": {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"a": "b"}},
                "spec": {"x": 1}
            }}})
        );
    }

    #[test]
    fn arrays_and_maps_prune_their_items() {
        let s = schema(json!({
            "type": "object",
            "properties": {
                "list": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
                "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "integer"}}}}
            }
        }));
        let mut obj = json!({
            "list": [{"n": "a", "z": 1}, {"z": 2}],
            "map": {"k1": {"v": 1, "w": 2}}
        });
        s.prune(&mut obj);
        assert_eq!(
            obj,
            json!({"list": [{"n": "a"}, {}], "map": {"k1": {"v": 1}}})
        );
    }
}
