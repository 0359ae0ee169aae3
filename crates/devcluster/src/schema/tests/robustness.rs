//! Garbage in, no panics out; sharing across tasks.

use super::reference::{own_crds, reference_schema};
use super::*;

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
    let s = reference_schema(&own_crds(), "Sandbox").unwrap();
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
        let _ = crate::schema::jsonpath::eval(&expr, &json!({"a": [{"b": 1}], "é": {"x": "y"}}));
        let _ = crate::schema::jsonpath::render(&expr, &json!({"a": [1, 2]}));
        let ts = g.text(
            &[
                "2024", "-", "01", "T", ":", "Z", "+", "é", "0", "12", ".", " ",
            ],
            12,
        );
        let _ = crate::schema::timefmt::parse_date_time(&ts);
        let _ = crate::schema::timefmt::is_date_time(&ts);
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
    assert_eq!(crate::schema::join_errors(&twice), errs[0].to_string());
    let two = vec![
        errs[0].clone(),
        crate::schema::FieldError::new("spec.x", FieldErrorKind::Required, None, ""),
    ];
    assert_eq!(
        crate::schema::join_errors(&two),
        format!("[{}, spec.x: Required value]", errs[0])
    );
}

#[test]
fn schemas_and_columns_can_be_shared_across_server_tasks() {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    shareable::<StructuralSchema>();
    shareable::<crate::schema::table::Column>();
    shareable::<crate::schema::SchemaError>();
}

#[test]
fn common_kubernetes_rule_idioms_evaluate() {
    let rules = [
        "self.name.matches('^[a-z]+$')",
        "self.tags.all(t, t.size() < 5)",
        "size(self.tags) <= 3",
        "self.name.startsWith('ab') && self.name.endsWith('c') && self.name.contains('b')",
        "self.tags.exists(t, t == 'x') && 'y' in self.tags",
        "has(self.replicas) ? self.replicas > 0 : true",
        "self.name.lowerAscii() == self.name",
        "self.labels.all(k, k.size() > 0 && self.labels[k] != '')",
        "'team' in self.labels",
        "self.tags.filter(t, t != 'x').size() == 1",
        "self.tags.map(t, t + '!').exists(t, t == 'x!')",
        "self.tags.exists_one(t, t == 'y')",
        "self.replicas * 2 == 4 && self.replicas % 2 == 0 && double(self.replicas) == 2.0",
        "string(self.replicas) == '2' && int('3') == 3",
        "self.name.split('b').size() == 2",
        "type(self.name) == string",
    ];
    for rule in rules
        .iter()
        .map(|r| r.to_string())
        .chain(rules.iter().map(|r| format!("!({r})")))
    {
        let negated = rule.starts_with("!(");
        let s = schema(json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "name": {"type": "string"},
                "replicas": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }, "x-kubernetes-validations": [{"rule": rule}]}}
        }));
        let errs = s.validate(&json!({"spec": {"name": "abc", "replicas": 2, "tags": ["x", "y"], "labels": {"team": "a"}}}));
        assert_eq!(
            errs.len(),
            usize::from(negated),
            "{rule}: {:?}",
            messages(&errs)
        );
    }
}
