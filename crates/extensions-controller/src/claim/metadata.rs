//! `spec.additionalPodMetadata`: validation (qualified keys, label-domain allow-list, blocked
//! annotation domains, label values, the API's limit on an object's annotations) and the
//! no-override merge into the pod metadata. Everything the API would refuse on the Pod is
//! refused here, before a claim takes a Sandbox.

use std::collections::BTreeMap;

use api_types::PodMetadata;
use api_types::keys::{
    SAFE_TO_EVICT_ANNOTATION, SANDBOX_PROPAGATED_ANNOTATIONS_ANNOTATION,
    SANDBOX_PROPAGATED_LABELS_ANNOTATION, SANDBOX_ROUTER_APP_LABEL, SANDBOX_ROUTER_APP_VALUE,
};

/// The API server's limit on all of one object's annotations together, keys and values
/// (`TotalAnnotationSizeLimitB`, 256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// The only label domain allowed when no allow-list is configured.
pub const DEFAULT_LABEL_DOMAIN: &str = "sandbox.users.io";
/// Annotation domains (and their subdomains) a claim may not set.
pub const BLOCKED_ANNOTATION_DOMAINS: [&str; 3] = ["kubernetes.io", "k8s.io", "agents.x-k8s.io"];

/// Why the metadata was refused; the `Display` text is the condition message tail.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// A key or value breaks a rule (Ready reason `InvalidMetadata`).
    #[error("failed to validate {kind} {key:?}: {detail}")]
    Invalid {
        kind: &'static str,
        key: String,
        detail: String,
    },
    /// The Pod would carry more annotation bytes than the API allows (Ready reason
    /// `InvalidMetadata`).
    #[error(
        "annotations are too large: the Pod would carry {size} bytes of annotations (keys and values, with the ones the controllers add), and the API allows at most {TOTAL_ANNOTATION_SIZE_LIMIT}"
    )]
    TooLarge { size: usize },
    /// The claim asks for a different value than the template (Ready reason `ReconcilerError`,
    /// as in the reference; it is not retried until the claim or template changes).
    #[error(
        "metadata override conflict: {kind} {key:?} is defined in template with value {template:?}, but claim requests {claim:?}"
    )]
    Conflict {
        kind: &'static str,
        key: String,
        template: String,
        claim: String,
    },
}

/// Parses the allow-list file content: entries split on `,`, `\n`, `\r`, trimmed, lower-cased,
/// empties dropped; an empty result means the default domain.
pub fn parse_allowed_domains(content: &str) -> Vec<String> {
    let domains: Vec<String> = content
        .split([',', '\n', '\r'])
        .map(|d| d.trim().to_lowercase())
        .filter(|d| !d.is_empty())
        .collect();
    if domains.is_empty() {
        vec![DEFAULT_LABEL_DOMAIN.to_owned()]
    } else {
        domains
    }
}

fn is_alnum(c: char) -> bool {
    c.is_ascii_alphanumeric()
}

/// The name part of a qualified name, or a label value when `allow_empty`.
fn check_name_part(name: &str, allow_empty: bool) -> Result<(), String> {
    if name.is_empty() {
        return if allow_empty {
            Ok(())
        } else {
            Err("name part must be non-empty".into())
        };
    }
    if name.len() > 63 {
        return Err(format!(
            "must be no more than 63 characters (got {})",
            name.len()
        ));
    }
    let ok_chars = name
        .chars()
        .all(|c| is_alnum(c) || matches!(c, '-' | '_' | '.'));
    let ends_ok = name.starts_with(is_alnum) && name.ends_with(is_alnum);
    if !ok_chars || !ends_ok {
        return Err(format!(
            "{name:?} must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

fn check_dns_subdomain(prefix: &str) -> Result<(), String> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 253
        && prefix.split('.').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && part.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && part.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "prefix {prefix:?} must be a lowercase DNS subdomain (e.g. 'example.com')"
        ))
    }
}

/// Checks `[prefix/]name`; returns the prefix if any.
fn check_qualified_name(key: &str) -> Result<Option<&str>, String> {
    match key.split_once('/') {
        Some((prefix, name)) => {
            check_dns_subdomain(prefix)?;
            check_name_part(name, false)?;
            Ok(Some(prefix))
        }
        None => {
            check_name_part(key, false)?;
            Ok(None)
        }
    }
}

fn in_domain(domain: &str, parent: &str) -> bool {
    domain == parent || domain.ends_with(&format!(".{parent}"))
}

fn check_label(key: &str, value: &str, allowed: &[String]) -> Result<(), String> {
    if key.eq_ignore_ascii_case(SANDBOX_ROUTER_APP_LABEL)
        && value.eq_ignore_ascii_case(SANDBOX_ROUTER_APP_VALUE)
    {
        return Err(format!(
            "restricted system label value: {key:?}={value:?} is not allowed in AdditionalPodMetadata"
        ));
    }
    let prefix = check_qualified_name(key)?;
    let Some(prefix) = prefix else {
        return Err(format!(
            "label {key:?} must have a domain prefix (e.g. 'sandbox.users.io/my-label') to prevent opting into unintended policy domains"
        ));
    };
    let domain = prefix.to_lowercase();
    if !allowed.iter().any(|a| in_domain(&domain, a)) {
        return Err(format!("label domain {domain:?} is not in the allowlist"));
    }
    check_name_part(value, true).map_err(|e| format!("invalid label value: {e}"))
}

fn check_annotation(key: &str) -> Result<(), String> {
    let prefix = check_qualified_name(key)?;
    if key == SAFE_TO_EVICT_ANNOTATION {
        return Ok(());
    }
    if let Some(prefix) = prefix {
        let domain = prefix.to_lowercase();
        if BLOCKED_ANNOTATION_DOMAINS
            .iter()
            .any(|d| in_domain(&domain, d))
        {
            return Err(format!(
                "restricted system domain: {key:?} is not allowed in AdditionalPodMetadata"
            ));
        }
    }
    Ok(())
}

/// The annotation bytes a Pod made from `metadata` carries: its annotations (keys and values),
/// and the two annotations the core controller adds listing the propagated label and
/// annotation keys.
pub fn pod_annotation_size(metadata: &PodMetadata) -> usize {
    let listed = |keys: &mut dyn Iterator<Item = &String>, key: &str| {
        let list: usize = keys.map(|k| k.len() + 1).sum();
        if list == 0 { 0 } else { key.len() + list }
    };
    metadata
        .annotations
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>()
        + listed(
            &mut metadata.labels.keys(),
            SANDBOX_PROPAGATED_LABELS_ANNOTATION,
        )
        + listed(
            &mut metadata.annotations.keys(),
            SANDBOX_PROPAGATED_ANNOTATIONS_ANNOTATION,
        )
}

fn check_size(metadata: &PodMetadata) -> Result<(), MetadataError> {
    let size = pod_annotation_size(metadata);
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        return Err(MetadataError::TooLarge { size });
    }
    Ok(())
}

/// Validates a claim's additional pod metadata. Keys are checked in sorted order, so the
/// reported key is deterministic.
pub fn validate(metadata: &PodMetadata, allowed_domains: &[String]) -> Result<(), MetadataError> {
    for (key, value) in &metadata.labels {
        check_label(key, value, allowed_domains).map_err(|detail| MetadataError::Invalid {
            kind: "label",
            key: key.clone(),
            detail,
        })?;
    }
    for key in metadata.annotations.keys() {
        check_annotation(key).map_err(|detail| MetadataError::Invalid {
            kind: "annotation",
            key: key.clone(),
            detail,
        })?;
    }
    check_size(metadata)
}

fn merge_map(
    kind: &'static str,
    target: &mut BTreeMap<String, String>,
    extra: &BTreeMap<String, String>,
) -> Result<(), MetadataError> {
    for (key, value) in extra {
        if let Some(existing) = target.get(key)
            && existing != value
        {
            return Err(MetadataError::Conflict {
                kind,
                key: key.clone(),
                template: existing.clone(),
                claim: value.clone(),
            });
        }
    }
    target.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(())
}

/// Validates `extra` and merges it into `target`; a key the target already has with another
/// value is a conflict (claims add metadata, they never override the template's).
pub fn merge(
    target: &mut PodMetadata,
    extra: &PodMetadata,
    allowed_domains: &[String],
) -> Result<(), MetadataError> {
    validate(extra, allowed_domains)?;
    let mut merged = target.clone();
    merge_map("label", &mut merged.labels, &extra.labels)?;
    merge_map("annotation", &mut merged.annotations, &extra.annotations)?;
    check_size(&merged)?;
    *target = merged;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> PodMetadata {
        PodMetadata {
            labels: pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
            annotations: BTreeMap::new(),
        }
    }

    fn annotations(pairs: &[(&str, &str)]) -> PodMetadata {
        PodMetadata {
            labels: BTreeMap::new(),
            annotations: pairs
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect(),
        }
    }

    fn default_domains() -> Vec<String> {
        vec![DEFAULT_LABEL_DOMAIN.into()]
    }

    fn message(m: &PodMetadata, domains: &[String]) -> String {
        validate(m, domains).unwrap_err().to_string()
    }

    #[test]
    fn accepts_allowed_labels_and_plain_annotations() {
        let mut m = labels(&[
            ("sandbox.users.io/user-label", "v"),
            ("team.sandbox.users.io/x", ""),
        ]);
        m.annotations
            .insert("user-annotation".into(), "anything at all".into());
        m.annotations
            .insert(SAFE_TO_EVICT_ANNOTATION.into(), "false".into());
        assert_eq!(validate(&m, &default_domains()), Ok(()));
    }

    #[test]
    fn router_label_is_refused_with_its_own_message() {
        assert_eq!(
            message(&labels(&[("app", "sandbox-router")]), &default_domains()),
            "failed to validate label \"app\": restricted system label value: \"app\"=\"sandbox-router\" is not allowed in AdditionalPodMetadata"
        );
        assert!(
            message(&labels(&[("APP", "Sandbox-Router")]), &default_domains())
                .contains("restricted system label value")
        );
    }

    #[test]
    fn labels_need_an_allowed_domain() {
        assert!(
            message(&labels(&[("team", "a")]), &default_domains())
                .contains("must have a domain prefix")
        );
        assert_eq!(
            message(&labels(&[("kubernetes.io/x", "a")]), &default_domains()),
            "failed to validate label \"kubernetes.io/x\": label domain \"kubernetes.io\" is not in the allowlist"
        );
        let custom = vec![
            "sandbox.users.io".to_owned(),
            "custom.company.com".to_owned(),
        ];
        assert_eq!(
            validate(&labels(&[("custom.company.com/my-label", "v")]), &custom),
            Ok(())
        );
        assert!(validate(&labels(&[("evilcustom.company.com/x", "v")]), &custom).is_err());
    }

    #[test]
    fn bad_keys_and_values_are_refused() {
        let long = "x".repeat(64);
        for bad in [
            labels(&[("sandbox.users.io/k", long.as_str())]),
            labels(&[("sandbox.users.io/k", "invalid@value")]),
            labels(&[("sandbox.users.io/bad key", "v")]),
            labels(&[("Sandbox_Users/k", "v")]),
        ] {
            assert!(
                matches!(
                    validate(&bad, &default_domains()),
                    Err(MetadataError::Invalid { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn system_annotation_domains_are_blocked_except_safe_to_evict() {
        for key in [
            "kubernetes.io/x",
            "sub.k8s.io/y",
            "agents.x-k8s.io/pod-name",
        ] {
            assert!(
                message(&annotations(&[(key, "v")]), &default_domains())
                    .contains("restricted system domain"),
                "{key}"
            );
        }
        assert_eq!(
            validate(
                &annotations(&[(SAFE_TO_EVICT_ANNOTATION, "true")]),
                &default_domains()
            ),
            Ok(())
        );
    }

    #[test]
    fn merge_adds_equal_values_and_refuses_overrides() {
        let mut target = labels(&[("sandbox.users.io/a", "1")]);
        merge(
            &mut target,
            &labels(&[("sandbox.users.io/a", "1"), ("sandbox.users.io/b", "2")]),
            &default_domains(),
        )
        .unwrap();
        assert_eq!(target.labels.len(), 2);
        let err = merge(
            &mut target,
            &labels(&[("sandbox.users.io/a", "9")]),
            &default_domains(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "metadata override conflict: label \"sandbox.users.io/a\" is defined in template with value \"1\", but claim requests \"9\""
        );
        assert_eq!(
            target.labels["sandbox.users.io/a"], "1",
            "a failed merge changes nothing"
        );
    }

    #[test]
    fn annotations_the_api_would_refuse_on_the_pod_are_refused_here() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let err =
            validate(&annotations(&[("note", big.as_str())]), &default_domains()).unwrap_err();
        assert!(matches!(err, MetadataError::TooLarge { .. }));
        assert!(err.to_string().contains("262144"), "{err}");
        // Each alone fits; the template's and the claim's together do not.
        let half = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT / 2);
        let mut target = annotations(&[("template-note", half.as_str())]);
        assert_eq!(
            validate(
                &annotations(&[("claim-note", half.as_str())]),
                &default_domains()
            ),
            Ok(())
        );
        assert!(matches!(
            merge(
                &mut target,
                &annotations(&[("claim-note", half.as_str())]),
                &default_domains()
            ),
            Err(MetadataError::TooLarge { .. })
        ));
        assert_eq!(
            target.annotations.len(),
            1,
            "a refused merge changes nothing"
        );
    }

    #[test]
    fn the_pods_annotation_size_counts_the_propagation_lists() {
        let mut m = labels(&[("sandbox.users.io/a", "1")]);
        m.annotations.insert("k".into(), "vv".into());
        assert_eq!(
            pod_annotation_size(&m),
            3 + SANDBOX_PROPAGATED_LABELS_ANNOTATION.len()
                + "sandbox.users.io/a".len()
                + 1
                + SANDBOX_PROPAGATED_ANNOTATIONS_ANNOTATION.len()
                + 2
        );
    }

    #[test]
    fn allow_list_file_format() {
        assert_eq!(
            parse_allowed_domains(" A.com ,b.org\r\n\n"),
            ["a.com", "b.org"]
        );
        assert_eq!(parse_allowed_domains("  \n"), [DEFAULT_LABEL_DOMAIN]);
    }
}
