//! The template controller's in-memory state: the NetworkPolicy specs it wrote, and why a
//! template's policy could not be made (read by claim passes, which hand out no Sandbox of such
//! a template).

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};

#[derive(Debug, Default)]
pub struct TemplateState {
    /// NetworkPolicy `namespace/name` → (resourceVersion we wrote, the spec we asked for), so a
    /// server-defaulted field does not make us rewrite the policy forever.
    written: Mutex<HashMap<String, (String, NetworkPolicySpec)>>,
    /// Template `namespace/name` → why its NetworkPolicy cannot be made.
    failures: Mutex<HashMap<String, String>>,
}

impl TemplateState {
    /// The spec we last wrote to policy `key`, with the version our write produced.
    pub fn written(&self, key: &str) -> Option<(String, NetworkPolicySpec)> {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Whether the policy `np` (at `key`, `namespace/name`) carries `desired`: its spec is
    /// that, or it is unchanged since this process wrote `desired` to it (the API server may
    /// have defaulted fields of what was written, e.g. a port's protocol).
    pub fn in_place(&self, key: &str, np: &NetworkPolicy, desired: &NetworkPolicySpec) -> bool {
        np.spec.as_ref() == Some(desired)
            || self.written(key).is_some_and(|(rv, spec)| {
                Some(rv.as_str()) == np.metadata.resource_version.as_deref() && &spec == desired
            })
    }

    pub fn remember_written(&self, key: String, rv: String, spec: NetworkPolicySpec) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (rv, spec));
    }

    /// Records why template `namespace/name`'s policy cannot be made; true when this is news
    /// (a Warning Event is due).
    pub fn failed(&self, namespace: &str, name: &str, why: String) -> bool {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.insert(format!("{namespace}/{name}"), why.clone()) != Some(why)
    }

    /// The template's policy is in place (or not wanted).
    pub fn succeeded(&self, namespace: &str, name: &str) {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&format!("{namespace}/{name}"));
    }

    /// Why template `namespace/name`'s policy cannot be made, if it cannot.
    pub fn failure(&self, namespace: &str, name: &str) -> Option<String> {
        self.failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }
}
