//! x-kubernetes-validations rules.

use super::*;

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
