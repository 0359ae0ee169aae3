//! The release's ServiceAccounts and RBAC (the `deploy/` pieces `cargo xtask release`
//! assembles), applied to a real control plane so the controllers run as themselves. The code
//! lives in [`realcluster::release_rbac`] (shared with `cargo xtask bench --cluster real`); these
//! wrappers fail the test on an error.

use serde_json::Value;

pub use realcluster::release_rbac::{
    CONTROLLERS, ControllerAccount, EXTENSIONS_CONTROLLER, SANDBOX_CONTROLLER, SYSTEM_NAMESPACE,
};

/// The documents of `deploy/<file>`.
pub fn documents(file: &str) -> Vec<Value> {
    realcluster::release_rbac::documents(file).unwrap_or_else(|e| panic!("{e}"))
}

/// Applies (as `admin`) the release's Namespace and, for each controller, its ServiceAccount,
/// ClusterRole, Roles and bindings. Returns the ClusterRoles and Roles, as documents.
pub async fn install(admin: &kube::Client) -> Vec<Value> {
    realcluster::release_rbac::install(admin)
        .await
        .unwrap_or_else(|e| panic!("installing the release's RBAC: {e}"))
}
