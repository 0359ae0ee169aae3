//! The label and annotation keys this controller uses, under the short names the code reads
//! best with; all values come from `api_types::keys`.

pub use api_types::hash::name_hash;
pub use api_types::keys::{
    CREATED_BY_LABEL, RESERVED_KEY_PREFIXES as RESERVED_PREFIXES,
    SANDBOX_LAUNCH_TYPE_LABEL as LAUNCH_TYPE_LABEL, SANDBOX_NAME_HASH_LABEL as NAME_HASH_LABEL,
    SANDBOX_POD_NAME_ANNOTATION as POD_NAME_ANNOTATION,
    SANDBOX_PROPAGATED_ANNOTATIONS_ANNOTATION as PROPAGATED_ANNOTATIONS_ANNOTATION,
    SANDBOX_PROPAGATED_LABELS_ANNOTATION as PROPAGATED_LABELS_ANNOTATION,
    SANDBOX_TEMPLATE_REF_ANNOTATION as TEMPLATE_REF_ANNOTATION,
    SANDBOX_TEMPLATE_REF_HASH_LABEL as TEMPLATE_REF_HASH_LABEL,
    SANDBOX_WARM_POOL_LABEL as WARM_POOL_LABEL, TRACE_CONTEXT_ANNOTATION,
};
pub use api_types::template::EXTENSIONS_GROUP;

/// `apiVersion` of the owner references the controller writes.
pub const SANDBOX_API_VERSION: &str = "agents.x-k8s.io/v1beta1";
/// `kind` of the owner references the controller writes.
pub const SANDBOX_KIND: &str = "Sandbox";

#[cfg(test)]
mod tests {
    use api_types::Sandbox;
    use kube::Resource;

    #[test]
    fn owner_reference_identity_matches_the_sandbox_type() {
        assert_eq!(super::SANDBOX_API_VERSION, Sandbox::api_version(&()));
        assert_eq!(super::SANDBOX_KIND, Sandbox::kind(&()));
    }

    #[test]
    fn name_hash_vectors() {
        assert_eq!(super::name_hash(""), "811c9dc5");
        assert_eq!(super::name_hash("a"), "e40c292c");
    }
}
