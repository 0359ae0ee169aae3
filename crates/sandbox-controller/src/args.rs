//! Flags of the core controller binary: the shared ones (`controller_common::args::CommonArgs`)
//! plus the reference's flags that apply to the Sandbox controller.

use clap::{ArgAction, Parser};
use controller_common::args::{CommonArgs, parse_go_bool};

/// Name of the leader-election Lease, as the reference's `LeaderElectionID`.
pub const LEASE_NAME: &str = "a3317529.agent-sandbox.x-k8s.io";

/// The agent-sandbox core controller: keeps a Pod, its PVCs and an optional headless Service for
/// every agents.x-k8s.io/v1beta1 Sandbox, and reports their state in the Sandbox's status.
#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "sandbox-controller", version, about, long_about = None)]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// Number of Sandboxes reconciled concurrently (a Sandbox is never reconciled by two workers
    /// at once). Must be at least 1.
    #[arg(long, env = "SANDBOX_CONCURRENT_WORKERS", default_value_t = 100,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sandbox_concurrent_workers: u16,

    /// Watch only Pods and Services that carry the tracking label
    /// `agents.x-k8s.io/sandbox-name-hash` (less memory on busy clusters). Go-style boolean.
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
/// chart arguments) start this binary unchanged. Setting one logs a warning.
#[derive(clap::Args, Debug, Clone, PartialEq, Default)]
#[command(next_help_heading = "Accepted for compatibility with the reference, without effect")]
pub struct ReferenceCompatArgs {
    /// Only `false` is accepted: the extension controllers are a separate binary.
    #[arg(long, default_value = "false", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = reject_extensions, action = ArgAction::Set)]
    pub extensions: bool,

    /// Ignored: no conversion webhook (only v1beta1 is served).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = parse_go_bool, action = ArgAction::Set)]
    pub enable_webhook: Option<bool>,

    /// Ignored: no conversion webhook.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = parse_go_bool, action = ArgAction::Set)]
    pub manage_webhook_certs: Option<bool>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_port: Option<u16>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_cert_dir: Option<String>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_cert_name: Option<String>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_key_name: Option<String>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_service_name: Option<String>,

    /// Ignored: no conversion webhook.
    #[arg(long)]
    pub webhook_namespace: Option<String>,
}

impl ReferenceCompatArgs {
    /// The names of the ignored flags that were given.
    pub fn ignored(&self) -> Vec<&'static str> {
        [
            ("--enable-webhook", self.enable_webhook.is_some()),
            (
                "--manage-webhook-certs",
                self.manage_webhook_certs.is_some(),
            ),
            ("--webhook-port", self.webhook_port.is_some()),
            ("--webhook-cert-dir", self.webhook_cert_dir.is_some()),
            ("--webhook-cert-name", self.webhook_cert_name.is_some()),
            ("--webhook-key-name", self.webhook_key_name.is_some()),
            (
                "--webhook-service-name",
                self.webhook_service_name.is_some(),
            ),
            ("--webhook-namespace", self.webhook_namespace.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }
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
    fn reference_helm_arguments_are_accepted_and_reported_as_ignored() {
        let args = Args::try_parse_from([
            "sandbox-controller",
            "--leader-elect=true",
            "--extensions=false",
            "--webhook-service-name=agent-sandbox-webhook-service",
            "--webhook-namespace=agent-sandbox-system",
        ])
        .unwrap();
        assert_eq!(
            args.reference.ignored(),
            ["--webhook-service-name", "--webhook-namespace"]
        );
        assert!(
            Args::try_parse_from(["sandbox-controller"])
                .unwrap()
                .reference
                .ignored()
                .is_empty()
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
            "SANDBOX_CONCURRENT_WORKERS",
        ] {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
    }
}
