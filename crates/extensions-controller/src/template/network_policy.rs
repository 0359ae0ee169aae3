//! The shared NetworkPolicy of a template: its name and desired spec (custom rules or the
//! secure default).

use std::collections::BTreeMap;

use api_types::keys::{
    SANDBOX_ROUTER_APP_LABEL, SANDBOX_ROUTER_APP_VALUE, SANDBOX_TEMPLATE_REF_HASH_LABEL,
};
use api_types::{SandboxTemplateSpec, name_hash};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Namespace whose `app: sandbox-router` pods may reach sandboxes under the secure default.
pub const ROUTER_NAMESPACE: &str = "agent-sandbox-system";
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Private, link-local (metadata server) and unique-local ranges the default egress blocks.
pub const BLOCKED_IPV4: [&str; 4] = [
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "169.254.0.0/16",
];
pub const BLOCKED_IPV6: [&str; 2] = ["fc00::/7", "fe80::/10"];

/// The longest name a NetworkPolicy may have (a DNS subdomain).
pub const MAX_POLICY_NAME: usize = 253;
const POLICY_SUFFIX: &str = "-network-policy";

/// `<template>-network-policy`, as the reference names it. A template name may be 253
/// characters, the most a NetworkPolicy name may be too: when the plain name would be longer,
/// the template name is cut and the hash of the whole name inserted,
/// `<template, cut>-<hash>-network-policy`, so two long names sharing a prefix still get two
/// policies.
pub fn policy_name(template_name: &str) -> String {
    let plain = format!("{template_name}{POLICY_SUFFIX}");
    if plain.len() <= MAX_POLICY_NAME {
        return plain;
    }
    let hash = name_hash(template_name);
    let mut keep = MAX_POLICY_NAME - POLICY_SUFFIX.len() - hash.len() - 1;
    while !template_name.is_char_boundary(keep) {
        keep -= 1;
    }
    let cut = template_name[..keep].trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    format!("{cut}-{hash}{POLICY_SUFFIX}")
}

fn labels(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, String>> {
    Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

/// The desired spec for a Managed template: pods selected by the template-ref hash label, both
/// policy types, and the template's rules or the secure default.
pub fn desired_spec(template_name: &str, template: &SandboxTemplateSpec) -> NetworkPolicySpec {
    let (ingress, egress) = match &template.network_policy {
        Some(custom) => (custom.ingress.clone(), custom.egress.clone()),
        None => (vec![default_ingress()], vec![default_egress()]),
    };
    NetworkPolicySpec {
        pod_selector: Some(LabelSelector {
            match_labels: labels(&[(SANDBOX_TEMPLATE_REF_HASH_LABEL, &name_hash(template_name))]),
            match_expressions: None,
        }),
        policy_types: Some(vec!["Ingress".to_owned(), "Egress".to_owned()]),
        ingress: Some(ingress),
        egress: Some(egress),
    }
}

fn default_ingress() -> NetworkPolicyIngressRule {
    NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: labels(&[(SANDBOX_ROUTER_APP_LABEL, SANDBOX_ROUTER_APP_VALUE)]),
                match_expressions: None,
            }),
            namespace_selector: Some(LabelSelector {
                match_labels: labels(&[(NAMESPACE_NAME_LABEL, ROUTER_NAMESPACE)]),
                match_expressions: None,
            }),
            ip_block: None,
        }]),
        ports: None,
    }
}

fn default_egress() -> NetworkPolicyEgressRule {
    let block = |cidr: &str, except: &[&str]| NetworkPolicyPeer {
        ip_block: Some(IPBlock {
            cidr: cidr.to_owned(),
            except: Some(except.iter().map(|s| (*s).to_owned()).collect()),
        }),
        ..NetworkPolicyPeer::default()
    };
    NetworkPolicyEgressRule {
        to: Some(vec![
            block("0.0.0.0/0", &BLOCKED_IPV4),
            block("::/0", &BLOCKED_IPV6),
        ]),
        ports: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_template_names_get_a_policy_name_within_the_limit() {
        assert_eq!(policy_name("tmpl"), "tmpl-network-policy");
        let at_limit = "a".repeat(MAX_POLICY_NAME - POLICY_SUFFIX.len());
        assert_eq!(policy_name(&at_limit), format!("{at_limit}-network-policy"));
        let longest = format!("t{}", "-long".repeat(50)) + "-a";
        assert_eq!(longest.len(), 253);
        let name = policy_name(&longest);
        assert!(name.len() <= MAX_POLICY_NAME, "{}", name.len());
        assert!(
            name.ends_with(&format!("-{}-network-policy", name_hash(&longest))),
            "{name}"
        );
        assert!(
            !name.contains("--"),
            "the cut ends on an alphanumeric: {name}"
        );
        let sibling = format!("t{}", "-long".repeat(50)) + "-b";
        assert_ne!(policy_name(&sibling), name, "same prefix, another policy");
    }
    use api_types::SandboxNetworkPolicySpec;

    #[test]
    fn secure_default_admits_only_the_router_and_public_egress() {
        let spec = desired_spec("t", &SandboxTemplateSpec::default());
        assert_eq!(
            spec.policy_types.as_deref(),
            Some(&["Ingress".to_owned(), "Egress".to_owned()][..])
        );
        let selector = spec.pod_selector.unwrap().match_labels.unwrap();
        assert_eq!(
            selector.get(SANDBOX_TEMPLATE_REF_HASH_LABEL),
            Some(&name_hash("t"))
        );
        let ingress = spec.ingress.unwrap();
        assert_eq!(ingress.len(), 1);
        let peers = ingress[0].from.as_ref().unwrap();
        assert_eq!(peers.len(), 1);
        let pods = peers[0]
            .pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(pods.get("app").map(String::as_str), Some("sandbox-router"));
        let ns = peers[0]
            .namespace_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        assert_eq!(
            ns.get(NAMESPACE_NAME_LABEL).map(String::as_str),
            Some("agent-sandbox-system")
        );
        let egress = spec.egress.unwrap();
        assert_eq!(egress.len(), 1);
        let to = egress[0].to.as_ref().unwrap();
        let v4 = to[0].ip_block.as_ref().unwrap();
        let v6 = to[1].ip_block.as_ref().unwrap();
        assert_eq!(v4.cidr, "0.0.0.0/0");
        for blocked in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "169.254.0.0/16",
        ] {
            assert!(
                v4.except.as_ref().unwrap().iter().any(|e| e == blocked),
                "{blocked}"
            );
        }
        assert_eq!(v6.cidr, "::/0");
        assert!(v6.except.as_ref().unwrap().iter().any(|e| e == "fe80::/10"));
    }

    #[test]
    fn custom_rules_are_copied_verbatim() {
        let rule = NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(LabelSelector {
                    match_labels: labels(&[("app", "ingress")]),
                    match_expressions: None,
                }),
                ..NetworkPolicyPeer::default()
            }]),
            ports: None,
        };
        let template = SandboxTemplateSpec {
            network_policy: Some(SandboxNetworkPolicySpec {
                ingress: vec![rule.clone()],
                egress: vec![],
            }),
            ..SandboxTemplateSpec::default()
        };
        let spec = desired_spec("custom", &template);
        assert_eq!(spec.ingress.unwrap(), vec![rule]);
        assert_eq!(
            spec.egress.unwrap(),
            vec![],
            "an empty egress list blocks all egress"
        );
        assert_eq!(policy_name("custom"), "custom-network-policy");
    }
}
