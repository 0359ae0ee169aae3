//! Owner-reference helpers: who controls an object, and the controller reference to write.

use api_types::template::EXTENSIONS_GROUP;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;

pub const WARM_POOL_KIND: &str = "SandboxWarmPool";
pub const CLAIM_KIND: &str = "SandboxClaim";
pub const TEMPLATE_KIND: &str = "SandboxTemplate";

/// The controller owner reference (`controller: true`), if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_deref()?
        .iter()
        .find(|r| r.controller == Some(true))
}

/// True when `meta`'s controller is the object with `uid`.
pub fn is_controlled_by(meta: &ObjectMeta, uid: &str) -> bool {
    controller_of(meta).is_some_and(|r| r.uid == uid)
}

/// The group of an `apiVersion` (`group/version`; the core group has none).
pub fn api_group(api_version: &str) -> &str {
    api_version
        .split_once('/')
        .map(|(group, _)| group)
        .unwrap_or("")
}

/// True for a reference to an extensions-group object of `kind`, any version (so references
/// written by the reference's v1alpha1 API still count).
pub fn refers_to_kind(reference: &OwnerReference, kind: &str) -> bool {
    reference.kind == kind && api_group(&reference.api_version) == EXTENSIONS_GROUP
}

/// The name of the pool controlling `meta`, if its controller is a SandboxWarmPool.
pub fn controlling_pool(meta: &ObjectMeta) -> Option<&OwnerReference> {
    controller_of(meta).filter(|r| refers_to_kind(r, WARM_POOL_KIND))
}

/// A controller reference (`controller` and `blockOwnerDeletion` true) to `owner`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let meta = owner.meta();
    Some(OwnerReference {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
        name: meta.name.clone()?,
        uid: meta.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(api_version: &str, kind: &str, uid: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: "owner".into(),
            uid: uid.into(),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    #[test]
    fn controller_is_the_reference_marked_controller() {
        let meta = ObjectMeta {
            owner_references: Some(vec![
                reference("apps/v1", "ReplicaSet", "a", false),
                reference(
                    "extensions.agents.x-k8s.io/v1alpha1",
                    WARM_POOL_KIND,
                    "b",
                    true,
                ),
            ]),
            ..ObjectMeta::default()
        };
        assert_eq!(controller_of(&meta).map(|r| r.uid.as_str()), Some("b"));
        assert!(is_controlled_by(&meta, "b"));
        assert!(!is_controlled_by(&meta, "a"));
        assert!(
            controlling_pool(&meta).is_some(),
            "any version of the group counts"
        );
    }

    #[test]
    fn foreign_groups_are_not_pools() {
        let meta = ObjectMeta {
            owner_references: Some(vec![reference("example.com/v1", WARM_POOL_KIND, "x", true)]),
            ..ObjectMeta::default()
        };
        assert!(controlling_pool(&meta).is_none());
        assert!(controlling_pool(&ObjectMeta::default()).is_none());
    }
}
