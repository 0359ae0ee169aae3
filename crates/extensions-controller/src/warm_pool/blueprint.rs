//! The Sandbox a pool creates from its template, the hashes stamped on it, and the staleness
//! test (does a member still match the template's blueprint?).

use std::collections::BTreeMap;

use api_types::keys::{
    CREATED_BY_CONTROLLER, CREATED_BY_LABEL, DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL,
    SAFE_TO_EVICT_ANNOTATION, SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM,
    SANDBOX_POD_NAME_ANNOTATION, SANDBOX_TEMPLATE_HASH_LABEL, SANDBOX_TEMPLATE_REF_ANNOTATION,
    SANDBOX_TEMPLATE_REF_HASH_LABEL, SANDBOX_WARM_POOL_LABEL,
};
use api_types::{
    Sandbox, SandboxBlueprint, SandboxSpec, SandboxTemplate, SandboxWarmPool, name_hash,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::ownership::controller_ref;
use crate::template::apply_secure_defaults;

/// Hash of the whole blueprint (pod template, volume claim templates, service) as canonical
/// JSON: the value of `agents.x-k8s.io/sandbox-template-hash`. Any blueprint change changes it;
/// staleness itself is decided semantically ([`matches_blueprint`]), the hash is a fast path.
pub fn blueprint_hash(blueprint: &SandboxBlueprint) -> String {
    // Serializing plain data (strings, maps, numbers) cannot fail; an empty hash means "unknown"
    // and makes callers fall back to the semantic comparison.
    serde_json::to_string(blueprint)
        .map(|json| name_hash(&json))
        .unwrap_or_default()
}

/// Hash of the pod template only (deprecated `sandbox-pod-template-hash` label value).
pub fn pod_template_hash(blueprint: &SandboxBlueprint) -> String {
    serde_json::to_string(&blueprint.pod_template)
        .map(|json| name_hash(&json))
        .unwrap_or_default()
}

/// True when `sandbox` still has what `template` would give a new member: the pod spec with
/// the secure defaults applied, the volume claim templates (names and specs, in order) and the
/// `service` setting. Pod-template metadata and VCT metadata do not make a member stale.
pub fn matches_blueprint(template: &SandboxTemplate, sandbox: &SandboxSpec) -> bool {
    let wanted = &template.spec.blueprint;
    let mut pod_spec = wanted.pod_template.spec.clone();
    apply_secure_defaults(&template.spec, &mut pod_spec);
    let have = &sandbox.blueprint;
    pod_spec == have.pod_template.spec
        && wanted.volume_claim_templates.len() == have.volume_claim_templates.len()
        && wanted
            .volume_claim_templates
            .iter()
            .zip(&have.volume_claim_templates)
            .all(|(w, h)| w.metadata.name == h.metadata.name && w.spec == h.spec)
        && wanted.service == have.service
}

/// What a pass needs to know about the pool's template.
#[derive(Debug, Clone)]
pub struct TemplateFacts {
    pub template: std::sync::Arc<SandboxTemplate>,
    pub blueprint_hash: String,
}

/// True when the member is stale for the current template: a different template name, or a
/// blueprint that no longer matches. The hash label is trusted only on members the pool owns
/// (`trust_hash_label`), so a foreign object cannot pass vetting with a copied label.
pub fn is_stale(
    template_name: &str,
    facts: &TemplateFacts,
    sandbox: &Sandbox,
    trust_hash_label: bool,
) -> bool {
    let labels = sandbox.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    if label(SANDBOX_TEMPLATE_REF_HASH_LABEL) != Some(name_hash(template_name).as_str()) {
        return true;
    }
    if trust_hash_label
        && !facts.blueprint_hash.is_empty()
        && label(SANDBOX_TEMPLATE_HASH_LABEL) == Some(facts.blueprint_hash.as_str())
    {
        return false;
    }
    !matches_blueprint(&facts.template, &sandbox.spec)
}

/// The API server keeps at most this much of a `generateName` prefix (a 63-character name
/// minus the 5 random characters).
const MAX_GENERATED_PREFIX: usize = 58;
/// The characters the API server draws a generated suffix from (no vowels, no look-alikes).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const SUFFIX_LEN: usize = 5;

/// A random suffix of the shape the API server gives `generateName` objects.
pub fn random_suffix() -> String {
    (0..SUFFIX_LEN)
        .map(|_| char::from(SUFFIX_ALPHABET[fastrand::usize(..SUFFIX_ALPHABET.len())]))
        .collect()
}

/// `member` (from [`build_member`]) named here rather than by the API server: the same shape
/// `generateName` gives (the prefix cut at 58 characters, then `suffix`), plus the annotation
/// `agents.x-k8s.io/pod-name` naming the Sandbox itself. The core controller names the Pod after
/// the Sandbox and writes that annotation when it is missing; set at creation it costs nothing.
pub fn with_name(member: &Sandbox, suffix: &str) -> Sandbox {
    let mut named = member.clone();
    // `generateName` stays, as on an object the API server named: users and tools that read it
    // to find a pool's members see what they would with the reference.
    let Some(prefix) = named.metadata.generate_name.clone() else {
        return named;
    };
    let mut cut = prefix.len().min(MAX_GENERATED_PREFIX);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    let name = format!("{}{suffix}", &prefix[..cut]);
    named
        .metadata
        .annotations
        .get_or_insert_default()
        .insert(SANDBOX_POD_NAME_ANNOTATION.to_owned(), name.clone());
    named.metadata.name = Some(name);
    named
}

/// The Sandbox the pool creates (`generateName: <pool>-`), owned by the pool; [`with_name`]
/// gives each create its name.
pub fn build_member(
    pool: &SandboxWarmPool,
    facts: &TemplateFacts,
    enable_eviction: bool,
) -> Option<Sandbox> {
    let pool_name = pool.metadata.name.as_deref()?;
    let template_name = pool.spec.sandbox_template_ref.name.as_str();
    let template = &facts.template;
    let pool_hash = name_hash(pool_name);
    let ref_hash = name_hash(template_name);
    let pod_hash = pod_template_hash(&template.spec.blueprint);

    let mut blueprint = template.spec.blueprint.clone();
    apply_secure_defaults(&template.spec, &mut blueprint.pod_template.spec);
    let pod_labels = &mut blueprint.pod_template.metadata.labels;
    pod_labels.insert(SANDBOX_WARM_POOL_LABEL.into(), pool_hash.clone());
    pod_labels.insert(SANDBOX_TEMPLATE_REF_HASH_LABEL.into(), ref_hash.clone());
    pod_labels.insert(
        DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL.into(),
        pod_hash.clone(),
    );
    pod_labels.insert(
        SANDBOX_TEMPLATE_HASH_LABEL.into(),
        facts.blueprint_hash.clone(),
    );
    if enable_eviction {
        blueprint
            .pod_template
            .metadata
            .annotations
            .entry(SAFE_TO_EVICT_ANNOTATION.into())
            .or_insert_with(|| "true".into());
    }

    let labels: BTreeMap<String, String> = [
        (SANDBOX_WARM_POOL_LABEL, pool_hash),
        (SANDBOX_TEMPLATE_REF_HASH_LABEL, ref_hash),
        (SANDBOX_LAUNCH_TYPE_LABEL, SANDBOX_LAUNCH_TYPE_WARM.into()),
        (DEPRECATED_SANDBOX_POD_TEMPLATE_HASH_LABEL, pod_hash),
        (SANDBOX_TEMPLATE_HASH_LABEL, facts.blueprint_hash.clone()),
        (CREATED_BY_LABEL, CREATED_BY_CONTROLLER.into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();

    Some(Sandbox {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            namespace: pool.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(
                SANDBOX_TEMPLATE_REF_ANNOTATION.to_owned(),
                template_name.to_owned(),
            )])),
            owner_references: Some(vec![controller_ref(pool)?]),
            ..ObjectMeta::default()
        },
        spec: SandboxSpec {
            blueprint,
            ..SandboxSpec::default()
        },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::{
        NetworkPolicyManagement, PersistentVolumeClaimTemplate, SandboxTemplateRef,
        SandboxTemplateSpec, SandboxWarmPoolSpec,
    };
    use k8s_openapi::api::core::v1::{Container, PersistentVolumeClaimSpec};
    use std::sync::Arc;

    fn template(image: &str) -> SandboxTemplate {
        let mut t = SandboxTemplate::new(
            "tmpl",
            SandboxTemplateSpec {
                blueprint: SandboxBlueprint {
                    pod_template: api_types::PodTemplate {
                        spec: k8s_openapi::api::core::v1::PodSpec {
                            containers: vec![Container {
                                name: "main".into(),
                                image: Some(image.into()),
                                ..Container::default()
                            }],
                            ..Default::default()
                        },
                        metadata: api_types::PodMetadata {
                            labels: BTreeMap::from([("team".into(), "a".into())]),
                            annotations: BTreeMap::new(),
                        },
                    },
                    volume_claim_templates: vec![vct("data", Some("fast")), vct("cache", None)],
                    service: None,
                },
                ..SandboxTemplateSpec::default()
            },
        );
        t.metadata.namespace = Some("ns".into());
        t
    }

    fn vct(name: &str, class: Option<&str>) -> PersistentVolumeClaimTemplate {
        PersistentVolumeClaimTemplate {
            metadata: api_types::EmbeddedObjectMetadata {
                name: name.into(),
                ..Default::default()
            },
            spec: PersistentVolumeClaimSpec {
                storage_class_name: class.map(Into::into),
                ..Default::default()
            },
        }
    }

    fn pool() -> SandboxWarmPool {
        let mut p = SandboxWarmPool::new(
            "pool",
            SandboxWarmPoolSpec {
                replicas: Some(2),
                sandbox_template_ref: SandboxTemplateRef {
                    name: "tmpl".into(),
                },
                update_strategy: None,
            },
        );
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("pool-uid".into());
        p
    }

    fn facts(t: SandboxTemplate) -> TemplateFacts {
        let hash = blueprint_hash(&t.spec.blueprint);
        TemplateFacts {
            template: Arc::new(t),
            blueprint_hash: hash,
        }
    }

    #[test]
    fn member_is_labelled_owned_and_secured() {
        let f = facts(template("v1"));
        let sb = build_member(&pool(), &f, true).unwrap();
        let labels = sb.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[SANDBOX_WARM_POOL_LABEL], name_hash("pool"));
        assert_eq!(labels[SANDBOX_TEMPLATE_REF_HASH_LABEL], name_hash("tmpl"));
        assert_eq!(labels[SANDBOX_LAUNCH_TYPE_LABEL], "warm");
        assert_eq!(labels[SANDBOX_TEMPLATE_HASH_LABEL], f.blueprint_hash);
        assert_eq!(labels[CREATED_BY_LABEL], "controller");
        assert_eq!(sb.metadata.generate_name.as_deref(), Some("pool-"));
        assert_eq!(
            sb.metadata.annotations.as_ref().unwrap()[SANDBOX_TEMPLATE_REF_ANNOTATION],
            "tmpl"
        );
        let owner = &sb.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("SandboxWarmPool", "pool-uid")
        );
        assert_eq!(owner.controller, Some(true));
        let pod = &sb.spec.blueprint.pod_template;
        assert_eq!(pod.metadata.labels["team"], "a");
        assert_eq!(pod.metadata.annotations[SAFE_TO_EVICT_ANNOTATION], "true");
        assert_eq!(pod.spec.automount_service_account_token, Some(false));
        assert_eq!(pod.spec.dns_policy.as_deref(), Some("None"));
        let names: Vec<_> = sb
            .spec
            .blueprint
            .volume_claim_templates
            .iter()
            .map(|v| v.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["data", "cache"]);
        assert!(matches_blueprint(&f.template, &sb.spec));
    }

    #[test]
    fn a_member_is_named_like_generate_name_and_points_at_its_pod() {
        let f = facts(template("v1"));
        let member = build_member(&pool(), &f, true).unwrap();
        let suffix = random_suffix();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix.bytes().all(|b| SUFFIX_ALPHABET.contains(&b)),
            "{suffix}"
        );
        let named = with_name(&member, &suffix);
        let name = named.metadata.name.clone().unwrap();
        assert_eq!(name, format!("pool-{suffix}"));
        assert_eq!(named.metadata.generate_name.as_deref(), Some("pool-"));
        let annotations = named.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[SANDBOX_POD_NAME_ANNOTATION], name);
        assert_eq!(annotations[SANDBOX_TEMPLATE_REF_ANNOTATION], "tmpl");
        // Everything else is the member as built.
        let mut unnamed = named.clone();
        unnamed.metadata.name = None;
        unnamed
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(SANDBOX_POD_NAME_ANNOTATION);
        assert_eq!(unnamed, member);

        // A long pool name is cut where the API server cuts it: a valid 63-character name.
        let mut long_pool = pool();
        long_pool.metadata.name = Some("p".repeat(70));
        let long = with_name(&build_member(&long_pool, &f, true).unwrap(), "bcd42");
        let name = long.metadata.name.unwrap();
        assert_eq!(name, format!("{}bcd42", "p".repeat(58)));
        assert_eq!(name.len(), 63);
    }

    #[test]
    fn eviction_annotation_respects_the_flag_and_the_template() {
        let f = facts(template("v1"));
        let off = build_member(&pool(), &f, false).unwrap();
        assert!(
            !off.spec
                .blueprint
                .pod_template
                .metadata
                .annotations
                .contains_key(SAFE_TO_EVICT_ANNOTATION)
        );
        let mut t = template("v1");
        t.spec
            .blueprint
            .pod_template
            .metadata
            .annotations
            .insert(SAFE_TO_EVICT_ANNOTATION.into(), "false".into());
        for flag in [true, false] {
            let sb = build_member(&pool(), &facts(t.clone()), flag).unwrap();
            assert_eq!(
                sb.spec.blueprint.pod_template.metadata.annotations[SAFE_TO_EVICT_ANNOTATION],
                "false"
            );
        }
    }

    #[test]
    fn staleness_follows_the_blueprint_not_metadata() {
        let f = facts(template("v1"));
        let member = build_member(&pool(), &f, true).unwrap();

        let mut relabelled = template("v1");
        relabelled
            .spec
            .blueprint
            .pod_template
            .metadata
            .labels
            .insert("x".into(), "y".into());
        relabelled.spec.blueprint.volume_claim_templates[0]
            .metadata
            .labels
            .insert("x".into(), "y".into());
        let relabelled = facts(relabelled);
        assert_ne!(
            relabelled.blueprint_hash, f.blueprint_hash,
            "metadata edits change the hash"
        );
        assert!(
            !is_stale("tmpl", &relabelled, &member, true),
            "but not staleness"
        );

        assert!(
            is_stale("tmpl", &facts(template("v2")), &member, true),
            "image change"
        );
        let mut reordered = template("v1");
        reordered.spec.blueprint.volume_claim_templates.reverse();
        assert!(
            is_stale("tmpl", &facts(reordered), &member, true),
            "VCT order"
        );
        let mut class = template("v1");
        class.spec.blueprint.volume_claim_templates[0]
            .spec
            .storage_class_name = Some("slow".into());
        assert!(is_stale("tmpl", &facts(class), &member, true), "VCT spec");
        let mut service = template("v1");
        service.spec.blueprint.service = Some(true);
        assert!(
            is_stale("tmpl", &facts(service), &member, true),
            "service nil -> true"
        );
        assert!(is_stale("other", &f, &member, true), "template ref renamed");
    }

    #[test]
    fn a_copied_hash_label_does_not_vet_a_foreign_spec() {
        let f = facts(template("v1"));
        let mut foreign = build_member(&pool(), &f, true).unwrap();
        foreign.spec.blueprint.pod_template.spec.containers[0].image = Some("evil".into());
        assert!(
            !is_stale("tmpl", &f, &foreign, true),
            "owned: hash label trusted"
        );
        assert!(
            is_stale("tmpl", &f, &foreign, false),
            "orphan: compared semantically"
        );
    }

    #[test]
    fn dns_defaults_count_as_current_only_for_the_secure_default() {
        let f = facts(template("v1"));
        let member = build_member(&pool(), &f, true).unwrap();
        let mut unmanaged = template("v1");
        unmanaged.spec.network_policy_management = NetworkPolicyManagement::Unmanaged;
        assert!(!matches_blueprint(&unmanaged, &member.spec));
    }
}
