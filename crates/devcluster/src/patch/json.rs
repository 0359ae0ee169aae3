//! JSON merge patch (RFC 7386) and JSON patch (RFC 6902), with the behaviour of the library the
//! Kubernetes API server uses for them, quirks included:
//!
//! * merge patch: `null` removes a member; a member added where there was none (or `null`) has
//!   its own `null` members dropped, also inside arrays; a `null` patch is a 400.
//! * JSON patch: a missing `value` is `null`; `test` of a missing member (or a `null` one)
//!   passes when the expected value is `null` or absent; `replace` of a missing member of an
//!   existing object adds it; `copy` from a missing member of an existing object copies `null`;
//!   negative array indices count from the end; intermediate path elements must exist.
//!
//! The `json-patch` crate is RFC-strict (a `test` of a missing path fails, `replace` of a missing
//! member fails, it rejects a missing `value` while decoding), so these are written here.

use serde_json::{Map, Value};

use super::PatchError;

/// The API server refuses JSON patches with more operations than this (413).
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// JSON merge patch, as the API server applies it to an object.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match (target, patch) {
        (Value::Object(doc), Value::Object(p)) => {
            let mut doc = doc.clone();
            merge_members(&mut doc, p);
            Value::Object(doc)
        }
        (_, Value::Object(_)) => merge_patch(&Value::Object(Map::new()), patch),
        (_, other) => other.clone(),
    }
}

/// [`merge_patch`] for a request body: a `null` body is a 400 (`Invalid JSON Patch`) and so is a
/// body that is not an object, which could never produce an object.
pub fn merge_patch_request(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    match patch {
        Value::Object(_) => Ok(merge_patch(target, patch)),
        Value::Null => Err(PatchError::BadRequest("Invalid JSON Patch".to_string())),
        other => Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            go_json_kind(other)
        ))),
    }
}

fn merge_members(doc: &mut Map<String, Value>, patch: &Map<String, Value>) {
    for (key, value) in patch {
        if value.is_null() {
            doc.remove(key);
            continue;
        }
        let merged = match doc.remove(key) {
            None | Some(Value::Null) => without_nulls(value),
            Some(Value::Object(mut current)) => match value {
                Value::Object(p) => {
                    merge_members(&mut current, p);
                    Value::Object(current)
                }
                other => other.clone(),
            },
            Some(_) => without_nulls(value),
        };
        doc.insert(key.clone(), merged);
    }
}

/// Drop `null` members of objects, recursively (array elements themselves stay).
fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The JSON type name Go's decoder uses in its errors.
pub(crate) fn go_json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's `%v` prints the decoded JSON (`map[a:1 b:[x y]]`), for messages that quote
/// patch content.
pub(crate) fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_fmt).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => format!(
            "map[{}]",
            m.iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// JSON patch. Operations apply in order, all or nothing.
pub fn json_patch(target: &Value, ops: &Value) -> Result<Value, PatchError> {
    let Value::Array(list) = ops else {
        return Err(PatchError::BadRequest(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            go_json_kind(ops)
        )));
    };
    for op in list {
        if !matches!(op, Value::Object(_) | Value::Null) {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                go_json_kind(op)
            )));
        }
    }
    if list.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            list.len()
        )));
    }
    let mut doc = target.clone();
    for op in list {
        apply_op(&mut doc, op).map_err(|detail| PatchError::Invalid { detail })?;
    }
    Ok(doc)
}

fn text_field(op: &Value, name: &str) -> Option<Result<String, ()>> {
    match op.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(Ok(s.clone())),
        Some(_) => Some(Err(())),
    }
}

fn apply_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let kind = match text_field(op, "op") {
        Some(Ok(kind)) => kind,
        _ => "unknown".to_string(),
    };
    let value = op.get("value").cloned().unwrap_or(Value::Null);
    let value_given = op.get("value").is_some_and(|v| !v.is_null());
    let path = || match text_field(op, "path") {
        Some(Ok(p)) => Ok(p),
        _ => Err(format!(
            "{kind} operation failed to decode path: operation missing path field: missing value"
        )),
    };
    let from = || match text_field(op, "from") {
        Some(Ok(p)) => Ok(p),
        _ => Err(format!(
            "{kind} operation failed to decode from: operation missing from field: missing value"
        )),
    };
    match kind.as_str() {
        "add" => {
            let path = path()?;
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!(
                    "add operation does not apply: doc is missing path: \"{path}\": missing value"
                )
            })?;
            add(container, &key, value).map_err(|e| format!("error in add for path: '{path}': {e}"))
        }
        "remove" => {
            let path = path()?;
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!(
                    "remove operation does not apply: doc is missing path: \"{path}\": missing value"
                )
            })?;
            remove(container, &key)
                .map(|_| ())
                .map_err(|e| format!("error in remove for path: '{path}': {e}"))
        }
        "replace" => {
            let path = path()?;
            if path.is_empty() {
                if !value.is_object() && !value.is_array() {
                    return Err("replace operation value must be object or array".to_string());
                }
                *doc = value;
                return Ok(());
            }
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!(
                    "replace operation does not apply: doc is missing path: {path}: missing value"
                )
            })?;
            replace(container, &key, value).map_err(|_| {
                format!(
                    "replace operation does not apply: doc is missing key: {path}: missing value"
                )
            })
        }
        "move" => {
            let from = from()?;
            let (container, key) = find_container(doc, &from).ok_or_else(|| {
                format!(
                    "move operation does not apply: doc is missing from path: {from}: missing value"
                )
            })?;
            let moved = remove(container, &key)
                .map_err(|e| format!("error in move for path: '{key}': {e}"))?;
            let path = path()?;
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!(
                    "move operation does not apply: doc is missing destination path: {path}: missing value"
                )
            })?;
            add(container, &key, moved)
                .map_err(|e| format!("error in move for path: '{path}': {e}"))
        }
        "copy" => {
            let from = from()?;
            let (container, key) = find_container(doc, &from).ok_or_else(|| {
                format!(
                    "copy operation does not apply: doc is missing from path: {from}: missing value"
                )
            })?;
            let copied = get(container, &key)
                .map_err(|e| format!("error in copy for from: '{from}': {e}"))?
                .cloned()
                .unwrap_or(Value::Null);
            let path = path()?;
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!(
                    "copy operation does not apply: doc is missing destination path: {path}: missing value"
                )
            })?;
            add(container, &key, copied)
                .map_err(|e| format!("error while adding value during copy: {e}"))
        }
        "test" => {
            let path = path()?;
            let failed = || format!("testing value {path} failed: test failed");
            if path.is_empty() {
                return if json_equal(doc, &value) {
                    Ok(())
                } else {
                    Err(failed())
                };
            }
            let (container, key) = find_container(doc, &path).ok_or_else(|| {
                format!("test operation does not apply: is missing path: {path}: missing value")
            })?;
            let current = get(container, &key)
                .map_err(|e| format!("error in test for path: '{path}': {e}"))?
                .filter(|v| !v.is_null());
            match current {
                None if !value_given => Ok(()),
                Some(v) if value_given && json_equal(v, &value) => Ok(()),
                _ => Err(failed()),
            }
        }
        other => Err(format!("Unexpected kind: {other}")),
    }
}

fn decode_token(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// Like Go's `strconv.Atoi`: optional sign, decimal digits.
fn parse_index(key: &str) -> Result<i64, String> {
    let digits = key.strip_prefix(['+', '-']).unwrap_or(key);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.Atoi: parsing \"{key}\": invalid syntax"));
    }
    key.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing \"{key}\": value out of range"))
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: invalid index referenced")
}

/// An existing index, negative ones counting from the end.
fn existing_index(items: &[Value], key: &str) -> Result<usize, String> {
    let idx = parse_index(key)?;
    let len = items.len() as i64;
    let resolved = if idx < 0 { idx + len } else { idx };
    if idx < -len || resolved >= len {
        return Err(invalid_index(idx));
    }
    usize::try_from(resolved).map_err(|_| invalid_index(idx))
}

/// The container holding the last token of `path`, and that token. `None` when the path has no
/// `/` or an intermediate element is missing or not a container.
fn find_container<'a>(doc: &'a mut Value, path: &str) -> Option<(&'a mut Value, String)> {
    let mut tokens: Vec<&str> = path.split('/').collect();
    if tokens.len() < 2 {
        return None;
    }
    let key = decode_token(tokens.pop()?);
    let mut current = doc;
    for token in &tokens[1..] {
        let token = decode_token(token);
        let next = match current {
            Value::Object(map) => map.get_mut(&token),
            Value::Array(items) => {
                let idx = existing_index(items, &token).ok()?;
                items.get_mut(idx)
            }
            _ => None,
        }?;
        if !next.is_object() && !next.is_array() {
            return None;
        }
        current = next;
    }
    if !current.is_object() && !current.is_array() {
        return None;
    }
    Some((current, key))
}

fn get<'a>(container: &'a Value, key: &str) -> Result<Option<&'a Value>, String> {
    match container {
        Value::Object(map) => Ok(map.get(key)),
        Value::Array(items) => existing_index(items, key).map(|i| items.get(i)),
        _ => Ok(None),
    }
}

fn add(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            if key == "-" {
                items.push(value);
                return Ok(());
            }
            let idx = parse_index(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = items.len() as i64 + 1;
            let resolved = if idx < 0 { idx + size } else { idx };
            if idx >= size || idx < -size {
                return Err(invalid_index(idx));
            }
            let at = usize::try_from(resolved).map_err(|_| invalid_index(idx))?;
            items.insert(at, value);
            Ok(())
        }
        _ => Err("not a container".to_string()),
    }
}

fn remove(container: &mut Value, key: &str) -> Result<Value, String> {
    match container {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: missing value")),
        Value::Array(items) => {
            let idx = existing_index(items, key)?;
            Ok(items.remove(idx))
        }
        _ => Err("not a container".to_string()),
    }
}

fn replace(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        // a missing member of an existing object is added, as the API server does
        Value::Object(map) => {
            map.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            let idx = existing_index(items, key)?;
            items[idx] = value;
            Ok(())
        }
        _ => Err("not a container".to_string()),
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`).
pub(crate) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y,
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests;
