//! Strategic merge patch for the built-in kinds.
//!
//! Maps merge recursively and `null` deletes, like a merge patch; lists follow the kind's
//! `patchStrategy`: lists of objects with a merge key merge element by element, lists of scalars
//! with the merge strategy are unions, every other list is replaced. Directives:
//! `$patch: replace|merge|delete` (in maps and in list elements), `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>`.

use serde_json::{Map, Value};

use super::json::{go_fmt, go_json_kind};
use super::shape::{BuiltinShape, PatchStrategy, shared_builtin_shape};
use super::{PatchError, TypeMeta};

const PATCH_DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Apply a strategic merge patch to an object of a built-in kind.
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    type_meta: &TypeMeta,
) -> Result<Value, PatchError> {
    let patch = match patch {
        Value::Object(p) => p,
        // decodes to an empty map: nothing changes
        Value::Null => return Ok(target.clone()),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                go_json_kind(other)
            )));
        }
    };
    let shape = shared_builtin_shape(type_meta);
    let original = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    let mut path = Vec::new();
    match merge_map(original, patch, &shape, &mut path)? {
        Some(merged) => Ok(Value::Object(merged)),
        None => Ok(Value::Object(Map::new())),
    }
}

fn directive_of(patch: &Map<String, Value>) -> Result<Option<&str>, PatchError> {
    match patch.get(PATCH_DIRECTIVE) {
        None => Ok(None),
        Some(Value::String(s)) if matches!(s.as_str(), "replace" | "merge" | "delete") => {
            Ok(Some(s.as_str()))
        }
        Some(other) => Err(PatchError::Internal(format!(
            "unknown patch type: {} in map: {}",
            go_fmt(other),
            go_fmt(&Value::Object(patch.clone()))
        ))),
    }
}

/// Drop every `$`-directive from a patch value (what remains is stored as is).
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(
                    |item| !matches!(item, Value::Object(m) if m.get(PATCH_DIRECTIVE).is_some()),
                )
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Merge `patch` into `original`; `None` means the map was deleted by `$patch: delete`.
fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    shape: &BuiltinShape,
    path: &mut Vec<String>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match directive_of(patch)? {
        Some("delete") => return Ok(None),
        Some("replace") => {
            let Value::Object(replaced) = strip_directives(&Value::Object(patch.clone())) else {
                return Ok(Some(Map::new()));
            };
            return Ok(Some(replaced));
        }
        _ => {}
    }

    let retain = match patch.get(RETAIN_KEYS) {
        None => None,
        Some(Value::Array(keys)) => {
            let mut names = Vec::new();
            for key in keys {
                let Value::String(name) = key else {
                    return Err(bad_retain_keys());
                };
                names.push(name.clone());
            }
            for key in patch.keys().filter(|k| !k.starts_with('$')) {
                if !names.contains(key) && !patch[key].is_null() {
                    return Err(PatchError::Invalid {
                        detail: format!(
                            "patch content doesn't match retainKeys list: {key} is not in $retainKeys"
                        ),
                    });
                }
            }
            Some(names)
        }
        Some(_) => return Err(bad_retain_keys()),
    };

    // the live lists, for `$setElementOrder` (server-only elements keep their live order)
    let live_lists = if patch.keys().any(|k| k.starts_with(SET_ELEMENT_ORDER)) {
        original.clone()
    } else {
        Map::new()
    };

    // $deleteFromPrimitiveList first, so that a merge of the same list in the patch adds back.
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Value::Array(remove) = value else {
                return Err(PatchError::BadRequest(
                    "invalid patch format of primitive list".to_string(),
                ));
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                items.retain(|item| !remove.contains(item));
            }
        }
    }

    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            original.remove(key);
            continue;
        }
        path.push(key.clone());
        let merged = merge_value(original.remove(key), value, shape, path)?;
        path.pop();
        if let Some(merged) = merged {
            original.insert(key.clone(), merged);
        }
    }

    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Value::Array(order) = value else {
                return Err(PatchError::BadRequest(
                    "invalid patch format of setElementOrder list".to_string(),
                ));
            };
            path.push(field.to_string());
            let strategy = shape.patch_strategy(&as_strs(path));
            path.pop();
            let live_order = match live_lists.get(field) {
                Some(Value::Array(items)) => items.as_slice(),
                _ => &[],
            };
            if let Some(Value::Array(items)) = original.get_mut(field) {
                reorder(items, order, live_order, strategy);
            }
        }
    }

    if let Some(keep) = retain {
        original.retain(|k, _| keep.contains(k));
    }
    Ok(Some(original))
}

fn bad_retain_keys() -> PatchError {
    PatchError::BadRequest("invalid patch format of retainKeys".to_string())
}

fn as_strs(path: &[String]) -> Vec<&str> {
    path.iter().map(String::as_str).collect()
}

/// Merge one member. `None`: the member is removed.
fn merge_value(
    original: Option<Value>,
    patch: &Value,
    shape: &BuiltinShape,
    path: &mut Vec<String>,
) -> Result<Option<Value>, PatchError> {
    match (original, patch) {
        (Some(Value::Object(orig)), Value::Object(p)) => {
            Ok(merge_map(orig, p, shape, path)?.map(Value::Object))
        }
        (None, Value::Object(p)) => Ok(merge_map(Map::new(), p, shape, path)?.map(Value::Object)),
        (Some(Value::Array(orig)), Value::Array(p)) => {
            let strategy = shape.patch_strategy(&as_strs(path));
            merge_list(orig, p, strategy, shape, path).map(|l| Some(Value::Array(l)))
        }
        (None, Value::Array(p)) => {
            let strategy = shape.patch_strategy(&as_strs(path));
            merge_list(Vec::new(), p, strategy, shape, path).map(|l| Some(Value::Array(l)))
        }
        (_, other) => Ok(Some(strip_directives(other))),
    }
}

fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    strategy: Option<PatchStrategy<'_>>,
    shape: &BuiltinShape,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, PatchError> {
    match strategy {
        None => Ok(patch
            .iter()
            .filter(|v| !matches!(v, Value::Object(m) if m.contains_key(PATCH_DIRECTIVE)))
            .map(strip_directives)
            .collect()),
        Some(PatchStrategy::MergePrimitives) => {
            let mut out = original;
            for item in patch {
                if item.is_array() {
                    return Err(PatchError::Invalid {
                        detail: "lists of lists are not supported".to_string(),
                    });
                }
                if item.is_object() {
                    return Err(PatchError::Internal(format!(
                        "{}: a list of primitives cannot contain {}",
                        path.join("."),
                        go_fmt(item)
                    )));
                }
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            Ok(out)
        }
        Some(PatchStrategy::MergeByKey(key)) => merge_keyed_list(original, patch, key, shape, path),
    }
}

fn merge_keyed_list(
    mut original: Vec<Value>,
    patch: &[Value],
    key: &str,
    shape: &BuiltinShape,
    path: &mut Vec<String>,
) -> Result<Vec<Value>, PatchError> {
    // `{"$patch": "replace"}` anywhere in the list: the other elements replace the list.
    let replace = patch.iter().any(|item| {
        matches!(item, Value::Object(m)
            if m.get(PATCH_DIRECTIVE) == Some(&Value::String("replace".into())))
    });
    let live = original.clone();
    if replace {
        return Ok(patch
            .iter()
            .filter(|item| !matches!(item, Value::Object(m) if m.contains_key(PATCH_DIRECTIVE)))
            .map(strip_directives)
            .collect());
    }
    for item in patch {
        let Value::Object(element) = item else {
            return Err(PatchError::Internal(format!(
                "expected map[string]interface {{}}, but got {}",
                go_json_kind(item)
            )));
        };
        let directive = directive_of(element)?;
        let Some(key_value) = element.get(key) else {
            return Err(PatchError::Internal(format!(
                "map: {} does not contain declared merge key: {key}",
                go_fmt(item)
            )));
        };
        let position = original.iter().position(|o| o.get(key) == Some(key_value));
        match (directive, position) {
            (Some("delete"), Some(i)) => {
                original.remove(i);
                // duplicates of the key go too
                original.retain(|o| o.get(key) != Some(key_value));
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => {
                let existing = match original.remove(i) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                if let Some(merged) = merge_map(existing, element, shape, path)? {
                    original.insert(i, Value::Object(merged));
                }
            }
            (_, None) => {
                if let Some(merged) = merge_map(Map::new(), element, shape, path)? {
                    original.push(Value::Object(merged));
                }
            }
        }
    }
    // Like the API server: the patch's elements take the patch's order, the others keep their
    // live order, interleaved by live position.
    let patch_elements: Vec<Value> = patch
        .iter()
        .filter(|item| {
            !matches!(item, Value::Object(m)
                if m.get(PATCH_DIRECTIVE) == Some(&Value::String("delete".into())))
        })
        .cloned()
        .collect();
    reorder(
        &mut original,
        &patch_elements,
        &live,
        Some(PatchStrategy::MergeByKey(key)),
    );
    Ok(original)
}

/// `$setElementOrder`: the elements it lists (the patch's) take its order; the others (the
/// server's) keep their live order; the two runs are interleaved so that an element of each
/// keeps its live position relative to the other when both were live.
fn reorder(
    items: &mut Vec<Value>,
    order: &[Value],
    live: &[Value],
    strategy: Option<PatchStrategy<'_>>,
) {
    let identity = |item: &Value| -> Option<Value> {
        match strategy {
            Some(PatchStrategy::MergeByKey(key)) => item.get(key).cloned(),
            _ => Some(item.clone()),
        }
    };
    let wanted: Vec<Value> = order.iter().filter_map(identity).collect();
    let live_ids: Vec<Option<Value>> = live.iter().map(identity).collect();
    let live_index = |item: &Value| {
        let id = identity(item);
        live_ids.iter().position(|l| l.is_some() && *l == id)
    };

    let (mut patch_items, mut server_items): (Vec<Value>, Vec<Value>) = std::mem::take(items)
        .into_iter()
        .partition(|item| identity(item).is_some_and(|id| wanted.contains(&id)));
    patch_items
        .sort_by_key(|item| identity(item).and_then(|id| wanted.iter().position(|w| *w == id)));
    server_items.sort_by_key(|item| live_index(item).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(patch_items.len() + server_items.len());
    let mut patch_iter = patch_items.into_iter().peekable();
    let mut server_iter = server_items.into_iter().peekable();
    loop {
        let take_patch = match (patch_iter.peek(), server_iter.peek()) {
            // As kube-apiserver merges them: a server-only element goes first only when both
            // were live and it was in front; otherwise (a new element) the patch's goes first.
            (Some(p), Some(s)) => match (live_index(p), live_index(s)) {
                (Some(pi), Some(si)) => pi < si,
                _ => true,
            },
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = if take_patch {
            patch_iter.next()
        } else {
            server_iter.next()
        };
        out.extend(next);
    }
    *items = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> TypeMeta {
        TypeMeta::new("v1", "Pod")
    }

    fn base_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1"}, "finalizers": ["f1"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "side", "image": "side:1"}
                ],
                "tolerations": [{"key": "k1", "operator": "Exists"}],
                "volumes": [{"name": "v1", "emptyDir": {}}]
            },
            "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}]}
        })
    }

    #[test]
    fn containers_merge_by_name_and_env_by_name() {
        let patch = json!({"spec": {"containers": [
            {"name": "app", "image": "app:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
            {"name": "new", "image": "new:1"}
        ]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        let containers = &out["spec"]["containers"];
        assert_eq!(containers.as_array().unwrap().len(), 3);
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}])
        );
        // The patch's new element goes before the live one it did not name, as on
        // kube-apiserver (tests/parity.rs checks it there).
        assert_eq!(containers[1], json!({"name": "new", "image": "new:1"}));
        assert_eq!(containers[2]["name"], "side");
    }

    #[test]
    fn atomic_lists_are_replaced_and_maps_merge() {
        let patch = json!({"metadata": {"labels": {"b": "2", "a": null}},
                           "spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "k2", "operator": "Exists"}])
        );
    }

    #[test]
    fn conditions_merge_by_type() {
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
        );
    }

    #[test]
    fn finalizers_are_a_set_and_delete_from_primitive_list_removes() {
        let patch = json!({"metadata": {"finalizers": ["f1", "f2"]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f1", "f2"]));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["f1"]}});
        let out = strategic_merge_patch(&out, &patch, &pod()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f2"]));
    }

    #[test]
    fn patch_delete_removes_an_element_and_a_map() {
        let patch = json!({"spec": {"containers": [{"name": "side", "$patch": "delete"}],
                                    "volumes": [{"name": "v1", "$patch": "delete"}]},
                           "metadata": {"labels": {"$patch": "delete"}}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(out["spec"]["containers"].as_array().unwrap().len(), 1);
        assert_eq!(out["spec"]["volumes"], json!([]));
        assert!(out["metadata"].get("labels").is_none());
    }

    #[test]
    fn patch_replace_in_map_and_list() {
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "z": "9"}},
                           "spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "o"}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"z": "9"}));
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "only", "image": "o"}])
        );
    }

    #[test]
    fn retain_keys_drops_unlisted_members() {
        let patch = json!({"spec": {"volumes": [{"name": "v1", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v1", "hostPath": {"path": "/x"}}])
        );
        let bad = json!({"spec": {"volumes": [{"name": "v1", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}]}});
        assert_eq!(
            strategic_merge_patch(&base_pod(), &bad, &pod())
                .unwrap_err()
                .code(),
            422
        );
    }

    #[test]
    fn set_element_order_orders_the_merged_list() {
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                                    "containers": [{"name": "app", "image": "app:3"}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["side", "app"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "app:3");
    }

    #[test]
    fn set_element_order_keeps_server_only_elements_in_their_live_place() {
        let live = json!({"spec": {"containers": [
            {"name": "a"}, {"name": "server"}, {"name": "b"}
        ]}});
        // the patch owns a and b, wants b first, and adds c at the end
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}, {"name": "c"}],
            "containers": [{"name": "c", "image": "c"}]
        }});
        let out = strategic_merge_patch(&live, &patch, &pod()).unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["server", "b", "a", "c"]);
    }

    #[test]
    fn a_patch_list_reorders_the_elements_it_names() {
        let patch =
            json!({"spec": {"containers": [{"name": "side"}, {"name": "app", "image": "app:9"}]}});
        let out = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["side", "app"]);
        assert_eq!(out["spec"]["containers"][1]["image"], "app:9");
    }

    #[test]
    fn errors_for_missing_merge_key_and_unknown_directive() {
        let patch = json!({"spec": {"containers": [{"image": "x"}]}});
        let err = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap_err();
        assert!(
            err.to_string()
                .contains("does not contain declared merge key: name"),
            "{err}"
        );
        let patch = json!({"metadata": {"$patch": "explode"}});
        let err = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap_err();
        assert_eq!(err.code(), 500);
        assert_eq!(
            err.to_string(),
            "unknown patch type: explode in map: map[$patch:explode]"
        );
        let patch = json!({"spec": {"containers": [{"image": "x", "tty": true, "n": 80}]}});
        let err = strategic_merge_patch(&base_pod(), &patch, &pod()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "map: map[image:x n:80 tty:true] does not contain declared merge key: name"
        );
        let err = strategic_merge_patch(&base_pod(), &json!([1]), &pod()).unwrap_err();
        assert_eq!(err.code(), 400);
        assert_eq!(
            err.to_string(),
            "json: cannot unmarshal array into Go value of type map[string]interface {}"
        );
        assert_eq!(
            strategic_merge_patch(&base_pod(), &json!(null), &pod()).unwrap(),
            base_pod()
        );
    }

    #[test]
    fn deployment_template_and_service_ports() {
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1,
            "template": {"spec": {"containers": [{"name": "a", "image": "a:1"}]}}}});
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}});
        let out = strategic_merge_patch(&deploy, &patch, &TypeMeta::new("apps/v1", "Deployment"))
            .unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "a", "image": "a:2"}])
        );
        assert_eq!(out["spec"]["replicas"], 1);

        let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}});
        let out = strategic_merge_patch(&svc, &patch, &TypeMeta::new("v1", "Service")).unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
    }

    #[test]
    fn unknown_kinds_replace_lists_but_keep_metadata_rules() {
        let tm = TypeMeta::new("example.com/v1", "Thing");
        let obj = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}, "spec": {"items": [1, 2]}});
        let patch = json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}, "spec": {"items": [3]}});
        let out = strategic_merge_patch(&obj, &patch, &tm).unwrap();
        assert_eq!(out["spec"]["items"], json!([3]));
        assert_eq!(
            out["metadata"]["ownerReferences"].as_array().unwrap().len(),
            2
        );
    }

    #[test]
    fn odd_patches_do_not_panic() {
        let odd = [
            json!({"spec": {"containers": [1, "x", null]}}),
            json!({"spec": {"containers": {"name": "x"}}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
            json!({"$retainKeys": "x"}),
            json!({"$retainKeys": [1]}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "f1"}}),
            json!({"spec": {"$setElementOrder/containers": 5}}),
            json!({"spec": {"$setElementOrder/containers": [1, {"x": 1}]}}),
            json!({"spec": {"containers": [{"name": "app", "$patch": 3}]}}),
            json!({"status": null, "spec": [], "metadata": "x"}),
        ];
        for patch in odd {
            let _ = strategic_merge_patch(&base_pod(), &patch, &pod());
            let _ = strategic_merge_patch(&json!(null), &patch, &pod());
        }
    }
}
