//! The release's Namespace, ServiceAccounts and RBAC (the `deploy/` pieces `cargo xtask
//! release` assembles), applied to a real control plane so the controllers run as themselves:
//! with a token of their own ServiceAccount ([`crate::RealCluster::service_account_kubeconfig`]),
//! never the admin credentials. Used by the end-to-end suites and by `cargo xtask dev --cluster
//! real`.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde::Deserialize as _;
use serde_json::Value;

use crate::Error;

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

/// `deploy/` of this repository.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("deploy")
}

/// The documents of `deploy/<file>`.
pub fn documents(file: &str) -> Result<Vec<Value>, Error> {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        action: "read",
        path: path.clone(),
        source,
    })?;
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(document)
            .map_err(|e| Error::Invalid(format!("{}: not a YAML document: {e}", path.display())))?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    Ok(documents)
}

/// Creates `object` unless it exists (409).
async fn create<K>(api: Api<K>, file: &str, object: &Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let typed: K = serde_json::from_value(object.clone())
        .map_err(|e| Error::Invalid(format!("deploy/{file}: {kind} {name}: {e}")))?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube {
            action: format!("create {kind} {name} from deploy/{file}"),
            source,
        }),
    }
}

/// Applies (as `admin`) the release's Namespace and, for each controller, its ServiceAccount,
/// ClusterRole, Roles and bindings; objects that exist already are left as they are. Returns
/// the ClusterRoles and Roles, as documents.
pub async fn install(admin: &kube::Client) -> Result<Vec<Value>, Error> {
    let mut rbac = Vec::new();
    let mut files = vec!["namespace.yaml".to_owned()];
    for c in &CONTROLLERS {
        files.push(format!("{}/service-account.yaml", c.binary));
        files.push(format!("{}/rbac.yaml", c.binary));
    }
    for file in files {
        for doc in documents(&file)? {
            let ns = doc["metadata"]["namespace"]
                .as_str()
                .unwrap_or(SYSTEM_NAMESPACE);
            let client = admin.clone();
            match doc["kind"].as_str().unwrap_or_default() {
                "Namespace" => create::<Namespace>(Api::all(client), &file, &doc).await?,
                "ServiceAccount" => {
                    create::<ServiceAccount>(Api::namespaced(client, ns), &file, &doc).await?
                }
                "ClusterRole" => create::<ClusterRole>(Api::all(client), &file, &doc).await?,
                "ClusterRoleBinding" => {
                    create::<ClusterRoleBinding>(Api::all(client), &file, &doc).await?
                }
                "Role" => create::<Role>(Api::namespaced(client, ns), &file, &doc).await?,
                "RoleBinding" => {
                    create::<RoleBinding>(Api::namespaced(client, ns), &file, &doc).await?
                }
                other => {
                    return Err(Error::Invalid(format!(
                        "deploy/{file}: unexpected kind {other}"
                    )));
                }
            }
            if matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
                rbac.push(doc);
            }
        }
    }
    Ok(rbac)
}
