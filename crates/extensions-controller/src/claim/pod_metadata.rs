//! The pod-template metadata of a claim's Sandbox: the template's, plus the claim identity
//! labels, plus the claim's validated `additionalPodMetadata`.

use api_types::keys::{CREATED_BY_LABEL, SANDBOX_ID_LABEL, SANDBOX_TEMPLATE_REF_HASH_LABEL};
use api_types::{PodMetadata, SandboxClaim, name_hash};

use super::metadata::{MetadataError, merge};

/// The claim's `created-by` label, if set and non-empty.
pub fn claim_created_by(claim: &SandboxClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(CREATED_BY_LABEL))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// `base` (normally the template's pod metadata) + `claim-uid` + `sandbox-template-ref-hash`
/// + the claim's `created-by` (removed when the claim has none) + `additionalPodMetadata`.
pub fn desired_pod_metadata(
    base: &PodMetadata,
    claim: &SandboxClaim,
    claim_uid: &str,
    template_name: Option<&str>,
    allowed_domains: &[String],
) -> Result<PodMetadata, MetadataError> {
    let mut meta = base.clone();
    meta.labels
        .insert(SANDBOX_ID_LABEL.into(), claim_uid.to_owned());
    if let Some(template) = template_name {
        meta.labels
            .insert(SANDBOX_TEMPLATE_REF_HASH_LABEL.into(), name_hash(template));
    }
    match claim_created_by(claim) {
        Some(value) => {
            meta.labels
                .insert(CREATED_BY_LABEL.into(), value.to_owned());
        }
        None => {
            meta.labels.remove(CREATED_BY_LABEL);
        }
    }
    merge(
        &mut meta,
        &claim.spec.additional_pod_metadata,
        allowed_domains,
    )?;
    Ok(meta)
}
