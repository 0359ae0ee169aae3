//! Label, annotation and reason strings this controller reads and writes.
//!
//! TEMPORARY: mirrors the values of `api_types::keys` / `api_types::conditions` until that crate
//! lands on main; then this module only re-exports them.

pub const SANDBOX_API_VERSION: &str = "agents.x-k8s.io/v1beta1";
pub const SANDBOX_KIND: &str = "Sandbox";
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";

pub const NAME_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";
pub const ADOPTABLE_LABEL: &str = "agents.x-k8s.io/adoptable";
pub const WARM_POOL_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";
pub const TEMPLATE_REF_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
pub const CREATED_BY_LABEL: &str = "agents.x-k8s.io/created-by";
pub const LAUNCH_TYPE_LABEL: &str = "agents.x-k8s.io/launch-type";
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";
pub const TEMPLATE_REF_ANNOTATION: &str = "agents.x-k8s.io/sandbox-template-ref";
pub const PROPAGATED_LABELS_ANNOTATION: &str = "agents.x-k8s.io/propagated-labels";
pub const PROPAGATED_ANNOTATIONS_ANNOTATION: &str = "agents.x-k8s.io/propagated-annotations";
pub const TRACE_CONTEXT_ANNOTATION: &str = "opentelemetry.io/trace-context";

pub const RESERVED_PREFIXES: [&str; 2] = ["agents.x-k8s.io/", "extensions.agents.x-k8s.io/"];

/// TEMPORARY until `api_types::hash::name_hash` lands: 32-bit FNV-1a of the UTF-8 bytes, as 8
/// lowercase hex digits.
pub fn name_hash(name: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.as_bytes() {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}
