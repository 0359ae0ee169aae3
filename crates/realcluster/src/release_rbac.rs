//! The release's Namespace, ServiceAccounts and RBAC (the `deploy/` pieces `cargo xtask release`
//! assembles), applied to a real control plane so the controllers run as themselves: the
//! end-to-end suites (`e2e_tests::release_rbac`) and `cargo xtask bench --cluster real` use it.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde::Deserialize as _;
use serde_json::Value;

use crate::error::Error;

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

/// `deploy/` at the repository root.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("deploy")
}

/// The documents of `deploy/<file>` (empty documents left out).
pub fn documents(file: &str) -> Result<Vec<Value>, Error> {
    let path = deploy_dir().join(file);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        action: "read",
        path: path.clone(),
        source,
    })?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = Value::deserialize(doc)
            .map_err(|e| Error::Invalid(format!("{}: not a YAML document: {e}", path.display())))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

async fn create<K>(api: Api<K>, object: &Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let typed: K = serde_json::from_value(object.clone())
        .map_err(|e| Error::Invalid(format!("{object}: not a valid object: {e}")))?;
    match api.create(&PostParams::default(), &typed).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Kube {
            action: format!(
                "create {} {}",
                object["kind"].as_str().unwrap_or("object"),
                object["metadata"]["name"].as_str().unwrap_or("?")
            ),
            source,
        }),
    }
}

/// Applies (as `admin`) the release's Namespace and, for each controller, its ServiceAccount,
/// ClusterRole, Roles and bindings (an object that already exists is left as it is). Returns the
/// ClusterRoles and Roles, as documents.
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
                "Namespace" => create::<Namespace>(Api::all(client), &doc).await?,
                "ServiceAccount" => {
                    create::<ServiceAccount>(Api::namespaced(client, ns), &doc).await?
                }
                "ClusterRole" => create::<ClusterRole>(Api::all(client), &doc).await?,
                "ClusterRoleBinding" => {
                    create::<ClusterRoleBinding>(Api::all(client), &doc).await?
                }
                "Role" => create::<Role>(Api::namespaced(client, ns), &doc).await?,
                "RoleBinding" => create::<RoleBinding>(Api::namespaced(client, ns), &doc).await?,
                other => {
                    return Err(Error::Invalid(format!(
                        "deploy/{file}: unexpected kind {other:?}"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_documents_name_every_controller_account_and_role() {
        for c in &CONTROLLERS {
            let accounts = documents(&format!("{}/service-account.yaml", c.binary)).unwrap();
            assert!(
                accounts
                    .iter()
                    .any(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == c.account),
                "{}: no ServiceAccount {}",
                c.binary,
                c.account
            );
            let rbac = documents(&format!("{}/rbac.yaml", c.binary)).unwrap();
            let names: Vec<&str> = rbac
                .iter()
                .filter_map(|d| d["metadata"]["name"].as_str())
                .collect();
            assert!(names.contains(&c.cluster_role), "{names:?}");
            for role in c.roles {
                assert!(names.contains(&role), "{role} missing from {names:?}");
            }
        }
        let error = documents("no-such-file.yaml").unwrap_err().to_string();
        assert!(error.contains("no-such-file.yaml"), "{error}");
    }
}
