//! Tests of the structural schema: shared helpers here, cases by topic in `tests/*.rs`.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{FieldErrorKind, ListType, StructuralSchema};

fn schema(v: Value) -> StructuralSchema {
    match StructuralSchema::from_openapi(&v) {
        Ok(s) => s,
        Err(e) => panic!("schema rejected: {e}"),
    }
}

fn messages(errors: &[super::FieldError]) -> Vec<String> {
    errors.iter().map(|e| e.to_string()).collect()
}

fn spec_schema(spec_properties: Value) -> StructuralSchema {
    schema(json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "properties": spec_properties}
        }
    }))
}

mod cel;
mod from_openapi;
mod prune_report;
mod reference;
mod robustness;
mod validation;
