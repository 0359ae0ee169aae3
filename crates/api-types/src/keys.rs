//! Label and annotation keys (and their fixed values) of the agent-sandbox API, exactly as the
//! reference writes them. Finalizer names and field-manager names are not API and live with the
//! controllers.

// --- Defined by the API packages -----------------------------------------------------------

/// Annotation on a Sandbox: name of the backing Pod when it differs from the Sandbox name
/// (warm-pool adoption).
pub const SANDBOX_POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";
/// Annotation on a warm-pool Sandbox: the SandboxTemplate it came from.
pub const SANDBOX_TEMPLATE_REF_ANNOTATION: &str = "agents.x-k8s.io/sandbox-template-ref";
/// Label on a Sandbox: [`SANDBOX_LAUNCH_TYPE_COLD`] or [`SANDBOX_LAUNCH_TYPE_WARM`].
pub const SANDBOX_LAUNCH_TYPE_LABEL: &str = "agents.x-k8s.io/launch-type";
/// Launch type of a Sandbox created for a claim (cold start).
pub const SANDBOX_LAUNCH_TYPE_COLD: &str = "cold";
/// Launch type of a Sandbox pre-provisioned by or adopted from a warm pool.
pub const SANDBOX_LAUNCH_TYPE_WARM: &str = "warm";
/// Label: which component created the resource (claim → Sandbox → Pod).
pub const CREATED_BY_LABEL: &str = "agents.x-k8s.io/created-by";
/// `created-by` value for resources created by the controllers (pool sandboxes).
pub const CREATED_BY_CONTROLLER: &str = "controller";
/// Normalized `created-by` value (Pods, metrics) for the Go client.
pub const CREATED_BY_GO_CLIENT: &str = "go-client";
/// Normalized `created-by` value (Pods, metrics) for the Python client.
pub const CREATED_BY_PYTHON_CLIENT: &str = "python-client";
/// Normalized `created-by` value (Pods, metrics) for anything else.
pub const CREATED_BY_UNKNOWN: &str = "unknown";
/// Deprecated label: pod-template hash on pool Sandboxes (superseded by
/// [`SANDBOX_TEMPLATE_HASH_LABEL`], still written by the pool controller).
pub const DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL: &str =
    "agents.x-k8s.io/sandbox-pod-template-hash";
/// Label on pool Sandboxes: hash of the SandboxBlueprint, for staleness detection.
pub const SANDBOX_TEMPLATE_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-template-hash";
/// Annotation on a Pod: comma-separated sorted label keys propagated from
/// `podTemplate.metadata`.
pub const SANDBOX_PROPAGATED_LABELS_ANNOTATION: &str = "agents.x-k8s.io/propagated-labels";
/// Annotation on a Pod: comma-separated sorted annotation keys propagated from
/// `podTemplate.metadata`.
pub const SANDBOX_PROPAGATED_ANNOTATIONS_ANNOTATION: &str =
    "agents.x-k8s.io/propagated-annotations";
/// Label (value [`SANDBOX_ADOPTABLE_VALUE`]) authorizing a Sandbox to adopt an unowned
/// Pod/Service/PVC carrying a matching [`SANDBOX_NAME_HASH_LABEL`].
pub const SANDBOX_ADOPTABLE_LABEL: &str = "agents.x-k8s.io/adoptable";
/// The value of [`SANDBOX_ADOPTABLE_LABEL`] that authorizes adoption.
pub const SANDBOX_ADOPTABLE_VALUE: &str = "true";
/// Label on pool Sandboxes (and their pod template): `name_hash(pool name)`; the pool selector.
pub const SANDBOX_WARM_POOL_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";
/// Label on Sandboxes, pod templates, Pods and the SandboxTemplate itself:
/// `name_hash(template name)`; the NetworkPolicy pod selector.
pub const SANDBOX_TEMPLATE_REF_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
/// Label on a claim's Sandbox and its pod template: the claim's UID.
pub const SANDBOX_ID_LABEL: &str = "agents.x-k8s.io/claim-uid";
/// Annotation on a SandboxClaim: name of the adopted Sandbox.
pub const ASSIGNED_SANDBOX_NAME_ANNOTATION: &str = "agents.x-k8s.io/sandbox-name";
/// Legacy label form of [`ASSIGNED_SANDBOX_NAME_ANNOTATION`] (same key), migrated to the
/// annotation by the controller.
pub const DEPRECATED_ASSIGNED_SANDBOX_NAME_LABEL: &str = "agents.x-k8s.io/sandbox-name";

// --- Defined in the reference's controller code (observable contract) ----------------------

/// Label on Pod, Service and PVC: `name_hash(sandbox name)`; Service selector and
/// `Sandbox.status.selector`.
pub const SANDBOX_NAME_HASH_LABEL: &str = "agents.x-k8s.io/sandbox-name-hash";
/// Annotation on a SandboxClaim: when the controller first saw it (metrics).
pub const CONTROLLER_FIRST_OBSERVED_AT_ANNOTATION: &str =
    "agents.x-k8s.io/controller-first-observed-at";
/// Annotation on a SandboxClaim, set by clients: when the client first requested it (metrics).
pub const CLIENT_FIRST_REQUESTED_AT_ANNOTATION: &str = "agents.x-k8s.io/client-first-requested-at";
/// Annotation on a SandboxClaim: first time Ready (RFC 3339 with nanoseconds, or `unknown`).
pub const CLAIM_FIRST_READY_AT_ANNOTATION: &str = "agents.x-k8s.io/claim-first-ready-at";
/// Annotation on a SandboxClaim, set by the example webhook (metrics).
pub const WEBHOOK_FIRST_OBSERVED_AT_ANNOTATION: &str = "agents.x-k8s.io/webhook-first-observed-at";
/// Annotation on a SandboxClaim that prevents recording the creation latency twice.
pub const CREATION_LATENCY_RECORDED_ANNOTATION: &str = "agents.x-k8s.io/creation-latency-recorded";
/// Annotation carrying the W3C trace context as JSON, claim → Sandbox (never copied to the Pod).
pub const TRACE_CONTEXT_ANNOTATION: &str = "opentelemetry.io/trace-context";
/// Annotation set to `"true"` on pool pod templates when warm-pool eviction is enabled; the only
/// exempted key in claim annotation validation.
pub const SAFE_TO_EVICT_ANNOTATION: &str = "cluster-autoscaler.kubernetes.io/safe-to-evict";
/// Label key of the sandbox-router pods (default NetworkPolicy ingress peer).
pub const SANDBOX_ROUTER_APP_LABEL: &str = "app";
/// Label value of the sandbox-router pods; `app=sandbox-router` is forbidden in claim labels.
pub const SANDBOX_ROUTER_APP_VALUE: &str = "sandbox-router";

// --- Conversion and migration bookkeeping --------------------------------------------------

/// JSON of the original v1alpha1 Sandbox, written on up-conversion.
pub const V1ALPHA1_SANDBOX_STATE_ANNOTATION: &str = "api.agents.x-k8s.io/v1alpha1-sandbox-state";
/// JSON of the original v1alpha1 SandboxClaim, written on up-conversion.
pub const V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION: &str =
    "api.agents.x-k8s.io/v1alpha1-sandboxclaim-state";
/// JSON of the original v1alpha1 SandboxTemplate, written on up-conversion.
pub const V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION: &str =
    "api.agents.x-k8s.io/v1alpha1-sandboxtemplate-state";
/// JSON of the original v1alpha1 SandboxWarmPool, written on up-conversion.
pub const V1ALPHA1_SANDBOXWARMPOOL_STATE_ANNOTATION: &str =
    "api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state";
/// Carries `volumeClaimTemplatesPolicy` on the v1alpha1 view of a SandboxTemplate.
pub const V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY_ANNOTATION: &str =
    "api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy";
/// Set by the migration tool to force a storage rewrite.
pub const STORAGE_MIGRATED_AT_ANNOTATION: &str = "agents.x-k8s.io/storage-migrated-at";
/// `"true"` on shadow pools created by the migration tool.
pub const MIGRATION_SHADOW_ANNOTATION: &str = "agents.x-k8s.io/migration-shadow";
/// Template name a migration shadow pool was created for.
pub const MIGRATION_SOURCE_TEMPLATE_ANNOTATION: &str = "agents.x-k8s.io/migration-source-template";

// --- Reserved prefixes ----------------------------------------------------------------------

/// Label/annotation key prefixes reserved for the system: pod-template keys with these
/// prefixes are never copied to the Pod.
pub const RESERVED_KEY_PREFIXES: [&str; 2] = ["agents.x-k8s.io/", "extensions.agents.x-k8s.io/"];

/// True when `key` starts with one of the [`RESERVED_KEY_PREFIXES`].
pub fn is_reserved_key(key: &str) -> bool {
    RESERVED_KEY_PREFIXES
        .iter()
        .any(|prefix| key.starts_with(prefix))
}

/// The label selector string `<SANDBOX_NAME_HASH_LABEL>=<name_hash(sandbox name)>` that selects
/// a sandbox's Pod (the value of `Sandbox.status.selector`).
pub fn sandbox_pod_selector(sandbox_name: &str) -> String {
    format!(
        "{SANDBOX_NAME_HASH_LABEL}={}",
        crate::hash::name_hash(sandbox_name)
    )
}

/// The label selector string `<SANDBOX_WARM_POOL_LABEL>=<name_hash(pool name)>` that selects a
/// pool's Sandboxes (the value of `SandboxWarmPool.status.selector`).
pub fn warm_pool_selector(pool_name: &str) -> String {
    format!(
        "{SANDBOX_WARM_POOL_LABEL}={}",
        crate::hash::name_hash(pool_name)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_keys_are_the_two_api_group_prefixes() {
        assert!(is_reserved_key(SANDBOX_NAME_HASH_LABEL));
        assert!(is_reserved_key("extensions.agents.x-k8s.io/anything"));
        assert!(!is_reserved_key("app"));
        assert!(!is_reserved_key(
            "api.agents.x-k8s.io/v1alpha1-sandbox-state"
        ));
        assert!(!is_reserved_key("sub.agents.x-k8s.io/x"));
        assert!(!is_reserved_key(TRACE_CONTEXT_ANNOTATION));
    }

    #[test]
    fn selectors_use_the_name_hash() {
        assert_eq!(
            sandbox_pod_selector("hello-world"),
            "agents.x-k8s.io/sandbox-name-hash=428d118e"
        );
        assert_eq!(
            warm_pool_selector("example-warmpool"),
            "agents.x-k8s.io/warm-pool-sandbox=6680271f"
        );
    }
}
