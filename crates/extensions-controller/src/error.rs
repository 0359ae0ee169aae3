//! The one error type of this crate.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API request failed; `action` says which (e.g. `patch Sandbox ns/name`).
    #[error("{action}: {source}")]
    Kube {
        action: String,
        #[source]
        source: kube::Error,
    },
    /// An object from the API lacks a field every stored object has (name, namespace, uid).
    #[error("{kind} object without metadata.{field}")]
    MissingMetadata {
        kind: &'static str,
        field: &'static str,
    },
    #[error("cannot serialize {what}: {source}")]
    Serialize {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot read the allowed label domains file {path}: {source}")]
    LabelDomainsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] controller_common::Error),
}

impl Error {
    pub fn kube(action: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            action: action.into(),
            source,
        }
    }

    /// Label for the reconcile-error log lines and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube { .. } => "kube",
            Error::MissingMetadata { .. } => "missing_metadata",
            Error::Serialize { .. } => "serialize",
            Error::LabelDomainsFile { .. } => "config",
            Error::Runtime(_) => "runtime",
        }
    }
}

/// HTTP status of an API error, if the server answered.
pub fn api_status(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

pub fn is_not_found(err: &kube::Error) -> bool {
    api_status(err) == Some(404)
}

pub fn is_conflict(err: &kube::Error) -> bool {
    api_status(err) == Some(409)
}

pub fn is_already_exists(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409 && status.reason == "AlreadyExists")
}
