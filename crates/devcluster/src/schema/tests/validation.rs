//! OpenAPI validation, list types, embedded resources, ratcheting, Status causes.

use super::*;

#[test]
fn minimum_enum_required_and_type_messages_match_the_real_server() {
    let s = spec_schema(json!({
        "replicas": {"type": "integer", "format": "int32", "minimum": 0},
        "operatingMode": {"type": "string", "enum": ["Running", "Suspended"]},
        "podTemplate": {"type": "object"}
    }));
    let mut with_required = json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "required": ["podTemplate"], "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "operatingMode": {"type": "string", "enum": ["Running", "Suspended"]},
            "podTemplate": {"type": "object"}
        }}}
    });
    let s_req = schema(with_required.take());
    assert_eq!(
        messages(&s_req.validate(&json!({"spec": {"replicas": -1, "operatingMode": "X"}}))),
        vec![
            "spec.podTemplate: Required value",
            "spec.operatingMode: Unsupported value: \"X\": supported values: \"Running\", \"Suspended\"",
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ]
    );
    let errs = s.validate(&json!({"spec": {"replicas": "string"}}));
    assert_eq!(
        messages(&errs),
        vec![
            "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
        ]
    );
    assert_eq!(errs[0].reason(), "FieldValueTypeInvalid");
    assert_eq!(
        s.validate(&json!({"spec": {"replicas": 1.5}}))[0].to_string(),
        "spec.replicas: Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
    );
    assert!(
        s.validate(
            &json!({"spec": {"replicas": 3, "operatingMode": "Running", "podTemplate": {}}})
        )
        .is_empty()
    );
}

#[test]
fn numeric_bounds_string_and_array_limits() {
    let s = spec_schema(json!({
        "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "maximum": 1000000},
        "step": {"type": "integer", "multipleOf": 5},
        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
        "labels": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}
    }));
    let errs = messages(&s.validate(&json!({"spec": {
        "ratio": 0, "step": 7, "name": "ABCDEFG", "tags": [], "labels": {"a": "1", "b": "2"}
    }})));
    assert_eq!(
        errs,
        vec![
            "spec.labels: Too many: 2: must have at most 1 items",
            "spec.name: Too long: may not be more than 5 bytes",
            "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
            "spec.ratio: Invalid value: 0: spec.ratio in body should be greater than 0",
            "spec.step: Invalid value: 7: spec.step in body should be a multiple of 5",
            "spec.tags: Invalid value: []interface {}{}: spec.tags in body should have at least 1 items",
        ]
    );
    assert_eq!(
        messages(
            &s.validate(&json!({"spec": {"ratio": 2000000, "name": "a", "tags": ["a", "b", "c"]}}))
        ),
        vec![
            "spec.name: Invalid value: \"a\": spec.name in body should be at least 2 chars long",
            "spec.ratio: Invalid value: 2000000: spec.ratio in body should be less than or equal to 1e+06",
            "spec.tags: Too many: 3: must have at most 2 items",
        ]
    );
    assert_eq!(
        messages(&s.validate(&json!({"spec": {"labels": {"a": 1}}}))),
        vec![
            "spec.labels.a: Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\""
        ]
    );
}

#[test]
fn formats_nullable_and_nested_paths() {
    let s = spec_schema(json!({
        "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "maybe": {"type": "string", "nullable": true},
        "big": {"type": "integer", "format": "int64"},
        "items": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}
        }}}
    }));
    assert!(s.validate(&json!({"spec": {"when": "2024-01-02T03:04:05Z", "id": "123e4567-e89b-12d3-a456-426614174000",
        "maybe": null, "big": 9007199254740993_i64, "items": [{"name": "a"}]}})).is_empty());
    assert_eq!(
        messages(&s.validate(
            &json!({"spec": {"when": "yesterday", "id": "nope", "items": [{"name": "a"}, {}]}})
        )),
        vec![
            "spec.id: Invalid value: \"nope\": spec.id in body must be of type uuid: \"nope\"",
            "spec.items[1].name: Required value",
            "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
        ]
    );
    // A null that is not nullable and has no default is dropped by defaulting; sent straight to
    // validation it is a type error.
    assert_eq!(
        messages(&s.validate(&json!({"spec": {"when": null}}))),
        vec![
            "spec.when: Invalid value: \"null\": spec.when in body must be of type string: \"null\""
        ]
    );
}

#[test]
fn list_types_reject_duplicates_and_report_their_type() {
    let s = spec_schema(json!({
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map",
                  "x-kubernetes-list-map-keys": ["port", "protocol"],
                  "items": {"type": "object", "required": ["port"], "properties": {
                      "port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"}
                  }}},
        "plain": {"type": "array", "items": {"type": "string"}}
    }));
    assert_eq!(
        messages(&s.validate(&json!({"spec": {
            "set": ["a", "b", "a"],
            "ports": [{"port": 80}, {"port": 80, "protocol": "UDP"}, {"port": 80, "protocol": "TCP"}],
            "plain": ["x", "x"]
        }}))),
        vec![
            "spec.ports[2]: Duplicate value: map[string]interface {}{\"port\":80, \"protocol\":\"TCP\"}",
            "spec.set[2]: Duplicate value: \"a\"",
        ]
    );
    assert_eq!(s.list_type(&["spec", "set"]), Some(ListType::Set));
    assert_eq!(
        s.list_type(&["spec", "ports"]),
        Some(ListType::Map(vec!["port".into(), "protocol".into()]))
    );
    assert_eq!(s.list_type(&["spec", "plain"]), Some(ListType::Atomic));
    assert_eq!(s.list_type(&["spec"]), None);
    assert_eq!(s.list_type(&["spec", "missing"]), None);
    // The same answers through the patch module's trait, as server-side apply asks them.
    let shape: &dyn crate::patch::FieldShape = &s;
    assert_eq!(shape.list_type(&["spec", "set"]), Some(ListType::Set));
}

#[test]
fn junctors_validate_values() {
    let s = spec_schema(json!({
        "a": {"type": "string", "oneOf": [{"pattern": "^x"}, {"pattern": "y$"}]},
        "b": {"type": "string", "not": {"enum": ["forbidden"]}},
        "c": {"type": "object", "properties": {"p": {"type": "string"}, "q": {"type": "string"}},
              "anyOf": [{"required": ["p"]}, {"required": ["q"]}]},
        "d": {"type": "integer", "allOf": [{"minimum": 1}, {"maximum": 3}]}
    }));
    assert!(
        s.validate(&json!({"spec": {"a": "xa", "b": "ok", "c": {"q": "1"}, "d": 2}}))
            .is_empty()
    );
    assert_eq!(
        messages(&s.validate(&json!({"spec": {"a": "xy", "b": "forbidden", "c": {}, "d": 5}}))),
        vec![
            "<nil>: Invalid value: \"\": \"spec.a\" must validate one and only one schema (oneOf). Found 2 valid alternatives",
            "<nil>: Invalid value: \"\": \"spec.b\" must not validate the schema (not)",
            "<nil>: Invalid value: \"\": \"spec.c\" must validate at least one schema (anyOf)",
            "spec.c.p: Required value",
            "spec.d: Invalid value: 5: spec.d in body should be less than or equal to 3",
            "<nil>: Invalid value: \"\": \"spec.d\" must validate all the schemas (allOf)",
        ]
    );
}

#[test]
fn embedded_resources_need_api_version_and_kind() {
    let s = spec_schema(json!({
        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}
    }));
    assert!(
        s.validate(&json!({"spec": {"template": {"apiVersion": "v1", "kind": "Pod", "spec": {}}}}))
            .is_empty()
    );
    assert_eq!(
        messages(&s.validate(&json!({"spec": {"template": {"spec": {}}}}))),
        vec![
            "spec.template.apiVersion: Required value: must not be empty",
            "spec.template.kind: Required value: must not be empty"
        ]
    );
}

#[test]
fn from_crd_compiles_every_version_and_roots_errors_at_the_version() {
    let crd = json!({"spec": {"versions": [
        {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}},
        {"name": "v2", "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {}}}}},
        {"name": "v3"}
    ]}});
    let err = StructuralSchema::from_crd(&crd).unwrap_err();
    assert_eq!(
        messages(err.field_errors()),
        vec![
            "spec.versions[1].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
            "spec.versions[2].schema.openAPIV3Schema: Required value: schemas are required",
        ]
    );
    let ok = StructuralSchema::from_crd(&json!({"spec": {"versions": [
        {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}}
    ]}}))
    .unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].0, "v1");
}

#[test]
fn updates_ratchet_unchanged_invalid_values() {
    let s = spec_schema(json!({
        "replicas": {"type": "integer", "minimum": 0},
        "name": {"type": "string", "maxLength": 3}
    }));
    // Stored before the schema got stricter.
    let old = json!({"spec": {"replicas": -1, "name": "long-name"}});
    assert_eq!(s.validate(&old).len(), 2);
    // Touching another field keeps the old values acceptable...
    let mut new = old.clone();
    new["metadata"] = json!({"labels": {"a": "b"}});
    assert!(s.validate_update(&new, &old).is_empty());
    // ...but a changed value is validated.
    new["spec"]["replicas"] = json!(-2);
    assert_eq!(
        messages(&s.validate_update(&new, &old)),
        vec![
            "spec.replicas: Invalid value: -2: spec.replicas in body should be greater than or equal to 0"
        ]
    );
}
