//! SandboxTemplate: v1beta1 `spec.volumeClaimTemplatesPolicy` travels on the v1alpha1 view as
//! the annotation `api.agents.x-k8s.io/v1beta1-volume-claim-templates-policy`
//! (`v1alpha1-conversion.md` §4). Everything else has the same wire shape.

use serde_json::{Map, Value, json};

use super::{
    ConversionError, HUB_VERSION, SANDBOX_TEMPLATE, SPOKE_VERSION, child_or_insert, copy_as,
    remove_annotation, set_annotation, string_at, write_state,
};
use crate::keys::{
    V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION as STATE,
    V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY_ANNOTATION as POLICY,
};

/// The values `volumeClaimTemplatesPolicy` takes.
const POLICIES: [&str; 3] = ["Disallowed", "Allowed", "Overrides"];

/// v1alpha1 → v1beta1: a valid policy annotation becomes `spec.volumeClaimTemplatesPolicy`
/// (and leaves the metadata); any other value fails the conversion.
pub fn up(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX_TEMPLATE, HUB_VERSION)?;
    if let Some(policy) = remove_annotation(&mut out, POLICY)? {
        if !POLICIES.contains(&policy.as_str()) {
            return Err(ConversionError::InvalidPolicyAnnotation(policy));
        }
        let spec = child_or_insert(&mut out, "spec", "spec")?;
        spec.insert("volumeClaimTemplatesPolicy".into(), json!(policy));
    }
    let source = input.as_object().ok_or(ConversionError::NotAnObject)?;
    write_state(&mut out, source, STATE, Map::new(), Map::new())?;
    Ok(Value::Object(out))
}

/// v1beta1 → v1alpha1: a non-empty policy is written to the annotation (over any value there);
/// an empty one removes it, so a stale value cannot bring a cleared policy back.
pub fn down(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX_TEMPLATE, SPOKE_VERSION)?;
    remove_annotation(&mut out, STATE)?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    let policy = string_at(
        spec,
        "volumeClaimTemplatesPolicy",
        "spec.volumeClaimTemplatesPolicy",
    )?
    .map(str::to_owned);
    spec.remove("volumeClaimTemplatesPolicy");
    match policy.filter(|p| !p.is_empty()) {
        Some(policy) => set_annotation(&mut out, POLICY, policy)?,
        None => {
            remove_annotation(&mut out, POLICY)?;
        }
    }
    Ok(Value::Object(out))
}
