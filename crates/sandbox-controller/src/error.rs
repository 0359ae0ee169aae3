//! The one error type of this crate. Each variant names the object involved; `metric_label`
//! gives a stable, low-cardinality label for the reconcile-error counter.

use std::time::Duration;

/// A failed step of a Sandbox reconcile, or of starting the controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed; `action` says which ("create pod \"x\"").
    #[error("{action}: {source}")]
    Api {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// A child object exists but another controller owns it.
    #[error("{kind} \"{name}\" is owned by {owner}, not by sandbox \"{sandbox}\"")]
    OwnedByOther {
        kind: &'static str,
        name: String,
        owner: String,
        sandbox: String,
    },
    /// An object of the name a child needs exists, and no controller owns it. The controller
    /// adopts nothing it did not create (`docs/security.md`), whatever its labels.
    #[error(
        "{kind} \"{name}\" exists but was not created by sandbox \"{sandbox}\" (it has no controller owner reference); the controller never adopts an object it did not create: delete or rename it"
    )]
    NotAdoptable {
        kind: &'static str,
        name: String,
        sandbox: String,
    },
    /// Pods the Sandbox does not own carry its tracking label, so its Service would send them
    /// the Sandbox's traffic.
    #[error(
        "service \"{service}\" selects pod(s) not created by this sandbox: {pods} (they carry its label agents.x-k8s.io/sandbox-name-hash={hash}); delete them or remove the label"
    )]
    ForeignPodsSelected {
        service: String,
        hash: String,
        pods: String,
    },
    /// More than one Pod is controlled by the Sandbox; the controller refuses to choose.
    #[error(
        "multiple Pods ({count}) are controlled by this Sandbox; refusing to choose or create a Pod"
    )]
    MultiplePods { count: usize },
    /// A Pod create returned AlreadyExists, and the Pod could not be read back.
    #[error("pod already exists but failed to fetch: {0}")]
    PodVanished(String),
    /// Process setup or lifecycle (client, admin servers, leader election) failed.
    #[error(transparent)]
    Runtime(#[from] controller_common::Error),
}

impl Error {
    pub fn api(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Api {
            action: action.into(),
            source,
        }
    }

    /// Stable label for metrics (never includes object names).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Api { source, .. } => match source {
                kube::Error::Api(s) if s.code == 409 => "conflict",
                kube::Error::Api(s) if s.code == 429 => "throttled",
                kube::Error::Api(s) if s.code >= 500 => "server_error",
                kube::Error::Api(s) if s.code == 422 || s.code == 400 => "invalid",
                kube::Error::Api(s) if s.code == 403 => "forbidden",
                kube::Error::Api(_) => "api_error",
                _ => "transport",
            },
            Error::OwnedByOther { .. } => "owned_by_other",
            Error::NotAdoptable { .. } => "not_adoptable",
            Error::ForeignPodsSelected { .. } => "foreign_pods_selected",
            Error::MultiplePods { .. } => "multiple_pods",
            Error::PodVanished(_) => "pod_vanished",
            Error::Runtime(_) => "runtime",
        }
    }

    /// What the failed pass was doing (the API action, else the error kind), without the
    /// server's message: the retry backoff escalates only while the same step keeps failing.
    pub fn retry_step(&self) -> &str {
        match self {
            Error::Api { action, .. } => action,
            other => other.metric_label(),
        }
    }

    /// First retry delay for a failed reconcile (it doubles while the same step keeps failing):
    /// shortest for contention, then transient server trouble, then what needs someone else to
    /// act. The reference starts every retry at 5 ms; 100 ms for 429/5xx still spaces the first
    /// retries of an overloaded server while a run of independent transient errors (seven 500s
    /// in a row on one create) costs 12.7 s in total, not the 127 s a 1 s start did.
    pub fn base_backoff(&self) -> Duration {
        match self.metric_label() {
            "conflict" => Duration::from_millis(50),
            "throttled" | "server_error" | "transport" => Duration::from_millis(100),
            _ => Duration::from_millis(200),
        }
    }
}

/// Whether a kube error is an HTTP status with this code.
pub fn is_status(err: &kube::Error, code: u16) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == code)
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> Error {
        let mut status = kube::core::Status::failure("injected", "InternalError");
        status.code = code;
        Error::api("create pod \"sb\"", kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn transient_server_errors_are_retried_sooner_than_conditions_others_must_fix() {
        let conflict = api_error(409).base_backoff();
        let transient = [api_error(500), api_error(503), api_error(429)].map(|e| e.base_backoff());
        let other = api_error(403).base_backoff();
        assert!(transient.iter().all(|t| conflict <= *t && *t < other));
        assert_eq!(api_error(500).retry_step(), "create pod \"sb\"");
        assert_eq!(
            Error::MultiplePods { count: 2 }.retry_step(),
            "multiple_pods"
        );
    }
}
