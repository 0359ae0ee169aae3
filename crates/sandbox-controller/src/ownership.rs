//! Who controls a child object.
//!
//! Ownership is decided by the owner reference marked `controller: true` and its UID only: a label
//! never proves ownership. The controller adopts nothing: a Pod, Service or PVC is a Sandbox's
//! only when the controller created it with the Sandbox's controller reference (see
//! `docs/security.md`: labels, `agents.x-k8s.io/adoptable` included, can be written by anyone
//! who can create Pods, so they cannot authorize a take-over).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// How a child object relates to one Sandbox.
#[derive(Debug, Clone, PartialEq)]
pub enum Ownership {
    /// No controller owner reference at all.
    Unowned,
    /// The controller owner reference carries the Sandbox's UID.
    OwnedBySandbox,
    /// Another object (or another incarnation of the Sandbox) controls it.
    OwnedByOther(OwnerReference),
}

impl Ownership {
    /// Classifies `meta` against the Sandbox UID `sandbox_uid`.
    pub fn of(meta: &ObjectMeta, sandbox_uid: &str) -> Self {
        let controller = meta
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        match controller {
            None => Ownership::Unowned,
            Some(r) if !sandbox_uid.is_empty() && r.uid == sandbox_uid => Ownership::OwnedBySandbox,
            Some(r) => Ownership::OwnedByOther(r.clone()),
        }
    }

    pub fn is_owned(&self) -> bool {
        matches!(self, Ownership::OwnedBySandbox)
    }
}

/// The text naming a foreign controller, as `<Kind>/<Name> (UID: <uid>)`.
pub fn describe_owner(r: &OwnerReference) -> String {
    format!("{}/{} (UID: {})", r.kind, r.name, r.uid)
}

/// The controller owner reference the Sandbox puts on every child it creates.
pub fn controller_ref(sandbox_name: &str, sandbox_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: crate::keys::SANDBOX_API_VERSION.to_string(),
        kind: crate::keys::SANDBOX_KIND.to_string(),
        name: sandbox_name.to_string(),
        uid: sandbox_uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta_with(refs: Vec<OwnerReference>) -> ObjectMeta {
        ObjectMeta {
            owner_references: Some(refs),
            ..Default::default()
        }
    }

    fn deployment_ref() -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "dep-uid".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn owner_reference_with_the_sandbox_uid_means_owned() {
        let meta = meta_with(vec![controller_ref("sb", "uid-1")]);
        assert_eq!(Ownership::of(&meta, "uid-1"), Ownership::OwnedBySandbox);
    }

    #[test]
    fn no_owner_reference_means_unowned() {
        assert_eq!(
            Ownership::of(&ObjectMeta::default(), "uid-1"),
            Ownership::Unowned
        );
        // A non-controller reference does not make an object owned.
        let mut r = controller_ref("sb", "uid-1");
        r.controller = None;
        assert_eq!(
            Ownership::of(&meta_with(vec![r]), "uid-1"),
            Ownership::Unowned
        );
    }

    #[test]
    fn foreign_controller_means_owned_by_other() {
        let meta = meta_with(vec![deployment_ref()]);
        assert_eq!(
            Ownership::of(&meta, "uid-1"),
            Ownership::OwnedByOther(deployment_ref())
        );
        assert_eq!(
            describe_owner(&deployment_ref()),
            "Deployment/web (UID: dep-uid)"
        );
    }

    #[test]
    fn only_the_uid_decides_ownership() {
        // Same name and kind but another incarnation's UID: not ours.
        let meta = meta_with(vec![controller_ref("sb", "old-uid")]);
        assert!(matches!(
            Ownership::of(&meta, "uid-1"),
            Ownership::OwnedByOther(_)
        ));
    }
}
