//! Sandbox: v1alpha1 `spec.replicas` (0/1) ↔ v1beta1 `spec.operatingMode`
//! (`v1alpha1-conversion.md` §3).

use serde_json::{Map, Value, json};

use super::{
    ConversionError, HUB_VERSION, SANDBOX, SPOKE_VERSION, child, child_or_insert, copy_as, integer,
    parse_state, remove_annotation, state_field, string_at, take, write_state,
};
use crate::keys::V1ALPHA1_SANDBOX_STATE_ANNOTATION as STATE;

const RUNNING: &str = "Running";
const SUSPENDED: &str = "Suspended";

/// v1alpha1 → v1beta1: `replicas` 0 becomes `Suspended`, 1 or absent `Running` (always
/// written); `status.replicas` is dropped (kept in the state annotation).
pub fn up(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX, HUB_VERSION)?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    let replicas = take(spec, "replicas");
    let suspended = match &replicas {
        Some(value) => integer(value, "spec.replicas")? == 0,
        None => false,
    };
    spec.insert(
        "operatingMode".into(),
        json!(if suspended { SUSPENDED } else { RUNNING }),
    );
    let mut status_replicas = None;
    if let Some(status) = child(&mut out, "status", "status")? {
        status_replicas = take(status, "replicas");
        if let Some(value) = &status_replicas {
            integer(value, "status.replicas")?;
        }
        status.remove("nodeName");
    }

    let mut state_spec = Map::new();
    if let Some(replicas) = replicas {
        state_spec.insert("replicas".into(), replicas);
    }
    let mut state_status = Map::new();
    if let Some(replicas) = status_replicas {
        state_status.insert("replicas".into(), replicas);
    }
    let source = input.as_object().ok_or(ConversionError::NotAnObject)?;
    write_state(&mut out, source, STATE, state_spec, state_status)?;
    Ok(Value::Object(out))
}

/// v1beta1 → v1alpha1: `Suspended` becomes `replicas: 0`, anything else 1, unless the state
/// annotation restores the original (absent stays absent; a stale 0 under `Running` becomes 1);
/// `status.replicas` is 0 or 1 by the mode, or the original's; `status.nodeName` is dropped.
pub fn down(input: &Value) -> Result<Value, ConversionError> {
    let mut out = copy_as(input, SANDBOX, SPOKE_VERSION)?;
    let original = remove_annotation(&mut out, STATE)?
        .map(|text| parse_state("Sandbox", &text))
        .transpose()?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    let mode = string_at(spec, "operatingMode", "spec.operatingMode")?.map(str::to_owned);
    spec.remove("operatingMode");
    let suspended = mode.as_deref() == Some(SUSPENDED);
    let running = mode.as_deref() == Some(RUNNING);

    let replicas = match &original {
        _ if suspended => Some(json!(0)),
        Some(state) if running => {
            match state_field("Sandbox", state, "spec", "replicas")? {
                None => None,
                Some(value) => Some(match state_integer(value, "spec.replicas")? {
                    // The hub says running: a stale 0 is not restored.
                    0 => json!(1),
                    _ => value.clone(),
                }),
            }
        }
        _ => Some(json!(1)),
    };
    match replicas {
        Some(value) => {
            spec.insert("replicas".into(), value);
        }
        None => {
            spec.remove("replicas");
        }
    }

    let status_replicas = match &original {
        Some(state) => match state_field("Sandbox", state, "status", "replicas")? {
            Some(value) => {
                state_integer(value, "status.replicas")?;
                Some(value.clone())
            }
            None => None,
        },
        None => Some(json!(if suspended { 0 } else { 1 })),
    }
    // 0 is not written (the reference's omitempty).
    .filter(|v| v.as_i64() != Some(0));
    match status_replicas {
        Some(value) => {
            let status = child_or_insert(&mut out, "status", "status")?;
            status.remove("nodeName");
            status.insert("replicas".into(), value);
        }
        None => {
            if let Some(status) = child(&mut out, "status", "status")? {
                status.remove("nodeName");
                status.remove("replicas");
            }
        }
    }
    Ok(Value::Object(out))
}

fn state_integer(value: &Value, path: &str) -> Result<i64, ConversionError> {
    value.as_i64().ok_or_else(|| ConversionError::State {
        kind: "Sandbox",
        message: format!("{path} must be an integer, got {value}"),
    })
}
