//! Fault injection rules: errors and latency per verb and resource, and watches closed early.
//!
//! Decisions draw from one seeded RNG, so a test that sets [`FaultConfig::seed`] and sends the
//! same requests in the same order sees the same faults.

use std::time::Duration;

use serde_json::{Value, json};

use super::request_info::RequestInfo;

/// Which requests a rule applies to and what it does to them.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// Verbs as in [`RequestInfo::verb`] (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`); empty matches every verb.
    pub verbs: Vec<String>,
    /// Resources this rule applies to; empty matches every request, resource or not. An entry is
    /// `RESOURCE` (any subresource: `pods` also matches `pods/status`), `RESOURCE/SUBRESOURCE`
    /// (only that subresource), either qualified by group as `RESOURCE.GROUP`
    /// (`sandboxes.agents.x-k8s.io`), or a non-resource path starting with `/` (`/version`).
    pub resources: Vec<String>,
    /// Probability in `0.0..=1.0` that a matching request fails with `error_code`.
    pub error_rate: f64,
    /// The HTTP status of injected failures: 429, 500, 503 or 504 (others are answered with a
    /// generic `Status` of that code).
    pub error_code: u16,
    /// Added before a matching request is handled (also before an injected failure).
    pub latency: Duration,
    /// For a matching watch: each event is held this long before it is sent, a watcher falling
    /// behind as kube-apiserver's watch cache does under load (the store changed, the watcher's
    /// cache has not seen it yet). Looked up as each event leaves, so a rule installed while a
    /// watch is open applies to it (an event already held waits out its delay).
    pub event_delay: Duration,
    /// The `Status` message of injected failures, e.g. an admission denial's text for a 422;
    /// `None` gives the code's generic message.
    pub message: Option<String>,
}

impl Default for FaultRule {
    fn default() -> Self {
        Self {
            verbs: Vec::new(),
            resources: Vec::new(),
            error_rate: 0.0,
            error_code: 500,
            latency: Duration::ZERO,
            event_delay: Duration::ZERO,
            message: None,
        }
    }
}

/// Closing watch streams early, as an API server does on restart or under load.
#[derive(Debug, Clone, PartialEq)]
pub struct WatchClose {
    /// Probability in `0.0..=1.0` that a watch is closed early.
    pub probability: f64,
    /// A closed watch ends after a duration drawn uniformly from `min_after..=max_after`.
    pub min_after: Duration,
    pub max_after: Duration,
}

/// All fault injection settings. The default injects nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    pub rules: Vec<FaultRule>,
    pub watch_close: Option<WatchClose>,
    /// Seed for the fault RNG; `None` seeds from the OS.
    pub seed: Option<u64>,
    /// `Retry-After` (seconds) sent with injected 429 and 503 answers.
    pub retry_after_seconds: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            watch_close: None,
            seed: None,
            retry_after_seconds: 1,
        }
    }
}

/// Errors in a fault configuration (reported when it is installed).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FaultConfigError {
    #[error("faults.rules[{index}].errorRate: Invalid value: {value}: must be between 0 and 1")]
    ErrorRate { index: usize, value: f64 },
    #[error(
        "faults.rules[{index}].errorCode: Invalid value: {value}: must be an HTTP error status (400-599)"
    )]
    ErrorCode { index: usize, value: u16 },
    #[error("faults.watchClose.probability: Invalid value: {value}: must be between 0 and 1")]
    WatchCloseProbability { value: f64 },
    #[error("faults.watchClose: minAfter must not exceed maxAfter")]
    WatchCloseRange,
}

impl FaultConfig {
    /// Checks rates and codes; the observer refuses a config that fails this.
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        for (index, rule) in self.rules.iter().enumerate() {
            if !(0.0..=1.0).contains(&rule.error_rate) {
                return Err(FaultConfigError::ErrorRate {
                    index,
                    value: rule.error_rate,
                });
            }
            if !(400..=599).contains(&rule.error_code) {
                return Err(FaultConfigError::ErrorCode {
                    index,
                    value: rule.error_code,
                });
            }
        }
        if let Some(close) = &self.watch_close {
            if !(0.0..=1.0).contains(&close.probability) {
                return Err(FaultConfigError::WatchCloseProbability {
                    value: close.probability,
                });
            }
            if close.min_after > close.max_after {
                return Err(FaultConfigError::WatchCloseRange);
            }
        }
        Ok(())
    }

    /// The rules that apply to a request, in order.
    pub fn matching_rules<'a>(
        &'a self,
        info: &'a RequestInfo,
    ) -> impl Iterator<Item = &'a FaultRule> {
        self.rules.iter().filter(move |rule| rule.matches(info))
    }
}

impl FaultRule {
    /// Whether this rule applies to the request.
    pub fn matches(&self, info: &RequestInfo) -> bool {
        let verb_ok = self.verbs.is_empty() || self.verbs.iter().any(|v| v == &info.verb);
        verb_ok
            && (self.resources.is_empty()
                || self
                    .resources
                    .iter()
                    .any(|entry| resource_matches(entry, info)))
    }
}

fn resource_matches(entry: &str, info: &RequestInfo) -> bool {
    if entry.starts_with('/') {
        return !info.is_resource_request && info.path == entry;
    }
    if !info.is_resource_request {
        return false;
    }
    let (resource_part, subresource) = match entry.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (entry, None),
    };
    let resource_ok = resource_part == info.resource
        || (!info.api_group.is_empty()
            && resource_part
                .strip_prefix(info.resource.as_str())
                .and_then(|rest| rest.strip_prefix('.'))
                == Some(info.api_group.as_str()));
    resource_ok && subresource.is_none_or(|s| s == info.subresource)
}

/// The reason a real API server gives for a status code.
pub fn reason_for_code(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}

/// The `Status` body of an injected failure (pure).
pub fn injected_status(code: u16, retry_after_seconds: u64, message: Option<&str>) -> Value {
    let message = match (message, code) {
        (Some(message), _) => message.to_string(),
        (None, 429) => "Too many requests, please try again later. (injected fault)".to_string(),
        (None, 500) => "Internal error occurred: injected fault".to_string(),
        (None, 503) => {
            "the server is currently unable to handle the request (injected fault)".to_string()
        }
        (None, 504) => "Timeout: request did not complete within requested timeout - context deadline exceeded (injected fault)".to_string(),
        (None, other) => format!("injected fault (HTTP {other})"),
    };
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason_for_code(code),
        "code": code,
    });
    if matches!(code, 429 | 503) {
        status["details"] = json!({ "retryAfterSeconds": retry_after_seconds });
    }
    if code == 500 {
        status["details"] = json!({ "causes": [{ "message": "injected fault" }] });
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::parse_request_info;
    use http::Method;

    fn req(method: Method, path: &str, query: Option<&str>) -> RequestInfo {
        parse_request_info(&method, path, query)
    }

    #[test]
    fn rules_match_by_verb_resource_subresource_and_group() {
        let pod_status = req(Method::PATCH, "/api/v1/namespaces/d/pods/p/status", None);
        let pod_get = req(Method::GET, "/api/v1/namespaces/d/pods/p", None);
        let sandbox_list = req(Method::GET, "/apis/agents.x-k8s.io/v1beta1/sandboxes", None);
        let version = req(Method::GET, "/version", None);

        let any = FaultRule::default();
        assert!(any.matches(&pod_status) && any.matches(&version));

        let pods = FaultRule {
            resources: vec!["pods".into()],
            ..Default::default()
        };
        assert!(pods.matches(&pod_status) && pods.matches(&pod_get));
        assert!(!pods.matches(&sandbox_list) && !pods.matches(&version));

        let status_only = FaultRule {
            resources: vec!["pods/status".into()],
            ..Default::default()
        };
        assert!(status_only.matches(&pod_status) && !status_only.matches(&pod_get));

        let patch_only = FaultRule {
            verbs: vec!["patch".into()],
            ..Default::default()
        };
        assert!(patch_only.matches(&pod_status) && !patch_only.matches(&pod_get));

        let qualified = FaultRule {
            resources: vec!["sandboxes.agents.x-k8s.io".into()],
            ..Default::default()
        };
        assert!(qualified.matches(&sandbox_list) && !qualified.matches(&pod_get));
        let wrong_group = FaultRule {
            resources: vec!["sandboxes.other.io".into()],
            ..Default::default()
        };
        assert!(!wrong_group.matches(&sandbox_list));

        let path = FaultRule {
            resources: vec!["/version".into()],
            ..Default::default()
        };
        assert!(path.matches(&version) && !path.matches(&pod_get));
    }

    #[test]
    fn validation_names_the_bad_field() {
        let bad_rate = FaultConfig {
            rules: vec![
                FaultRule::default(),
                FaultRule {
                    error_rate: 1.5,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let err = bad_rate.validate().unwrap_err();
        assert_eq!(
            err,
            FaultConfigError::ErrorRate {
                index: 1,
                value: 1.5
            }
        );
        assert!(err.to_string().starts_with("faults.rules[1].errorRate"));

        let bad_code = FaultConfig {
            rules: vec![FaultRule {
                error_code: 200,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert!(matches!(
            bad_code.validate(),
            Err(FaultConfigError::ErrorCode { .. })
        ));

        let bad_range = FaultConfig {
            watch_close: Some(WatchClose {
                probability: 0.5,
                min_after: Duration::from_secs(2),
                max_after: Duration::from_secs(1),
            }),
            ..Default::default()
        };
        assert_eq!(bad_range.validate(), Err(FaultConfigError::WatchCloseRange));
        assert_eq!(FaultConfig::default().validate(), Ok(()));
    }

    #[test]
    fn injected_statuses_look_like_a_real_server() {
        let s = injected_status(429, 2, None);
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["code"], 429);
        assert_eq!(s["details"]["retryAfterSeconds"], 2);
        assert_eq!(
            injected_status(503, 1, None)["reason"],
            "ServiceUnavailable"
        );
        assert_eq!(injected_status(500, 1, None)["reason"], "InternalError");
        assert_eq!(injected_status(504, 1, None)["reason"], "Timeout");
        assert_eq!(injected_status(418, 1, None)["reason"], "Unknown");
        let denied = injected_status(422, 1, Some("spec.x: Required value"));
        assert_eq!(denied["message"], "spec.x: Required value");
        assert_eq!(denied["code"], 422);
        // kube-rs turns any of these into an `ErrorResponse`.
        let parsed: kube::core::Status =
            serde_json::from_value(injected_status(503, 1, None)).unwrap();
        assert_eq!(parsed.code, 503);
    }
}
