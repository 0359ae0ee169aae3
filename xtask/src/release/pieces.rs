//! The hand-written pieces in `deploy/` and how they are templated.
//!
//! Pieces are plain YAML an operator can read; the only templating is two placeholders,
//! `${REGISTRY}` and `${VERSION}`, replaced verbatim. Any other `${...}` is an error, so a typo
//! in a placeholder cannot reach a release file.

use std::fs;
use std::path::Path;

use crate::error::XtaskError;
use crate::release::options::{ImageRegistry, ReleaseVersion};

/// The Namespace every controller object lives in; part of the core install.
pub const NAMESPACE_PIECE: &str = "namespace.yaml";

/// Pieces of the core controller, relative to `deploy/`, in apply order (after the
/// Namespace and the CRD).
pub const CORE_PIECES: &[&str] = &[
    "sandbox-controller/service-account.yaml",
    "sandbox-controller/rbac.yaml",
    "sandbox-controller/metrics-service.yaml",
    "sandbox-controller/webhook-service.yaml",
    "sandbox-controller/deployment.yaml",
];

/// Pieces of the extensions controller, relative to `deploy/`, in apply order (after the
/// extension CRDs).
pub const EXTENSIONS_PIECES: &[&str] = &[
    "extensions-controller/service-account.yaml",
    "extensions-controller/rbac.yaml",
    "extensions-controller/metrics-service.yaml",
    "extensions-controller/webhook-service.yaml",
    "extensions-controller/deployment.yaml",
];

/// Reads `deploy/<relative>` and substitutes the placeholders.
pub fn load_piece(
    deploy_dir: &Path,
    relative: &str,
    registry: &ImageRegistry,
    version: &ReleaseVersion,
) -> Result<String, XtaskError> {
    let path = deploy_dir.join(relative);
    let text = fs::read_to_string(&path).map_err(|e| XtaskError::io("cannot read", &path, e))?;
    substitute(
        &text,
        &format!("deploy/{relative}"),
        &[
            ("REGISTRY", registry.as_str()),
            ("VERSION", version.as_str()),
        ],
    )
}

/// Replaces every `${NAME}` in `text` with its value from `values`; an unknown or unterminated
/// placeholder is an error naming `origin`.
pub fn substitute(text: &str, origin: &str, values: &[(&str, &str)]) -> Result<String, XtaskError> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(XtaskError::UnknownPlaceholder {
                origin: origin.to_string(),
                placeholder: after.chars().take(20).collect::<String>(),
            });
        };
        let name = &after[..end];
        let Some((_, value)) = values.iter().find(|(known, _)| *known == name) else {
            return Err(XtaskError::UnknownPlaceholder {
                origin: origin.to_string(),
                placeholder: format!("${{{name}}}"),
            });
        };
        out.push_str(value);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_known_placeholders_everywhere() {
        let out = substitute(
            "image: ${REGISTRY}/x:${VERSION}\nversion: ${VERSION}\n",
            "p",
            &[("REGISTRY", "r.example/a"), ("VERSION", "v1.0.0")],
        )
        .unwrap();
        assert_eq!(out, "image: r.example/a/x:v1.0.0\nversion: v1.0.0\n");
    }

    #[test]
    fn unknown_or_unterminated_placeholders_are_errors() {
        let error = substitute("a: ${REGISTY}\n", "deploy/x.yaml", &[("REGISTRY", "r")])
            .unwrap_err()
            .to_string();
        assert!(error.contains("deploy/x.yaml"), "{error}");
        assert!(error.contains("${REGISTY}"), "{error}");
        assert!(substitute("a: ${REGISTRY\n", "p", &[("REGISTRY", "r")]).is_err());
    }
}
