//! `meta.k8s.io/v1` Table responses, for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`
//! (what `kubectl get` asks for).
//!
//! Custom resources get `Name` followed by their `additionalPrinterColumns` (or `Age` when they
//! declare none); built-in kinds get the columns kubectl shows for them ([`builtin_columns`]).
//! Ages are rendered on the server ("5m", "3h10m"), as a real API server does; that is why
//! [`render`] takes the current time.

use serde_json::{Value, json};

use super::{FieldError, FieldErrorKind, jsonpath, timefmt};

mod builtin;

pub use builtin::builtin_columns;

/// Where a column's cells come from.
#[derive(Clone)]
pub enum CellSource {
    /// `metadata.name`.
    Name,
    /// The age of `metadata.creationTimestamp` ("5m").
    Age,
    /// `metadata.creationTimestamp` as an RFC 3339 string (the server's default table, "Created At").
    CreatedAt,
    /// A printer-column JSONPath, converted by the column's type (CRD columns).
    JsonPath(String),
    /// A built-in printer: object and now (seconds since the epoch) to cell.
    Computed(fn(&Value, i64) -> Value),
}

impl std::fmt::Debug for CellSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CellSource::Name => write!(f, "Name"),
            CellSource::Age => write!(f, "Age"),
            CellSource::CreatedAt => write!(f, "CreatedAt"),
            CellSource::JsonPath(p) => write!(f, "JsonPath({p:?})"),
            CellSource::Computed(_) => write!(f, "Computed"),
        }
    }
}

/// One column: its `columnDefinitions` entry and how to compute its cells.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    /// `type` of the column definition: string, integer, number, boolean or date.
    pub column_type: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub source: CellSource,
}

impl Column {
    pub(crate) fn new(
        name: &str,
        column_type: &str,
        description: &str,
        priority: i64,
        source: CellSource,
    ) -> Self {
        Column {
            name: name.to_string(),
            column_type: column_type.to_string(),
            format: String::new(),
            description: description.to_string(),
            priority,
            source,
        }
    }

    pub(crate) fn name_column() -> Self {
        let mut c = Column::new(
            "Name",
            "string",
            "Name must be unique within a namespace. It is the object's identifier in URLs and cannot be changed.",
            0,
            CellSource::Name,
        );
        c.format = "name".to_string();
        c
    }

    pub(crate) fn age_column() -> Self {
        Column::new("Age", "date", AGE_DESCRIPTION, 0, CellSource::Age)
    }

    /// The JSONPath of a printer column, if it has one.
    pub fn json_path(&self) -> Option<&str> {
        match &self.source {
            CellSource::JsonPath(p) => Some(p),
            _ => None,
        }
    }

    fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.column_type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }

    fn cell(&self, obj: &Value, now: i64) -> Value {
        match &self.source {
            CellSource::Name => obj
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::String(String::new())),
            CellSource::Age => Value::String(age(obj.pointer("/metadata/creationTimestamp"), now)),
            CellSource::CreatedAt => match obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(timefmt::parse_date_time)
            {
                Some(secs) => Value::String(timefmt::format_rfc3339(secs)),
                None => Value::Null,
            },
            CellSource::JsonPath(path) => json_path_cell(path, &self.column_type, obj, now),
            CellSource::Computed(f) => f(obj, now),
        }
    }
}

const AGE_DESCRIPTION: &str = "CreationTimestamp is the time the server created this object, in UTC (RFC 3339). Clients may not set it.";

/// What each row carries besides its cells (`includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object (`"object": null`).
    None,
    /// A `PartialObjectMetadata` with the object's metadata (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query parameter; `None` for a value the server rejects.
    pub fn parse(value: Option<&str>) -> Option<Self> {
        match value {
            None | Some("") | Some("Metadata") => Some(IncludeObject::Metadata),
            Some("None") => Some(IncludeObject::None),
            Some("Object") => Some(IncludeObject::Object),
            Some(_) => None,
        }
    }
}

/// The age of a timestamp as table printers show it (`<unknown>` without one).
pub fn age(timestamp: Option<&Value>, now: i64) -> String {
    match timestamp
        .and_then(Value::as_str)
        .and_then(timefmt::parse_date_time)
    {
        Some(t) => timefmt::human_duration(now - t),
        None => "<unknown>".to_string(),
    }
}

/// Columns of one CRD version (`spec.versions[i]`): Name, then `additionalPrinterColumns`, or Age
/// when it declares none.
pub fn crd_columns(crd_version: &Value) -> Vec<Column> {
    let mut columns = vec![Column::name_column()];
    let declared = crd_version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
        .filter(|cols| !cols.is_empty());
    match declared {
        None => columns.push(Column {
            source: CellSource::JsonPath(".metadata.creationTimestamp".into()),
            ..Column::age_column()
        }),
        Some(cols) => {
            for c in cols {
                let text = |k: &str| {
                    c.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string()
                };
                columns.push(Column {
                    name: text("name"),
                    column_type: text("type"),
                    format: text("format"),
                    description: text("description"),
                    priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    source: CellSource::JsonPath(text("jsonPath")),
                });
            }
        }
    }
    columns
}

/// Checks the `additionalPrinterColumns` of one CRD version (at `path`, e.g.
/// `spec.versions[0].additionalPrinterColumns`) as the real server does when the CRD is written.
pub fn printer_column_errors(crd_version: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(cols) = crd_version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array)
    else {
        return errors;
    };
    for (i, c) in cols.iter().enumerate() {
        let at = |field: &str| format!("{path}[{i}].{field}");
        let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default();
        if text("name").is_empty() {
            errors.push(FieldError::new(
                &at("name"),
                FieldErrorKind::Required,
                None,
                "",
            ));
        }
        let ty = text("type");
        if ty.is_empty() {
            errors.push(FieldError::new(
                &at("type"),
                FieldErrorKind::Required,
                None,
                "",
            ));
        } else if !PRINTER_COLUMN_TYPES.contains(&ty) {
            errors.push(FieldError::not_supported(
                &at("type"),
                Value::String(ty.into()),
                PRINTER_COLUMN_TYPES,
            ));
        }
        let format = text("format");
        if !format.is_empty() && !PRINTER_COLUMN_FORMATS.contains(&format) {
            errors.push(FieldError::not_supported(
                &at("format"),
                Value::String(format.into()),
                PRINTER_COLUMN_FORMATS,
            ));
        }
        if c.get("priority")
            .and_then(Value::as_i64)
            .is_some_and(|p| p < 0)
        {
            errors.push(FieldError::new(
                &at("priority"),
                FieldErrorKind::Invalid,
                c.get("priority").cloned(),
                "must be non-negative",
            ));
        }
        let json_path = text("jsonPath");
        if json_path.is_empty() {
            errors.push(FieldError::new(
                &at("jsonPath"),
                FieldErrorKind::Required,
                None,
                "",
            ));
        } else if !json_path.starts_with('.')
            || jsonpath::eval(&format!("{{{json_path}}}"), &Value::Null).is_err()
        {
            errors.push(FieldError::new(
                &at("jsonPath"),
                FieldErrorKind::Invalid,
                Some(Value::String(json_path.into())),
                "must be a simple json path starting with .",
            ));
        }
    }
    errors
}

const PRINTER_COLUMN_TYPES: &[&str] = &["integer", "number", "string", "boolean", "date"];
const PRINTER_COLUMN_FORMATS: &[&str] = &[
    "int32",
    "int64",
    "float",
    "double",
    "byte",
    "date",
    "date-time",
    "password",
];

/// A printer-column cell, converted as the apiextensions server does: the first result of the
/// path; strings printed as JSONPath prints them; integers, numbers and booleans typed; dates as
/// ages; nothing found is null.
fn json_path_cell(path: &str, column_type: &str, obj: &Value, now: i64) -> Value {
    let wrapped = if path.trim_start().starts_with('{') {
        path.to_string()
    } else {
        format!("{{{path}}}")
    };
    let Ok(results) = jsonpath::eval(&wrapped, obj) else {
        return Value::Null;
    };
    let Some(first) = results.into_iter().next() else {
        return Value::Null;
    };
    match column_type {
        "string" => Value::String(jsonpath::value_text(&first)),
        "integer" => match &first {
            Value::Number(n) => n
                .as_i64()
                .map(Value::from)
                .or_else(|| n.as_f64().map(|f| Value::from(f as i64)))
                .unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "number" => match &first {
            Value::Number(n) => n.as_f64().map(Value::from).unwrap_or(Value::Null),
            _ => Value::Null,
        },
        "boolean" => match first {
            Value::Bool(b) => Value::Bool(b),
            _ => Value::Null,
        },
        "date" => match &first {
            Value::String(s) => match timefmt::parse_date_time(s) {
                Some(t) => Value::String(timefmt::human_duration(now - t)),
                None => Value::String("<invalid>".into()),
            },
            _ => Value::Null,
        },
        _ => Value::Null,
    }
}

/// Builds the Table for `objects`. `list_metadata` becomes the Table's `metadata` (resourceVersion,
/// continue); `now` is seconds since the epoch, for ages.
pub fn render(
    columns: &[Column],
    objects: &[Value],
    include_object: IncludeObject,
    list_metadata: Value,
    now: i64,
) -> Value {
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells: Vec<Value> = columns.iter().map(|c| c.cell(obj, now)).collect();
            let object = match include_object {
                IncludeObject::None => Value::Null,
                IncludeObject::Object => obj.clone(),
                IncludeObject::Metadata => json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": if list_metadata.is_null() { json!({}) } else { list_metadata },
        "columnDefinitions": columns.iter().map(Column::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

/// [`render`] without the column definitions (`"columnDefinitions": null`), as a real server
/// sends the watch events after the first one of a Table watch (`TableOptions.noHeaders`).
pub fn render_without_headers(
    columns: &[Column],
    objects: &[Value],
    include_object: IncludeObject,
    list_metadata: Value,
    now: i64,
) -> Value {
    let mut table = render(columns, objects, include_object, list_metadata, now);
    table["columnDefinitions"] = Value::Null;
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_709_294_400; // 2024-03-01T12:00:00Z

    fn sandbox_version() -> Value {
        json!({
            "name": "v1beta1",
            "additionalPrinterColumns": [
                {"jsonPath": ".status.conditions[?(@.type=='Ready')].status", "name": "Ready", "type": "string"},
                {"jsonPath": ".status.conditions[?(@.type=='Ready')].reason", "name": "Reason", "type": "string"},
                {"jsonPath": ".status.replicas", "name": "Replicas", "type": "integer", "priority": 1, "description": "how many"},
                {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"}
            ]
        })
    }

    #[test]
    fn crd_tables_have_name_then_printer_columns_with_server_side_ages() {
        let cols = crd_columns(&sandbox_version());
        let obj = json!({
            "metadata": {"name": "sb", "namespace": "default", "creationTimestamp": "2024-03-01T11:55:00Z", "resourceVersion": "7"},
            "status": {"replicas": 1, "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}
        });
        let table = render(
            &cols,
            std::slice::from_ref(&obj),
            IncludeObject::Metadata,
            json!({"resourceVersion": "9"}),
            NOW,
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(table["metadata"], json!({"resourceVersion": "9"}));
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Reason", "Replicas", "Age"]);
        assert_eq!(table["columnDefinitions"][0]["format"], "name");
        assert_eq!(table["columnDefinitions"][3]["priority"], 1);
        assert_eq!(table["columnDefinitions"][3]["description"], "how many");
        assert_eq!(table["columnDefinitions"][4]["type"], "date");
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["sb", "True", "DependenciesReady", 1, "5m"])
        );
        assert_eq!(
            table["rows"][0]["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
        );
    }

    #[test]
    fn missing_values_are_null_cells_and_include_object_is_honoured() {
        let cols = crd_columns(&sandbox_version());
        let obj = json!({"metadata": {"name": "fresh"}});
        let none = render(
            &cols,
            std::slice::from_ref(&obj),
            IncludeObject::None,
            Value::Null,
            NOW,
        );
        assert_eq!(
            none["rows"][0]["cells"],
            json!(["fresh", null, null, null, null])
        );
        assert_eq!(none["rows"][0]["object"], Value::Null);
        assert_eq!(none["metadata"], json!({}));
        let full = render(
            &cols,
            std::slice::from_ref(&obj),
            IncludeObject::Object,
            Value::Null,
            NOW,
        );
        assert_eq!(full["rows"][0]["object"], obj);
        assert_eq!(IncludeObject::parse(None), Some(IncludeObject::Metadata));
        assert_eq!(
            IncludeObject::parse(Some("Object")),
            Some(IncludeObject::Object)
        );
        assert_eq!(IncludeObject::parse(Some("Everything")), None);
    }

    #[test]
    fn a_crd_without_printer_columns_shows_name_and_age() {
        let cols = crd_columns(&json!({"name": "v1"}));
        let table = render(
            &cols,
            &[json!({"metadata": {"name": "x", "creationTimestamp": "2024-03-01T10:00:00Z"}})],
            IncludeObject::None,
            Value::Null,
            NOW,
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Age"]);
        assert_eq!(table["rows"][0]["cells"], json!(["x", "120m"]));
    }

    #[test]
    fn printer_columns_are_checked_when_the_crd_is_written() {
        assert!(
            printer_column_errors(
                &sandbox_version(),
                "spec.versions[0].additionalPrinterColumns"
            )
            .is_empty()
        );
        let bad = json!({"additionalPrinterColumns": [
            {"name": "A", "type": "text", "jsonPath": "status.x"},
            {"type": "string", "jsonPath": ".a[", "format": "fancy", "priority": -1}
        ]});
        let errs: Vec<String> =
            printer_column_errors(&bad, "spec.versions[0].additionalPrinterColumns")
                .iter()
                .map(|e| e.to_string())
                .collect();
        assert_eq!(
            errs,
            vec![
                "spec.versions[0].additionalPrinterColumns[0].type: Unsupported value: \"text\": supported values: \"integer\", \"number\", \"string\", \"boolean\", \"date\"",
                "spec.versions[0].additionalPrinterColumns[0].jsonPath: Invalid value: \"status.x\": must be a simple json path starting with .",
                "spec.versions[0].additionalPrinterColumns[1].name: Required value",
                "spec.versions[0].additionalPrinterColumns[1].format: Unsupported value: \"fancy\": supported values: \"int32\", \"int64\", \"float\", \"double\", \"byte\", \"date\", \"date-time\", \"password\"",
                "spec.versions[0].additionalPrinterColumns[1].priority: Invalid value: -1: must be non-negative",
                "spec.versions[0].additionalPrinterColumns[1].jsonPath: Invalid value: \".a[\": must be a simple json path starting with .",
            ]
        );
    }

    #[test]
    fn typed_cells_convert_like_the_server() {
        let version = json!({"additionalPrinterColumns": [
            {"jsonPath": ".spec.n", "name": "N", "type": "number"},
            {"jsonPath": ".spec.flag", "name": "Flag", "type": "boolean"},
            {"jsonPath": ".spec.obj", "name": "Obj", "type": "string"},
            {"jsonPath": ".spec.when", "name": "When", "type": "date"},
            {"jsonPath": ".spec.flag", "name": "Mistyped", "type": "integer"}
        ]});
        let cols = crd_columns(&version);
        let obj = json!({"metadata": {"name": "o"}, "spec": {"n": 2.5, "flag": true, "obj": {"a": 1}, "when": "garbage"}});
        let table = render(&cols, &[obj], IncludeObject::None, Value::Null, NOW);
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["o", 2.5, true, "{\"a\":1}", "<invalid>", null])
        );
    }
}
