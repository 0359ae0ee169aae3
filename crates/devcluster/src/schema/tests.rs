//! Validation, CEL and reference-CRD tests of the structural schema.

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

// ---- from_openapi ----------------------------------------------------------------------------

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

// ---- validation ------------------------------------------------------------------------------

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

// ---- CEL ---------------------------------------------------------------------------------------

fn immutable_vct_schema() -> StructuralSchema {
    spec_schema_with_rules(json!([{
        "message": "volumeClaimTemplates is immutable",
        "rule": "has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)"
    }]))
}

fn spec_schema_with_rules(rules: Value) -> StructuralSchema {
    schema(json!({
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "properties": {
                "replicas": {"type": "integer"},
                "name": {"type": "string"},
                "volumeClaimTemplates": {"type": "array", "items": {"type": "object", "properties": {
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
                    "size": {"type": "string"}
                }}}
            },
            "x-kubernetes-validations": rules
        }}
    }))
}

#[test]
fn the_sandbox_volume_claim_templates_rule_is_enforced_on_update_only() {
    let s = immutable_vct_schema();
    let with =
        json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "size": "1Gi"}]}});
    let changed =
        json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"}, "size": "2Gi"}]}});
    let without = json!({"spec": {"replicas": 1}});
    // Create: transition rules are skipped.
    assert!(s.validate(&with).is_empty());
    // Unchanged: passes.
    assert!(s.validate_update(&with, &with).is_empty());
    assert!(
        s.validate_update(&without, &json!({"spec": {"replicas": 2}}))
            .is_empty()
    );
    // Changed, added or removed: fails with the rule's message on `spec`.
    for (new, old) in [(&changed, &with), (&with, &without), (&without, &with)] {
        let errs = s.validate_update(new, old);
        assert_eq!(
            messages(&errs),
            vec!["spec: Invalid value: \"object\": volumeClaimTemplates is immutable"],
            "{new} <- {old}"
        );
        assert_eq!(errs[0].reason(), "FieldValueInvalid");
    }
    // No old spec at all: the transition rule is skipped.
    assert!(
        s.validate_update(&with, &json!({"metadata": {}}))
            .is_empty()
    );
}

#[test]
fn cel_rules_messages_reasons_and_field_paths() {
    let s = spec_schema_with_rules(json!([
        {"rule": "self.replicas >= 0"},
        {"rule": "size(self.name) < 4", "messageExpression": "'name too long: ' + self.name", "fieldPath": ".name"},
        {"rule": "self.name.startsWith('a')", "message": "must start with a", "reason": "FieldValueForbidden"}
    ]));
    assert!(
        s.validate(&json!({"spec": {"replicas": 1, "name": "abc"}}))
            .is_empty()
    );
    let errs = s.validate(&json!({"spec": {"replicas": -1, "name": "bcdef"}}));
    assert_eq!(
        messages(&errs),
        vec![
            "spec: Invalid value: \"object\": failed rule: self.replicas >= 0",
            "spec.name: Invalid value: \"object\": name too long: bcdef",
            "spec: Forbidden: must start with a",
        ]
    );
    assert_eq!(errs[2].reason(), "FieldValueForbidden");
}

#[test]
fn rule_reasons_shape_the_error_like_the_real_server() {
    let s = schema(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
                     "x-kubernetes-validations": [{"rule": "self != 0", "message": "port must be set"}]},
            "names": {"type": "array", "items": {"type": "string"},
                      "x-kubernetes-validations": [{"rule": "self.all(n, self.exists_one(m, m == n))", "message": "ignored", "reason": "FieldValueDuplicate"}]},
            "owner": {"type": "string", "x-kubernetes-validations": [{"rule": "self != ''", "message": "owner is needed", "reason": "FieldValueRequired"}]}
        }}}
    }));
    assert!(
        s.validate(&json!({"spec": {"port": 8080, "names": ["a", "b"], "owner": "me"}}))
            .is_empty()
    );
    let errs = s.validate(&json!({"spec": {"port": 0, "names": ["a", "a"], "owner": ""}}));
    assert_eq!(
        messages(&errs),
        vec![
            "spec.names: Duplicate value: \"array\"",
            "spec.owner: Required value: owner is needed",
            "spec.port: Invalid value: \"\": port must be set",
        ]
    );
    assert_eq!(errs[0].reason(), "FieldValueDuplicate");
    assert_eq!(errs[1].reason(), "FieldValueRequired");
}

#[test]
fn a_rule_that_does_not_compile_rejects_the_crd() {
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self.x == "}]}}
    }))
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: \"self.x == \": compilation failed"),
        "{text}"
    );
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
            {"rule": "self.items.all(i, i.size > limit)"}
        ]}}
    }))
    .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("compilation failed: ERROR: undeclared reference to 'limit'"),
        "{err}"
    );
    assert!(
        StructuralSchema::from_openapi(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
                {"rule": "self.all(k, self[k].all(i, type(i) == string || [1].exists(j, j == i)))"}
            ]}}
        }))
        .is_ok()
    );
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "true", "reason": "Nope"}]}}
    }))
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("x-kubernetes-validations[0].reason: Unsupported value: \"Nope\""),
        "{err}"
    );
}

#[test]
fn a_rule_that_errors_at_runtime_is_an_invalid_value_not_a_panic() {
    let s = spec_schema_with_rules(json!([
        {"rule": "self.missing == 1"},
        {"rule": "self.volumeClaimTemplates[3].size == '1'", "message": "fourth claim is 1", "fieldPath": ".volumeClaimTemplates"}
    ]));
    let errs = s.validate(&json!({"spec": {"volumeClaimTemplates": []}}));
    assert_eq!(
        messages(&errs),
        vec![
            "spec: Invalid value: \"object\": no such key: missing evaluating rule: self.missing == 1",
            "spec: Invalid value: \"object\": index out of bounds: 3 evaluating rule: fourth claim is 1",
        ]
    );
}

#[test]
fn optional_old_self_rules_also_run_on_create() {
    let s = schema(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}},
            "x-kubernetes-validations": [{
                "rule": "oldSelf.hasValue() ? self.replicas >= oldSelf.value().replicas : self.replicas <= 3",
                "message": "replicas start at most 3 and never shrink",
                "optionalOldSelf": true
            }]
        }}
    }));
    assert!(s.validate(&json!({"spec": {"replicas": 2}})).is_empty());
    assert_eq!(s.validate(&json!({"spec": {"replicas": 5}})).len(), 1);
    assert!(
        s.validate_update(
            &json!({"spec": {"replicas": 5}}),
            &json!({"spec": {"replicas": 2}})
        )
        .is_empty()
    );
    assert_eq!(
        messages(&s.validate_update(
            &json!({"spec": {"replicas": 1}}),
            &json!({"spec": {"replicas": 2}})
        )),
        vec!["spec: Invalid value: \"object\": replicas start at most 3 and never shrink"]
    );
    let err = StructuralSchema::from_openapi(&json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "x-kubernetes-validations": [{"rule": "true", "optionalOldSelf": true}]}}
    }))
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("x-kubernetes-validations[0].optionalOldSelf: Invalid value: true"),
        "{err}"
    );
}

#[test]
fn list_map_items_correlate_with_old_items_by_key() {
    let s = schema(json!({
        "type": "object",
        "properties": {"spec": {"type": "object", "properties": {
            "items": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"},
                    "value": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "value is immutable"}]}
                }}}
        }}}
    }));
    let old =
        json!({"spec": {"items": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]}});
    let reordered = json!({"spec": {"items": [{"name": "b", "value": "2"}, {"name": "a", "value": "1"}, {"name": "c", "value": "3"}]}});
    assert!(s.validate_update(&reordered, &old).is_empty());
    let changed = json!({"spec": {"items": [{"name": "b", "value": "9"}]}});
    assert_eq!(
        messages(&s.validate_update(&changed, &old)),
        vec!["spec.items[0].value: Invalid value: \"string\": value is immutable"]
    );
}

// ---- reference CRDs and examples -----------------------------------------------------------------

fn spec_dir() -> PathBuf {
    let mut candidates = Vec::new();
    if let Ok(dir) = std::env::var("AGENT_SANDBOX_SPEC_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    candidates.push(manifest.join("../../../shared/spec"));
    candidates.push(manifest.join("../../../../shared/spec"));
    for c in &candidates {
        if c.join("reference-crds").is_dir() {
            return c.clone();
        }
    }
    panic!("spec directory not found (set AGENT_SANDBOX_SPEC_DIR); looked in {candidates:?}");
}

fn load_yaml_docs(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|doc| {
            let v: Value = serde::Deserialize::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            (!v.is_null()).then_some(v)
        })
        .collect()
}

fn reference_schema(kind: &str) -> Option<StructuralSchema> {
    let file = match kind {
        "Sandbox" => "agents.x-k8s.io_sandboxes.yaml",
        "SandboxClaim" => "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        "SandboxTemplate" => "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
        "SandboxWarmPool" => "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
        _ => return None,
    };
    let crd = load_yaml_docs(&spec_dir().join("reference-crds").join(file)).remove(0);
    let versions = crd["spec"]["versions"].as_array().unwrap();
    let (i, version) = versions
        .iter()
        .enumerate()
        .find(|(_, v)| v["name"] == "v1beta1")
        .unwrap();
    Some(
        StructuralSchema::from_openapi_at(
            &version["schema"]["openAPIV3Schema"],
            &format!("spec.versions[{i}].schema.openAPIV3Schema"),
        )
        .unwrap_or_else(|e| panic!("{file}: {e}")),
    )
}

fn admit(s: &StructuralSchema, mut obj: Value) -> (Value, Vec<super::FieldError>) {
    let errs = s.admit(&mut obj, None);
    (obj, errs)
}

#[test]
fn every_version_of_every_reference_crd_compiles() {
    let mut compiled = 0;
    for entry in std::fs::read_dir(spec_dir().join("reference-crds")).unwrap() {
        let path = entry.unwrap().path();
        for crd in load_yaml_docs(&path) {
            for (i, version) in crd["spec"]["versions"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                if let Err(e) =
                    StructuralSchema::from_openapi(&version["schema"]["openAPIV3Schema"])
                {
                    panic!("{} versions[{i}]: {e}", path.display());
                }
                compiled += 1;
            }
        }
    }
    assert_eq!(compiled, 8, "four CRDs with two versions each");
}

#[test]
fn every_example_of_our_kinds_validates_clean_after_defaulting() {
    let dir = spec_dir().join("examples");
    let mut checked = 0;
    let mut entries: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        for doc in load_yaml_docs(&path) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let Some(s) = reference_schema(&kind) else {
                continue;
            };
            let (_, errs) = admit(&s, doc);
            assert!(
                errs.is_empty(),
                "{}: {kind}: {:?}",
                path.display(),
                messages(&errs)
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} examples of our kinds found");
}

#[test]
fn sandbox_defaults_and_pruning_follow_the_reference_crd() {
    let s = reference_schema("Sandbox").unwrap();
    let (obj, errs) = admit(
        &s,
        json!({
            "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
            "metadata": {"name": "a"},
            "spec": {
                "unknownField": 1,
                "podTemplate": {
                    "metadata": {"labels": {"a": "b"}, "name": "dropped"},
                    "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]}
                }
            }
        }),
    );
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(obj["spec"]["operatingMode"], "Running");
    assert!(obj["spec"].get("unknownField").is_none());
    assert!(obj["spec"]["podTemplate"]["metadata"].get("name").is_none());
    assert_eq!(
        obj["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );
}

#[test]
fn broken_sandboxes_fail_at_the_right_path() {
    let s = reference_schema("Sandbox").unwrap();
    let cases = [
        (json!({"spec": {}}), "spec.podTemplate: Required value"),
        (
            json!({"spec": {"operatingMode": "Paused", "podTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
            "spec.operatingMode: Unsupported value: \"Paused\": supported values: \"Running\", \"Suspended\"",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {}}}}),
            "spec.podTemplate.spec.containers: Required value",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {"containers": [{"image": "x"}]}}}}),
            "spec.podTemplate.spec.containers[0].name: Required value",
        ),
        (
            json!({"spec": {"podTemplate": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": "eighty"}]}]}}}}),
            "spec.podTemplate.spec.containers[0].ports[0].containerPort: Invalid value: \"string\": spec.podTemplate.spec.containers[0].ports[0].containerPort in body must be of type integer: \"string\"",
        ),
        (
            json!({"spec": {"shutdownTime": "tomorrow", "podTemplate": {"spec": {"containers": [{"name": "c"}]}}}}),
            "spec.shutdownTime: Invalid value: \"tomorrow\": spec.shutdownTime in body must be of type date-time: \"tomorrow\"",
        ),
    ];
    for (obj, expected) in cases {
        let (_, errs) = admit(&s, obj.clone());
        assert!(
            messages(&errs).iter().any(|m| m == expected),
            "{obj}: want {expected:?}, got {:?}",
            messages(&errs)
        );
    }
}

#[test]
fn broken_warm_pools_claims_and_templates_fail_at_the_right_path() {
    let pool = reference_schema("SandboxWarmPool").unwrap();
    let (_, errs) = admit(
        &pool,
        json!({"spec": {"replicas": "three", "sandboxTemplateRef": {"name": "t"}}}),
    );
    assert!(
        messages(&errs).contains(&"spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"".to_string()),
        "{errs:?}"
    );
    let (_, errs) = admit(
        &pool,
        json!({"spec": {"replicas": -1, "sandboxTemplateRef": {"name": "t"}}}),
    );
    assert_eq!(
        messages(&errs),
        vec![
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0"
        ]
    );
    let (defaulted, errs) = admit(
        &pool,
        json!({"spec": {"sandboxTemplateRef": {"name": "t"}}}),
    );
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(defaulted["spec"]["replicas"], 1);
    let claim = reference_schema("SandboxClaim").unwrap();
    let (_, errs) = admit(&claim, json!({"spec": {}}));
    assert_eq!(messages(&errs), vec!["spec.warmPoolRef: Required value"]);
    let template = reference_schema("SandboxTemplate").unwrap();
    let (_, errs) = admit(
        &template,
        json!({"spec": {"envVarsInjectionPolicy": "Sometimes", "podTemplate": {"spec": {"containers": []}}}}),
    );
    assert!(
        messages(&errs).iter().any(|m| m.starts_with("spec.envVarsInjectionPolicy: Unsupported value: \"Sometimes\"")),
        "{errs:?}"
    );
}

#[test]
fn the_reference_sandbox_rule_blocks_volume_claim_template_changes() {
    let s = reference_schema("Sandbox").unwrap();
    let base = json!({"spec": {
        "podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
    }});
    let (old, errs) = admit(&s, base.clone());
    assert!(errs.is_empty(), "{errs:?}");
    let mut changed = base.clone();
    changed["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    s.prune(&mut changed);
    s.apply_defaults(&mut changed);
    assert_eq!(
        messages(&s.validate_update(&changed, &old)),
        vec!["spec: Invalid value: \"object\": volumeClaimTemplates is immutable"]
    );
    let mut replicas_only = old.clone();
    replicas_only["spec"]["replicas"] = json!(0);
    assert!(s.validate_update(&replicas_only, &old).is_empty());
}

// ---- robustness ----------------------------------------------------------------------------------

/// A small deterministic generator (xorshift), so the garbage below is the same on every run.
struct Garbage(u64);

impl Garbage {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }

    fn text(&mut self, alphabet: &[&str], max: u64) -> String {
        let n = self.next() % max;
        (0..n).map(|_| *self.pick(alphabet)).collect()
    }

    fn value(&mut self, depth: u32) -> Value {
        let keys = [
            "spec",
            "podTemplate",
            "containers",
            "name",
            "replicas",
            "operatingMode",
            "volumeClaimTemplates",
            "metadata",
            "ports",
            "é",
        ];
        match self.next() % if depth == 0 { 5 } else { 7 } {
            0 => Value::Null,
            1 => json!(self.next().is_multiple_of(3)),
            2 => json!((self.next() % 2000) as i64 - 1000),
            3 => json!(1.5),
            4 => json!(self.text(&["a", "Running", "é", "-", "1"], 6)),
            5 => Value::Array(
                (0..self.next() % 3)
                    .map(|_| self.value(depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..self.next() % 4)
                    .map(|_| (self.pick(&keys).to_string(), self.value(depth - 1)))
                    .collect(),
            ),
        }
    }
}

#[test]
fn garbage_objects_and_expressions_never_panic() {
    let s = reference_schema("Sandbox").unwrap();
    let mut g = Garbage(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2000 {
        let mut obj = json!({"spec": g.value(4), "status": g.value(3)});
        if g.next().is_multiple_of(2) {
            obj["spec"] = json!({"podTemplate": {"spec": {"containers": [g.value(3)]}}, "volumeClaimTemplates": g.value(2)});
        }
        let old = obj.clone();
        s.prune(&mut obj);
        s.apply_defaults(&mut obj);
        let _ = s.validate(&obj);
        let _ = s.validate_update(&obj, &old);
        let _ = s.list_type(&["spec", "podTemplate", "spec", "containers"]);
    }
    let alphabet = [
        ".", "..", "[", "]", "?(", ")", "@", "$", "'", "\"", "*", ":", "-1", "0", "a", "é", "{",
        "}", "==", "\\", ",", " ", "range ", "end",
    ];
    for _ in 0..5000 {
        let expr = g.text(&alphabet, 12);
        let _ = super::jsonpath::eval(&expr, &json!({"a": [{"b": 1}], "é": {"x": "y"}}));
        let _ = super::jsonpath::render(&expr, &json!({"a": [1, 2]}));
        let ts = g.text(
            &[
                "2024", "-", "01", "T", ":", "Z", "+", "é", "0", "12", ".", " ",
            ],
            12,
        );
        let _ = super::timefmt::parse_date_time(&ts);
        let _ = super::timefmt::is_date_time(&ts);
    }
}

#[test]
fn causes_and_aggregate_messages_match_a_422_status() {
    let s = spec_schema(json!({"replicas": {"type": "integer", "minimum": 0}}));
    let errs = s.validate(&json!({"spec": {"replicas": -1}}));
    assert_eq!(
        errs[0].cause(),
        json!({
            "reason": "FieldValueInvalid",
            "message": "Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
            "field": "spec.replicas"
        })
    );
    let twice = vec![errs[0].clone(), errs[0].clone()];
    assert_eq!(super::join_errors(&twice), errs[0].to_string());
    let two = vec![
        errs[0].clone(),
        super::FieldError::new("spec.x", FieldErrorKind::Required, None, ""),
    ];
    assert_eq!(
        super::join_errors(&two),
        format!("[{}, spec.x: Required value]", errs[0])
    );
}

#[test]
fn schemas_and_columns_can_be_shared_across_server_tasks() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<StructuralSchema>();
    shareable::<super::table::Column>();
    shareable::<super::SchemaError>();
}
