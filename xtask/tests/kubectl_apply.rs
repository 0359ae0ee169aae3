//! The release files applied with the real `kubectl` (1.32 on these machines) to a minimal
//! in-test API server: discovery for the kinds the release uses, and create/get/patch
//! recorded per object. It checks what a user running `kubectl apply -f` would get:
//! `sandbox.yaml` creates exactly the core objects; `extensions.yaml` applied afterwards
//! creates only its own objects and patches none of the core ones; and
//! `sandbox-with-extensions.yaml` applied over both leaves every object unchanged.
//!
//! kubectl is required: set `XTASK_SKIP_KUBECTL=1` to skip on a machine without it.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::{Value, json};
use xtask::release::{ReleaseOptions, render_release, write_release};
use xtask::workspace::deploy_dir;

/// (group, version, plural, kind, namespaced) of every resource the release may contain.
const RESOURCES: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "namespaces", "Namespace", false),
    ("", "v1", "serviceaccounts", "ServiceAccount", true),
    ("", "v1", "services", "Service", true),
    ("apps", "v1", "deployments", "Deployment", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
    ("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
    ),
];

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

fn discovery(path: &str) -> Option<Value> {
    if path == "/api" {
        return Some(json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}));
    }
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (group, version, ..) in RESOURCES {
        if !group.is_empty() {
            groups.entry(group).or_default().push(version);
        }
    }
    if path == "/apis" {
        let list: Vec<Value> = groups
            .keys()
            .map(|group| {
                let gv = json!({"groupVersion": format!("{group}/v1"), "version": "v1"});
                json!({"name": group, "versions": [gv.clone()], "preferredVersion": gv})
            })
            .collect();
        return Some(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": list}));
    }
    let gv = path
        .strip_prefix("/api/")
        .or_else(|| path.strip_prefix("/apis/"))?;
    let resources: Vec<Value> = RESOURCES
        .iter()
        .filter(|(g, v, ..)| group_version(g, v) == gv)
        .map(|(_, _, plural, kind, namespaced)| {
            json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": namespaced,
                   "kind": kind, "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// What the server saw: each write as "METHOD path", and the stored objects by item path.
#[derive(Default)]
struct State {
    writes: Vec<String>,
    objects: BTreeMap<String, Value>,
}

fn not_found(path: &str) -> (u16, Value) {
    (
        404,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "message": format!("{path} not found"), "reason": "NotFound", "code": 404}),
    )
}

fn handle(state: &Mutex<State>, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let path = path.split('?').next().unwrap_or_default();
    if method == "GET"
        && let Some(document) = discovery(path)
    {
        return (200, document);
    }
    let mut state = state.lock().unwrap();
    match method {
        "GET" => match state.objects.get(path) {
            Some(object) => (200, object.clone()),
            None => not_found(path),
        },
        "POST" => {
            let object: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let item = format!("{path}/{name}");
            state.writes.push(format!("POST {item}"));
            if state.objects.contains_key(&item) {
                return (
                    409,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": "AlreadyExists", "code": 409}),
                );
            }
            state.objects.insert(item, object.clone());
            (201, object)
        }
        "PATCH" | "PUT" | "DELETE" => {
            state.writes.push(format!("{method} {path}"));
            match state.objects.get(path) {
                Some(object) => (200, object.clone()),
                None => not_found(path),
            }
        }
        _ => not_found(path),
    }
}

fn serve_connection(stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let path = parts.next().unwrap_or_default().to_string();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, document) = handle(&state, &method, &path, &body);
        let payload = document.to_string();
        let response = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
            payload.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

/// Starts the server; returns its URL and its state.
fn start_server() -> (String, Arc<Mutex<State>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let state = Arc::new(Mutex::new(State::default()));
    let shared = state.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let state = shared.clone();
            thread::spawn(move || serve_connection(stream, state));
        }
    });
    (url, state)
}

fn kubectl_apply(kubeconfig: &Path, file: &Path) -> String {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        // Keep kubectl's discovery cache out of the user's home directory.
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("kubectl-cache"))
        .args(["apply", "--validate=false", "-f"])
        .arg(file)
        .output()
        .expect("kubectl on PATH (install kubectl, or set XTASK_SKIP_KUBECTL=1 to skip)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "kubectl apply -f {} failed:\n{stdout}\n{}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The item path a real API server would store `kind` `namespace/name` at.
fn item_path(kind: &str, namespace: Option<&str>, name: &str) -> String {
    let (group, version, plural, _, namespaced) = RESOURCES
        .iter()
        .find(|r| r.3 == kind)
        .unwrap_or_else(|| panic!("unknown kind {kind}"));
    let root = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    match (namespaced, namespace) {
        (true, Some(ns)) => format!("{root}/namespaces/{ns}/{plural}/{name}"),
        _ => format!("{root}/{plural}/{name}"),
    }
}

fn creates(objects: &[(&str, Option<&str>, &str)]) -> Vec<String> {
    let mut out: Vec<String> = objects
        .iter()
        .map(|(kind, ns, name)| format!("POST {}", item_path(kind, *ns, name)))
        .collect();
    out.sort();
    out
}

fn take_writes(state: &Mutex<State>) -> Vec<String> {
    let mut writes = std::mem::take(&mut state.lock().unwrap().writes);
    writes.sort();
    writes
}

const NS: Option<&str> = Some("agent-sandbox-system");

#[test]
fn kubectl_apply_creates_exactly_the_listed_objects() {
    if std::env::var_os("XTASK_SKIP_KUBECTL").is_some() {
        eprintln!("XTASK_SKIP_KUBECTL set: not running kubectl");
        return;
    }
    let options = ReleaseOptions::parse("v1.2.3", "registry.test/agent-sandbox").unwrap();
    let manifests = render_release(&deploy_dir(), &options).unwrap();
    let dir = tempfile::tempdir().unwrap();
    write_release(dir.path(), &manifests).unwrap();

    let (url, state) = start_server();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {url}\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n\
             users:\n- name: fake\n  user: {{}}\ncurrent-context: fake\n"
        ),
    )
    .unwrap();

    // sandbox.yaml on an empty cluster: exactly the core objects are created.
    let out = kubectl_apply(&kubeconfig, &dir.path().join("sandbox.yaml"));
    assert_eq!(
        take_writes(&state),
        creates(&[
            ("Namespace", None, "agent-sandbox-system"),
            (
                "CustomResourceDefinition",
                None,
                "sandboxes.agents.x-k8s.io"
            ),
            ("ServiceAccount", NS, "sandbox-controller"),
            ("ClusterRole", None, "agent-sandbox-controller"),
            ("ClusterRoleBinding", None, "agent-sandbox-controller"),
            ("Role", NS, "sandbox-controller-leader-election"),
            ("RoleBinding", NS, "sandbox-controller-leader-election"),
            ("Service", NS, "sandbox-controller-metrics"),
            ("Deployment", NS, "sandbox-controller"),
        ]),
        "kubectl said:\n{out}"
    );

    // extensions.yaml after it: only the extension objects are created, nothing is patched.
    let out = kubectl_apply(&kubeconfig, &dir.path().join("extensions.yaml"));
    assert_eq!(
        take_writes(&state),
        creates(&[
            (
                "CustomResourceDefinition",
                None,
                "sandboxtemplates.extensions.agents.x-k8s.io"
            ),
            (
                "CustomResourceDefinition",
                None,
                "sandboxwarmpools.extensions.agents.x-k8s.io"
            ),
            (
                "CustomResourceDefinition",
                None,
                "sandboxclaims.extensions.agents.x-k8s.io"
            ),
            ("ServiceAccount", NS, "extensions-controller"),
            ("ClusterRole", None, "agent-sandbox-controller-extensions"),
            (
                "ClusterRoleBinding",
                None,
                "agent-sandbox-controller-extensions"
            ),
            ("Role", NS, "extensions-controller-leader-election"),
            ("RoleBinding", NS, "extensions-controller-leader-election"),
            ("Service", NS, "extensions-controller-metrics"),
            ("Deployment", NS, "extensions-controller"),
        ]),
        "kubectl said:\n{out}"
    );

    // sandbox-with-extensions.yaml over both: the same objects, so kubectl writes nothing.
    let out = kubectl_apply(
        &kubeconfig,
        &dir.path().join("sandbox-with-extensions.yaml"),
    );
    assert_eq!(
        take_writes(&state),
        Vec::<String>::new(),
        "kubectl said:\n{out}"
    );
    assert_eq!(out.lines().count(), 19, "{out}");
    assert!(out.lines().all(|l| l.ends_with(" unchanged")), "{out}");
}
