//! The caches every reconcile reads: one reflector store per kind, shared by the three
//! controllers (so the API server serves one watch per kind), and the indexes over the Sandbox
//! store ([`sandbox_index`]).

pub mod sandbox_index;

use std::sync::Arc;

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::reflector::{ObjectRef, Store};

#[derive(Clone)]
pub struct Stores {
    pub sandboxes: Store<Sandbox>,
    /// Members by pool label and Sandboxes by controller UID, over `sandboxes`.
    pub sandbox_index: sandbox_index::SandboxIndex,
    pub pools: Store<SandboxWarmPool>,
    pub templates: Store<SandboxTemplate>,
    pub claims: Store<SandboxClaim>,
    pub policies: Store<NetworkPolicy>,
    pub pods: Store<Pod>,
}

impl Stores {
    pub async fn wait_until_ready(&self) -> bool {
        self.sandboxes.wait_until_ready().await.is_ok()
            && self.pools.wait_until_ready().await.is_ok()
            && self.templates.wait_until_ready().await.is_ok()
            && self.claims.wait_until_ready().await.is_ok()
            && self.policies.wait_until_ready().await.is_ok()
            && self.pods.wait_until_ready().await.is_ok()
    }

    pub fn template(&self, namespace: &str, name: &str) -> Option<Arc<SandboxTemplate>> {
        self.templates.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn pool(&self, namespace: &str, name: &str) -> Option<Arc<SandboxWarmPool>> {
        self.pools.get(&ObjectRef::new(name).within(namespace))
    }

    pub fn sandbox(&self, namespace: &str, name: &str) -> Option<Arc<Sandbox>> {
        self.sandboxes.get(&ObjectRef::new(name).within(namespace))
    }

    /// Cached Sandboxes in `namespace` carrying the pool label `pool_label` (a pool name hash).
    pub fn sandboxes_with_pool_label(
        &self,
        namespace: &str,
        pool_label: &str,
    ) -> Vec<Arc<Sandbox>> {
        let mut found = self
            .sandbox_index
            .with_pool_label(&self.sandboxes, namespace, pool_label);
        // The index runs one event ahead of the store: keep what the store shows labelled.
        found.retain(|sb| has_pool_label(sb, pool_label));
        found
    }

    /// A pool pass's view of the Sandboxes in `namespace` labelled `pool_label`: the number
    /// of quiet members in the classes `countable` accepts (counted, not looked at), and every
    /// other labelled Sandbox, including the members named in `must_look`
    /// ([`sandbox_index::SandboxIndex::pool_census`]). The count is the index's, which
    /// may run one watch event ahead of the store; the listed ones are what the store shows
    /// with the label.
    pub fn pool_census(
        &self,
        namespace: &str,
        pool_label: &str,
        countable: impl Fn(&crate::warm_pool::census::QuietClass) -> bool,
        must_look: &[String],
    ) -> (usize, Vec<Arc<Sandbox>>) {
        let (quiet, mut found) = self.sandbox_index.pool_census(
            &self.sandboxes,
            namespace,
            pool_label,
            countable,
            must_look,
        );
        found.retain(|sb| has_pool_label(sb, pool_label));
        (quiet, found)
    }

    /// Cached Sandboxes in `namespace` whose controlling owner has UID `uid`.
    pub fn sandboxes_controlled_by(&self, namespace: &str, uid: &str) -> Vec<Arc<Sandbox>> {
        let mut found = self.sandbox_index.controlled_by(&self.sandboxes, uid);
        found.retain(|sb| {
            sb.metadata.namespace.as_deref() == Some(namespace)
                && crate::ownership::is_controlled_by(&sb.metadata, uid)
        });
        found
    }
}

fn has_pool_label(sb: &Sandbox, pool_label: &str) -> bool {
    sb.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(api_types::keys::SANDBOX_WARM_POOL_LABEL))
        .map(String::as_str)
        == Some(pool_label)
}
