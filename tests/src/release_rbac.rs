//! The release's ServiceAccounts and RBAC, applied to a real control plane so the controllers
//! run as themselves: `realcluster::release_rbac` (shared with `cargo xtask dev --cluster
//! real`), with the suites' panicking `install`.

use serde_json::Value;

pub use realcluster::release_rbac::{
    CONTROLLERS, ControllerAccount, EXTENSIONS_CONTROLLER, SANDBOX_CONTROLLER, SYSTEM_NAMESPACE,
};

/// Applies (as `admin`) the release's Namespace and, for each controller, its ServiceAccount,
/// ClusterRole, Roles and bindings. Returns the ClusterRoles and Roles, as documents.
pub async fn install(admin: &kube::Client) -> Vec<Value> {
    realcluster::release_rbac::install(admin)
        .await
        .unwrap_or_else(|e| panic!("installing the release's RBAC: {e}"))
}
