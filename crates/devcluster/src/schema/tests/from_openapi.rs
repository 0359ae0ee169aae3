//! Schema checks when a CRD is written.

use super::*;

#[test]
fn a_field_without_type_is_not_structural() {
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {"spec": {"properties": {"a": {"type": "string"}}}}
    }))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"
    );
    assert_eq!(err.field_errors()[0].reason(), "FieldValueRequired");
}

#[test]
fn non_structural_schemas_are_rejected_with_every_problem_listed() {
    let err = StructuralSchema::from_openapi_at(
        &json!({
            "type": "string",
            "properties": {
                "list": {"type": "array"},
                "junk": {"type": "object", "anyOf": [{"type": "string"}]},
                "ref": {"$ref": "#/definitions/x"},
                "flag": {"type": "object", "additionalProperties": false},
                "uniq": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}
            }
        }),
        "spec.versions[0].schema.openAPIV3Schema",
    )
    .unwrap_err();
    let text = err.to_string();
    for expected in [
        "spec.versions[0].schema.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root",
        "properties[list].items: Required value: must be specified",
        "properties[junk].anyOf[0].type: Forbidden: must be empty to be structural",
        "properties[ref].$ref: Forbidden: $ref is not supported",
        "properties[flag].additionalProperties: Forbidden: additionalProperties cannot be set to false",
        "properties[uniq].uniqueItems: Forbidden: uniqueItems cannot be set to true",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in {text}");
    }
    assert!(
        text.starts_with('['),
        "several errors are bracketed: {text}"
    );
}

#[test]
fn int_or_string_any_of_pattern_is_accepted() {
    let s = spec_schema(json!({
        "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}
    }));
    assert!(s.validate(&json!({"spec": {"port": 80}})).is_empty());
    assert!(s.validate(&json!({"spec": {"port": "http"}})).is_empty());
    let expected = vec![
        "<nil>: Invalid value: \"\": \"spec.port\" must validate at least one schema (anyOf)",
        "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer: \"boolean\"",
    ];
    let errs = s.validate(&json!({"spec": {"port": true}}));
    assert_eq!(messages(&errs), expected);
    assert_eq!(errs[1].kind, FieldErrorKind::TypeInvalid);
    // Without the anyOf written out, the field validates the same way.
    let implicit = spec_schema(json!({"port": {"x-kubernetes-int-or-string": true}}));
    assert!(
        implicit
            .validate(&json!({"spec": {"port": "http"}}))
            .is_empty()
    );
    assert_eq!(
        messages(&implicit.validate(&json!({"spec": {"port": true}}))),
        expected
    );
}

#[test]
fn bad_pattern_and_bad_list_map_keys_are_schema_errors() {
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {
            "s": {"type": "string", "pattern": "([a-z"},
            "m": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"other": {"type": "string"}}}}
        }
    }))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(
            "properties[s].pattern: Invalid value: \"([a-z\": must be a valid regular expression"
        ),
        "{text}"
    );
    assert!(
        text.contains("properties[m].items.properties[name]: Required value: entries of x-kubernetes-list-map-keys must be specified as properties"),
        "{text}"
    );
}

#[test]
fn garbage_input_never_panics() {
    for v in [
        json!(null),
        json!(1),
        json!("x"),
        json!([]),
        json!({"type": 5}),
        json!({"type": "object", "properties": []}),
        json!({"type": "object", "properties": {"a": {"type": "array", "items": [1]}}}),
        json!({"type": "object", "required": [1], "x-kubernetes-validations": "nope"}),
    ] {
        assert!(StructuralSchema::from_openapi(&v).is_err(), "{v}");
    }
}
