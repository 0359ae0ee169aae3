//! devcluster against kube-apiserver: the same requests, in the same order, sent to both, and
//! their answers compared (issue #19 item 4).
//!
//! Each step is one raw HTTP request a client could send. What is compared is what a client
//! acts on: the status code; for an error, whether the body is a JSON `Status` or plain text,
//! the `reason` and every cause's `field` and `reason`; for a success, the parts of the object
//! the step names. `Status` messages are compared too and counted, but only reported: their
//! wording is not something clients branch on.
//!
//! A step whose answers differ fails the test unless it is in [`KNOWN_DIFFERENCES`], each of
//! which `docs/devcluster.md` lists; a listed step that no longer differs fails it as well, so
//! the list stays true. The real control plane is this workspace's `realcluster` (kube-apiserver,
//! etcd, kwok built from `upstream/go.mod`); without Go the test skips with one line, except
//! under CI.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Steps whose answers differ on purpose or for now, with the reason (also in
/// docs/devcluster.md, "Differences from kube-apiserver").
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[];

const NS: &str = "parity";

/// One request of the sequence.
struct Step {
    name: &'static str,
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Body,
    /// JSON pointers into a successful answer that must be equal on both grounds.
    compare: &'static [&'static str],
}

enum Body {
    None,
    Json(Value),
    Raw(&'static str),
}

fn step(name: &'static str, method: &'static str, path: impl Into<String>) -> Step {
    Step {
        name,
        method,
        path: path.into(),
        content_type: "application/json",
        body: Body::None,
        compare: &[],
    }
}

impl Step {
    fn json(mut self, body: Value) -> Step {
        self.body = Body::Json(body);
        self
    }
    fn raw(mut self, content_type: &'static str, body: &'static str) -> Step {
        self.content_type = content_type;
        self.body = Body::Raw(body);
        self
    }
    fn content_type(mut self, content_type: &'static str) -> Step {
        self.content_type = content_type;
        self
    }
    fn compare(mut self, pointers: &'static [&'static str]) -> Step {
        self.compare = pointers;
        self
    }
}

fn configmaps() -> String {
    format!("/api/v1/namespaces/{NS}/configmaps")
}

fn widgets() -> String {
    format!("/apis/parity.example.com/v1/namespaces/{NS}/widgets")
}

fn core_event(extra: Value) -> Value {
    let mut event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "box.1", "namespace": NS},
        "involvedObject": {"kind": "ConfigMap", "name": "box", "namespace": NS},
        "reason": "Checked",
        "message": "checked",
        "type": "Normal",
    });
    if let (Some(event), Some(extra)) = (event.as_object_mut(), extra.as_object()) {
        event.extend(extra.clone());
    }
    event
}

fn events_v1(regarding: Value) -> Value {
    json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"generateName": "box."},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "parity.example.com/checker",
        "reportingInstance": "checker-0",
        "action": "Check", "reason": "Checked", "type": "Normal",
        "regarding": regarding,
    })
}

fn apply_labels(labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shared", "labels": labels}})
}

/// The sequence, in order (later steps see what earlier ones created).
fn steps() -> Vec<Step> {
    let cm = |name: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}});
    vec![
        // Paths nothing serves.
        step("unknown resource of a built-in group", "GET", "/apis/apps/v1/nosuch"),
        step("unknown resource of the core group", "GET", "/api/v1/nosuch"),
        step("unknown resource of a custom group", "GET", "/apis/parity.example.com/v1/nosuch"),
        step("unknown group", "GET", "/apis/nosuch.example.com/v1/things"),
        step("discovery of an unknown group", "GET", "/apis/nosuch.example.com"),
        step("discovery of an unknown version", "GET", "/apis/apps/v9"),
        step("discovery of an unknown version of a custom group", "GET", "/apis/parity.example.com/v9"),
        step("namespaced resource by name across namespaces", "GET", "/api/v1/pods/x"),
        step("cluster-scoped resource under a namespace", "GET", format!("/api/v1/namespaces/{NS}/nodes/x")),
        step("unknown subresource of a built-in kind", "GET", format!("/api/v1/namespaces/{NS}/pods/x/nosuch")),
        step("unknown subresource of a custom kind", "GET", format!("{}/x/nosuch", widgets())),
        step("scale of a custom kind without scale", "GET", format!("{}/x/scale", widgets())),
        // Objects that are not there.
        step("get a missing object", "GET", format!("/api/v1/namespaces/{NS}/pods/missing")),
        step("get a missing custom object", "GET", format!("{}/missing", widgets())),
        step("delete a missing object", "DELETE", format!("{}/missing", configmaps())),
        step("create in a missing namespace", "POST", "/api/v1/namespaces/nosuchns/configmaps").json(cm("a")),
        // Creates refused by validation.
        step("service name that is not a DNS-1035 label", "POST", format!("/api/v1/namespaces/{NS}/services"))
            .json(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1abc"},
                "spec": {"ports": [{"port": 80}]}})),
        step("pod without containers", "POST", format!("/api/v1/namespaces/{NS}/pods"))
            .json(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}})),
        step("name longer than 253 characters", "POST", configmaps()).json(cm(&"a".repeat(254))),
        step("name with capital letters", "POST", configmaps()).json(cm("Box")),
        step("invalid label value", "POST", configmaps())
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "l", "labels": {"a": "not ok!"}}})),
        step("generateName ending in a dot", "POST", configmaps())
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "box."}})),
        step("create with a resourceVersion", "POST", configmaps())
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rv", "resourceVersion": "5"}})),
        step("create with another namespace in the body", "POST", configmaps())
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other", "namespace": "default"}})),
        step("unknown field with fieldValidation=Strict", "POST", format!("{}?fieldValidation=Strict", configmaps()))
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "strict"}, "nosuch": 1})),
        step("body that is not JSON", "POST", configmaps()).raw("application/json", "{"),
        step("unsupported content type", "POST", configmaps()).raw("text/plain", "hello"),
        step("unsupported content type for a custom resource", "POST", widgets()).raw("text/plain", "hello"),
        // Creates that succeed, then what conflicts with them.
        step("create", "POST", configmaps()).json(cm("box")).compare(&["/data", "/metadata/name", "/metadata/namespace"]),
        step("dry-run create", "POST", format!("{}?dryRun=All", configmaps())).json(cm("dry")).compare(&["/metadata/name"]),
        step("dry-run create stored nothing", "GET", format!("{}/dry", configmaps())),
        step("create an existing name", "POST", configmaps()).json(cm("box")),
        step("update at a stale resourceVersion", "PUT", format!("{}/box", configmaps()))
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "box", "resourceVersion": "1"}})),
        step("update with another name in the body", "PUT", format!("{}/box", configmaps()))
            .json(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}})),
        step("merge patch that is not JSON", "PATCH", format!("{}/box", configmaps()))
            .raw("application/merge-patch+json", "{"),
        step("JSON patch whose test fails", "PATCH", format!("{}/box", configmaps()))
            .raw("application/json-patch+json", r#"[{"op":"test","path":"/data/k","value":"other"}]"#),
        step("JSON patch of a missing path", "PATCH", format!("{}/box", configmaps()))
            .raw("application/json-patch+json", r#"[{"op":"replace","path":"/data/nosuch/x","value":"1"}]"#),
        step("delete with a stale uid precondition", "DELETE", format!("{}/box", configmaps()))
            .json(json!({"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "00000000-0000-0000-0000-000000000000"}})),
        step("list with a bad label selector", "GET", format!("{}?labelSelector=a%20in", configmaps())),
        step("list with an unknown field selector", "GET", format!("{}?fieldSelector=spec.nosuch%3Dx", configmaps())),
        // Strategic merge patch: where the patch's new list elements go among the live ones
        // (found by devcluster's API tests on the real ground: the patch's go first).
        step("create a deployment", "POST", format!("/apis/apps/v1/namespaces/{NS}/deployments"))
            .json(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
                        {"name": "side", "image": "side:1"}]}}}}))
            .compare(&["/spec/template/spec/containers/0/env"]),
        step("strategic merge patch adding list elements", "PATCH", format!("/apis/apps/v1/namespaces/{NS}/deployments/web"))
            .json(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "env": [{"name": "C", "value": "3"}, {"name": "B", "value": "4"}]},
                {"name": "new", "image": "new:1"}]}}}}))
            .content_type("application/strategic-merge-patch+json")
            .compare(&["/spec/template/spec/containers/0/name", "/spec/template/spec/containers/0/env",
                "/spec/template/spec/containers/1/name", "/spec/template/spec/containers/2/name"]),
        // Events: what kube-apiserver refuses (found by the Python client on the real ground).
        step("event time without six fraction digits", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"eventTime": "2026-01-01T00:00:00Z", "reportingComponent": "parity",
                "reportingInstance": "parity-0", "action": "Check"}))),
        step("event generateName ending in a dot", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"metadata": {"generateName": "box.", "namespace": NS}}))),
        step("core event with eventTime and no reporting fields", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"eventTime": "2026-01-01T00:00:00.000000Z"}))),
        step("core event named with capitals and an underscore", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"metadata": {"name": "Box_1", "namespace": NS}})))
            .compare(&["/metadata/name"]),
        step("old-style core event about an object of another namespace", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"metadata": {"name": "box.4", "namespace": NS},
                "involvedObject": {"kind": "ConfigMap", "name": "box", "namespace": "default"}}))),
        step("legacy core event", "POST", format!("/api/v1/namespaces/{NS}/events"))
            .json(core_event(json!({"metadata": {"name": "box.2", "namespace": NS}, "count": 1})))
            .compare(&["/reason", "/involvedObject/name", "/count"]),
        step("events.k8s.io event missing its required fields", "POST", format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"))
            .json(json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "box.3"}})),
        step("events.k8s.io event about another namespace's object", "POST", format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"))
            .json(events_v1(json!({"kind": "ConfigMap", "name": "box", "namespace": "default"})))
            .compare(&["/regarding/namespace", "/reportingController"]),
        step("events.k8s.io event about a cluster-scoped object", "POST", format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"))
            .json(events_v1(json!({"kind": "Node", "name": "node-0"}))),
        step("lease renewTime without six fraction digits", "POST", format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"))
            .json(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                "spec": {"holderIdentity": "a", "renewTime": "2026-01-01T00:00:00Z"}})),
        // Custom resources.
        step("custom resource with a wrongly typed field", "POST", widgets())
            .json(json!({"apiVersion": "parity.example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": "big"}})),
        step("custom resource create drops unknown fields", "POST", widgets())
            .json(json!({"apiVersion": "parity.example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                "spec": {"size": 3, "nosuch": 1}, "status": {"ready": true}}))
            .compare(&["/spec", "/status"]),
        step("custom resource status through the status subresource", "PATCH", format!("{}/w/status", widgets()))
            .raw("application/merge-patch+json", r#"{"metadata":{"labels":{"z":"1"}},"spec":{"size":4},"status":{"ready":true}}"#)
            .compare(&["/metadata/labels", "/spec", "/status"]),
        // Server-side apply: a field two managers own stays while one of them still applies it.
        step("apply by manager a", "PATCH", format!("{}/shared?fieldManager=a", configmaps()))
            .json(apply_labels(json!({"a": "1", "s": "x"}))).content_type("application/apply-patch+yaml")
            .compare(&["/metadata/labels"]),
        step("apply by manager b sharing a field", "PATCH", format!("{}/shared?fieldManager=b", configmaps()))
            .json(apply_labels(json!({"s": "x"}))).content_type("application/apply-patch+yaml")
            .compare(&["/metadata/labels"]),
        step("manager a stops applying the shared field", "PATCH", format!("{}/shared?fieldManager=a", configmaps()))
            .json(apply_labels(json!({"a": "1"}))).content_type("application/apply-patch+yaml")
            .compare(&["/metadata/labels"]),
        step("manager b stops applying it too", "PATCH", format!("{}/shared?fieldManager=b", configmaps()))
            .json(apply_labels(json!({}))).content_type("application/apply-patch+yaml")
            .compare(&["/metadata/labels"]),
        step("apply conflicting with another manager", "PATCH", format!("{}/shared?fieldManager=c", configmaps()))
            .json(apply_labels(json!({"a": "2"}))).content_type("application/apply-patch+yaml"),
        step("apply without a field manager", "PATCH", format!("{}/shared", configmaps()))
            .json(apply_labels(json!({"a": "1"}))).content_type("application/apply-patch+yaml"),
    ]
}

/// What a client acts on in an answer.
#[derive(Debug, PartialEq)]
enum Outcome {
    /// A JSON `Status` (any code): reason and (field, reason) of each cause, sorted.
    Status {
        code: u16,
        reason: String,
        causes: Vec<(String, String)>,
    },
    /// A success with an object: the compared parts.
    Object { code: u16, parts: Vec<Value> },
    /// Anything else: the code, the media type and the trimmed body.
    Other {
        code: u16,
        media_type: String,
        body: String,
    },
}

struct Answer {
    outcome: Outcome,
    message: Option<String>,
}

async fn send(client: &kube::Client, step: &Step) -> Answer {
    let bytes = match &step.body {
        Body::None => Vec::new(),
        Body::Json(v) => serde_json::to_vec(v).unwrap(),
        Body::Raw(text) => text.as_bytes().to_vec(),
    };
    let request = http::Request::builder()
        .method(step.method)
        .uri(&step.path)
        .header("content-type", step.content_type)
        .header("accept", "application/json")
        .body(kube::client::Body::from(bytes))
        .unwrap();
    let response = client
        .send(request)
        .await
        .unwrap_or_else(|e| panic!("{}: request not sent: {e}", step.name));
    let code = response.status().as_u16();
    let media_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let body = response.into_body().collect_bytes().await.unwrap();
    let text = String::from_utf8_lossy(&body).into_owned();
    let json: Option<Value> = (media_type == "application/json")
        .then(|| serde_json::from_str(&text).ok())
        .flatten();
    match json {
        Some(status) if status["kind"] == "Status" => {
            let mut causes: Vec<(String, String)> = status["details"]["causes"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| {
                    let text = |key: &str| c[key].as_str().unwrap_or("").to_string();
                    (text("field"), text("reason"))
                })
                .collect();
            causes.sort();
            Answer {
                outcome: Outcome::Status {
                    code,
                    reason: status["reason"].as_str().unwrap_or("").to_string(),
                    causes,
                },
                message: status["message"].as_str().map(String::from),
            }
        }
        Some(object) if (200..300).contains(&code) => Answer {
            outcome: Outcome::Object {
                code,
                parts: step
                    .compare
                    .iter()
                    .map(|p| object.pointer(p).cloned().unwrap_or(Value::Null))
                    .collect(),
            },
            message: None,
        },
        _ => Answer {
            outcome: Outcome::Other {
                code,
                media_type,
                body: text.trim().to_string(),
            },
            message: None,
        },
    }
}

/// `message` with what differs from run to run masked: UIDs and the five characters a server
/// appends to a `generateName`.
fn mask_generated(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        let uid_shaped = chars.len() >= i + 36
            && chars[i..i + 36].iter().enumerate().all(|(k, c)| {
                if matches!(k, 8 | 13 | 18 | 23) {
                    *c == '-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if uid_shaped {
            out.push_str("<uid>");
            i += 36;
            continue;
        }
        // `box.` followed by a generated suffix and a closing quote.
        let generated = chars[i] == '.'
            && chars.len() > i + 6
            && chars[i + 1..i + 6].iter().all(char::is_ascii_alphanumeric)
            && chars[i + 6] == '"';
        if generated {
            out.push_str(".<generated>\"");
            i += 7;
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// The namespace and the Widget CRD every step uses, created on `client`'s cluster.
async fn prepare(client: &kube::Client, real: bool) {
    let setup = [
        step("namespace", "POST", "/api/v1/namespaces")
            .json(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})),
        step("crd", "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions").json(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.parity.example.com"},
            "spec": {
                "group": "parity.example.com",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                    }}},
                }],
            },
        })),
    ];
    for s in &setup {
        let answer = send(client, s).await;
        assert!(
            matches!(answer.outcome, Outcome::Object { code: 201, .. }),
            "setup {}: {:?}",
            s.name,
            answer.outcome
        );
    }
    // The custom resource is served once the CRD is Established (and, on kube-apiserver, once
    // its discovery and handlers caught up: a list answers 200).
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = send(client, &step("widgets served", "GET", widgets())).await;
        if matches!(answer.outcome, Outcome::Object { code: 200, .. }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "widgets not served within 60 s: {:?}",
            answer.outcome
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The ServiceAccount admission plugin waits for the namespace's default ServiceAccount
    // before it admits a Pod; kube-controller-manager creates it. devcluster creates none and
    // needs none (docs/devcluster.md).
    if !real {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let path = format!("/api/v1/namespaces/{NS}/serviceaccounts/default");
        let answer = send(client, &step("default service account", "GET", path)).await;
        if matches!(answer.outcome, Outcome::Object { code: 200, .. }) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no default ServiceAccount within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn devcluster_answers_like_kube_apiserver() {
    if !realcluster::go_or_skip("devcluster_answers_like_kube_apiserver") {
        return;
    }
    let dev = devcluster::DevCluster::start(devcluster::Config::ephemeral())
        .await
        .expect("devcluster starts");
    let real = realcluster::shared().await.expect("real cluster starts");
    let dev_client = dev.client();
    let real_client = real.client().await.expect("real client");
    prepare(&dev_client, false).await;
    prepare(&real_client, true).await;

    let mut identical = 0;
    let mut messages_identical = 0;
    let mut messages_compared = 0;
    let mut unexpected = Vec::new();
    let mut stale = Vec::new();
    let steps = steps();
    for s in &steps {
        let on_dev = send(&dev_client, s).await;
        let on_real = send(&real_client, s).await;
        let known = KNOWN_DIFFERENCES.iter().find(|(name, _)| *name == s.name);
        if on_dev.outcome == on_real.outcome {
            identical += 1;
            if known.is_some() {
                stale.push(s.name);
            }
        } else if known.is_none() {
            unexpected.push(format!(
                "{} ({} {}):\n  devcluster:     {:?}\n  kube-apiserver: {:?}",
                s.name, s.method, s.path, on_dev.outcome, on_real.outcome
            ));
        }
        if let (Some(a), Some(b)) = (&on_dev.message, &on_real.message) {
            messages_compared += 1;
            if mask_generated(a) == mask_generated(b) {
                messages_identical += 1;
            } else {
                eprintln!(
                    "message differs, {}:\n  devcluster:     {a}\n  kube-apiserver: {b}",
                    s.name
                );
            }
        }
    }
    eprintln!(
        "{} API behaviours checked on devcluster and kube-apiserver: {identical} identical, {} known differences; Status messages identical in {messages_identical} of {messages_compared}",
        steps.len(),
        KNOWN_DIFFERENCES.len()
    );
    dev.shutdown().await;
    assert!(
        unexpected.is_empty(),
        "{} steps answered differently (fix devcluster, or list the step in KNOWN_DIFFERENCES and docs/devcluster.md):\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    assert!(
        stale.is_empty(),
        "listed as known differences but now identical (remove them from KNOWN_DIFFERENCES and docs/devcluster.md): {stale:?}"
    );
}
