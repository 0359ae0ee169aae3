//! SandboxWarmPool: v1alpha1 requires `spec.replicas`, v1beta1 defaults it to 1; v1beta1 adds
//! `status.observedGeneration` (`v1alpha1-conversion.md` §5).

use serde_json::{Map, Value, json};

use super::{
    ConversionError, HUB_VERSION, SANDBOX_WARM_POOL, SPOKE_VERSION, child, child_or_insert,
    copy_as, integer, remove_annotation, write_state,
};
use crate::keys::V1ALPHA1_SANDBOXWARMPOOL_STATE_ANNOTATION as STATE;

/// v1alpha1 → v1beta1: `spec.replicas` is always written (0 when the input lacks it, as the
/// reference's non-pointer field reads); `status.observedGeneration` stays unset.
pub fn up(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX_WARM_POOL, HUB_VERSION)?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    match spec.get("replicas").filter(|v| !v.is_null()) {
        Some(value) => {
            integer(value, "spec.replicas")?;
        }
        None => {
            spec.insert("replicas".into(), json!(0));
        }
    }
    if let Some(status) = child(&mut out, "status", "status")? {
        status.remove("observedGeneration");
    }
    let source = input.as_object().ok_or(ConversionError::NotAnObject)?;
    write_state(&mut out, source, STATE, Map::new(), Map::new())?;
    Ok(Value::Object(out))
}

/// v1beta1 → v1alpha1: an unset `spec.replicas` becomes 1 (v1beta1's default, v1alpha1
/// requires the field); `status.observedGeneration` is dropped.
pub fn down(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX_WARM_POOL, SPOKE_VERSION)?;
    remove_annotation(&mut out, STATE)?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    match spec.get("replicas").filter(|v| !v.is_null()) {
        Some(value) => {
            integer(value, "spec.replicas")?;
        }
        None => {
            spec.insert(
                "replicas".into(),
                json!(crate::warm_pool::DEFAULT_WARM_POOL_REPLICAS),
            );
        }
    }
    if let Some(status) = child(&mut out, "status", "status")? {
        status.remove("observedGeneration");
    }
    Ok(Value::Object(out))
}
