//! Flags of the core controller binary: the shared ones (`controller_common::args::CommonArgs`)
//! plus the reference's flags that apply to the Sandbox controller.

use clap::{ArgAction, Parser};
use controller_common::args::{CommonArgs, parse_go_bool};
use controller_common::webhook::WebhookArgs;

/// Name of the leader-election Lease, as the reference's `LeaderElectionID`.
pub const LEASE_NAME: &str = "a3317529.agent-sandbox.x-k8s.io";

/// Default `--webhook-cert-secret` of this binary.
pub const WEBHOOK_CERT_SECRET: &str = "sandbox-controller-webhook-certs";

/// The agent-sandbox core controller: keeps a Pod, its PVCs and an optional headless Service for
/// every agents.x-k8s.io/v1beta1 Sandbox, and reports their state in the Sandbox's status.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "sandbox-controller", version, about, long_about = None)]
#[command(mut_arg("webhook_service_name", |a| a.default_value(api_types::conversion::CORE_WEBHOOK_SERVICE).required(false)))]
#[command(mut_arg("webhook_cert_secret", |a| a.default_value(WEBHOOK_CERT_SECRET).required(false)))]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// The conversion webhook of the Sandbox CRD.
    #[command(flatten)]
    pub webhook: WebhookArgs,

    /// Number of Sandboxes reconciled concurrently (a Sandbox is never reconciled by two workers
    /// at once). Must be at least 1.
    #[arg(long, env = "SANDBOX_CONCURRENT_WORKERS", default_value_t = 100,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sandbox_concurrent_workers: u16,

    /// Watch only Pods and Services that carry the tracking label
    /// `agents.x-k8s.io/sandbox-name-hash` (less memory on busy clusters). Pre-existing objects
    /// must then carry that label to be adopted. Go-style boolean.
    #[arg(
        long,
        env = "CACHE_LABEL_SELECTORS",
        default_value = "false",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set,
    )]
    pub cache_label_selectors: bool,

    /// Do not publish Kubernetes Events (saves one API write per event). Go-style boolean.
    #[arg(
        long,
        env = "DISABLE_SANDBOX_EVENTS",
        default_value = "false",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set,
    )]
    pub disable_sandbox_events: bool,

    #[command(flatten)]
    pub reference: ReferenceCompatArgs,
}

fn reject_extensions(s: &str) -> Result<bool, String> {
    match parse_go_bool(s)? {
        false => Ok(false),
        true => Err(
            "the extension controllers run in the separate extensions-controller binary; remove --extensions"
                .to_string(),
        ),
    }
}

/// Flags of the reference binary that have no effect here, accepted so its manifests (Helm
/// chart arguments) start this binary unchanged.
#[derive(clap::Args, Debug, Clone, PartialEq, Default)]
#[command(next_help_heading = "Accepted for compatibility with the reference, without effect")]
pub struct ReferenceCompatArgs {
    /// Only `false` is accepted: the extension controllers are a separate binary.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = reject_extensions, action = ArgAction::Set)]
    pub extensions: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    #[test]
    fn defaults_follow_the_reference() {
        let args = Args::try_parse_from(["sandbox-controller"]).unwrap();
        assert_eq!(args.sandbox_concurrent_workers, 100);
        assert!(!args.cache_label_selectors);
        assert!(!args.disable_sandbox_events);
        assert!(args.common.leader_elect);
        assert_eq!(args.common.cluster_domain, "cluster.local");
    }

    #[test]
    fn flags_parse_go_style() {
        let args = Args::try_parse_from([
            "sandbox-controller",
            "--sandbox-concurrent-workers=7",
            "--cache-label-selectors",
            "--disable-sandbox-events=true",
            "--leader-elect=false",
            "--cluster-domain=custom.domain",
        ])
        .unwrap();
        assert_eq!(args.sandbox_concurrent_workers, 7);
        assert!(args.cache_label_selectors && args.disable_sandbox_events);
        assert!(!args.common.leader_elect);
        assert_eq!(args.common.cluster_domain, "custom.domain");
    }

    #[test]
    fn zero_or_garbage_workers_is_a_usage_error() {
        for bad in [
            "--sandbox-concurrent-workers=0",
            "--sandbox-concurrent-workers=-1",
            "--sandbox-concurrent-workers=many",
        ] {
            let err = Args::try_parse_from(["sandbox-controller", bad]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}");
            assert_eq!(err.exit_code(), 2);
        }
    }

    #[test]
    fn reference_helm_arguments_set_the_webhook() {
        let args = Args::try_parse_from([
            "sandbox-controller",
            "--leader-elect=true",
            "--extensions=false",
            "--webhook-service-name=agent-sandbox-webhook-service",
            "--webhook-namespace=agent-sandbox-system",
        ])
        .unwrap();
        assert_eq!(
            args.webhook.webhook_service_name,
            "agent-sandbox-webhook-service"
        );
        assert_eq!(args.webhook.webhook_namespace, "agent-sandbox-system");
    }

    #[test]
    fn webhook_defaults_name_this_controllers_service_and_secret() {
        let args = Args::try_parse_from(["sandbox-controller"]).unwrap();
        assert!(args.webhook.enable_webhook && args.webhook.manage_webhook_certs);
        assert_eq!(args.webhook.webhook_port, 9443);
        assert_eq!(
            args.webhook.webhook_service_name,
            "sandbox-controller-webhook"
        );
        assert_eq!(
            args.webhook.webhook_cert_secret,
            "sandbox-controller-webhook-certs"
        );
    }

    #[test]
    fn extensions_true_is_refused_with_a_pointer_to_the_other_binary() {
        for bad in ["--extensions", "--extensions=true"] {
            let err = Args::try_parse_from(["sandbox-controller", bad]).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(
                err.to_string().contains("extensions-controller binary"),
                "{err}"
            );
        }
    }

    #[test]
    fn help_lists_every_flag() {
        let help = <Args as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        for flag in [
            "--sandbox-concurrent-workers",
            "--cache-label-selectors",
            "--disable-sandbox-events",
            "--leader-elect",
            "--cluster-domain",
            "--enable-webhook",
            "--webhook-service-name",
            "SANDBOX_CONCURRENT_WORKERS",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
    }
}
