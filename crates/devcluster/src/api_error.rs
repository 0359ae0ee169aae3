//! Errors as the API server reports them: every one becomes a `meta.k8s.io/v1` `Status` body.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// One cause of a 422 `Invalid` (`details.causes[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// An error answer of the API server.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes).
    pub details: Option<Value>,
    /// Answered as kube-apiserver's plain-text `404 page not found` instead of a `Status`
    /// ([`ApiError::page_not_found`]).
    pub plain_text: bool,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
            plain_text: false,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found_path() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// A path nothing serves, as kube-apiserver answers it outside its built-in groups (a group
    /// it does not serve, or a resource a custom group does not have): plain text
    /// `404 page not found`, not a `Status`. (Unknown resources of built-in groups get a JSON
    /// `Status`: [`ApiError::not_found_path`].)
    pub fn page_not_found() -> Self {
        let mut e = Self::new(404, "NotFound", "404 page not found");
        e.plain_text = true;
        e
    }

    /// `pods "x" not found`, `sandboxes.agents.x-k8s.io "x" not found`.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", qualified(group, plural)),
        );
        e.details = Some(details(group, plural, name));
        e
    }

    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", qualified(group, plural)),
        );
        e.details = Some(details(group, plural, name));
        e
    }

    /// 409 `Conflict` (stale resourceVersion, failed preconditions).
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let mut e = Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, plural)
            ),
        );
        e.details = Some(details(group, plural, name));
        e
    }

    pub fn stale(group: &str, plural: &str, name: &str) -> Self {
        Self::conflict(
            group,
            plural,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid` with field causes, worded like the real server:
    /// `Sandbox.agents.x-k8s.io "x" is invalid: spec.replicas: Invalid value: ...`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let joined = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect::<Vec<_>>();
        let summary = if joined.len() == 1 {
            joined[0].clone()
        } else {
            format!("[{}]", joined.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {summary}"),
        );
        let mut d = details(group, kind, name);
        d["causes"] = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        e.details = Some(d);
        e
    }

    /// 403 `Forbidden`: `pods "x" is forbidden: WHY` (`pods is forbidden: WHY` without a name).
    pub fn forbidden(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let message = if name.is_empty() {
            format!("{} is forbidden: {why}", qualified(group, plural))
        } else {
            format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified(group, plural)
            )
        };
        let mut e = Self::new(403, "Forbidden", message);
        e.details = Some(details(group, plural, name));
        e
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 415 listing the media types the endpoint accepts.
    pub fn unsupported_media_type(accepted: &[&str]) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
        )
    }

    /// A 500 as kube-apiserver words one (`apierrors.NewInternalError`): the message prefixed
    /// with `Internal error occurred: `, and the bare message as the one cause.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        let mut e = Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        );
        e.details = Some(json!({"causes": [{"message": message}]}));
        e
    }

    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// `details` of a Status: name, group (omitted when empty, as for core kinds) and kind.
pub fn details(group: &str, kind: &str, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": kind});
    if !group.is_empty() {
        d["group"] = json!(group);
    }
    d
}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if self.plain_text {
            return (
                code,
                [
                    (http::header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                    (http::header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                ],
                format!("{}\n", self.message),
            )
                .into_response();
        }
        let mut resp = crate::server::json_response(code, &self.to_status());
        // As a real server: `details.retryAfterSeconds` is also sent as `Retry-After`.
        if let Some(secs) = self
            .details
            .as_ref()
            .and_then(|d| d.get("retryAfterSeconds"))
            .and_then(Value::as_u64)
            .filter(|s| *s > 0)
        {
            resp.headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_qualified_resource() {
        let e = ApiError::not_found("agents.x-k8s.io", "sandboxes", "box");
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "sandboxes.agents.x-k8s.io \"box\" not found");
        assert_eq!(
            ApiError::not_found("", "pods", "p").message,
            "pods \"p\" not found"
        );
    }

    #[test]
    fn invalid_lists_field_causes() {
        let e = ApiError::invalid(
            "agents.x-k8s.io",
            "Sandbox",
            "box",
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.podTemplate".into(),
            }],
        );
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "Sandbox.agents.x-k8s.io \"box\" is invalid: spec.podTemplate: Required value"
        );
        assert_eq!(
            e.to_status()["details"]["causes"][0]["field"],
            "spec.podTemplate"
        );
    }
}
