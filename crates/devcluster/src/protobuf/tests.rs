use serde_json::json;

use super::*;

fn round_trip(object: &Value) -> Value {
    let encoded = encode(object)
        .expect("a kind with a protobuf form")
        .unwrap();
    assert!(encoded.starts_with(MAGIC));
    decode(&encoded).unwrap()
}

#[test]
fn a_pod_round_trips_through_protobuf() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web", "namespace": "default", "uid": "u-1", "resourceVersion": "42",
            "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "front"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-0",
                                 "controller": true, "blockOwnerDeletion": false}],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                               "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}],
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "restartPolicy": "Never",
            "containers": [{
                "name": "c", "image": "busybox", "command": ["sh", "-c", "exit 0"],
                "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": false},
            }],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null,
                            "lastTransitionTime": "2026-01-01T00:00:01Z"}],
            "podIPs": [{"ip": "127.2.0.1"}],
            "startTime": "2026-01-01T00:00:01Z",
        },
    });
    let back = round_trip(&pod);
    let spec = &back["spec"];
    // Pointers set to zero stay; JSON names come back; special types keep their JSON form.
    assert_eq!(spec["terminationGracePeriodSeconds"], 0);
    assert_eq!(spec["containers"][0]["securityContext"]["runAsUser"], 0);
    assert_eq!(
        spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(spec["containers"][0]["resources"]["limits"]["cpu"], "500m");
    assert_eq!(
        spec["containers"][0]["readinessProbe"]["httpGet"]["port"],
        "http"
    );
    assert_eq!(spec["containers"][0]["readinessProbe"]["periodSeconds"], 5);
    assert_eq!(spec["containers"][0]["ports"][0]["containerPort"], 8080);
    assert_eq!(
        spec["volumes"][0],
        json!({"name": "v", "emptyDir": {}}),
        "inline VolumeSource"
    );
    assert_eq!(back["metadata"], pod["metadata"]);
    assert_eq!(
        back["status"]["conditions"][0]["lastTransitionTime"],
        "2026-01-01T00:00:01Z"
    );
    assert_eq!(back["status"]["podIPs"], json!([{"ip": "127.2.0.1"}]));
    assert_eq!(back["status"]["startTime"], "2026-01-01T00:00:01Z");
    // Go's zero values of fields without omitempty are written, as kube-apiserver writes them.
    assert_eq!(spec["containers"][0]["name"], "c");
}

#[test]
fn services_network_policies_and_lists_round_trip() {
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"clusterIP": "None", "selector": {"app": "x"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]},
    });
    let back = round_trip(&svc);
    assert_eq!(back["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(back["spec"]["selector"], json!({"app": "x"}));
    let np = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": "deny"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"],
                 "egress": [{"ports": [{"port": 53, "protocol": "UDP"}],
                             "to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}]},
    });
    let back = round_trip(&np);
    assert_eq!(back["spec"], np["spec"]);
    let list = json!({
        "apiVersion": "v1", "kind": "PodList",
        "metadata": {"resourceVersion": "7", "continue": "abc"},
        "items": [{"metadata": {"name": "a"}, "spec": {"containers": []}}],
    });
    let back = round_trip(&list);
    assert_eq!(back["metadata"], list["metadata"]);
    assert_eq!(back["items"][0]["metadata"]["name"], "a");
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 404,
                        "reason": "NotFound", "message": "pods \"x\" not found",
                        "details": {"name": "x", "kind": "pods"}, "metadata": {}});
    let back = round_trip(&status);
    assert_eq!(back["code"], 404);
    assert_eq!(back["details"]["name"], "x");
}

#[test]
fn delete_options_and_custom_resources() {
    let opts = json!({"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                      "propagationPolicy": "Foreground", "preconditions": {"uid": "u"}});
    let back = round_trip(&opts);
    assert_eq!(back["gracePeriodSeconds"], 0);
    assert_eq!(back["propagationPolicy"], "Foreground");
    assert_eq!(back["preconditions"]["uid"], "u");
    assert!(!serves("agents.x-k8s.io/v1beta1", "Sandbox"));
    assert!(encode(&json!({"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox"})).is_none());
    assert!(matches!(decode(b"{}"), Err(ProtobufError::NoEnvelope)));
}

#[test]
fn watch_frames_are_length_prefixed_events_around_enveloped_objects() {
    use prost::Message as _;
    let frame = json!({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
                                                   "metadata": {"name": "c"}, "data": {"k": "v"}}});
    let bytes = encode_watch_frame(&frame).unwrap();
    let len = u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize;
    assert_eq!(len, bytes.len() - 4);
    let event = WatchEvent::decode(&bytes[4..]).unwrap();
    assert_eq!(event.type_, "ADDED");
    let object = decode(&event.object.unwrap().raw).unwrap();
    assert_eq!(object["data"], json!({"k": "v"}));
}

#[test]
fn accept_negotiation_follows_the_first_media_range() {
    assert!(wants_protobuf("application/vnd.kubernetes.protobuf, */*"));
    assert!(wants_protobuf(
        "application/vnd.kubernetes.protobuf,application/json"
    ));
    assert!(!wants_protobuf(
        "application/json, application/vnd.kubernetes.protobuf"
    ));
    assert!(!wants_protobuf(
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json"
    ));
    assert!(!wants_protobuf(""));
}
