//! Small helpers for object metadata: timestamps, uids, generated names, name validation.

use serde_json::{Map, Value};

/// Now, as Kubernetes writes times: RFC 3339 in UTC with second precision.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Now plus `secs` seconds, RFC 3339 UTC.
pub fn rfc3339_in(secs: i64) -> String {
    let ts = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A random RFC 4122 version 4 UUID.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    for x in &mut b {
        *x = fastrand::u8(..);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The 5-character suffix the real server appends to `generateName` (consonants and digits
/// that cannot spell words).
pub fn generated_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

/// A `generateName` as a real server validates it: the name check applies to the prefix with a
/// trailing `-` masked (the generated suffix follows it). Like the real server's, the mask
/// replaces the last two characters with `a`.
pub fn mask_trailing_dash(prefix: &str) -> String {
    let chars: Vec<char> = prefix.chars().collect();
    if chars.len() > 1 && chars.last() == Some(&'-') {
        let mut masked: String = chars[..chars.len() - 2].iter().collect();
        masked.push('a');
        masked
    } else {
        prefix.to_string()
    }
}

/// Checks a DNS-1123 subdomain (most object names); returns the problem if any.
pub fn dns1123_subdomain_problem(name: &str) -> Option<String> {
    if name.len() > 253 {
        return Some("must be no more than 253 characters".into());
    }
    let ok_label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.split('.').all(ok_label) {
        None
    } else {
        Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into())
    }
}

/// Checks a DNS-1123 label (namespaces, services); returns the problem if any.
pub fn dns1123_label_problem(name: &str) -> Option<String> {
    if name.len() > 63 {
        return Some("must be no more than 63 characters".into());
    }
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        None
    } else {
        Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into())
    }
}

/// `metadata` of an object as a mutable map, creating it when absent.
pub fn metadata_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    let o = obj.as_object_mut()?;
    let m = o
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    m.as_object_mut()
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, list: Vec<String>) {
    if let Some(m) = metadata_mut(obj) {
        if list.is_empty() {
            m.remove("finalizers");
        } else {
            m.insert(
                "finalizers".into(),
                Value::Array(list.into_iter().map(Value::String).collect()),
            );
        }
    }
}

/// `metadata.labels` as a sorted map.
pub fn labels(obj: &Value) -> std::collections::BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4() {
        let u = new_uid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert_ne!(u, new_uid());
    }

    #[test]
    fn names_are_checked_like_the_real_server() {
        assert!(dns1123_subdomain_problem("my-box.v1").is_none());
        assert!(dns1123_subdomain_problem("My_Box").is_some());
        assert!(dns1123_label_problem("a.b").is_some());
        assert_eq!(generated_suffix().len(), 5);
    }

    #[test]
    fn times_are_rfc3339_utc() {
        let now = now_rfc3339();
        assert!(now.ends_with('Z'));
        assert!(now.parse::<jiff::Timestamp>().is_ok());
        assert!(rfc3339_in(30) > now);
    }
}

/// Problems with `metadata.labels`, `metadata.annotations` and `metadata.finalizers`, as field
/// causes of a 422 (every kind is checked, as on a real server).
pub fn object_meta_causes(obj: &Value) -> Vec<crate::api_error::Cause> {
    let mut out = Vec::new();
    let mut push = |field: String, message: String| {
        out.push(crate::api_error::Cause {
            reason: "FieldValueInvalid".into(),
            message,
            field,
        })
    };
    // The selector module words key problems as `... Invalid value: "key": problem`.
    let key_problem = |key: &str| {
        crate::selector::validate_label_key(key).err().map(|e| {
            let text = e.to_string();
            match text.split_once("Invalid value: ") {
                Some((_, rest)) => format!("Invalid value: {rest}"),
                None => text,
            }
        })
    };
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(p) = key_problem(k) {
                push("metadata.labels".into(), p);
            }
            let value = v.as_str().unwrap_or("");
            if let Some(p) = label_value_problem(value) {
                push(
                    "metadata.labels".into(),
                    format!("Invalid value: {value:?}: {p}"),
                );
            }
        }
    }
    if let Some(annotations) = obj
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        let mut total = 0usize;
        for (k, v) in annotations {
            total += k.len() + v.as_str().map_or(0, str::len);
            if let Some(p) = key_problem(k) {
                push("metadata.annotations".into(), p);
            }
        }
        if total > 256 * 1024 {
            push(
                "metadata.annotations".into(),
                format!("Too long: may not be more than 262144 bytes (got {total})"),
            );
        }
    }
    for (i, f) in finalizers(obj).iter().enumerate() {
        if let Some(p) = key_problem(f) {
            push(format!("metadata.finalizers[{i}]"), p);
        }
    }
    out
}

fn label_value_problem(value: &str) -> Option<&'static str> {
    if value.len() > 63 {
        return Some("must be no more than 63 characters");
    }
    let b = value.as_bytes();
    let ok = value.is_empty()
        || (b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')));
    (!ok).then_some(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
    )
}

#[cfg(test)]
mod object_meta_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bad_labels_annotations_and_finalizers_are_field_errors() {
        let ok = json!({"metadata": {"labels": {"app.kubernetes.io/name": "web", "empty": ""}, "finalizers": ["example.com/x"]}});
        assert!(object_meta_causes(&ok).is_empty());
        let bad = json!({"metadata": {
            "labels": {"bad key": "v", "k": "bad value"},
            "annotations": {"/x": "y"},
            "finalizers": ["ok/one", "not ok"],
        }});
        let fields: Vec<String> = object_meta_causes(&bad)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(
            fields,
            [
                "metadata.labels",
                "metadata.labels",
                "metadata.annotations",
                "metadata.finalizers[1]"
            ]
        );
    }
}

/// Whether a terminating object is done: its finalizers are all gone and no grace period runs
/// (a pod in its grace period stays, however its finalizers go, until its kubelet deletes it
/// with grace 0 once its containers have stopped).
pub fn finalized(obj: &Value) -> bool {
    let in_grace_period = obj
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    obj.pointer("/metadata/deletionTimestamp").is_some()
        && finalizers(obj).is_empty()
        && !in_grace_period
}
