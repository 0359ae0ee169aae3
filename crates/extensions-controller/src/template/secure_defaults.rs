//! Secure pod-spec defaults for template-made Sandboxes (api.md §2.1): no service-account token
//! unless the template asks for one, and, when the template runs under the secure default
//! NetworkPolicy (which blocks cluster DNS), public resolvers instead of cluster DNS.

use api_types::{NetworkPolicyManagement, SandboxTemplateSpec};
use k8s_openapi::api::core::v1::{PodDNSConfig, PodSpec};

/// Resolvers used when the secure default NetworkPolicy blocks cluster DNS.
pub const PUBLIC_NAMESERVERS: [&str; 2] = ["8.8.8.8", "1.1.1.1"];

/// True when the template gets the secure default NetworkPolicy (managed, no custom rules).
pub fn uses_secure_default_policy(template: &SandboxTemplateSpec) -> bool {
    template.network_policy_management == NetworkPolicyManagement::Managed
        && template.network_policy.is_none()
}

/// Applies the defaults in place: `automountServiceAccountToken: false` when unset; and
/// `dnsPolicy: None` with the public nameservers when the secure default policy applies and
/// the pod spec sets no `dnsPolicy`.
pub fn apply_secure_defaults(template: &SandboxTemplateSpec, pod: &mut PodSpec) {
    if pod.automount_service_account_token.is_none() {
        pod.automount_service_account_token = Some(false);
    }
    if uses_secure_default_policy(template) && pod.dns_policy.as_deref().unwrap_or("").is_empty() {
        pod.dns_policy = Some("None".to_owned());
        pod.dns_config = Some(PodDNSConfig {
            nameservers: Some(PUBLIC_NAMESERVERS.iter().map(|s| (*s).to_owned()).collect()),
            ..PodDNSConfig::default()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::SandboxNetworkPolicySpec;

    fn template(management: NetworkPolicyManagement, custom: bool) -> SandboxTemplateSpec {
        SandboxTemplateSpec {
            network_policy_management: management,
            network_policy: custom.then(SandboxNetworkPolicySpec::default),
            ..SandboxTemplateSpec::default()
        }
    }

    #[test]
    fn managed_default_turns_token_off_and_isolates_dns() {
        let mut pod = PodSpec::default();
        apply_secure_defaults(&template(NetworkPolicyManagement::Managed, false), &mut pod);
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.dns_policy.as_deref(), Some("None"));
        assert_eq!(
            pod.dns_config.unwrap().nameservers.unwrap(),
            vec!["8.8.8.8".to_owned(), "1.1.1.1".to_owned()]
        );
    }

    #[test]
    fn explicit_token_setting_is_kept_and_dns_still_isolated() {
        let mut pod = PodSpec {
            automount_service_account_token: Some(true),
            ..PodSpec::default()
        };
        apply_secure_defaults(&template(NetworkPolicyManagement::Managed, false), &mut pod);
        assert_eq!(pod.automount_service_account_token, Some(true));
        assert_eq!(pod.dns_policy.as_deref(), Some("None"));
    }

    #[test]
    fn unmanaged_or_custom_policy_leaves_dns_alone() {
        for spec in [
            template(NetworkPolicyManagement::Unmanaged, false),
            template(NetworkPolicyManagement::Managed, true),
        ] {
            let mut pod = PodSpec::default();
            apply_secure_defaults(&spec, &mut pod);
            assert_eq!(pod.automount_service_account_token, Some(false));
            assert!(pod.dns_policy.is_none() && pod.dns_config.is_none());
        }
    }

    #[test]
    fn an_explicit_dns_policy_is_never_replaced() {
        let mut pod = PodSpec {
            dns_policy: Some("ClusterFirst".into()),
            ..PodSpec::default()
        };
        apply_secure_defaults(&template(NetworkPolicyManagement::Managed, false), &mut pod);
        assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirst"));
        assert!(pod.dns_config.is_none());
    }
}
