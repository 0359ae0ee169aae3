//! The validated inputs of a release: its version and its image registry.

use std::fmt;

use crate::error::XtaskError;

/// A release version: `v` + a semantic version that is also a valid image tag and label value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseVersion(String);

/// Label values (the Deployments carry `app.kubernetes.io/version`) are at most 63 characters.
const MAX_VERSION_LEN: usize = 63;

impl ReleaseVersion {
    /// Parses `vMAJOR.MINOR.PATCH[-PRERELEASE]`.
    ///
    /// Build metadata (`+...`) is refused: `+` is allowed neither in an image tag nor in a
    /// label value.
    pub fn parse(given: &str) -> Result<Self, XtaskError> {
        let invalid = |reason: &str| XtaskError::InvalidVersion {
            given: given.to_string(),
            reason: reason.to_string(),
        };
        let Some(semver_text) = given.strip_prefix('v') else {
            return Err(invalid(
                "expected `v` followed by a semantic version, e.g. v1.2.3",
            ));
        };
        let version = semver::Version::parse(semver_text).map_err(|e| {
            invalid(&format!(
                "not a semantic version after the `v` ({e}); expected e.g. v1.2.3 or v1.2.3-rc.1"
            ))
        })?;
        if !version.build.is_empty() {
            return Err(invalid(
                "build metadata (`+...`) cannot be part of an image tag; drop it",
            ));
        }
        if given.len() > MAX_VERSION_LEN {
            return Err(invalid(&format!(
                "longer than {MAX_VERSION_LEN} characters (it is used as a label value)"
            )));
        }
        if !given.ends_with(|c: char| c.is_ascii_alphanumeric()) {
            return Err(invalid(
                "must end with a letter or digit (it is used as a label value)",
            ));
        }
        Ok(ReleaseVersion(given.to_string()))
    }

    /// The version as given, with its leading `v`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ReleaseVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An image registry and repository prefix such as `ghcr.io/example/agent-sandbox`: the
/// controller images are `<registry>/<binary>:<version>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRegistry(String);

impl ImageRegistry {
    /// Accepts `host[:port][/path...]` in the character set image references allow, lowercase
    /// (repository paths must be), without a scheme, a tag, or a trailing slash.
    pub fn parse(given: &str) -> Result<Self, XtaskError> {
        let invalid = |reason: &str| XtaskError::InvalidRegistry {
            given: given.to_string(),
            reason: reason.to_string(),
        };
        if given.is_empty() {
            return Err(invalid("must not be empty"));
        }
        if given.contains("://") {
            return Err(invalid(
                "give the registry without a scheme, e.g. ghcr.io/example",
            ));
        }
        if let Some(bad) = given.chars().find(|c| {
            !(c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '.' | '-' | '_' | '/' | ':'))
        }) {
            return Err(invalid(&format!(
                "character {bad:?} is not allowed (use lowercase letters, digits, '.', '-', '_', ':' and '/')"
            )));
        }
        let mut components = given.split('/');
        let host = components.next().unwrap_or_default();
        if host.is_empty() || components.clone().any(str::is_empty) {
            return Err(invalid(
                "has an empty path component (leading, trailing or doubled '/')",
            ));
        }
        if components.any(|c| c.contains(':')) {
            return Err(invalid(
                "':' is only allowed for a port on the host; the release adds the tag itself",
            ));
        }
        Ok(ImageRegistry(given.to_string()))
    }

    /// The registry prefix as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The full image reference of `binary` at `version`.
    pub fn image(&self, binary: &str, version: &ReleaseVersion) -> String {
        format!("{}/{binary}:{version}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_and_prerelease_versions() {
        for good in ["v0.1.0", "v1.2.3", "v1.0.0-rc.1", "v10.20.30-alpha-2"] {
            assert_eq!(ReleaseVersion::parse(good).unwrap().as_str(), good);
        }
    }

    #[test]
    fn refuses_versions_that_are_not_tags() {
        for (bad, why) in [
            ("1.2.3", "expected `v` followed by"),
            ("v1.2", "not a semantic version"),
            ("vlatest", "not a semantic version"),
            ("v1.2.3+build.5", "build metadata"),
            ("v01.2.3", "not a semantic version"),
            ("v1.0.0-rc-", "must end with a letter or digit"),
        ] {
            let error = ReleaseVersion::parse(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{error}");
            assert!(error.contains(why), "{bad}: {error}");
        }
        let long = format!("v1.0.0-{}", "a".repeat(60));
        assert!(
            ReleaseVersion::parse(&long)
                .unwrap_err()
                .to_string()
                .contains("63")
        );
    }

    #[test]
    fn registry_builds_image_references() {
        let registry = ImageRegistry::parse("localhost:5000/team/agent-sandbox").unwrap();
        let version = ReleaseVersion::parse("v1.2.3").unwrap();
        assert_eq!(
            registry.image("sandbox-controller", &version),
            "localhost:5000/team/agent-sandbox/sandbox-controller:v1.2.3"
        );
    }

    #[test]
    fn refuses_unusable_registries() {
        for (bad, why) in [
            ("", "must not be empty"),
            ("https://ghcr.io/x", "without a scheme"),
            ("ghcr.io/X", "character 'X'"),
            ("ghcr.io/x/", "empty path component"),
            ("ghcr.io//x", "empty path component"),
            ("ghcr.io/x:v1", "only allowed for a port"),
            ("ghcr.io/x y", "character ' '"),
            ("ghcr.io/${VERSION}", "character '$'"),
        ] {
            let error = ImageRegistry::parse(bad).unwrap_err().to_string();
            assert!(error.contains(why), "{bad:?}: {error}");
        }
    }
}
