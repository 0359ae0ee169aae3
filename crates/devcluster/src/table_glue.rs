//! `meta.k8s.io/v1` Table answers for kubectl (`Accept: application/json;as=Table;...`), rendered
//! with `schema::table`: CRD printer columns for custom resources, kubectl's usual columns for
//! built-in kinds.

use serde_json::Value;

use crate::api_error::ApiError;
use crate::schema::table::{self, IncludeObject};
use crate::server::{ResourceRequest, SharedState};

/// The columns and row-object mode a Table answer for `req` uses.
pub fn columns_for(req: &ResourceRequest) -> Result<(Vec<table::Column>, IncludeObject), ApiError> {
    let include = IncludeObject::parse(req.query.get("includeObject")).ok_or_else(|| {
        ApiError::bad_request(format!(
            "includeObject: Unsupported value: {:?}: supported values: \"Metadata\", \"None\", \"Object\"",
            req.query.get("includeObject").unwrap_or("")
        ))
    })?;
    let columns = match &req.info.crd {
        Some(crd) => {
            let version = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .and_then(|vs| vs.iter().find(|v| v["name"] == req.version.as_str()))
                .cloned()
                .unwrap_or(Value::Null);
            table::crd_columns(&version)
        }
        None => table::builtin_columns(&req.info.kind),
    };
    Ok((columns, include))
}

pub fn render(
    _state: &SharedState,
    req: &ResourceRequest,
    objects: &[Value],
    list_metadata: Value,
) -> Result<Value, ApiError> {
    let (columns, include) = columns_for(req)?;
    let now = jiff::Timestamp::now().as_second();
    Ok(table::render(
        &columns,
        objects,
        include,
        list_metadata,
        now,
    ))
}
