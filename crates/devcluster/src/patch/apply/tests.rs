use serde_json::{Value, json};

use super::*;
use crate::patch::{ListType, TypeMeta, builtin_shape};

const T0: &str = "2026-01-01T00:00:00Z";
const T1: &str = "2026-01-01T00:01:00Z";
const T2: &str = "2026-01-01T00:02:00Z";

fn opts(manager: &str, force: bool, now: &str) -> ApplyOptions {
    ApplyOptions {
        manager: manager.to_string(),
        force,
        subresource: None,
        now: now.to_string(),
        status_subresource: false,
    }
}

fn deploy_shape() -> impl FieldShape {
    builtin_shape(&TypeMeta::new("apps/v1", "Deployment"))
}

fn pod_shape() -> impl FieldShape {
    builtin_shape(&TypeMeta::new("v1", "Pod"))
}

fn deployment(replicas: i64, labels: Value) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": labels},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "app", "image": "app:1"}]}}}
    })
}

fn managers_of(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or_default().to_string(),
                        e["operation"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    obj["metadata"]["managedFields"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["manager"] == manager))
        .unwrap_or_else(|| panic!("no managedFields entry for {manager} in {obj}"))
}

#[test]
fn create_via_apply_records_the_managers_fields() {
    let applied = deployment(2, json!({"app": "web"}));
    let out = apply(None, &applied, &opts("kubectl", false, T0), &deploy_shape()).unwrap();
    assert_eq!(out["spec"]["replicas"], 2);
    assert_eq!(out["metadata"]["name"], "web");
    let e = entry(&out, "kubectl");
    assert_eq!(e["operation"], "Apply");
    assert_eq!(e["apiVersion"], "apps/v1");
    assert_eq!(e["time"], T0);
    assert_eq!(e["fieldsType"], "FieldsV1");
    assert!(e.get("subresource").is_none());
    assert_eq!(
        e["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"app\"}": {".": {}, "f:name": {}, "f:image": {}}
            }}}}
        })
    );
}

#[test]
fn reapply_without_a_field_removes_it() {
    let first = deployment(2, json!({"app": "web", "tier": "front"}));
    let live = apply(None, &first, &opts("kubectl", false, T0), &deploy_shape()).unwrap();
    let mut second = deployment(2, json!({"app": "web"}));
    second["spec"].as_object_mut().unwrap().remove("replicas");
    let out = apply(
        Some(&live),
        &second,
        &opts("kubectl", false, T1),
        &deploy_shape(),
    )
    .unwrap();
    assert_eq!(out["metadata"]["labels"], json!({"app": "web"}));
    assert!(out["spec"].get("replicas").is_none(), "{out}");
    assert_eq!(entry(&out, "kubectl")["time"], T1);
}

#[test]
fn removing_all_labels_drops_the_empty_map() {
    let live = apply(
        None,
        &deployment(1, json!({"app": "web"})),
        &opts("m", false, T0),
        &deploy_shape(),
    )
    .unwrap();
    let mut again = deployment(1, json!({}));
    again["metadata"].as_object_mut().unwrap().remove("labels");
    let out = apply(Some(&live), &again, &opts("m", false, T1), &deploy_shape()).unwrap();
    assert!(out["metadata"].get("labels").is_none(), "{out}");
}

#[test]
fn second_manager_changing_a_field_conflicts_and_force_takes_it() {
    let live = apply(
        None,
        &deployment(2, json!({"app": "web"})),
        &opts("alice", false, T0),
        &deploy_shape(),
    )
    .unwrap();
    let bob = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 5}});
    let err = apply(Some(&live), &bob, &opts("bob", false, T1), &deploy_shape()).unwrap_err();
    assert_eq!(err.code(), 409);
    assert_eq!(
        err.to_string(),
        "Apply failed with 1 conflict: conflict with \"alice\": .spec.replicas"
    );
    let ApplyError::Conflict { conflicts, .. } = &err else {
        panic!("expected a conflict, got {err:?}")
    };
    assert_eq!(
        conflicts,
        &vec![Conflict {
            manager: "\"alice\"".into(),
            field: ".spec.replicas".into()
        }]
    );

    let out = apply(Some(&live), &bob, &opts("bob", true, T1), &deploy_shape()).unwrap();
    assert_eq!(out["spec"]["replicas"], 5);
    assert_eq!(
        entry(&out, "bob")["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(
        entry(&out, "alice")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none()
    );

    // alice no longer owns replicas: re-applying her config without it keeps bob's value...
    let mut alice_again = deployment(2, json!({"app": "web"}));
    alice_again["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let out2 = apply(
        Some(&out),
        &alice_again,
        &opts("alice", false, T2),
        &deploy_shape(),
    )
    .unwrap();
    assert_eq!(out2["spec"]["replicas"], 5);
}

#[test]
fn same_value_from_two_managers_is_shared_not_a_conflict() {
    let live = apply(
        None,
        &deployment(2, json!({})),
        &opts("alice", false, T0),
        &deploy_shape(),
    )
    .unwrap();
    let bob = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    let out = apply(Some(&live), &bob, &opts("bob", false, T1), &deploy_shape()).unwrap();
    // alice stops applying replicas: bob still owns it, so it stays
    let mut alice = deployment(2, json!({}));
    alice["spec"].as_object_mut().unwrap().remove("replicas");
    let out = apply(
        Some(&out),
        &alice,
        &opts("alice", false, T2),
        &deploy_shape(),
    )
    .unwrap();
    assert_eq!(out["spec"]["replicas"], 2);
}

#[test]
fn update_managers_conflict_too_and_messages_name_them() {
    let created = deployment(1, json!({}));
    let mut live = created.clone();
    record_update(
        None,
        &mut live,
        "kube-controller",
        "Update",
        None,
        T0,
        &deploy_shape(),
    );
    assert_eq!(
        managers_of(&live),
        vec![("kube-controller".into(), "Update".into())]
    );
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                         "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "app", "image": "app:2"}]}}}});
    let err = apply(
        Some(&live),
        &applied,
        &opts("me", false, T1),
        &deploy_shape(),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "Apply failed with 2 conflicts: conflicts with \"kube-controller\" using apps/v1:"
        ),
        "{msg}"
    );
    assert!(msg.contains("\n- .spec.replicas"), "{msg}");
    assert!(
        msg.contains("\n- .spec.template.spec.containers[name=\"app\"].image"),
        "{msg}"
    );
}

#[test]
fn map_lists_merge_by_key_and_removed_elements_go() {
    let pod = |containers: Value| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}});
    let live = apply(
        None,
        &pod(json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
                    {"name": "b", "image": "b:1"}])),
        &opts("m1", false, T0),
        &pod_shape(),
    )
    .unwrap();
    // another manager adds a container of its own
    let other = pod(json!([{"name": "sidecar", "image": "s:1"}]));
    let live = apply(Some(&live), &other, &opts("m2", false, T1), &pod_shape()).unwrap();
    let names = |obj: &Value| -> Vec<String> {
        obj["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&live), vec!["a", "b", "sidecar"]);
    // m1 drops container b and env Y
    let live = apply(
        Some(&live),
        &pod(json!([{"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]}])),
        &opts("m1", false, T2),
        &pod_shape(),
    )
    .unwrap();
    assert_eq!(names(&live), vec!["a", "sidecar"]);
    assert_eq!(
        live["spec"]["containers"][0]["env"],
        json!([{"name": "X", "value": "1"}])
    );
}

#[test]
fn conditions_from_two_status_managers() {
    let mut o = opts("kubelet", false, T0);
    o.subresource = Some("status".into());
    o.status_subresource = true;
    let live = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    let mut live_rec = live.clone();
    record_update(
        None,
        &mut live_rec,
        "creator",
        "Update",
        None,
        T0,
        &pod_shape(),
    );
    let applied = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": "ignored"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let out = apply(Some(&live_rec), &applied, &o, &pod_shape()).unwrap();
    assert!(
        out["spec"].get("nodeName").is_none(),
        "status apply must not touch spec"
    );
    let e = entry(&out, "kubelet");
    assert_eq!(e["subresource"], "status");
    assert_eq!(
        e["fieldsV1"],
        json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {}}}}})
    );
    let mut o2 = o.clone();
    o2.manager = "scheduler".into();
    let applied2 = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
    let out = apply(Some(&out), &applied2, &o2, &pod_shape()).unwrap();
    assert_eq!(
        out["status"]["conditions"],
        json!([{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}])
    );
    // a main-resource apply of a kind with a status subresource ignores status
    let mut main = opts("x", false, T1);
    main.status_subresource = true;
    let out2 = apply(Some(&out), &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "status": {"phase": "Failed"}}), &main, &pod_shape()).unwrap();
    assert!(out2["status"].get("phase").is_none());
}

#[test]
fn finalizers_are_a_set_owned_per_value() {
    let cm = |finalizers: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": finalizers}});
    let shape = builtin_shape(&TypeMeta::new("v1", "ConfigMap"));
    let live = apply(None, &cm(json!(["a"])), &opts("m1", false, T0), &shape).unwrap();
    let live = apply(
        Some(&live),
        &cm(json!(["b"])),
        &opts("m2", false, T1),
        &shape,
    )
    .unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["a", "b"]));
    let live = apply(Some(&live), &cm(json!([])), &opts("m1", false, T2), &shape).unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["b"]));
}

#[test]
fn object_without_managed_fields_gets_before_first_apply() {
    let live = deployment(1, json!({"app": "web"}));
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 4}});
    let err = apply(
        Some(&live),
        &applied,
        &opts("m", false, T0),
        &deploy_shape(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("\"before-first-apply\""), "{err}");
    let out = apply(Some(&live), &applied, &opts("m", true, T0), &deploy_shape()).unwrap();
    assert_eq!(out["spec"]["replicas"], 4);
    assert!(managers_of(&out).contains(&("before-first-apply".into(), "Update".into())));
}

#[test]
fn no_op_apply_keeps_the_stored_timestamps() {
    let applied = deployment(2, json!({"app": "web"}));
    let live = apply(None, &applied, &opts("kubectl", false, T0), &deploy_shape()).unwrap();
    let again = apply(
        Some(&live),
        &applied,
        &opts("kubectl", false, T1),
        &deploy_shape(),
    )
    .unwrap();
    assert_eq!(again, live);
}

#[test]
fn apply_errors() {
    let err = apply(None, &json!([1]), &opts("m", false, T0), &deploy_shape()).unwrap_err();
    assert_eq!(err.code(), 400);
    let err = apply(
        None,
        &deployment(1, json!({})),
        &opts("", false, T0),
        &deploy_shape(),
    )
    .unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(
        err.to_string().contains("fieldManager: Required value"),
        "{err}"
    );
    let dup = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "a"}, {"name": "a"}]}});
    let err = apply(None, &dup, &opts("m", false, T0), &pod_shape()).unwrap_err();
    assert_eq!(err.code(), 500);
    assert!(
        err.to_string()
            .starts_with("failed to create typed patch object (/v1, Kind=Pod): .spec.containers"),
        "{err}"
    );
    let nokey =
        json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"image": "x"}]}});
    assert!(
        apply(None, &nokey, &opts("m", false, T0), &pod_shape())
            .unwrap_err()
            .to_string()
            .contains("omits key field \"name\"")
    );
}

#[test]
fn record_update_takes_changed_fields_from_others() {
    let shape = deploy_shape();
    let live = apply(
        None,
        &deployment(2, json!({"app": "web"})),
        &opts("kubectl", false, T0),
        &shape,
    )
    .unwrap();
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(7);
    record_update(Some(&live), &mut scaled, "hpa", "Update", None, T1, &shape);
    assert_eq!(
        entry(&scaled, "hpa")["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert_eq!(entry(&scaled, "hpa")["operation"], "Update");
    assert!(
        entry(&scaled, "kubectl")["fieldsV1"]["f:spec"]
            .get("f:replicas")
            .is_none()
    );
    // now kubectl can re-apply replicas only with a conflict against hpa
    let err = apply(
        Some(&scaled),
        &deployment(2, json!({"app": "web"})),
        &opts("kubectl", false, T2),
        &shape,
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("conflict with \"hpa\" using apps/v1: .spec.replicas"),
        "{err}"
    );
    // Apply entries sort before Update entries
    assert_eq!(
        managers_of(&scaled),
        vec![
            ("kubectl".into(), "Apply".into()),
            ("hpa".into(), "Update".into())
        ]
    );
}

#[test]
fn record_update_no_op_and_removal_and_reset() {
    let shape = deploy_shape();
    let mut created = deployment(1, json!({"a": "1"}));
    record_update(None, &mut created, "creator", "Update", None, T0, &shape);
    let mut same = created.clone();
    record_update(
        Some(&created),
        &mut same,
        "other",
        "Update",
        None,
        T1,
        &shape,
    );
    assert_eq!(same, created, "a no-op write records nothing");

    let mut removed = created.clone();
    removed["metadata"]["labels"] = json!({});
    record_update(
        Some(&created),
        &mut removed,
        "other",
        "Update",
        None,
        T1,
        &shape,
    );
    assert!(
        entry(&removed, "creator")["fieldsV1"]["f:metadata"]
            .get("f:labels")
            .is_none()
    );
    assert_eq!(
        entry(&removed, "other")["fieldsV1"],
        json!({"f:metadata": {"f:labels": {}}})
    );

    let mut reset = created.clone();
    reset["metadata"]["managedFields"] = json!([{}]);
    record_update(
        Some(&created),
        &mut reset,
        "other",
        "Update",
        None,
        T1,
        &shape,
    );
    assert!(reset["metadata"].get("managedFields").is_none());
}

#[test]
fn odd_inputs_do_not_panic() {
    let shape = pod_shape();
    let odd = [
        json!(null),
        json!(1),
        json!("x"),
        json!([]),
        json!({}),
        json!({"metadata": "x"}),
        json!({"metadata": {"managedFields": "x"}}),
        json!({"metadata": {"managedFields": [1, {"fieldsV1": 3}, {"fieldsV1": {"f:a": {"k:{": {}}}}]}}),
        json!({"spec": {"containers": [1, [2], null]}}),
        json!({"spec": {"containers": {"name": "x"}}}),
        json!({"metadata": {"finalizers": [{"a": [1]}, {"a": [1]}]}}),
    ];
    for live in &odd {
        for applied in &odd {
            let _ = apply(Some(live), applied, &opts("m", false, T0), &shape);
            let _ = apply(Some(live), applied, &opts("m", true, T0), &shape);
            let mut new = applied.clone();
            record_update(
                Some(live),
                &mut new,
                "m",
                "Update",
                Some("status"),
                T0,
                &shape,
            );
        }
    }
}

#[test]
fn create_records_added_objects_like_the_api_server() {
    let shape = deploy_shape();
    let mut created = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1", "resources": {}}]}}}
    });
    record_update(
        None,
        &mut created,
        "kubectl-create",
        "Update",
        None,
        T0,
        &shape,
    );
    assert_eq!(
        entry(&created, "kubectl-create")["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:strategy": {"f:type": {}, "f:rollingUpdate": {".": {}, "f:maxSurge": {}}},
                "f:template": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
                        ".": {}, "f:name": {}, "f:image": {}, "f:resources": {}
                    }}}
                }
            }
        })
    );
}

#[test]
fn custom_resources_use_the_callers_shape() {
    // a shape from a CRD schema: spec.items is a set, everything else atomic
    let shape = |path: &[&str]| (path == ["spec", "items"]).then_some(ListType::Set);
    let mut created = json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t"}, "spec": {"items": ["a"], "size": 1}});
    record_update(None, &mut created, "ctl", "Update", None, T0, &shape);
    assert_eq!(
        entry(&created, "ctl")["fieldsV1"],
        json!({"f:spec": {".": {}, "f:items": {".": {}, "v:\"a\"": {}}, "f:size": {}}})
    );
    let applied = json!({"apiVersion": "example.com/v1", "kind": "Thing",
        "metadata": {"name": "t"}, "spec": {"items": ["b"]}});
    let out = apply(Some(&created), &applied, &opts("ssa", false, T1), &shape).unwrap();
    assert_eq!(out["spec"]["items"], json!(["a", "b"]));
    assert_eq!(out["spec"]["size"], 1);
}

#[test]
fn update_adding_finalizers_and_annotations_owns_the_new_containers() {
    let shape = builtin_shape(&TypeMeta::new("v1", "ConfigMap"));
    let mut live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
    record_update(None, &mut live, "creator", "Update", None, T0, &shape);
    assert_eq!(
        entry(&live, "creator")["fieldsV1"],
        json!({"f:data": {".": {}, "f:k": {}}})
    );
    let mut next = live.clone();
    next["metadata"]["finalizers"] = json!(["example.com/f"]);
    next["metadata"]["annotations"] = json!({"a": "1"});
    record_update(Some(&live), &mut next, "ctrl", "Update", None, T1, &shape);
    assert_eq!(
        entry(&next, "ctrl")["fieldsV1"],
        json!({"f:metadata": {
            "f:finalizers": {".": {}, "v:\"example.com/f\"": {}},
            "f:annotations": {".": {}, "f:a": {}}
        }})
    );
    // the creator keeps data, untouched
    assert_eq!(
        entry(&next, "creator")["fieldsV1"],
        json!({"f:data": {".": {}, "f:k": {}}})
    );
}

#[test]
fn atomic_maps_are_replaced_and_owned_whole() {
    let shape = deploy_shape();
    let live = apply(
        None,
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}}}),
        &opts("m", false, T0),
        &shape,
    )
    .unwrap();
    assert_eq!(
        entry(&live, "m")["fieldsV1"],
        json!({"f:spec": {"f:selector": {}}})
    );
    let out = apply(
        Some(&live),
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"c": "3"}}}}),
        &opts("m", false, T1),
        &shape,
    )
    .unwrap();
    assert_eq!(out["spec"]["selector"], json!({"matchLabels": {"c": "3"}}));
}

#[test]
fn applying_managed_fields_is_rejected() {
    let mut applied = deployment(1, json!({}));
    applied["metadata"]["managedFields"] = json!([]);
    let err = apply(None, &applied, &opts("m", false, T0), &deploy_shape()).unwrap_err();
    assert_eq!(
        (err.code(), err.to_string().as_str()),
        (400, "metadata.managedFields must be nil")
    );
}

#[test]
fn ignored_top_level_fields_are_owned_by_nobody() {
    let shape = pod_shape();
    // a create whose status the server filled in (qosClass) is not owned by the creator
    let mut created = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"qosClass": "BestEffort"}});
    record_update_ignoring(
        None,
        &mut created,
        "kubectl-run",
        "Update",
        None,
        T0,
        &shape,
        &["status"],
    );
    assert_eq!(
        entry(&created, "kubectl-run")["fieldsV1"],
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}}}})
    );
    // the kubelet's status write owns status, and a later main-resource write keeps it owned
    let mut running = created.clone();
    running["status"]["phase"] = json!("Running");
    record_update(
        Some(&created),
        &mut running,
        "kubelet",
        "Update",
        Some("status"),
        T1,
        &shape,
    );
    let mut relabeled = running.clone();
    relabeled["metadata"]["labels"] = json!({"a": "1"});
    relabeled["status"] = json!({});
    record_update_ignoring(
        Some(&running),
        &mut relabeled,
        "kubectl-label",
        "Update",
        None,
        T2,
        &shape,
        &["status"],
    );
    assert_eq!(
        entry(&relabeled, "kubelet")["fieldsV1"],
        json!({"f:status": {"f:phase": {}}})
    );
}

#[test]
fn atomic_list_elements_are_owned_without_their_fields() {
    let shape = pod_shape();
    let mut created = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}], "imagePullSecrets": [{"name": "regcred"}]}});
    record_update(
        None,
        &mut created,
        "kubectl-run",
        "Update",
        None,
        T0,
        &shape,
    );
    assert_eq!(
        entry(&created, "kubectl-run")["fieldsV1"]["f:spec"]["f:imagePullSecrets"],
        json!({".": {}, "k:{\"name\":\"regcred\"}": {}})
    );
}

#[test]
fn a_field_two_managers_apply_stays_until_both_stop() {
    let shape = builtin_shape(&TypeMeta::new("v1", "ConfigMap"));
    let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default"}, "data": data});
    let live = apply(
        None,
        &cm(json!({"a": "1", "b": "1"})),
        &opts("alice", false, T0),
        &shape,
    )
    .unwrap();
    let live = apply(
        Some(&live),
        &cm(json!({"a": "1"})),
        &opts("bob", false, T1),
        &shape,
    )
    .unwrap();
    assert_eq!(
        entry(&live, "bob")["fieldsV1"],
        json!({"f:data": {"f:a": {}}}),
        "{live}"
    );
    let live = apply(
        Some(&live),
        &cm(json!({"b": "1"})),
        &opts("alice", false, T2),
        &shape,
    )
    .unwrap();
    assert_eq!(live["data"], json!({"a": "1", "b": "1"}));
    let live = apply(Some(&live), &cm(json!({})), &opts("bob", false, T2), &shape).unwrap();
    assert_eq!(live["data"], json!({"b": "1"}));
}
