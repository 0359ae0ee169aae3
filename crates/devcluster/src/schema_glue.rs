//! Glue between CRD handling and the structural-schema machinery.
//!
//! Interim: until `schema.rs` (devcluster-schema) is merged, a CRD's schema is only checked to
//! be an object and custom resources are stored without pruning, defaulting or validation.

use serde_json::Value;

use crate::api_error::Cause;

/// Whether a version's `openAPIV3Schema` is acceptable; the error names what is wrong.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    if schema.is_object() {
        Ok(())
    } else {
        Err(format!("{schema}: must be an object"))
    }
}

/// Prune, default and validate a custom resource against its version's schema; field causes of
/// a 422 when invalid.
pub fn admit(_schema: &Value, _old: Option<&Value>, _new: &mut Value) -> Vec<Cause> {
    Vec::new()
}
