//! The ownership bookkeeping of ordinary writes gives exactly what the plain version gives.

use serde_json::{Map, Value, json};

use super::*;
use crate::patch::{TypeMeta, apply, builtin_shape};

use crate::patch::test_gen::Gen;

/// Replaces the element of the list `list` whose `key` equals `entry`'s, or appends `entry`
/// (a list that is missing or not a list becomes one).
fn upsert(list: &mut Value, key: &str, entry: Value) {
    let mut items: Vec<Value> = list
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|item| item[key] != entry[key])
        .collect();
    items.push(entry);
    *list = Value::Array(items);
}

fn map_at<'a>(object: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    let mut current = object;
    for key in path {
        if !current[*key].is_object() {
            current[*key] = json!({});
        }
        current = &mut current[*key];
    }
    current.as_object_mut().expect("made an object above")
}

/// One random change of a Pod-like object, as a controller, kubectl or a kubelet makes them:
/// labels, annotations, finalizers and owner references; containers (a map-list) and their
/// images; status conditions and phase; whole sections removed or made odd.
fn mutate(g: &mut Gen, object: &mut Value) {
    match g.below(14) {
        0 | 1 => {
            let key = g.pick(&["app", "tier", "pool", "claim"]);
            let value = g.pick(&["a", "b", "c"]);
            map_at(object, &["metadata", "labels"]).insert(key.into(), json!(value));
        }
        2 => {
            let key = g.pick(&["app", "tier", "pool", "claim"]);
            map_at(object, &["metadata", "labels"]).remove(key);
        }
        3 => {
            let key = g.pick(&["note", "agents.x-k8s.io/claim", "trace"]);
            let value = g.pick(&["1", "2", ""]);
            map_at(object, &["metadata", "annotations"]).insert(key.into(), json!(value));
        }
        4 => {
            let finalizers: Vec<&str> = match g.below(4) {
                0 => vec![],
                1 => vec!["f1"],
                2 => vec!["f1", "f2"],
                _ => vec!["f2"],
            };
            object["metadata"]["finalizers"] = json!(finalizers);
        }
        5 => {
            let uid = g.pick(&["u1", "u2"]);
            object["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                "name": "s", "uid": uid, "controller": true,
            }]);
        }
        6 => {
            let name = g.pick(&["app", "side"]);
            let image = g.pick(&["img:1", "img:2"]);
            upsert(
                &mut object["spec"]["containers"],
                "name",
                json!({"name": name, "image": image}),
            );
        }
        7 => {
            if let Some(containers) = object["spec"]["containers"].as_array_mut() {
                containers.pop();
            }
        }
        8 | 9 => {
            let type_ = g.pick(&["Ready", "Scheduled", "Initialized"]);
            let status = g.pick(&["True", "False"]);
            upsert(
                &mut object["status"]["conditions"],
                "type",
                json!({"type": type_, "status": status}),
            );
        }
        10 => {
            object["status"]["phase"] = json!(g.pick(&["Pending", "Running"]));
        }
        11 => {
            let section = g.pick(&["status", "spec", "labels", "annotations"]);
            match section {
                "labels" | "annotations" => {
                    map_at(object, &["metadata"]).remove(section);
                }
                _ => {
                    map_at(object, &[]).remove(section);
                }
            }
        }
        12 => {
            // nothing tracked left in metadata, or server-set metadata only
            let meta = map_at(object, &["metadata"]);
            meta.retain(|k, _| !matches!(k.as_str(), "labels" | "annotations" | "finalizers"));
            meta.insert("generation".into(), json!(g.below(3)));
        }
        _ => {
            object["spec"]["nodeName"] = json!(g.pick(&["n1", "n2"]));
        }
    }
}

/// What the write sends as `managedFields`: usually what it read, sometimes nothing, a reset,
/// or a list of its own (stale or made up).
fn sent_managed_fields(g: &mut Gen, old: &Value, new: &mut Value) {
    let meta = map_at(new, &["metadata"]);
    match g.below(20) {
        0 => {
            meta.remove("managedFields");
        }
        1 => {
            meta.insert("managedFields".into(), json!([{}]));
        }
        2 => {
            meta.insert("managedFields".into(), json!([]));
        }
        3 => {
            meta.insert(
                "managedFields".into(),
                json!([{"manager": "sent", "operation": "Update", "apiVersion": "v1",
                        "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {}}}]),
            );
        }
        4 => {
            meta.insert("managedFields".into(), odd_managed_fields());
        }
        _ => {
            // what it read
            match old.pointer("/metadata/managedFields") {
                Some(stored) => meta.insert("managedFields".into(), stored.clone()),
                None => meta.remove("managedFields"),
            };
        }
    }
}

/// Stored entries the server would not write itself: another fieldsType, empty or unreadable
/// fieldsV1, entries out of order.
fn odd_managed_fields() -> Value {
    json!([
        {"manager": "old", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV2", "fieldsV1": {}},
        {"manager": "writer-b", "operation": "Update", "apiVersion": "v1", "time": "T99",
         "fieldsV1": {"f:status": {"f:phase": {}}}},
        {"manager": "empty", "operation": "Update", "apiVersion": "v1", "fieldsV1": {"zz": {}}},
        {"manager": "garbage", "operation": "Update", "apiVersion": "v1",
         "fieldsV1": {"x:y": {}, "f:status": {"k:notjson": {}}, "f:metadata": {"f:labels": {"f:gone": {}}}}},
        {"manager": "writer-a", "operation": "Update", "apiVersion": "v1", "time": "2025-01-01T00:00:00Z",
         "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}
    ])
}

#[test]
fn fast_bookkeeping_matches_the_plain_version_on_varied_writes() {
    let shape = builtin_shape(&TypeMeta::new("v1", "Pod"));
    let managers = ["writer-a", "writer-b", "kubelet", "kubectl-edit"];
    let mut writes = 0;
    for seed in 1..=400u64 {
        let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "5",
                         "labels": {"app": "a"}},
            "spec": {"containers": [{"name": "app", "image": "img:1"}]},
        });
        let created_by = g.pick(&managers);
        let mut fast = object.clone();
        record_update(None, &mut fast, created_by, "Update", None, "T00", &shape);
        let mut plain = object.clone();
        record_update_reference(
            None,
            &mut plain,
            created_by,
            "Update",
            None,
            "T00",
            &shape,
            &[],
        );
        assert_eq!(fast, plain, "create, seed {seed}");
        object = fast;
        // Sometimes an apply owns part of it too.
        if g.chance(3) {
            let applied = json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"tier": "a"}},
                "spec": {"containers": [{"name": "app", "image": "img:1"}]}});
            let opts = crate::patch::ApplyOptions {
                manager: "applier".into(),
                force: true,
                subresource: None,
                now: "T01".into(),
                status_subresource: true,
            };
            object = apply(Some(&object), &applied, &opts, &shape).expect("apply");
        }
        for step in 0..16 {
            if g.chance(12) {
                // stored by some other path (the server's own bootstrap, an older version)
                match g.below(3) {
                    0 => object["metadata"]["managedFields"] = odd_managed_fields(),
                    1 => object["metadata"]["managedFields"] = json!([]),
                    _ => {
                        map_at(&mut object, &["metadata"]).remove("managedFields");
                    }
                }
            }
            let mut new = object.clone();
            for _ in 0..=g.below(3) {
                mutate(&mut g, &mut new);
            }
            if g.chance(8) {
                new = object.clone(); // a no-op write
            }
            sent_managed_fields(&mut g, &object, &mut new);
            let manager = g.pick(&managers);
            let subresource = g.chance(4).then_some("status");
            let ignored: &[&str] = if subresource.is_none() && g.chance(2) {
                &["status"]
            } else {
                &[]
            };
            let now = format!("T{:02}", step + 2);
            let mut fast = new.clone();
            record_update_ignoring(
                Some(&object),
                &mut fast,
                manager,
                "Update",
                subresource,
                &now,
                &shape,
                ignored,
            );
            let mut plain = new;
            record_update_reference(
                Some(&object),
                &mut plain,
                manager,
                "Update",
                subresource,
                &now,
                &shape,
                ignored,
            );
            assert_eq!(
                fast, plain,
                "seed {seed} step {step}: manager {manager}, subresource {subresource:?}, \
                 ignored {ignored:?}, from {object}"
            );
            writes += 1;
            object = fast;
        }
    }
    assert_eq!(writes, 400 * 16);
}

#[test]
fn entries_the_write_does_not_touch_are_kept_byte_for_byte() {
    let shape = builtin_shape(&TypeMeta::new("v1", "Pod"));
    // A stored entry in an encoding the server would not produce itself (keys of a `k:` element
    // out of order): it stays as stored while nothing of it changes.
    let odd =
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}}}}});
    let old = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "labels": {"app": "a"}, "managedFields": [
            {"manager": "creator", "operation": "Update", "apiVersion": "v1", "time": "T0",
             "fieldsType": "FieldsV1", "fieldsV1": odd.clone()},
            {"manager": "labeler", "operation": "Update", "apiVersion": "v1", "time": "T0",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}},
        ]},
        "spec": {"containers": [{"name": "app", "image": "img:1"}]},
    });
    let mut new = old.clone();
    new["metadata"]["labels"]["app"] = json!("b");
    record_update(
        Some(&old),
        &mut new,
        "relabeler",
        "Update",
        None,
        "T1",
        &shape,
    );
    let entries = new["metadata"]["managedFields"].as_array().unwrap();
    let managers: Vec<&str> = entries
        .iter()
        .map(|e| e["manager"].as_str().unwrap())
        .collect();
    assert_eq!(
        managers,
        ["creator", "relabeler"],
        "labeler lost its only field"
    );
    assert_eq!(entries[0]["fieldsV1"], odd);
    assert_eq!(
        entries[1]["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:app": {}}}})
    );
    let mut plain = old.clone();
    plain["metadata"]["labels"]["app"] = json!("b");
    record_update_reference(
        Some(&old),
        &mut plain,
        "relabeler",
        "Update",
        None,
        "T1",
        &shape,
        &[],
    );
    assert_eq!(new, plain);
}
