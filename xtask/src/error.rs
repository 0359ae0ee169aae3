//! The one error type of the xtask library. Every message is a single line that says what is
//! wrong and, where there is one, what to do about it.

use std::path::PathBuf;

/// Everything that can go wrong while generating CRDs or release manifests.
#[derive(Debug, thiserror::Error)]
pub enum XtaskError {
    /// `--version` is not `v` followed by a semantic version usable as an image tag.
    #[error("invalid --version {given:?}: {reason}")]
    InvalidVersion { given: String, reason: String },

    /// `--registry` is not a usable image registry/repository prefix.
    #[error("invalid --registry {given:?}: {reason}")]
    InvalidRegistry { given: String, reason: String },

    /// A file or directory could not be read, created or written.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A YAML document could not be parsed or serialized.
    #[error("{origin}: {message}")]
    Yaml { origin: String, message: String },

    /// A manifest document is not a valid object of the Kubernetes type it claims to be.
    #[error("{origin}: {message}")]
    InvalidManifest { origin: String, message: String },

    /// A hand-written piece uses a `${...}` placeholder the release does not know.
    #[error("{origin}: unknown placeholder {placeholder:?} (known: ${{REGISTRY}}, ${{VERSION}})")]
    UnknownPlaceholder { origin: String, placeholder: String },

    /// The same (kind, namespace, name) appears twice in one release file.
    #[error("{file}: object {object} appears more than once")]
    DuplicateObject { file: String, object: String },

    /// Building, checking or pushing an image failed.
    #[error(transparent)]
    Image(#[from] crate::image::ImageError),

    /// Generating, checking or packaging the chart failed.
    #[error(transparent)]
    Chart(Box<crate::chart::ChartError>),

    /// Pushing to the registry failed.
    #[error("push to {registry}: {message}")]
    Push { registry: String, message: String },

    /// `cargo xtask crds --check` found committed CRD files that differ from the Rust types.
    #[error("{dir} is out of date ({details}); run `cargo xtask crds` and commit the result")]
    CrdsOutOfDate { dir: String, details: String },

    /// `cargo xtask migrate` could not run, or a phase finished with errors.
    #[error("migrate: {0}")]
    Migrate(String),
}

impl XtaskError {
    /// An [`XtaskError::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        XtaskError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

impl From<crate::chart::ChartError> for XtaskError {
    fn from(error: crate::chart::ChartError) -> Self {
        match error {
            crate::chart::ChartError::Release(inner) => inner,
            other => XtaskError::Chart(Box::new(other)),
        }
    }
}
