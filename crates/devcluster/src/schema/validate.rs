//! OpenAPI value validation with the messages of the real server (kube-openapi's validator as the
//! apiextensions API server converts its errors to field errors), list-type uniqueness, embedded
//! resource type meta, and CEL rules.

use std::collections::BTreeMap;

use serde_json::Value;

use super::node::{Additional, JsonType, Node};
use super::{FieldError, FieldErrorKind, cel_rules, timefmt};

/// Validates a whole object; `old` is the object being replaced on update.
pub(crate) fn validate_root(root: &Node, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut v = Validator::default();
    v.node(root, obj, old, "", true);
    v.finish()
}

/// Validates one value against one node (used for defaults at CRD time).
pub(crate) fn validate_value(
    node: &Node,
    value: &Value,
    path: &str,
    old: Option<&Value>,
) -> Vec<FieldError> {
    let mut v = Validator::default();
    v.node(node, value, old, path, false);
    v.finish()
}

/// Errors in the order the real server reports them: OpenAPI schema errors, then embedded
/// resource errors, then list-type errors, then CEL rule errors.
#[derive(Default)]
struct Validator {
    errors: Vec<FieldError>,
    embedded: Vec<FieldError>,
    list_types: Vec<FieldError>,
    cel: Vec<FieldError>,
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// [`Validator::in_body`] as a `Display`, for messages built only when a check fails.
struct InBody<'a>(&'a str);

impl std::fmt::Display for InBody<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("body")
        } else {
            write!(f, "{} in body", self.0)
        }
    }
}

/// The JSON type name of a value, as kube-openapi reports it.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Number(n) => {
            if is_integral(n) {
                "integer"
            } else {
                "number"
            }
        }
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn is_integral(n: &serde_json::Number) -> bool {
    n.is_i64()
        || n.is_u64()
        || n.as_f64()
            .is_some_and(|f| f.is_finite() && f.fract() == 0.0)
}

/// Formats a float like Go's `%v` (shortest `%g` with the exponent from precision 6).
pub(crate) fn go_float(f: f64) -> String {
    if f == 0.0 {
        return "0".to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let exp = f.abs().log10().floor() as i32;
    if (-4..6).contains(&exp) {
        let s = format!("{f}");
        return s;
    }
    let s = format!("{f:e}");
    match s.split_once('e') {
        Some((mantissa, e)) => {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

fn number_text(n: &serde_json::Number) -> String {
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => go_float(i as f64),
        (None, Some(u)) => go_float(u as f64),
        _ => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

impl Validator {
    fn finish(mut self) -> Vec<FieldError> {
        self.errors.append(&mut self.embedded);
        self.errors.append(&mut self.list_types);
        self.errors.append(&mut self.cel);
        self.errors
    }

    fn push(
        &mut self,
        path: &str,
        kind: FieldErrorKind,
        value: Option<Value>,
        message: impl Into<String>,
    ) {
        self.errors
            .push(FieldError::new(path, kind, value, message));
    }

    /// `<path> in body ...`, kube-openapi's way of naming the field in its messages.
    fn in_body(path: &str) -> String {
        InBody(path).to_string()
    }

    fn type_matches(ty: JsonType, v: &Value) -> bool {
        match (ty, v) {
            (JsonType::Object, Value::Object(_)) => true,
            (JsonType::Array, Value::Array(_)) => true,
            (JsonType::String, Value::String(_)) => true,
            (JsonType::Boolean, Value::Bool(_)) => true,
            (JsonType::Number, Value::Number(_)) => true,
            (JsonType::Integer, Value::Number(n)) => is_integral(n),
            _ => false,
        }
    }

    /// Validates `value` against `node`. Returns nothing; errors accumulate.
    fn node(
        &mut self,
        node: &Node,
        value: &Value,
        old: Option<&Value>,
        path: &str,
        is_resource_root: bool,
    ) {
        // Validation ratcheting (on by default since Kubernetes 1.30): a value an update leaves
        // unchanged is not validated again, so objects admitted under an older schema stay writable.
        if let Some(o) = old
            && json_equal(value, o)
        {
            return;
        }
        if value.is_null() {
            if node.nullable {
                return;
            }
            if let Some(ty) = node.ty {
                self.push(
                    path,
                    FieldErrorKind::TypeInvalid,
                    Some(Value::String("null".into())),
                    format!(
                        "{} must be of type {}: \"null\"",
                        Self::in_body(path),
                        ty.name()
                    ),
                );
                return;
            }
        }
        if let Some(ty) = node.ty
            && !Self::type_matches(ty, value)
        {
            let actual = type_name(value);
            self.push(
                path,
                FieldErrorKind::TypeInvalid,
                Some(Value::String(actual.into())),
                format!(
                    "{} must be of type {}: \"{actual}\"",
                    Self::in_body(path),
                    ty.name()
                ),
            );
            return;
        }

        self.junctors(node, value, path);
        self.value_checks(node, value, path);

        match value {
            Value::Object(map) => {
                for name in &node.required {
                    if !map.contains_key(name) {
                        self.push(&child_path(path, name), FieldErrorKind::Required, None, "");
                    }
                }
                if node.embedded {
                    for field in ["apiVersion", "kind"] {
                        if map
                            .get(field)
                            .and_then(Value::as_str)
                            .is_none_or(str::is_empty)
                        {
                            self.embedded.push(FieldError::new(
                                &child_path(path, field),
                                FieldErrorKind::Required,
                                None,
                                "must not be empty",
                            ));
                        }
                    }
                }
                let old_map = old.and_then(Value::as_object);
                for (key, child) in map {
                    if is_resource_root
                        && (key == "metadata" || key == "apiVersion" || key == "kind")
                    {
                        // The server validates ObjectMeta and type meta itself; the schema may only
                        // constrain metadata.name and metadata.generateName.
                        if key == "metadata"
                            && let Some(meta_node) = node.properties.get("metadata")
                            && let Value::Object(meta) = child
                        {
                            for field in ["name", "generateName"] {
                                if let (Some(n), Some(v)) =
                                    (meta_node.properties.get(field), meta.get(field))
                                {
                                    self.node(
                                        n,
                                        v,
                                        None,
                                        &child_path(&child_path(path, key), field),
                                        false,
                                    );
                                }
                            }
                        }
                        continue;
                    }
                    let child_node = match node.properties.get(key) {
                        Some(n) => Some(n),
                        None => match &node.additional {
                            Some(Additional::Schema(n)) => Some(n.as_ref()),
                            _ => None,
                        },
                    };
                    if let Some(child_node) = child_node {
                        let old_child = old_map.and_then(|m| m.get(key));
                        self.node(
                            child_node,
                            child,
                            old_child,
                            &child_path(path, key),
                            child_node.embedded,
                        );
                    }
                }
            }
            Value::Array(items) => {
                self.list_type_checks(node, items, path);
                if let Some(item_node) = &node.items {
                    let old_items = old.and_then(Value::as_array);
                    for (i, item) in items.iter().enumerate() {
                        let old_item = old_items.and_then(|o| correlate_item(node, item, o));
                        self.node(
                            item_node,
                            item,
                            old_item,
                            &format!("{path}[{i}]"),
                            item_node.embedded,
                        );
                    }
                }
            }
            _ => {}
        }

        cel_rules::evaluate(node, value, old, path, &mut self.cel);
    }

    /// String, format, number, array, enum and object-size keywords, in kube-openapi's order.
    fn value_checks(&mut self, node: &Node, value: &Value, path: &str) {
        // Written out only into the message of an error.
        let body = InBody(path);
        match value {
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(f64::NAN);
                if let Some(multiple) = &node.multiple_of {
                    let m = multiple.as_f64().unwrap_or(f64::NAN);
                    let q = x / m;
                    if m > 0.0 && (q - q.round()).abs() > 1e-9 {
                        self.push(
                            path,
                            FieldErrorKind::Invalid,
                            Some(value.clone()),
                            format!("{body} should be a multiple of {}", number_text(multiple)),
                        );
                    }
                }
                if let Some(max) = &node.maximum {
                    let m = max.as_f64().unwrap_or(f64::NAN);
                    if node.exclusive_maximum && x >= m {
                        self.push(
                            path,
                            FieldErrorKind::Invalid,
                            Some(value.clone()),
                            format!("{body} should be less than {}", number_text(max)),
                        );
                    } else if !node.exclusive_maximum && x > m {
                        self.push(
                            path,
                            FieldErrorKind::Invalid,
                            Some(value.clone()),
                            format!(
                                "{body} should be less than or equal to {}",
                                number_text(max)
                            ),
                        );
                    }
                }
                if let Some(min) = &node.minimum {
                    let m = min.as_f64().unwrap_or(f64::NAN);
                    if node.exclusive_minimum && x <= m {
                        self.push(
                            path,
                            FieldErrorKind::Invalid,
                            Some(value.clone()),
                            format!("{body} should be greater than {}", number_text(min)),
                        );
                    } else if !node.exclusive_minimum && x < m {
                        self.push(
                            path,
                            FieldErrorKind::Invalid,
                            Some(value.clone()),
                            format!(
                                "{body} should be greater than or equal to {}",
                                number_text(min)
                            ),
                        );
                    }
                }
            }
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some(max) = node.max_length
                    && len > max
                {
                    self.push(
                        path,
                        FieldErrorKind::TooLong,
                        None,
                        format!("may not be more than {max} bytes"),
                    );
                }
                if let Some(min) = node.min_length
                    && len < min
                {
                    self.push(
                        path,
                        FieldErrorKind::Invalid,
                        Some(value.clone()),
                        format!("{body} should be at least {min} chars long"),
                    );
                }
                if let Some((src, re)) = &node.pattern
                    && !re.is_match(s)
                {
                    self.push(
                        path,
                        FieldErrorKind::Invalid,
                        Some(value.clone()),
                        format!("{body} should match '{src}'"),
                    );
                }
                if let Some(format) = &node.format
                    && !string_format_ok(format, s)
                {
                    self.push(
                        path,
                        FieldErrorKind::TypeInvalid,
                        Some(value.clone()),
                        format!("{body} must be of type {format}: {:?}", s),
                    );
                }
            }
            Value::Array(items) => {
                let n = items.len() as u64;
                if let Some(min) = node.min_items
                    && n < min
                {
                    self.push(
                        path,
                        FieldErrorKind::Invalid,
                        Some(value.clone()),
                        format!("{body} should have at least {min} items"),
                    );
                }
                if let Some(max) = node.max_items
                    && n > max
                {
                    self.push(
                        path,
                        FieldErrorKind::TooMany,
                        Some(Value::from(n)),
                        format!("must have at most {max} items"),
                    );
                }
            }
            _ => {}
        }
        if let Some(allowed) = &node.enum_values
            && !allowed.iter().any(|a| json_equal(a, value))
        {
            let names: Vec<String> = allowed
                .iter()
                .map(|a| match a {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            self.errors
                .push(FieldError::not_supported(path, value.clone(), &refs));
        }
        if let Value::Object(map) = value {
            let n = map.len() as u64;
            if let Some(max) = node.max_properties
                && n > max
            {
                self.push(
                    path,
                    FieldErrorKind::TooMany,
                    Some(Value::from(n)),
                    format!("must have at most {max} items"),
                );
            }
            if let Some(min) = node.min_properties
                && n < min
            {
                self.push(
                    path,
                    FieldErrorKind::Invalid,
                    Some(value.clone()),
                    format!("{body} should have at least {min} properties"),
                );
            }
        }
    }

    /// allOf / anyOf / oneOf / not: value validation against sub-schemas.
    /// allOf / anyOf / oneOf / not. kube-openapi reports the composite failures as plain errors,
    /// which the apiextensions server files under the nil field path with an empty value:
    /// `<nil>: Invalid value: "": "spec.a" must validate one and only one schema (oneOf). Found none valid`.
    /// allOf also reports every branch's errors; anyOf and oneOf the errors of their best branch.
    fn junctors(&mut self, node: &Node, value: &Value, path: &str) {
        let name = format!("{path:?}");
        let composite = |message: String| {
            FieldError::new(
                "<nil>",
                FieldErrorKind::Invalid,
                Some(Value::String(String::new())),
                message,
            )
        };
        if !node.all_of.is_empty() {
            let mut validated = 0;
            for sub in &node.all_of {
                let errs = branch_errors(sub, value, path);
                if errs.is_empty() {
                    validated += 1;
                }
                self.errors.extend(errs);
            }
            if validated != node.all_of.len() {
                let extra = if validated == 0 {
                    ". None validated"
                } else {
                    ""
                };
                self.errors.push(composite(format!(
                    "{name} must validate all the schemas (allOf){extra}"
                )));
            }
        }
        if !node.any_of.is_empty() {
            let results: Vec<Vec<FieldError>> = node
                .any_of
                .iter()
                .map(|sub| branch_errors(sub, value, path))
                .collect();
            if !results.iter().any(Vec::is_empty) {
                self.errors.push(composite(format!(
                    "{name} must validate at least one schema (anyOf)"
                )));
                self.errors.extend(best_failure(results));
            }
        }
        if !node.one_of.is_empty() {
            let results: Vec<Vec<FieldError>> = node
                .one_of
                .iter()
                .map(|sub| branch_errors(sub, value, path))
                .collect();
            let validated = results.iter().filter(|r| r.is_empty()).count();
            if validated != 1 {
                let extra = if validated == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {validated} valid alternatives")
                };
                self.errors.push(composite(format!(
                    "{name} must validate one and only one schema (oneOf). {extra}"
                )));
                if validated == 0 {
                    self.errors.extend(best_failure(results));
                }
            }
        }
        if let Some(not) = &node.not
            && branch_errors(not, value, path).is_empty()
        {
            self.errors.push(composite(format!(
                "{name} must not validate the schema (not)"
            )));
        }
    }

    /// `x-kubernetes-list-type: set` items and `map` keys must be unique.
    fn list_type_checks(&mut self, node: &Node, items: &[Value], path: &str) {
        match node.list_type.as_deref() {
            Some("set") => {
                for (i, item) in items.iter().enumerate() {
                    if items[..i].iter().any(|earlier| json_equal(earlier, item)) {
                        self.list_types.push(FieldError::new(
                            &format!("{path}[{i}]"),
                            FieldErrorKind::Duplicate,
                            Some(item.clone()),
                            "",
                        ));
                    }
                }
            }
            Some("map") => {
                let mut seen: Vec<BTreeMap<String, Value>> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    let key = map_key(node, item);
                    if seen.iter().any(|k| keys_equal(k, &key)) {
                        let shown: serde_json::Map<String, Value> =
                            key.clone().into_iter().collect();
                        self.list_types.push(FieldError::new(
                            &format!("{path}[{i}]"),
                            FieldErrorKind::Duplicate,
                            Some(Value::Object(shown)),
                            "",
                        ));
                    }
                    seen.push(key);
                }
            }
            _ => {}
        }
    }
}

fn keys_equal(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
}

/// The key fields of a list-map item (absent keys fall back to the schema default, as the real
/// server does for keys like `protocol`).
fn map_key(node: &Node, item: &Value) -> BTreeMap<String, Value> {
    let item_node = node.items.as_deref();
    node.list_map_keys
        .iter()
        .filter_map(|k| {
            let v = item.get(k).cloned().or_else(|| {
                item_node
                    .and_then(|n| n.properties.get(k))
                    .and_then(|n| n.default.clone())
            })?;
            Some((k.clone(), v))
        })
        .collect()
}

/// The old value of a list item for transition rules: only list-type map items correlate (by key).
fn correlate_item<'a>(node: &Node, item: &Value, old_items: &'a [Value]) -> Option<&'a Value> {
    if node.list_type.as_deref() != Some("map") {
        return None;
    }
    let key = map_key(node, item);
    old_items
        .iter()
        .find(|o| keys_equal(&map_key(node, o), &key))
}

/// The errors of one junctor branch against the value (a declared type must match too, as in
/// int-or-string's `anyOf: [{type: integer}, {type: string}]`).
fn branch_errors(node: &Node, value: &Value, path: &str) -> Vec<FieldError> {
    validate_value(node, value, path, None)
}

/// The errors of the branch that came closest (fewest errors; the first on a tie).
fn best_failure(results: Vec<Vec<FieldError>>) -> Vec<FieldError> {
    results
        .into_iter()
        .reduce(|best, r| if r.len() < best.len() { r } else { best })
        .unwrap_or_default()
}

/// The string formats the real server checks; unknown formats are not checked.
fn string_format_ok(format: &str, s: &str) -> bool {
    match format {
        "date-time" => timefmt::is_date_time(s),
        "date" => timefmt::parse_date(s).is_some(),
        "uuid" => is_uuid(s),
        "byte" => is_base64(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "hostname" => is_hostname(s),
        _ => true,
    }
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    parts.len() == 5
        && parts
            .iter()
            .zip(lens)
            .all(|(p, l)| p.len() == l && p.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - body.len() <= 2
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '+' || c == '/')
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    if ip.parse::<std::net::Ipv4Addr>().is_ok() {
        bits <= 32
    } else {
        ip.parse::<std::net::Ipv6Addr>().is_ok() && bits <= 128
    }
}

fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}
