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
