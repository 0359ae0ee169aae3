//! `x-kubernetes-validations`: CEL rules compiled when the CRD is written and evaluated on every
//! custom-resource write, with `self` bound to the value at the rule's place and, for transition
//! rules, `oldSelf` bound to the old object's value at the same place.
//!
//! The CEL engine is the `cel` crate (cel-rust), with its string and list extension libraries.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use cel::IdedExpr;
use cel::common::ast::{EntryExpr, Expr, IdedEntryExpr};
use serde_json::Value;

use super::node::{JsonType, Node};
use super::{FieldError, FieldErrorKind};

/// One compiled rule.
#[derive(Clone)]
pub(crate) struct CompiledRule {
    pub rule: String,
    program: Arc<cel::Program>,
    message: Option<String>,
    message_expression: Option<Arc<cel::Program>>,
    reason: FieldErrorKind,
    field_path: Option<String>,
    /// A transition rule (it uses `oldSelf`): skipped unless there is an old value.
    pub uses_old_self: bool,
    /// `optionalOldSelf: true`: the transition rule also runs without an old value, with
    /// `oldSelf` an optional (`oldSelf.hasValue()`, `oldSelf.orValue(x)`).
    optional_old_self: bool,
}

impl std::fmt::Debug for CompiledRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledRule")
            .field("rule", &self.rule)
            .finish()
    }
}

fn env() -> &'static Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        // The extensions only fail when registered twice; this environment is built once.
        let _ = env.add_extension(cel::extensions::strings);
        let _ = env.add_extension(cel::extensions::lists);
        Arc::new(env)
    })
}

/// Identifiers a rule may use besides its comprehension variables: the bound values and the
/// type names CEL knows.
const DECLARED: &[&str] = &[
    "self",
    "oldSelf",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
];

fn compile(source: &str) -> Result<cel::Program, String> {
    let program = env().compile(source).map_err(|e| e.to_string())?;
    let mut free = BTreeSet::new();
    free_identifiers(program.expression(), &mut Vec::new(), &mut free);
    match free
        .into_iter()
        .find(|name| !DECLARED.contains(&name.as_str()))
    {
        Some(name) => Err(format!("ERROR: undeclared reference to '{name}'")),
        None => Ok(program),
    }
}

/// Collects the identifiers of `e` not bound by an enclosing comprehension (`all`, `exists`, `map`...).
fn free_identifiers<'a>(e: &'a IdedExpr, bound: &mut Vec<&'a str>, out: &mut BTreeSet<String>) {
    match &e.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(&name.as_str()) {
                out.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_identifiers(target, bound, out);
            }
            for arg in &call.args {
                free_identifiers(arg, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            free_identifiers(&c.iter_range, bound, out);
            free_identifiers(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(&c.iter_var);
            if let Some(v2) = &c.iter_var2 {
                bound.push(v2);
            }
            bound.push(&c.accu_var);
            free_identifiers(&c.loop_cond, bound, out);
            free_identifiers(&c.loop_step, bound, out);
            free_identifiers(&c.result, bound, out);
            bound.truncate(depth);
        }
        Expr::List(list) => {
            for el in &list.elements {
                free_identifiers(el, bound, out);
            }
        }
        Expr::Map(map) => entries_free(&map.entries, bound, out),
        Expr::Struct(st) => entries_free(&st.entries, bound, out),
        Expr::Select(sel) => free_identifiers(&sel.operand, bound, out),
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entries_free<'a>(
    entries: &'a [IdedEntryExpr],
    bound: &mut Vec<&'a str>,
    out: &mut BTreeSet<String>,
) {
    for entry in entries {
        match &entry.expr {
            EntryExpr::MapEntry(m) => {
                free_identifiers(&m.key, bound, out);
                free_identifiers(&m.value, bound, out);
            }
            EntryExpr::StructField(f) => free_identifiers(&f.value, bound, out),
        }
    }
}

/// Compiles the rules of one schema node; problems are reported as CRD field errors at `path`.
pub(crate) fn compile_rules(
    raw: &Value,
    path: &str,
    errors: &mut Vec<FieldError>,
) -> Vec<CompiledRule> {
    let Some(list) = raw.as_array() else {
        errors.push(FieldError::new(
            path,
            FieldErrorKind::Invalid,
            Some(raw.clone()),
            "must be an array",
        ));
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let item_path = format!("{path}[{i}]");
        let Some(obj) = item.as_object() else {
            errors.push(FieldError::new(
                &item_path,
                FieldErrorKind::Invalid,
                Some(item.clone()),
                "must be an object",
            ));
            continue;
        };
        let rule = match obj.get("rule").and_then(Value::as_str) {
            Some(r) if !r.trim().is_empty() => r.to_string(),
            _ => {
                errors.push(FieldError::new(
                    &format!("{item_path}.rule"),
                    FieldErrorKind::Required,
                    None,
                    "",
                ));
                continue;
            }
        };
        let program = match compile(&rule) {
            Ok(p) => p,
            Err(e) => {
                errors.push(FieldError::new(
                    &format!("{item_path}.rule"),
                    FieldErrorKind::Invalid,
                    Some(Value::String(rule.clone())),
                    format!("compilation failed: {e}"),
                ));
                continue;
            }
        };
        let message = obj
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(m) = &message
            && (m.trim().is_empty() || m.contains('\n'))
        {
            errors.push(FieldError::new(
                &format!("{item_path}.message"),
                FieldErrorKind::Invalid,
                Some(Value::String(m.clone())),
                "message must be non-empty and must not contain line breaks",
            ));
        }
        let message_expression = match obj.get("messageExpression").and_then(Value::as_str) {
            Some(src) => match compile(src) {
                Ok(p) => Some(Arc::new(p)),
                Err(e) => {
                    errors.push(FieldError::new(
                        &format!("{item_path}.messageExpression"),
                        FieldErrorKind::Invalid,
                        Some(Value::String(src.to_string())),
                        format!("messageExpression compilation failed: {e}"),
                    ));
                    None
                }
            },
            None => None,
        };
        let reason = match obj.get("reason").and_then(Value::as_str) {
            None | Some("FieldValueInvalid") => FieldErrorKind::Invalid,
            Some("FieldValueForbidden") => FieldErrorKind::Forbidden,
            Some("FieldValueRequired") => FieldErrorKind::Required,
            Some("FieldValueDuplicate") => FieldErrorKind::Duplicate,
            Some(other) => {
                errors.push(FieldError::not_supported(
                    &format!("{item_path}.reason"),
                    Value::String(other.to_string()),
                    &[
                        "FieldValueInvalid",
                        "FieldValueForbidden",
                        "FieldValueRequired",
                        "FieldValueDuplicate",
                    ],
                ));
                FieldErrorKind::Invalid
            }
        };
        let field_path = obj
            .get("fieldPath")
            .and_then(Value::as_str)
            .map(str::to_string);
        if let Some(fp) = &field_path
            && !fp.is_empty()
            && !fp.starts_with('.')
            && !fp.starts_with('[')
        {
            errors.push(FieldError::new(
                &format!("{item_path}.fieldPath"),
                FieldErrorKind::Invalid,
                Some(Value::String(fp.clone())),
                "fieldPath must be a valid path: must start with '.' or '['",
            ));
        }
        let uses_old_self = program.references().has_variable("oldSelf");
        let optional_old_self = obj
            .get("optionalOldSelf")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        if optional_old_self && !uses_old_self {
            errors.push(FieldError::new(
                &format!("{item_path}.optionalOldSelf"),
                FieldErrorKind::Invalid,
                Some(Value::Bool(true)),
                "may not be set if rule does not use oldSelf",
            ));
        }
        out.push(CompiledRule {
            rule,
            program: Arc::new(program),
            message,
            message_expression,
            reason,
            field_path,
            uses_old_self,
            optional_old_self,
        });
    }
    out
}

/// Converts a JSON value to a CEL value, typed by the schema where it says more than JSON does
/// (integers stay integers, numbers become doubles).
fn to_cel(node: Option<&Node>, v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Number(n) => {
            let wants_double = node.is_some_and(|n| n.ty == Some(JsonType::Number));
            match (wants_double, n.as_i64(), n.as_u64()) {
                (false, Some(i), _) => cel::Value::Int(i),
                (false, None, Some(u)) => cel::Value::UInt(u),
                _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            }
        }
        Value::Array(items) => {
            let item_node = node.and_then(|n| n.items.as_deref());
            cel::Value::List(Arc::new(
                items.iter().map(|i| to_cel(item_node, i)).collect(),
            ))
        }
        Value::Object(map) => {
            let converted: HashMap<String, cel::Value> = map
                .iter()
                .map(|(k, val)| (k.clone(), to_cel(node.and_then(|n| n.child(k)), val)))
                .collect();
            cel::Value::from(converted)
        }
    }
}

/// The schema type of the node a rule sits on, shown as the invalid value of a failed rule
/// (empty for int-or-string and untyped preserve-unknown-fields nodes).
fn schema_type_name(node: &Node) -> &'static str {
    node.ty.map(JsonType::name).unwrap_or("")
}

fn join_path(base: &str, suffix: &str) -> String {
    if base.is_empty() {
        suffix.trim_start_matches('.').to_string()
    } else {
        format!("{base}{suffix}")
    }
}

/// Evaluates the rules of `node` against `value` at `path`.
pub(crate) fn evaluate(
    node: &Node,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if node.rules.is_empty() {
        return;
    }
    let self_value = to_cel(Some(node), value);
    let old_value = old.map(|o| to_cel(Some(node), o));
    for rule in &node.rules {
        if rule.uses_old_self && old_value.is_none() && !rule.optional_old_self {
            continue;
        }
        let mut ctx = cel::Context::with_env(Arc::clone(env()));
        ctx.add_variable_from_value("self", self_value.clone());
        if rule.optional_old_self {
            let optional = match &old_value {
                Some(o) => cel::objects::OptionalValue::of(o.clone()),
                None => cel::objects::OptionalValue::none(),
            };
            ctx.add_variable_from_value("oldSelf", cel::Value::Opaque(Arc::new(optional)));
        } else if let Some(o) = &old_value {
            ctx.add_variable_from_value("oldSelf", o.clone());
        }
        let error_path = match &rule.field_path {
            Some(fp) if !fp.is_empty() => join_path(path, fp),
            _ => path.to_string(),
        };
        let type_name = Value::String(schema_type_name(node).to_string());
        match rule.program.execute(&ctx) {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => {
                let message = rule
                    .message_expression
                    .as_ref()
                    .and_then(|p| match p.execute(&ctx) {
                        Ok(cel::Value::String(s)) if !s.trim().is_empty() => Some(s.to_string()),
                        _ => None,
                    })
                    .or_else(|| rule.message.clone())
                    .unwrap_or_else(|| format!("failed rule: {}", rule.rule));
                // As the real server: Forbidden and Required carry no value, Duplicate no message.
                let (value, message) = match rule.reason {
                    FieldErrorKind::Forbidden | FieldErrorKind::Required => (None, message),
                    FieldErrorKind::Duplicate => (Some(type_name), String::new()),
                    _ => (Some(type_name), message),
                };
                errors.push(FieldError::new(
                    &error_path,
                    rule.reason.clone(),
                    value,
                    message,
                ));
            }
            Ok(other) => errors.push(FieldError::new(
                &error_path,
                FieldErrorKind::Invalid,
                Some(type_name),
                format!(
                    "rule did not evaluate to a boolean (got {}): {}",
                    cel_value_kind(&other),
                    rule.rule
                ),
            )),
            // Runtime errors are reported at the rule's node, as the real server words them.
            Err(e) => errors.push(FieldError::new(
                path,
                FieldErrorKind::Invalid,
                Some(type_name),
                runtime_error_message(&e, rule),
            )),
        }
    }
}

fn cel_value_kind(v: &cel::Value) -> String {
    format!("{:?}", v.type_of())
}

/// `no such key: x evaluating rule: <message or rule>`, and the overload wording for type
/// mismatches the compiler would have caught on a typed schema.
fn runtime_error_message(e: &cel::ExecutionError, rule: &CompiledRule) -> String {
    let rule_text = rule
        .message
        .as_deref()
        .unwrap_or(&rule.rule)
        .trim()
        .to_string();
    match e {
        cel::ExecutionError::NoSuchOverload(_)
        | cel::ExecutionError::UnsupportedBinaryOperator(..) => format!(
            "'no such overload': call arguments did not match a supported operator, function or macro signature for rule: {rule_text}"
        ),
        cel::ExecutionError::NoSuchKey(k) => {
            format!("no such key: {k} evaluating rule: {rule_text}")
        }
        cel::ExecutionError::IndexOutOfBounds(i) => {
            format!(
                "index out of bounds: {} evaluating rule: {rule_text}",
                cel_value_text(i)
            )
        }
        cel::ExecutionError::DivisionByZero(_) => {
            format!("division by zero evaluating rule: {rule_text}")
        }
        cel::ExecutionError::RemainderByZero(_) => {
            format!("modulus by zero evaluating rule: {rule_text}")
        }
        cel::ExecutionError::Overflow(..) => {
            format!("integer overflow evaluating rule: {rule_text}")
        }
        other => format!("{other} evaluating rule: {rule_text}"),
    }
}

fn cel_value_text(v: &cel::Value) -> String {
    match v {
        cel::Value::Int(i) => i.to_string(),
        cel::Value::UInt(u) => u.to_string(),
        other => format!("{other:?}"),
    }
}
