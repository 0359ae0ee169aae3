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
/// `metadata` (top level and embedded) keeps the fields of ObjectMeta. Returns the paths of the
/// fields it dropped (`.spec.foo`, `.list[2].bar`), in document order.
pub(crate) fn prune_root(root: &Node, obj: &mut Value) -> Vec<String> {
    let mut pruner = Pruner::default();
    pruner.object(root, obj, true);
    pruner.dropped
}

/// Prunes a value against its node (defaults are checked this way at CRD time).
pub(crate) fn prune_value(node: &Node, value: &mut Value) {
    Pruner::default().value(node, value);
}

/// One pruning pass: the path of the value being pruned (one buffer, grown and cut back as the
/// walk goes down and up, so a path is written out only for a field that is dropped) and the
/// paths dropped so far.
#[derive(Default)]
struct Pruner {
    path: String,
    dropped: Vec<String>,
}

impl Pruner {
    /// Runs `f` with `.key` appended to the current path.
    fn under_key<T>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        let len = self.path.len();
        self.path.push('.');
        self.path.push_str(key);
        let out = f(self);
        self.path.truncate(len);
        out
    }

    fn drop_current(&mut self) {
        self.dropped.push(self.path.clone());
    }

    fn object(&mut self, node: &Node, value: &mut Value, is_resource_root: bool) {
        match value {
            Value::Object(map) => {
                let keep_all = node.preserve_unknown;
                map.retain(|key, child| {
                    if is_resource_root && (key == "apiVersion" || key == "kind") {
                        return true;
                    }
                    self.under_key(key, |p| {
                        if is_resource_root && key == "metadata" {
                            // Not pruned by the schema, but read as an ObjectMeta, which drops
                            // what ObjectMeta does not have.
                            p.object_meta(child);
                            return true;
                        }
                        if let Some(child_node) = node.properties.get(key) {
                            p.value(child_node, child);
                            return true;
                        }
                        match &node.additional {
                            Some(Additional::Schema(child_node)) => {
                                p.value(child_node, child);
                                true
                            }
                            Some(Additional::Any) => true,
                            None if keep_all => true,
                            None => {
                                p.drop_current();
                                false
                            }
                        }
                    })
                });
            }
            Value::Array(items) => {
                if let Some(item_node) = &node.items {
                    for (i, item) in items.iter_mut().enumerate() {
                        let len = self.path.len();
                        self.path.push('[');
                        self.path.push_str(&i.to_string());
                        self.path.push(']');
                        self.value(item_node, item);
                        self.path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }

    fn value(&mut self, node: &Node, value: &mut Value) {
        self.object(node, value, node.embedded);
    }

    fn object_meta(&mut self, meta: &mut Value) {
        if let Value::Object(map) = meta {
            map.retain(|k, _| {
                let keep = OBJECT_META_FIELDS.contains(&k.as_str());
                if !keep {
                    self.under_key(k, Pruner::drop_current);
                }
                keep
            });
        }
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
