//! Cells of the event table, for core/v1 and events.k8s.io/v1 events alike.

use serde_json::Value;

use super::{ptr, s};
use crate::schema::table::age;

fn event_time(o: &Value, fields: &[&str]) -> Option<Value> {
    fields.iter().find_map(|f| {
        ptr(o, f)
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
    })
}

pub(super) fn event_last_seen(o: &Value, now: i64) -> Value {
    let t = event_time(
        o,
        &[
            "/series/lastObservedTime",
            "/lastTimestamp",
            "/deprecatedLastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ],
    );
    Value::String(age(t.as_ref(), now))
}

pub(super) fn event_first_seen(o: &Value, now: i64) -> Value {
    let t = event_time(
        o,
        &[
            "/firstTimestamp",
            "/deprecatedFirstTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ],
    );
    Value::String(age(t.as_ref(), now))
}

pub(super) fn event_count(o: &Value, _: i64) -> Value {
    let n = ptr(o, "/series/count")
        .or_else(|| ptr(o, "/count"))
        .or_else(|| ptr(o, "/deprecatedCount"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    Value::from(n)
}

pub(super) fn event_object(o: &Value, _: i64) -> Value {
    let obj = ptr(o, "/involvedObject").or_else(|| ptr(o, "/regarding"));
    let kind = s(obj.and_then(|x| x.get("kind"))).to_lowercase();
    let name = s(obj.and_then(|x| x.get("name")));
    Value::String(format!("{kind}/{name}"))
}

pub(super) fn event_source(o: &Value, _: i64) -> Value {
    let component =
        s(ptr(o, "/source/component").or_else(|| ptr(o, "/deprecatedSource/component")));
    let host = s(ptr(o, "/source/host").or_else(|| ptr(o, "/deprecatedSource/host")));
    let (first, second) = if component.is_empty() {
        (
            s(ptr(o, "/reportingController")),
            s(ptr(o, "/reportingInstance")),
        )
    } else {
        (component, host)
    };
    Value::String(if second.is_empty() {
        first
    } else {
        format!("{first}, {second}")
    })
}
