use serde_json::{Value, json};

use super::*;

fn detail(result: Result<Value, PatchError>) -> String {
    match result {
        Err(PatchError::Invalid { detail }) => detail,
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[test]
fn merge_patch_merges_objects_and_null_deletes() {
    let target = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"list": [1, 2]}});
    let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"list": [9]}});
    assert_eq!(
        merge_patch(&target, &patch),
        json!({"metadata": {"labels": {"b": "2", "c": "3"}}, "spec": {"list": [9]}})
    );
    // new members lose their null members, also inside arrays; arrays keep null elements
    assert_eq!(
        merge_patch(
            &json!({}),
            &json!({"a": {"b": {"c": 1, "d": null}}, "l": [{"x": null, "y": 1}, null]})
        ),
        json!({"a": {"b": {"c": 1}}, "l": [{"y": 1}, null]})
    );
    // replacing an existing object by an array keeps the array as sent
    assert_eq!(
        merge_patch(&json!({"a": {"k": 1}}), &json!({"a": [{"x": null}]})),
        json!({"a": [{"x": null}]})
    );
    // a member that was null counts as missing
    assert_eq!(
        merge_patch(&json!({"a": null}), &json!({"a": {"b": null, "c": 2}})),
        json!({"a": {"c": 2}})
    );
}

#[test]
fn merge_patch_request_rejects_null_and_non_objects() {
    let err = merge_patch_request(&json!({}), &json!(null)).unwrap_err();
    assert_eq!(
        (err.code(), err.to_string().as_str()),
        (400, "Invalid JSON Patch")
    );
    let err = merge_patch_request(&json!({}), &json!([1])).unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(err.to_string().contains("cannot unmarshal array"), "{err}");
    assert_eq!(
        merge_patch_request(&json!({"a": 1}), &json!({"b": 2})).unwrap(),
        json!({"a": 1, "b": 2})
    );
}

#[test]
fn json_patch_applies_all_operations() {
    let target = json!({"metadata": {"name": "x", "finalizers": ["a"]}, "spec": {"n": 1}});
    let ops = json!([
        {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
        {"op": "add", "path": "/metadata/finalizers/0", "value": "z"},
        {"op": "replace", "path": "/spec/n", "value": 2},
        {"op": "copy", "from": "/spec/n", "path": "/spec/m"},
        {"op": "move", "from": "/spec/m", "path": "/spec/k"},
        {"op": "remove", "path": "/metadata/name"},
        {"op": "test", "path": "/spec/k", "value": 2.0},
        {"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "v"}},
        {"op": "test", "path": "/metadata/annotations/a~0b~1c", "value": "v"}
    ]);
    assert_eq!(
        json_patch(&target, &ops).unwrap(),
        json!({"metadata": {"finalizers": ["z", "a", "b"], "annotations": {"a~b/c": "v"}},
               "spec": {"n": 2, "k": 2}})
    );
}

#[test]
fn test_of_missing_member_against_null_passes() {
    // What kube-runtime's finalizer() sends for an object without finalizers.
    let target = json!({"metadata": {"name": "x"}});
    let ops = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}
    ]);
    assert_eq!(
        json_patch(&target, &ops).unwrap(),
        json!({"metadata": {"name": "x", "finalizers": ["f"]}})
    );
    // an absent value counts as null too; a null member counts as missing
    assert!(json_patch(&target, &json!([{"op": "test", "path": "/metadata/x"}])).is_ok());
    assert!(
        json_patch(
            &json!({"a": null}),
            &json!([{"op": "test", "path": "/a", "value": null}])
        )
        .is_ok()
    );
    // a missing member tested against a value fails, and so does a present one against null
    assert_eq!(
        detail(json_patch(
            &target,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": ["f"]}])
        )),
        "testing value /metadata/finalizers failed: test failed"
    );
    assert!(
        json_patch(
            &target,
            &json!([{"op": "test", "path": "/metadata/name", "value": null}])
        )
        .is_err()
    );
    // the parent must exist even when testing against null
    assert_eq!(
        detail(json_patch(
            &target,
            &json!([{"op": "test", "path": "/status/phase", "value": null}])
        )),
        "test operation does not apply: is missing path: /status/phase: missing value"
    );
}

#[test]
fn api_server_leniencies() {
    // replace of a missing member of an existing object adds it
    assert_eq!(
        json_patch(
            &json!({"a": {}}),
            &json!([{"op": "replace", "path": "/a/b", "value": 1}])
        )
        .unwrap(),
        json!({"a": {"b": 1}})
    );
    // add without a value adds null
    assert_eq!(
        json_patch(&json!({}), &json!([{"op": "add", "path": "/a"}])).unwrap(),
        json!({"a": null})
    );
    // negative indices count from the end
    assert_eq!(
        json_patch(
            &json!({"l": [1, 2, 3]}),
            &json!([{"op": "remove", "path": "/l/-1"}, {"op": "replace", "path": "/l/-2", "value": 9}])
        )
        .unwrap(),
        json!({"l": [9, 2]})
    );
    // add at index == length appends
    assert_eq!(
        json_patch(
            &json!({"l": [1]}),
            &json!([{"op": "add", "path": "/l/1", "value": 2}])
        )
        .unwrap(),
        json!({"l": [1, 2]})
    );
    // replacing the whole document
    assert_eq!(
        json_patch(
            &json!({"a": 1}),
            &json!([{"op": "replace", "path": "", "value": {"b": 2}}])
        )
        .unwrap(),
        json!({"b": 2})
    );
    // test of the whole document
    assert!(
        json_patch(
            &json!({"a": 1}),
            &json!([{"op": "test", "path": "", "value": {"a": 1}}])
        )
        .is_ok()
    );
}

#[test]
fn failures_are_422_name_the_operation_and_path_and_change_nothing() {
    let target = json!({"spec": {"n": 1, "l": [1]}});
    let cases = [
        (
            json!([{"op": "remove", "path": "/spec/x"}]),
            "error in remove for path: '/spec/x'",
        ),
        (
            json!([{"op": "remove", "path": "/nope/x"}]),
            "remove operation does not apply: doc is missing path: \"/nope/x\"",
        ),
        (
            json!([{"op": "replace", "path": "/spec/l/5", "value": 1}]),
            "replace operation does not apply: doc is missing key: /spec/l/5",
        ),
        (
            json!([{"op": "add", "path": "/nope/x", "value": 1}]),
            "add operation does not apply: doc is missing path: \"/nope/x\"",
        ),
        (
            json!([{"op": "add", "path": "/spec/l/3", "value": 1}]),
            "error in add for path: '/spec/l/3'",
        ),
        (
            json!([{"op": "add", "path": "/spec/l/x", "value": 1}]),
            "error in add for path: '/spec/l/x'",
        ),
        (
            json!([{"op": "add", "path": "/spec/n/x", "value": 1}]),
            "add operation does not apply",
        ),
        (
            json!([{"op": "move", "from": "/a", "path": "/b"}]),
            "error in move for path: 'a'",
        ),
        (
            json!([{"op": "move", "from": "/spec/n", "path": "/x/y"}]),
            "move operation does not apply: doc is missing destination path: /x/y",
        ),
        (
            json!([{"op": "copy", "from": "/x/a", "path": "/b"}]),
            "copy operation does not apply: doc is missing from path: /x/a",
        ),
        (
            json!([{"op": "test", "path": "/spec/n", "value": 2}]),
            "testing value /spec/n failed",
        ),
        (
            json!([{"op": "frobnicate", "path": "/a"}]),
            "Unexpected kind: frobnicate",
        ),
        (json!([{"path": "/a"}]), "Unexpected kind: unknown"),
        (json!([null]), "Unexpected kind: unknown"),
        (
            json!([{"op": "add", "value": 1}]),
            "add operation failed to decode path",
        ),
        (
            json!([{"op": "add", "path": "no-slash", "value": 1}]),
            "add operation does not apply",
        ),
        (
            json!([{"op": "replace", "path": "", "value": 1}]),
            "replace operation value must be object or array",
        ),
    ];
    for (ops, expected) in cases {
        let result = json_patch(&target, &ops);
        let err = result.clone().unwrap_err();
        assert_eq!(err.code(), 422, "{ops}");
        let text = detail(result);
        assert!(text.starts_with(expected), "{ops}: {text}");
    }
    // all or nothing
    let ops =
        json!([{"op": "replace", "path": "/spec/n", "value": 5}, {"op": "remove", "path": "/x"}]);
    assert!(json_patch(&target, &ops).is_err());
    assert_eq!(target, json!({"spec": {"n": 1, "l": [1]}}));
}

#[test]
fn copy_from_a_missing_member_copies_null() {
    assert_eq!(
        json_patch(
            &json!({"a": {}}),
            &json!([{"op": "copy", "from": "/a/x", "path": "/b"}])
        )
        .unwrap(),
        json!({"a": {}, "b": null})
    );
}

#[test]
fn malformed_documents_are_bad_requests() {
    for ops in [json!({"op": "add"}), json!([1, 2]), json!("x"), json!([[]])] {
        let err = json_patch(&json!({}), &ops).unwrap_err();
        assert_eq!(err.code(), 400, "{ops}: {err}");
        assert!(
            err.to_string().starts_with("json: cannot unmarshal"),
            "{err}"
        );
    }
    let many = Value::Array(vec![
        json!({"op": "test", "path": "/a"});
        MAX_JSON_PATCH_OPERATIONS + 1
    ]);
    let err = json_patch(&json!({}), &many).unwrap_err();
    assert_eq!(err.code(), 413);
    assert_eq!(
        err.to_string(),
        "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
    );
}

#[test]
fn odd_paths_and_values_never_panic() {
    let target = json!({"a": [1, {"b": [true]}], "c": "s", "": {"": 0}});
    let paths = [
        "",
        "/",
        "//",
        "/a/-",
        "/a/-1",
        "/a/-9",
        "/a/99999999999999999999",
        "/a/+1",
        "/a/01",
        "/a/1/b/0",
        "/c/x",
        "/~",
        "/~2",
        "/a/1/b/-",
        "/é",
        "/a/ 1",
    ];
    for op in ["add", "remove", "replace", "move", "copy", "test"] {
        for path in paths {
            for from in paths {
                let ops = json!([{"op": op, "path": path, "from": from, "value": {"x": null}}]);
                let _ = json_patch(&target, &ops);
            }
        }
    }
}
