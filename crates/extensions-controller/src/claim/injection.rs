//! The template policies that let a claim customize its (cold) Sandbox:
//! `envVarsInjectionPolicy` for `spec.env` and `volumeClaimTemplatesPolicy` for
//! `spec.volumeClaimTemplates`.

use std::collections::{BTreeMap, HashSet};

use api_types::{
    ClaimEnvVar, EnvVarsInjectionPolicy, PersistentVolumeClaimTemplate, VolumeClaimTemplatesPolicy,
};
use k8s_openapi::api::core::v1::{Container, EnvVar, PodSpec};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// The template's policy refuses the request (Ready reason `EnvVarsInjectionRejected`).
    #[error("{0}")]
    Rejected(String),
    /// The request cannot be applied as written (Ready reason `ReconcilerError`).
    #[error("{0}")]
    Invalid(String),
}

fn apply_to_container(
    container: &mut Container,
    vars: &[&ClaimEnvVar],
    policy: EnvVarsInjectionPolicy,
) -> Result<(), EnvError> {
    if vars.is_empty() {
        return Ok(());
    }
    if policy == EnvVarsInjectionPolicy::Allowed
        && container.env_from.as_ref().is_some_and(|e| !e.is_empty())
    {
        return Err(EnvError::Rejected(format!(
            "container {:?} uses EnvFrom sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables",
            container.name
        )));
    }
    let env = container.env.get_or_insert_with(Vec::new);
    for var in vars {
        match env.iter_mut().find(|e| e.name == var.name) {
            Some(existing) if policy == EnvVarsInjectionPolicy::Overrides => {
                *existing = EnvVar {
                    name: var.name.clone(),
                    value: Some(var.value.clone()),
                    value_from: None,
                };
            }
            Some(_) => {
                return Err(EnvError::Invalid(format!(
                    "environment variable override is not allowed by the template policy for variable {:?}",
                    var.name
                )));
            }
            None => env.push(EnvVar {
                name: var.name.clone(),
                value: Some(var.value.clone()),
                value_from: None,
            }),
        }
    }
    Ok(())
}

/// Injects the claim's env vars into `pod` (a copy of the template's pod spec). Unnamed vars go
/// to the first regular container; named ones to the init or regular container of that name.
pub fn inject_env(
    policy: EnvVarsInjectionPolicy,
    pod: &mut PodSpec,
    env: &[ClaimEnvVar],
) -> Result<(), EnvError> {
    if env.is_empty() {
        return Ok(());
    }
    if !matches!(
        policy,
        EnvVarsInjectionPolicy::Allowed | EnvVarsInjectionPolicy::Overrides
    ) {
        return Err(EnvError::Rejected(
            "environment variable injection is not allowed by the template policy".into(),
        ));
    }
    let first = pod.containers.first().map(|c| c.name.clone());
    let mut named: BTreeMap<&str, Vec<&ClaimEnvVar>> = BTreeMap::new();
    let mut unnamed = Vec::new();
    for var in env {
        if var.container_name.is_empty() {
            unnamed.push(var);
        } else {
            named
                .entry(var.container_name.as_str())
                .or_default()
                .push(var);
        }
    }
    let init_names: HashSet<String> = pod
        .init_containers
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    let names: HashSet<&str> = pod.containers.iter().map(|c| c.name.as_str()).collect();
    for var in env.iter().filter(|v| !v.container_name.is_empty()) {
        if !names.contains(var.container_name.as_str()) && !init_names.contains(&var.container_name)
        {
            return Err(EnvError::Invalid(format!(
                "target container {:?} not found in template for environment variable {:?}",
                var.container_name, var.name
            )));
        }
    }
    if first.is_none() && !unnamed.is_empty() {
        return Err(EnvError::Invalid(format!(
            "template has no container for environment variable {:?}",
            unnamed[0].name
        )));
    }
    for container in pod.init_containers.iter_mut().flatten() {
        let vars = named
            .get(container.name.as_str())
            .cloned()
            .unwrap_or_default();
        apply_to_container(container, &vars, policy)?;
    }
    for (index, container) in pod.containers.iter_mut().enumerate() {
        let mut vars = named
            .get(container.name.as_str())
            .cloned()
            .unwrap_or_default();
        if index == 0 {
            vars.extend(unnamed.iter().copied());
        }
        apply_to_container(container, &vars, policy)?;
    }
    Ok(())
}

fn check_names(which: &str, list: &[PersistentVolumeClaimTemplate]) -> Result<(), String> {
    let mut seen = HashSet::new();
    for (index, vct) in list.iter().enumerate() {
        let name = vct.metadata.name.as_str();
        if name.is_empty() {
            return Err(format!(
                "invalid volume claim templates: {which}: name at index {index} is empty"
            ));
        }
        if !seen.insert(name) {
            return Err(format!(
                "invalid volume claim templates: {which}: duplicate name {name:?}"
            ));
        }
    }
    Ok(())
}

/// The volume claim templates of a cold Sandbox (Ready reason `VolumeClaimTemplatesError` on
/// error): the template's, validated, when the claim has none; otherwise merged per policy.
pub fn merge_volume_claim_templates(
    policy: VolumeClaimTemplatesPolicy,
    template: &[PersistentVolumeClaimTemplate],
    claim: &[PersistentVolumeClaimTemplate],
) -> Result<Vec<PersistentVolumeClaimTemplate>, String> {
    check_names("template", template)?;
    if claim.is_empty() {
        return Ok(template.to_vec());
    }
    let wrap = |e: String| format!("failed to merge volume claim templates: {e}");
    check_names("claim", claim).map_err(wrap)?;
    match policy {
        VolumeClaimTemplatesPolicy::Disallowed => Err(wrap(
            "volume claim templates are disallowed by the template".into(),
        )),
        VolumeClaimTemplatesPolicy::Allowed => {
            if let Some(clash) = claim
                .iter()
                .find(|c| template.iter().any(|t| t.metadata.name == c.metadata.name))
            {
                return Err(wrap(format!(
                    "overriding volume claim templates is forbidden by the template: cannot override template volume {:?}",
                    clash.metadata.name
                )));
            }
            Ok(template.iter().chain(claim).cloned().collect())
        }
        VolumeClaimTemplatesPolicy::Overrides => {
            let mut merged: Vec<PersistentVolumeClaimTemplate> = template
                .iter()
                .map(|t| {
                    claim
                        .iter()
                        .find(|c| c.metadata.name == t.metadata.name)
                        .unwrap_or(t)
                        .clone()
                })
                .collect();
            merged.extend(
                claim
                    .iter()
                    .filter(|c| !template.iter().any(|t| t.metadata.name == c.metadata.name))
                    .cloned(),
            );
            Ok(merged)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::EmbeddedObjectMetadata;
    use k8s_openapi::api::core::v1::{EnvFromSource, PersistentVolumeClaimSpec};

    fn container(name: &str, env: &[(&str, &str)], env_from: bool) -> Container {
        Container {
            name: name.into(),
            env: Some(
                env.iter()
                    .map(|(n, v)| EnvVar {
                        name: (*n).into(),
                        value: Some((*v).into()),
                        value_from: None,
                    })
                    .collect(),
            ),
            env_from: env_from.then(|| vec![EnvFromSource::default()]),
            ..Container::default()
        }
    }

    fn var(name: &str, value: &str, container: &str) -> ClaimEnvVar {
        ClaimEnvVar {
            name: name.into(),
            value: value.into(),
            container_name: container.into(),
        }
    }

    fn env_of(c: &Container) -> Vec<(String, String)> {
        c.env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect()
    }

    fn pod() -> PodSpec {
        PodSpec {
            containers: vec![container(
                "test-container",
                &[("EXISTING_VAR", "template-value")],
                false,
            )],
            ..PodSpec::default()
        }
    }

    #[test]
    fn overrides_replaces_in_place_and_appends() {
        let mut p = pod();
        inject_env(
            EnvVarsInjectionPolicy::Overrides,
            &mut p,
            &[
                var("EXISTING_VAR", "claim", ""),
                var("NEW_VAR", "claim-value", ""),
            ],
        )
        .unwrap();
        assert_eq!(
            env_of(&p.containers[0]),
            [
                ("EXISTING_VAR".into(), "claim".into()),
                ("NEW_VAR".into(), "claim-value".into())
            ]
        );
    }

    #[test]
    fn allowed_adds_but_never_overrides() {
        let mut p = pod();
        inject_env(
            EnvVarsInjectionPolicy::Allowed,
            &mut p,
            &[var("NEW_VAR_ALLOWED", "x", "")],
        )
        .unwrap();
        assert_eq!(p.containers[0].env.as_ref().unwrap().len(), 2);
        let err = inject_env(
            EnvVarsInjectionPolicy::Allowed,
            &mut pod(),
            &[var("EXISTING_VAR", "x", "")],
        )
        .unwrap_err();
        assert_eq!(err, EnvError::Invalid("environment variable override is not allowed by the template policy for variable \"EXISTING_VAR\"".into()));
    }

    #[test]
    fn disallowed_policy_rejects_any_env() {
        let err = inject_env(
            EnvVarsInjectionPolicy::Disallowed,
            &mut pod(),
            &[var("A", "b", "")],
        )
        .unwrap_err();
        assert_eq!(
            err,
            EnvError::Rejected(
                "environment variable injection is not allowed by the template policy".into()
            )
        );
        assert_eq!(
            inject_env(EnvVarsInjectionPolicy::Disallowed, &mut pod(), &[]),
            Ok(())
        );
    }

    #[test]
    fn env_from_blocks_allowed_only_for_targeted_containers() {
        let mut p = PodSpec {
            containers: vec![
                container("app", &[], false),
                container("sidecar", &[], true),
            ],
            init_containers: Some(vec![container("init-setup", &[], true)]),
            ..PodSpec::default()
        };
        inject_env(
            EnvVarsInjectionPolicy::Allowed,
            &mut p,
            &[var("APP_ENV", "1", "app")],
        )
        .unwrap();
        assert_eq!(env_of(&p.containers[0]).len(), 1);
        assert!(env_of(&p.containers[1]).is_empty());
        let err = inject_env(
            EnvVarsInjectionPolicy::Allowed,
            &mut p,
            &[var("X", "1", "init-setup")],
        )
        .unwrap_err();
        assert_eq!(err, EnvError::Rejected("container \"init-setup\" uses EnvFrom sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables".into()));
    }

    #[test]
    fn named_targets_include_init_containers_and_must_exist() {
        let mut p = PodSpec {
            init_containers: Some(vec![container("init", &[], false)]),
            ..pod()
        };
        inject_env(
            EnvVarsInjectionPolicy::Overrides,
            &mut p,
            &[var("INIT_ENV", "1", "init")],
        )
        .unwrap();
        assert_eq!(
            env_of(&p.init_containers.as_ref().unwrap()[0]),
            [("INIT_ENV".into(), "1".into())]
        );
        let err = inject_env(
            EnvVarsInjectionPolicy::Overrides,
            &mut pod(),
            &[var("INVALID_ENV", "1", "does-not-exist")],
        )
        .unwrap_err();
        assert_eq!(err, EnvError::Invalid("target container \"does-not-exist\" not found in template for environment variable \"INVALID_ENV\"".into()));
    }

    fn vct(name: &str, size: &str) -> PersistentVolumeClaimTemplate {
        PersistentVolumeClaimTemplate {
            metadata: EmbeddedObjectMetadata {
                name: name.into(),
                ..Default::default()
            },
            spec: PersistentVolumeClaimSpec {
                storage_class_name: Some(size.into()),
                ..Default::default()
            },
        }
    }

    fn names(list: &[PersistentVolumeClaimTemplate]) -> Vec<(&str, &str)> {
        list.iter()
            .map(|v| {
                (
                    v.metadata.name.as_str(),
                    v.spec.storage_class_name.as_deref().unwrap_or(""),
                )
            })
            .collect()
    }

    #[test]
    fn volume_claim_template_policies() {
        let template = [vct("data", "1Gi")];
        assert_eq!(
            names(
                &merge_volume_claim_templates(
                    VolumeClaimTemplatesPolicy::Disallowed,
                    &template,
                    &[]
                )
                .unwrap()
            ),
            [("data", "1Gi")]
        );
        let over = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Overrides,
            &template,
            &[vct("data", "5Gi"), vct("extra", "1Gi")],
        )
        .unwrap();
        assert_eq!(names(&over), [("data", "5Gi"), ("extra", "1Gi")]);
        let allowed = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Allowed,
            &template,
            &[vct("custom", "2Gi")],
        )
        .unwrap();
        assert_eq!(names(&allowed), [("data", "1Gi"), ("custom", "2Gi")]);
        let err = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Allowed,
            &template,
            &[vct("data", "2Gi")],
        )
        .unwrap_err();
        assert!(
            err.contains("cannot override template volume \"data\""),
            "{err}"
        );
        let err = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Disallowed,
            &template,
            &[vct("x", "1")],
        )
        .unwrap_err();
        assert!(
            err.contains("volume claim templates are disallowed by the template"),
            "{err}"
        );
        let err = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Overrides,
            &template,
            &[vct("", "1")],
        )
        .unwrap_err();
        assert!(err.contains("name at index 0 is empty"), "{err}");
        let err = merge_volume_claim_templates(
            VolumeClaimTemplatesPolicy::Overrides,
            &[vct("data", "1"), vct("data", "2")],
            &[],
        )
        .unwrap_err();
        assert!(err.contains("duplicate name \"data\""), "{err}");
    }
}
