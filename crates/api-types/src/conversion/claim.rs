//! SandboxClaim: v1alpha1's template plus warm-pool policy ↔ v1beta1's single `warmPoolRef`
//! (`v1alpha1-conversion.md` §6).
//!
//! Up picks the pool, first rule that applies:
//! - A: `warmpool` names a specific pool → that pool;
//! - B: the claim is bound to a Sandbox not named like the claim (a warm start) → the pool that
//!   made it, the Sandbox's name without its last `-suffix`;
//! - C: otherwise (a cold start) → the template's shadow pool, `shadow-pool-<template>`.
//!
//! Down without a state annotation: a shadow pool gives back its template and `default`; any
//! other pool name is used for both the template and `warmpool` (the template is not knowable).
//! With one, the original template and policy come back when up-converting them (with the
//! claim's current status) gives the current pool; otherwise the pool was changed through
//! v1beta1, the template is kept and `warmpool` names the new pool. `spec.volumeClaimTemplates`
//! has no v1alpha1 field and is dropped (the reference does the same).
//!
//! The reference restores the original on a looser match (the current pool equals the original
//! policy's pool or template, that name with the shadow prefix, or the bound Sandbox's name with
//! or without its suffix). That hides some changes made through v1beta1 and undoes them on the
//! next v1alpha1 write: a `default` claim of template `t` re-pointed to a pool that is also
//! named `t` reads back as `warmpool: default` and converts back up to `shadow-pool-t`. Matching
//! on the exact derivation reads it back as `warmpool: t`, which converts back up to `t`; every
//! original the reference restores after a v1alpha1 write is restored here too.

use serde_json::{Map, Value};

use super::{
    ConversionError, HUB_VERSION, SANDBOX_CLAIM, SHADOW_POOL_PREFIX, SPOKE_VERSION,
    child_or_insert, child_ref, copy_as, field_type, metadata_str, name_ref, parse_state,
    remove_annotation, state_field, string_at, take, write_state,
};
use crate::keys::V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION as STATE;
use crate::v1alpha1::is_specific_pool;

/// `name` cut before its last `-` (unchanged without one): `my-pool-abcde` → `my-pool`.
pub fn strip_suffix(name: &str) -> &str {
    name.rsplit_once('-').map_or(name, |(head, _)| head)
}

/// The v1beta1 pool a v1alpha1 claim converts to (rules A, B, C).
pub fn derive_pool_name(
    claim_name: &str,
    template_name: &str,
    warmpool: Option<&str>,
    bound_sandbox: &str,
) -> String {
    match warmpool {
        Some(pool) if is_specific_pool(pool) => pool.to_owned(),
        _ if !bound_sandbox.is_empty() && bound_sandbox != claim_name => {
            strip_suffix(bound_sandbox).to_owned()
        }
        _ => format!("{SHADOW_POOL_PREFIX}{template_name}"),
    }
}

/// `status.sandbox.name`, empty when absent.
fn bound_sandbox(object: &Map<String, Value>) -> Result<String, ConversionError> {
    let Some(status) = child_ref(object, "status", "status")? else {
        return Ok(String::new());
    };
    let Some(sandbox) = child_ref(status, "sandbox", "status.sandbox")? else {
        return Ok(String::new());
    };
    Ok(string_at(sandbox, "name", "status.sandbox.name")?
        .unwrap_or_default()
        .to_owned())
}

/// The name inside a `{name: ...}` reference value.
fn ref_name(value: Option<&Value>, path: &'static str) -> Result<String, ConversionError> {
    match value {
        None => Ok(String::new()),
        Some(Value::Object(map)) => {
            Ok(string_at(map, "name", path)?.unwrap_or_default().to_owned())
        }
        Some(other) => Err(field_type(path, "an object", other)),
    }
}

/// v1alpha1 → v1beta1: `sandboxTemplateRef` and `warmpool` become `warmPoolRef` (rules A–C).
pub fn up(input: &Value) -> Result<Value, ConversionError> {
    let source = input.as_object().ok_or(ConversionError::NotAnObject)?;
    let claim_name = metadata_str(source, "name")?.to_owned();
    let sandbox = bound_sandbox(source)?;
    let mut out = copy_as(input, SANDBOX_CLAIM, HUB_VERSION)?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    let template_ref = take(spec, "sandboxTemplateRef");
    let template = ref_name(template_ref.as_ref(), "spec.sandboxTemplateRef.name")?;
    let warmpool = take(spec, "warmpool");
    let policy = match &warmpool {
        None => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(other) => return Err(field_type("spec.warmpool", "a string", other)),
    };
    let pool = derive_pool_name(&claim_name, &template, policy, &sandbox);
    spec.insert("warmPoolRef".into(), serde_json::json!({ "name": pool }));

    let mut state_spec = Map::new();
    if let Some(template_ref) = template_ref {
        state_spec.insert("sandboxTemplateRef".into(), template_ref);
    }
    if let Some(warmpool) = warmpool {
        state_spec.insert("warmpool".into(), warmpool);
    }
    write_state(&mut out, source, STATE, state_spec, Map::new())?;
    Ok(Value::Object(out))
}

/// v1beta1 → v1alpha1: see the module docs.
pub fn down(input: &Value) -> Result<Value, ConversionError> {
    let source = input.as_object().ok_or(ConversionError::NotAnObject)?;
    let claim_name = metadata_str(source, "name")?.to_owned();
    let sandbox = bound_sandbox(source)?;
    let mut out = copy_as(input, SANDBOX_CLAIM, SPOKE_VERSION)?;
    let original = remove_annotation(&mut out, STATE)?
        .map(|text| parse_state("SandboxClaim", &text))
        .transpose()?;
    let spec = child_or_insert(&mut out, "spec", "spec")?;
    let current = ref_name(spec.get("warmPoolRef"), "spec.warmPoolRef.name")?;
    spec.remove("warmPoolRef");
    spec.remove("volumeClaimTemplates");

    let (template_ref, warmpool) = match original {
        None => match current.strip_prefix(SHADOW_POOL_PREFIX) {
            Some(template) => (name_ref(template), Some(Value::from("default"))),
            None => (name_ref(&current), Some(Value::from(current.clone()))),
        },
        Some(state) => {
            let state_error = |message: String| ConversionError::State {
                kind: "SandboxClaim",
                message,
            };
            let template_ref =
                state_field("SandboxClaim", &state, "spec", "sandboxTemplateRef")?.cloned();
            let template = match &template_ref {
                None => String::new(),
                Some(Value::Object(map)) => match map.get("name") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => {
                        return Err(state_error(format!(
                            "spec.sandboxTemplateRef.name must be a string, got {other}"
                        )));
                    }
                },
                Some(other) => {
                    return Err(state_error(format!(
                        "spec.sandboxTemplateRef must be an object, got {other}"
                    )));
                }
            };
            let warmpool = state_field("SandboxClaim", &state, "spec", "warmpool")?.cloned();
            let policy = match &warmpool {
                None => None,
                Some(Value::String(s)) => Some(s.as_str()),
                Some(other) => {
                    return Err(state_error(format!(
                        "spec.warmpool must be a string, got {other}"
                    )));
                }
            };
            // Restore only when up-converting the original gives the current pool back.
            let matches = derive_pool_name(&claim_name, &template, policy, &sandbox) == current;
            let template_ref = template_ref.unwrap_or_else(|| name_ref(""));
            if matches {
                (template_ref, warmpool)
            } else {
                // The pool was changed through v1beta1: say which, keep the template.
                (template_ref, Some(Value::from(current.clone())))
            }
        }
    };
    spec.insert("sandboxTemplateRef".into(), template_ref);
    match warmpool {
        Some(warmpool) => {
            spec.insert("warmpool".into(), warmpool);
        }
        None => {
            spec.remove("warmpool");
        }
    }
    Ok(Value::Object(out))
}
