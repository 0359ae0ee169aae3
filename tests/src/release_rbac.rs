//! The release's ServiceAccounts and RBAC (the `deploy/` pieces `cargo xtask release`
//! assembles), applied to a real control plane so the controllers run as themselves.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde::Deserialize as _;
use serde_json::Value;

/// The namespace of the controllers' ServiceAccounts, Leases and webhook Secrets.
pub const SYSTEM_NAMESPACE: &str = "agent-sandbox-system";

/// A controller as the release ships it.
#[derive(Debug, Clone, Copy)]
pub struct ControllerAccount {
    /// Binary name, also its `deploy/` directory.
    pub binary: &'static str,
    /// Its ServiceAccount in [`SYSTEM_NAMESPACE`].
    pub account: &'static str,
    pub cluster_role: &'static str,
    /// Its Roles in [`SYSTEM_NAMESPACE`] (Lease, webhook certificate Secret).
    pub roles: [&'static str; 2],
}

pub const SANDBOX_CONTROLLER: ControllerAccount = ControllerAccount {
    binary: "sandbox-controller",
    account: "sandbox-controller",
    cluster_role: "agent-sandbox-controller",
    roles: [
        "sandbox-controller-leader-election",
        "sandbox-controller-webhook-certs",
    ],
};

pub const EXTENSIONS_CONTROLLER: ControllerAccount = ControllerAccount {
    binary: "extensions-controller",
    account: "extensions-controller",
    cluster_role: "agent-sandbox-controller-extensions",
    roles: [
        "extensions-controller-leader-election",
        "extensions-controller-webhook-certs",
    ],
};

pub const CONTROLLERS: [ControllerAccount; 2] = [SANDBOX_CONTROLLER, EXTENSIONS_CONTROLLER];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .join("deploy")
}

/// The documents of `deploy/<file>`.
pub fn documents(file: &str) -> Vec<Value> {
    let path = deploy_dir().join(file);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).expect("a YAML document"))
        .filter(|doc| !doc.is_null())
        .collect()
}

async fn create<K>(api: Api<K>, object: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object.clone()).expect("a valid object");
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("create {object}: {error}"),
    }
}

/// Applies (as `admin`) the release's Namespace and, for each controller, its ServiceAccount,
/// ClusterRole, Roles and bindings. Returns the ClusterRoles and Roles, as documents.
pub async fn install(admin: &kube::Client) -> Vec<Value> {
    let mut rbac = Vec::new();
    let mut files = vec!["namespace.yaml".to_owned()];
    for c in &CONTROLLERS {
        files.push(format!("{}/service-account.yaml", c.binary));
        files.push(format!("{}/rbac.yaml", c.binary));
    }
    for file in files {
        for doc in documents(&file) {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(SYSTEM_NAMESPACE);
            let client = admin.clone();
            match doc["kind"].as_str().unwrap_or_default() {
                "Namespace" => create::<Namespace>(Api::all(client), &doc).await,
                "ServiceAccount" => {
                    create::<ServiceAccount>(Api::namespaced(client, ns), &doc).await
                }
                "ClusterRole" => create::<ClusterRole>(Api::all(client), &doc).await,
                "ClusterRoleBinding" => create::<ClusterRoleBinding>(Api::all(client), &doc).await,
                "Role" => create::<Role>(Api::namespaced(client, ns), &doc).await,
                "RoleBinding" => create::<RoleBinding>(Api::namespaced(client, ns), &doc).await,
                other => panic!("deploy/{file}: unexpected kind {other}"),
            }
            if matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
                rbac.push(doc);
            }
        }
    }
    rbac
}
