//! `meta.k8s.io/v1` Table answers for kubectl (`Accept: application/json;as=Table;...`).
//!
//! Interim: until `schema::table` (devcluster-schema) is merged, every kind renders as the
//! columns a CRD without printer columns gets: Name and Age.

use serde_json::{Value, json};

use crate::server::{ResourceRequest, SharedState};

pub fn render(
    _state: &SharedState,
    req: &ResourceRequest,
    objects: &[Value],
    list_metadata: Value,
) -> Value {
    let include = req.query.get("includeObject").unwrap_or("Metadata");
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({
                "cells": [
                    o.pointer("/metadata/name").cloned().unwrap_or(Value::Null),
                    o.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .and_then(crate::meta::seconds_since)
                        .map(|s| Value::String(crate::meta::human_duration(s)))
                        .unwrap_or_else(|| Value::String("<unknown>".into())),
                ],
            });
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({
                        "kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": o.get("metadata").cloned().unwrap_or_else(|| json!({})),
                    })
                }
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0},
            {"name": "Age", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0},
        ],
        "rows": rows,
    })
}
