//! The files and command lines of the components: pure functions of the data directory's
//! [`Layout`], the [`Ports`] and the [`crate::Options`], so they can be read (and tested) in one
//! place.

use std::path::{Path, PathBuf};

use crate::pki::{CertKey, Pki};
use crate::upstream::Component;

/// Every request of a ServiceAccount in this namespace is audited (the controllers' own
/// ServiceAccounts live there: `deploy/*/service-account.yaml`).
pub const AUDITED_NAMESPACE: &str = "agent-sandbox-system";

/// The Service ClusterIP range, and the `kubernetes` Service's address in it (its first).
/// Nothing sends traffic to ClusterIPs here (there is no kube-proxy); they are strings in status.
pub const SERVICE_CIDR: &str = "10.96.0.0/16";
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";

/// The simulated Pods' IPs (strings in status only, never used for traffic: loopback, as the
/// design asks of simulated addresses) and the nodes' address.
pub const POD_CIDR: &str = "127.64.0.0/16";
pub const NODE_IP: &str = "127.0.0.1";

/// The annotation that hands a Node to kwok.
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
pub const KWOK_NODE_VALUE: &str = "fake";

/// The issuer of service-account tokens (as production clusters name it).
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Where everything of one cluster lives; the whole directory is removed at stop.
#[derive(Debug, Clone)]
pub struct Layout {
    pub root: PathBuf,
}

impl Layout {
    pub fn new(root: PathBuf) -> Layout {
        Layout { root }
    }
    pub fn pki(&self, file: &str) -> PathBuf {
        self.root.join("pki").join(file)
    }
    pub fn etcd_data(&self) -> PathBuf {
        self.root.join("etcd")
    }
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.root.join("kubeconfig").join(user)
    }
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.kubeconfig("admin")
    }
    pub fn audit_policy(&self) -> PathBuf {
        self.root.join("audit-policy.yaml")
    }
    pub fn audit_log(&self) -> PathBuf {
        self.root.join("audit.log")
    }
    pub fn kwok_config(&self) -> PathBuf {
        self.root.join("kwok.yaml")
    }
    pub fn log(&self, component: Component) -> PathBuf {
        self.root
            .join("logs")
            .join(format!("{}.log", component.name()))
    }
    /// The subdirectories to create before writing.
    pub fn dirs(&self) -> [PathBuf; 4] {
        [
            self.root.join("pki"),
            self.root.join("kubeconfig"),
            self.root.join("logs"),
            self.etcd_data(),
        ]
    }
}

/// The loopback ports of one cluster (picked free at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub kwok: u16,
}

/// The API server's URL.
pub fn server_url(ports: &Ports) -> String {
    format!("https://127.0.0.1:{}", ports.apiserver)
}

/// The PKI files: (path, contents, private?).
pub fn pki_files(layout: &Layout, pki: &Pki) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    let mut pair = |name: &str, pair: &CertKey| {
        files.push((layout.pki(&format!("{name}.crt")), pair.cert.clone()));
        files.push((layout.pki(&format!("{name}.key")), pair.key.clone()));
    };
    pair("ca", &pki.ca);
    pair("apiserver", &pki.apiserver);
    pair("etcd-ca", &pki.etcd_ca);
    pair("etcd-server", &pki.etcd_server);
    pair("apiserver-etcd-client", &pki.apiserver_etcd_client);
    pair("admin", &pki.admin);
    pair("kube-controller-manager", &pki.controller_manager);
    pair("kube-scheduler", &pki.scheduler);
    pair("kwok", &pki.kwok);
    files.push((layout.pki("sa.key"), pki.service_account_key.clone()));
    files.push((layout.pki("sa.pub"), pki.service_account_pub.clone()));
    files
}

fn arg(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

fn path(p: PathBuf) -> String {
    p.display().to_string()
}

/// etcd: client URLs over TLS with client certificates (the API server's), peer URL on a free
/// loopback port (a single member, but the default port would clash between clusters).
pub fn etcd_args(layout: &Layout, ports: &Ports) -> Vec<String> {
    let client = format!("https://127.0.0.1:{}", ports.etcd_client);
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        arg("name", "realcluster"),
        arg("data-dir", path(layout.etcd_data())),
        arg("listen-client-urls", &client),
        arg("advertise-client-urls", &client),
        arg("listen-peer-urls", &peer),
        arg("initial-advertise-peer-urls", &peer),
        arg("initial-cluster", format!("realcluster={peer}")),
        arg("cert-file", path(layout.pki("etcd-server.crt"))),
        arg("key-file", path(layout.pki("etcd-server.key"))),
        arg("trusted-ca-file", path(layout.pki("etcd-ca.crt"))),
        "--client-cert-auth".to_owned(),
        arg("log-level", "warn"),
    ]
}

/// kube-apiserver with production-like settings: TLS only, client certificates and
/// service-account tokens, `Node,RBAC` authorization, the default admission plugins with
/// PodSecurity named explicitly (it is on by default since 1.25; naming it keeps it on should
/// the default set change), and the audit log of [`AUDITED_NAMESPACE`]'s ServiceAccounts.
/// kube-apiserver's flags for [`crate::Options::short_history`]: etcd compacted every second
/// (instead of every 5 minutes) and ConfigMaps watched from etcd rather than from the watch
/// cache (which keeps its own history), so a ConfigMap watch from a resourceVersion a few
/// seconds old is `410 Gone`, as any watch from a compacted one is on a production cluster.
pub fn short_history_args() -> Vec<String> {
    vec![
        arg("etcd-compaction-interval", "1s"),
        arg("watch-cache-sizes", "configmaps#0"),
    ]
}

pub fn apiserver_args(layout: &Layout, ports: &Ports) -> Vec<String> {
    vec![
        arg("bind-address", "127.0.0.1"),
        arg("advertise-address", "127.0.0.1"),
        arg("secure-port", ports.apiserver),
        arg(
            "etcd-servers",
            format!("https://127.0.0.1:{}", ports.etcd_client),
        ),
        arg("etcd-cafile", path(layout.pki("etcd-ca.crt"))),
        arg(
            "etcd-certfile",
            path(layout.pki("apiserver-etcd-client.crt")),
        ),
        arg(
            "etcd-keyfile",
            path(layout.pki("apiserver-etcd-client.key")),
        ),
        arg("tls-cert-file", path(layout.pki("apiserver.crt"))),
        arg("tls-private-key-file", path(layout.pki("apiserver.key"))),
        arg("client-ca-file", path(layout.pki("ca.crt"))),
        arg("authorization-mode", "Node,RBAC"),
        arg("enable-admission-plugins", "PodSecurity"),
        arg("service-account-issuer", SERVICE_ACCOUNT_ISSUER),
        arg("service-account-key-file", path(layout.pki("sa.pub"))),
        arg(
            "service-account-signing-key-file",
            path(layout.pki("sa.key")),
        ),
        arg("service-cluster-ip-range", SERVICE_CIDR),
        arg("audit-policy-file", path(layout.audit_policy())),
        arg("audit-log-path", path(layout.audit_log())),
        // One file, never rotated away under a reader; written before the response is sent.
        arg("audit-log-maxbackup", 0),
        arg("audit-log-maxsize", 0),
        arg("audit-log-mode", "blocking"),
        arg("audit-log-format", "json"),
        // The `kubernetes` Service's Endpoints would name 127.0.0.1, which Endpoints validation
        // rejects (loopback); nothing routes to it here.
        arg("endpoint-reconciler-type", "none"),
    ]
}

/// kube-controller-manager: every default controller, each with its own ServiceAccount's
/// credentials (as production clusters run it); no serving port (nothing scrapes it, and a
/// fixed default port would clash between clusters).
pub fn controller_manager_args(layout: &Layout) -> Vec<String> {
    vec![
        arg(
            "kubeconfig",
            path(layout.kubeconfig("kube-controller-manager")),
        ),
        arg("secure-port", 0),
        arg("bind-address", "127.0.0.1"),
        arg("use-service-account-credentials", true),
        arg(
            "service-account-private-key-file",
            path(layout.pki("sa.key")),
        ),
        arg("root-ca-file", path(layout.pki("ca.crt"))),
        arg("cluster-signing-cert-file", path(layout.pki("ca.crt"))),
        arg("cluster-signing-key-file", path(layout.pki("ca.key"))),
        arg("service-cluster-ip-range", SERVICE_CIDR),
        arg("leader-elect", true),
    ]
}

/// kube-scheduler: default profile, no serving port.
pub fn scheduler_args(layout: &Layout) -> Vec<String> {
    vec![
        arg("kubeconfig", path(layout.kubeconfig("kube-scheduler"))),
        arg("secure-port", 0),
        arg("bind-address", "127.0.0.1"),
        arg("leader-elect", true),
    ]
}

/// kwok: manages the Nodes annotated [`KWOK_NODE_ANNOTATION`] and their Pods.
pub fn kwok_args(layout: &Layout, ports: &Ports) -> Vec<String> {
    vec![
        arg("kubeconfig", path(layout.kubeconfig("kwok"))),
        arg("config", path(layout.kwok_config())),
        arg("manage-all-nodes", false),
        arg(
            "manage-nodes-with-annotation-selector",
            format!("{KWOK_NODE_ANNOTATION}={KWOK_NODE_VALUE}"),
        ),
        arg("cidr", POD_CIDR),
        arg("node-ip", NODE_IP),
        arg("node-lease-duration-seconds", 40),
        arg("server-address", format!("127.0.0.1:{}", ports.kwok)),
    ]
}

/// The command line of `component`.
pub fn args(component: Component, layout: &Layout, ports: &Ports) -> Vec<String> {
    match component {
        Component::Etcd => etcd_args(layout, ports),
        Component::KubeApiserver => apiserver_args(layout, ports),
        Component::KubeControllerManager => controller_manager_args(layout),
        Component::KubeScheduler => scheduler_args(layout),
        Component::Kwok => kwok_args(layout, ports),
    }
}

/// The audit policy: every request of a ServiceAccount of [`AUDITED_NAMESPACE`] at `Metadata`
/// level (user, verb, resource, subresource, namespace, name, response code), one event per
/// request (the `ResponseComplete` stage; `ResponseStarted` too for watches); nothing else.
pub fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\n\
         kind: Policy\n\
         omitStages: [RequestReceived]\n\
         rules:\n\
         - level: Metadata\n  \
           userGroups: [\"system:serviceaccounts:{AUDITED_NAMESPACE}\"]\n\
         - level: None\n"
    )
}

/// A kubeconfig for `user` whose certificate files are in the PKI directory (the components'),
/// or embedded (`embed`: the admin kubeconfig handed out, which must work on its own).
pub fn kubeconfig(
    layout: &Layout,
    ports: &Ports,
    user: &str,
    pki_name: &str,
    embed: Option<(&Pki, &CertKey)>,
) -> String {
    let (cluster, credentials) = match embed {
        Some((pki, pair)) => (
            serde_json::json!({
                "server": server_url(ports),
                "certificate-authority-data": base64(&pki.ca.cert),
            }),
            serde_json::json!({
                "client-certificate-data": base64(&pair.cert),
                "client-key-data": base64(&pair.key),
            }),
        ),
        None => (
            serde_json::json!({
                "server": server_url(ports),
                "certificate-authority": path(layout.pki("ca.crt")),
            }),
            serde_json::json!({
                "client-certificate": path(layout.pki(&format!("{pki_name}.crt"))),
                "client-key": path(layout.pki(&format!("{pki_name}.key"))),
            }),
        ),
    };
    let config = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "realcluster", "cluster": cluster}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": user, "context": {"cluster": "realcluster", "user": user}}],
        "current-context": user,
    });
    serde_yaml::to_string(&config).unwrap_or_default()
}

/// Standard base64 (the kubeconfig's `*-data` fields).
fn base64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The time from a Pod being scheduled to it being Running and Ready: fixed, or uniform in a
/// range (`--pod-startup-delay 0`, `200ms`, `100ms..2s`, as devcluster's flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Delay {
    pub min: std::time::Duration,
    pub max: std::time::Duration,
}

impl Delay {
    /// Parses `0`, `<n>ms`, `<n>s`, `<n>m`, or `<a>..<b>` of those.
    pub fn parse(text: &str) -> Result<Delay, String> {
        let one = |text: &str| parse_duration(text.trim());
        match text.split_once("..") {
            Some((a, b)) => {
                let (min, max) = (one(a)?, one(b)?);
                if min > max {
                    return Err(format!("delay range {text:?} ends before it starts"));
                }
                Ok(Delay { min, max })
            }
            None => {
                let d = one(text)?;
                Ok(Delay { min: d, max: d })
            }
        }
    }
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let invalid = || format!("invalid duration {text:?}: want e.g. 0, 200ms, 2s or 1m");
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let (number, millis_per_unit) = if let Some(n) = text.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1_000)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60_000)
    } else {
        return Err(invalid());
    };
    let n: u64 = number.trim().parse().map_err(|_| invalid())?;
    n.checked_mul(millis_per_unit)
        .map(std::time::Duration::from_millis)
        .ok_or_else(invalid)
}

/// kwok's configuration: its Stages for Nodes (Ready once created; kwok renews their Leases) and
/// Pods (Running and Ready after `delay`; gone once deleted). kwok runs only the Stages it is
/// given, so every transition the cluster relies on is written here.
pub fn kwok_config(delay: Delay) -> String {
    include_str!("kwok-stages.yaml")
        .replace("@DELAY_MS@", &delay.min.as_millis().to_string())
        .replace("@JITTER_MS@", &delay.max.as_millis().to_string())
        .replace("@NODE_IP@", NODE_IP)
}

/// A Node for kwok to run: `kwok-node-<index>`, schedulable, with room for many Pods.
pub fn node(index: u32) -> serde_json::Value {
    let name = node_name(index);
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: KWOK_NODE_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "status": {
            "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "250"},
            "capacity": {"cpu": "32", "memory": "256Gi", "pods": "250"},
        },
    })
}

/// The name of node `index` (from 1).
pub fn node_name(index: u32) -> String {
    format!("kwok-node-{index}")
}

/// Files written with owner-only permissions (keys, and the kubeconfigs holding them).
pub fn is_private(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "key")
        || path.parent().is_some_and(|p| p.ends_with("kubeconfig"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout::new(PathBuf::from("/tmp/x"))
    }
    const PORTS: Ports = Ports {
        etcd_client: 1001,
        etcd_peer: 1002,
        apiserver: 1003,
        kwok: 1004,
    };

    #[test]
    fn nothing_listens_beyond_loopback() {
        for component in Component::ALL {
            for a in args(component, &layout(), &PORTS) {
                for key in ["address", "urls", "-url"] {
                    if a.split('=').next().unwrap().contains(key) {
                        assert!(
                            a.contains("127.0.0.1") && !a.contains("0.0.0.0"),
                            "{component}: {a}"
                        );
                    }
                }
            }
        }
        let apiserver = apiserver_args(&layout(), &PORTS);
        assert!(apiserver.contains(&"--bind-address=127.0.0.1".to_owned()));
        for component in [Component::KubeControllerManager, Component::KubeScheduler] {
            let a = args(component, &layout(), &PORTS);
            assert!(a.contains(&"--secure-port=0".to_owned()), "{component}");
        }
    }

    #[test]
    fn the_api_server_is_production_like() {
        let a = apiserver_args(&layout(), &PORTS);
        for expected in [
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=PodSecurity",
            "--client-ca-file=/tmp/x/pki/ca.crt",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-signing-key-file=/tmp/x/pki/sa.key",
            "--audit-log-path=/tmp/x/audit.log",
            "--etcd-servers=https://127.0.0.1:1001",
        ] {
            assert!(a.contains(&expected.to_owned()), "{expected} in {a:?}");
        }
        // The short history is for tests that ask for it: by default etcd is compacted every
        // 5 minutes and every watch is served from the watch cache, as in production.
        assert!(
            a.iter()
                .all(|arg| !arg.starts_with("--etcd-compaction-interval")
                    && !arg.starts_with("--watch-cache-sizes")),
            "{a:?}"
        );
    }

    #[test]
    fn the_audit_policy_names_the_controllers_namespace() {
        let policy: serde_json::Value = serde_yaml::from_str(&audit_policy()).unwrap();
        assert_eq!(
            policy["rules"][0]["userGroups"][0],
            "system:serviceaccounts:agent-sandbox-system"
        );
        assert_eq!(policy["rules"][0]["level"], "Metadata");
        assert_eq!(policy["rules"][1]["level"], "None");
    }

    #[test]
    fn delays() {
        use std::time::Duration;
        assert_eq!(Delay::parse("0").unwrap(), Delay::default());
        assert_eq!(
            Delay::parse("200ms").unwrap(),
            Delay {
                min: Duration::from_millis(200),
                max: Duration::from_millis(200)
            }
        );
        assert_eq!(
            Delay::parse("100ms..2s").unwrap(),
            Delay {
                min: Duration::from_millis(100),
                max: Duration::from_secs(2)
            }
        );
        assert!(Delay::parse("2s..1s").unwrap_err().contains("ends before"));
        assert!(Delay::parse("soon").unwrap_err().contains("\"soon\""));
    }

    #[test]
    fn the_kwok_config_is_yaml_with_the_delay() {
        use std::time::Duration;
        let text = kwok_config(Delay {
            min: Duration::from_millis(100),
            max: Duration::from_millis(2000),
        });
        let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&text)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        assert!(docs.len() >= 2, "{text}");
        assert!(docs.iter().all(|d| d["kind"] == "Stage"));
        let ready = docs
            .iter()
            .find(|d| d["metadata"]["name"] == "pod-ready")
            .unwrap();
        assert_eq!(ready["spec"]["delay"]["durationMilliseconds"], 100);
        assert_eq!(ready["spec"]["delay"]["jitterDurationMilliseconds"], 2000);
    }

    #[test]
    fn kubeconfigs() {
        let pki = crate::pki::generate(KUBERNETES_SERVICE_IP).unwrap();
        let embedded: serde_json::Value = serde_yaml::from_str(&kubeconfig(
            &layout(),
            &PORTS,
            "admin",
            "admin",
            Some((&pki, &pki.admin)),
        ))
        .unwrap();
        assert_eq!(
            embedded["clusters"][0]["cluster"]["server"],
            "https://127.0.0.1:1003"
        );
        assert!(embedded["users"][0]["user"]["client-key-data"].is_string());
        let files: serde_json::Value =
            serde_yaml::from_str(&kubeconfig(&layout(), &PORTS, "kwok", "kwok", None)).unwrap();
        assert_eq!(
            files["users"][0]["user"]["client-key"],
            "/tmp/x/pki/kwok.key"
        );
        assert!(is_private(&layout().pki("kwok.key")));
        assert!(is_private(&layout().kubeconfig("admin")));
        assert!(!is_private(&layout().pki("ca.crt")));
    }
}
