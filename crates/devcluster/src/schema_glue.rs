//! Glue between CRD handling and the structural-schema machinery (`schema.rs`): checking a CRD's
//! schemas and printer columns, and the custom-resource write pipeline (prune, default, validate).

use serde_json::Value;

use crate::api_error::Cause;
use crate::schema::StructuralSchema;

/// Field errors of a CRD's schemas and printer columns (empty when the CRD is acceptable).
pub fn check_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = match StructuralSchema::from_crd(crd) {
        Ok(_) => Vec::new(),
        Err(e) => crate::patch_glue::causes_of(e.field_errors()),
    };
    if let Some(versions) = crd.pointer("/spec/versions").and_then(Value::as_array) {
        for (i, v) in versions.iter().enumerate() {
            let errors = crate::schema::table::printer_column_errors(
                v,
                &format!("spec.versions[{i}].additionalPrinterColumns"),
            );
            causes.extend(crate::patch_glue::causes_of(&errors));
        }
    }
    causes
}

/// Compiled schemas of every version of a CRD (versions whose schema does not compile are left
/// out; such a CRD is refused on write).
pub fn compile(crd: &Value) -> Vec<(String, std::sync::Arc<StructuralSchema>)> {
    StructuralSchema::from_crd(crd)
        .map(|v| {
            v.into_iter()
                .map(|(name, s)| (name, std::sync::Arc::new(s)))
                .collect()
        })
        .unwrap_or_default()
}

/// Paths (`.spec.foo`) of fields present in `before` and missing in `after`: what pruning dropped.
pub fn dropped_fields(before: &Value, after: &Value, path: &str, out: &mut Vec<String>) {
    let mut buf = path.to_string();
    missing_members(before, after, &mut buf, out);
}

/// [`dropped_fields`] with the path in one buffer, written out only for a missing member.
fn missing_members(before: &Value, after: &Value, path: &mut String, out: &mut Vec<String>) {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            for (k, v) in b {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                match a.get(k) {
                    None => out.push(path.clone()),
                    Some(av) => missing_members(v, av, path, out),
                }
                path.truncate(len);
            }
        }
        (Value::Array(b), Value::Array(a)) => {
            for (i, (bv, av)) in b.iter().zip(a.iter()).enumerate() {
                let len = path.len();
                path.push('[');
                path.push_str(&i.to_string());
                path.push(']');
                missing_members(bv, av, path, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Prune, default and validate a custom resource; field causes of a 422 when invalid. Returns the
/// paths pruning dropped (for `fieldValidation`).
#[cfg(test)]
pub fn admit(
    schema: &StructuralSchema,
    old: Option<&Value>,
    new: &mut Value,
) -> (Vec<String>, Vec<Cause>) {
    admit_onto(schema, old, false, new)
}

/// [`admit`]; when `old_admitted_here` (the stored `old` was itself pruned and defaulted under
/// this schema, and has not changed since), the top-level members of `new` equal to `old`'s are
/// set aside while pruning and defaulting: pruning and defaulting work member by member, and
/// those members are what the same steps made of them before (they drop nothing and gain no
/// default). A default the reduced object gains for a member set aside is replaced by it.
/// Validation sees the whole object (and skips unchanged values itself).
pub fn admit_onto(
    schema: &StructuralSchema,
    old: Option<&Value>,
    old_admitted_here: bool,
    new: &mut Value,
) -> (Vec<String>, Vec<Cause>) {
    let set_aside: Vec<(String, Value)> = match (old, &mut *new) {
        (Some(Value::Object(old)), Value::Object(members)) if old_admitted_here => {
            let unchanged: Vec<String> = members
                .iter()
                .filter(|(k, v)| old.get(k.as_str()) == Some(*v))
                .map(|(k, _)| k.clone())
                .collect();
            unchanged
                .iter()
                .filter_map(|k| members.remove_entry(k.as_str()))
                .collect()
        }
        _ => Vec::new(),
    };
    let dropped = schema.prune_reporting(new);
    schema.apply_defaults(new);
    if let Value::Object(members) = new {
        members.extend(set_aside);
    }
    let errors = match old {
        Some(old) => schema.validate_update(new, old),
        None => schema.validate(new),
    };
    (dropped, crate::patch_glue::causes_of(&errors))
}

#[cfg(test)]
mod onto_tests;
