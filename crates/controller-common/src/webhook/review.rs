//! One `ConversionReview` in, one out: the request checks and the answer, with no I/O.
//!
//! A review the API server sends is answered with HTTP 200 and a `ConversionReview` of the same
//! `apiVersion` (`apiextensions.k8s.io/v1`, or `v1beta1`, whose shape is the same) echoing the
//! request's `uid`; any object that cannot be converted fails the whole review
//! (`result.status: Failure` and a message naming the object, no objects), as the reference's
//! controller-runtime does. A body that is not a review at all (not JSON, another `apiVersion`
//! or `kind`, no `request` or `uid`) gets HTTP 400 with a failed `apiextensions.k8s.io/v1`
//! review saying what is wrong. Nothing here panics on input, and a panic inside a converter is
//! caught and reported as a failure.

use std::panic::{AssertUnwindSafe, catch_unwind};

use http::StatusCode;
use serde_json::{Value, json};

use super::Conversions;

/// The `ConversionReview` API versions answered (the CRDs list both; the API server uses the
/// first it speaks, `v1`).
pub const REVIEW_API_VERSIONS: [&str; 2] =
    ["apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"];

/// The answer to one request body: the HTTP status and the `ConversionReview` to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: StatusCode,
    pub review: Value,
}

impl Answer {
    /// Whether the review reports success.
    pub fn succeeded(&self) -> bool {
        self.review.pointer("/response/result/status") == Some(&json!("Success"))
    }
}

fn answer(
    status: StatusCode,
    api_version: &str,
    uid: &str,
    result: Result<Vec<Value>, String>,
) -> Answer {
    let (result, objects) = match result {
        Ok(objects) => (json!({"status": "Success"}), objects),
        Err(message) => (
            json!({"status": "Failure", "message": message, "reason": "BadRequest"}),
            Vec::new(),
        ),
    };
    Answer {
        status,
        review: json!({
            "apiVersion": api_version,
            "kind": "ConversionReview",
            "response": {"uid": uid, "result": result, "convertedObjects": objects},
        }),
    }
}

fn bad_request(message: String) -> Answer {
    answer(
        StatusCode::BAD_REQUEST,
        REVIEW_API_VERSIONS[0],
        "",
        Err(message),
    )
}

/// Answers the request `body` with `conversions`.
pub fn handle(body: &[u8], conversions: &Conversions) -> Answer {
    let review: Value = match serde_json::from_slice(body) {
        Ok(review) => review,
        Err(e) => {
            return bad_request(format!(
                "the request body is not a JSON ConversionReview: {e}"
            ));
        }
    };
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !REVIEW_API_VERSIONS.contains(&api_version) {
        return bad_request(format!(
            "unsupported ConversionReview apiVersion {api_version:?}: this webhook answers {}",
            REVIEW_API_VERSIONS.join(" and ")
        ));
    }
    if review.get("kind").and_then(Value::as_str) != Some("ConversionReview") {
        return bad_request(format!(
            "expected kind \"ConversionReview\", got {}",
            review
                .get("kind")
                .map_or("nothing".to_owned(), Value::to_string)
        ));
    }
    let Some(request) = review.get("request").filter(|r| r.is_object()) else {
        return bad_request("the ConversionReview has no request".into());
    };
    let Some(uid) = request.get("uid").and_then(Value::as_str) else {
        return bad_request("the ConversionReview request has no uid".into());
    };
    let result = convert_all(request, conversions);
    answer(StatusCode::OK, api_version, uid, result)
}

/// `<kind> <namespace>/<name>` (or `<kind> <name>`) for messages.
fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    match (meta("namespace"), meta("name")) {
        ("", "") => kind.to_owned(),
        ("", name) => format!("{kind} {name}"),
        (namespace, name) => format!("{kind} {namespace}/{name}"),
    }
}

fn convert_all(request: &Value, conversions: &Conversions) -> Result<Vec<Value>, String> {
    let desired = request
        .get("desiredAPIVersion")
        .and_then(Value::as_str)
        .filter(|v| !v.is_empty())
        .ok_or("the ConversionReview request has no desiredAPIVersion")?;
    let objects = match request.get("objects") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(objects)) => objects,
        Some(_) => return Err("request.objects must be a list".into()),
    };
    let (desired_group, desired_version) = desired.split_once('/').unwrap_or(("", desired));

    // Every object must be of one kind this webhook converts.
    let mut kind_of_review: Option<(&str, &str)> = None;
    for (index, object) in objects.iter().enumerate() {
        let type_field = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or("");
        let (api_version, kind) = (type_field("apiVersion"), type_field("kind"));
        if !object.is_object() || api_version.is_empty() || kind.is_empty() {
            return Err(format!(
                "request.objects[{index}] is not an object with an apiVersion and a kind"
            ));
        }
        let group = api_version.split_once('/').map_or("", |(g, _)| g);
        match kind_of_review {
            None => kind_of_review = Some((group, kind)),
            Some(first) if first == (group, kind) => {}
            Some((first_group, first_kind)) => {
                return Err(format!(
                    "mixed kinds in one ConversionReview: {first_kind}.{first_group} and {kind}.{group}; the API server sends one kind per review"
                ));
            }
        }
    }
    let Some((group, kind)) = kind_of_review else {
        return Ok(Vec::new());
    };
    let Some(served) = conversions.kind(group, kind) else {
        return Err(format!(
            "this webhook does not convert {kind}.{group}; it converts {}",
            conversions.describe()
        ));
    };
    if desired_group != group || !served.versions.iter().any(|v| v == desired_version) {
        return Err(format!(
            "desiredAPIVersion {desired:?} is not a version of {kind}.{group}; served: {}",
            served
                .versions
                .iter()
                .map(|v| format!("{group}/{v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    objects
        .iter()
        .map(|object| {
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            if api_version == desired {
                return Ok(object.clone());
            }
            let version = api_version.split_once('/').map_or("", |(_, v)| v);
            if !served.versions.iter().any(|v| v == version) {
                return Err(format!(
                    "cannot convert {} from {api_version}: not a served version",
                    describe(object)
                ));
            }
            let converted =
                catch_unwind(AssertUnwindSafe(|| (conversions.convert)(object, desired)))
                    .unwrap_or_else(
                        |_| Err("internal error in the converter (it panicked)".into()),
                    );
            converted.map_err(|e| {
                format!(
                    "converting {} from {api_version} to {desired}: {e}",
                    describe(object)
                )
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "review/tests.rs"]
mod tests;
