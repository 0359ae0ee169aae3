//! Flags of the extensions controller binary: the shared ones
//! ([`controller_common::args::CommonArgs`]) plus the reference's extension flags, with the same
//! names, defaults and validation.

use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use controller_common::args::{CommonArgs, parse_go_bool};
use controller_common::webhook::WebhookArgs;

/// Name of this binary's leader-election Lease (distinct from the core controller's).
pub const LEASE_NAME: &str = "extensions.agent-sandbox.x-k8s.io";

/// Where the reference reads the claim label-domain allow-list from (ConfigMap mount).
pub const DEFAULT_ALLOWED_LABEL_DOMAINS_FILE: &str = "/etc/sandbox-config/allowed-label-domains";

/// Default `--webhook-cert-secret` of this binary.
pub const WEBHOOK_CERT_SECRET: &str = "extensions-controller-webhook-certs";

#[derive(Parser, Debug, Clone, PartialEq)]
#[command(name = "extensions-controller", version, about, long_about = None)]
#[command(mut_arg("webhook_service_name", |a| a.default_value(api_types::conversion::EXTENSIONS_WEBHOOK_SERVICE).required(false)))]
#[command(mut_arg("webhook_cert_secret", |a| a.default_value(WEBHOOK_CERT_SECRET).required(false)))]
pub struct Args {
    #[command(flatten)]
    pub common: CommonArgs,

    /// The conversion webhook of the SandboxTemplate, SandboxWarmPool and SandboxClaim CRDs.
    #[command(flatten)]
    pub webhook: WebhookArgs,

    /// Accepted for compatibility with the reference's single binary; this binary always runs
    /// the SandboxTemplate, SandboxWarmPool and SandboxClaim controllers.
    #[arg(long, env = "EXTENSIONS", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub extensions: bool,

    /// Parallel SandboxClaim reconciles.
    #[arg(long, env = "SANDBOX_CLAIM_CONCURRENT_WORKERS", default_value_t = 50,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sandbox_claim_concurrent_workers: u16,

    /// Parallel SandboxWarmPool reconciles (one pool is never reconciled twice at once).
    #[arg(long, env = "SANDBOX_WARM_POOL_CONCURRENT_WORKERS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sandbox_warm_pool_concurrent_workers: u16,

    /// Parallel SandboxTemplate reconciles.
    #[arg(long, env = "SANDBOX_TEMPLATE_CONCURRENT_WORKERS", default_value_t = 1,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sandbox_template_concurrent_workers: u16,

    /// Most creates or deletes one pool reconcile issues.
    #[arg(long, env = "SANDBOX_WARM_POOL_MAX_BATCH_SIZE", default_value_t = 300,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub sandbox_warm_pool_max_batch_size: u32,

    /// Hold before refilling a pool after members were taken (Go duration, `0` = none).
    #[arg(long, env = "SANDBOX_WARM_POOL_REPLENISH_DELAY", default_value = "0",
          value_parser = parse_go_duration)]
    pub sandbox_warm_pool_replenish_delay: Duration,

    /// Most Sandbox creates per second per pool (`0` = unlimited).
    #[arg(long, env = "SANDBOX_WARM_POOL_MAX_REFILL_RATE", default_value_t = 0.0,
          value_parser = parse_refill_rate)]
    pub sandbox_warm_pool_max_refill_rate: f64,

    /// How long a pool member may stay not Ready before it is replaced.
    #[arg(long, env = "SANDBOX_WARM_POOL_READINESS_GRACE_PERIOD", default_value = "5m",
          value_parser = parse_positive_go_duration)]
    pub sandbox_warm_pool_readiness_grace_period: Duration,

    /// How often a pool holding unschedulable members re-checks them.
    #[arg(long, env = "SANDBOX_WARM_POOL_UNSCHEDULABLE_RECHECK_INTERVAL", default_value = "1m",
          value_parser = parse_positive_go_duration)]
    pub sandbox_warm_pool_unschedulable_recheck_interval: Duration,

    /// Mark pool pods `cluster-autoscaler.kubernetes.io/safe-to-evict: "true"` unless the
    /// template sets that annotation.
    #[arg(long, env = "ENABLE_WARM_POOL_EVICTION", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub enable_warm_pool_eviction: bool,

    /// Emit no Events for SandboxClaims.
    #[arg(long, env = "DISABLE_CLAIM_EVENTS", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub disable_claim_events: bool,

    /// Publish the Normal Event `SandboxAdopted` when a claim takes a warm pool Sandbox (off by
    /// default: one API write per warm claim for what the claim's status already says). The
    /// other claim Events (`SandboxProvisioned`, `ClaimExpired`) follow `--disable-claim-events`.
    #[arg(long, env = "CLAIM_ADOPTION_EVENTS", default_value = "false", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub claim_adoption_events: bool,

    /// Do not write the observability annotations (`controller-first-observed-at`,
    /// `opentelemetry.io/trace-context`, `claim-first-ready-at`) on SandboxClaims.
    #[arg(long, env = "DISABLE_CLAIM_OBSERVABILITY_ANNOTATIONS", default_value = "false",
          num_args = 0..=1, require_equals = true, default_missing_value = "true",
          value_parser = parse_go_bool, action = ArgAction::Set)]
    pub disable_claim_observability_annotations: bool,

    /// File with the label domains claims may use in `additionalPodMetadata.labels`
    /// (comma or newline separated). A missing file means only `sandbox.users.io`.
    #[arg(long, env = "ALLOWED_LABEL_DOMAINS_FILE", default_value = DEFAULT_ALLOWED_LABEL_DOMAINS_FILE)]
    pub allowed_label_domains_file: PathBuf,
}

impl Args {
    /// Sum of all worker counts, for the reference's "too many workers" warning.
    pub fn total_workers(&self) -> u64 {
        u64::from(self.sandbox_claim_concurrent_workers)
            + u64::from(self.sandbox_warm_pool_concurrent_workers)
            + u64::from(self.sandbox_template_concurrent_workers)
    }
}

fn parse_refill_rate(s: &str) -> Result<f64, String> {
    let value: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number of creates per second, got {s:?}"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("must be a finite number >= 0, got {s:?}"));
    }
    Ok(value)
}

fn parse_positive_go_duration(s: &str) -> Result<Duration, String> {
    let d = parse_go_duration(s)?;
    if d.is_zero() {
        return Err(format!("must be greater than 0, got {s:?}"));
    }
    Ok(d)
}

/// Parses a Go `time.ParseDuration` string (`300ms`, `1m30s`, `1.5h`, `0`). Negative durations
/// are refused (none of the flags has a meaning for them).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() || text.starts_with('-') {
        return Err(format!(
            "expected a duration such as 300ms, 30s, 5m or 1h, got {s:?}"
        ));
    }
    let text = text.strip_prefix('+').unwrap_or(text);
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!("expected a number in duration {s:?}"));
        }
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("invalid number in duration {s:?}"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "missing unit in duration {s:?} (use ms, s, m or h)"
                ));
            }
            other => return Err(format!("unknown unit {other:?} in duration {s:?}")),
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).map_err(|_| format!("duration {s:?} is out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::error::ErrorKind;

    #[test]
    fn defaults_follow_the_reference() {
        let args = Args::try_parse_from(["extensions-controller"]).unwrap();
        assert_eq!(args.sandbox_claim_concurrent_workers, 50);
        assert_eq!(args.sandbox_warm_pool_concurrent_workers, 1);
        assert_eq!(args.sandbox_template_concurrent_workers, 1);
        assert_eq!(args.sandbox_warm_pool_max_batch_size, 300);
        assert_eq!(args.sandbox_warm_pool_replenish_delay, Duration::ZERO);
        assert_eq!(args.sandbox_warm_pool_max_refill_rate, 0.0);
        assert_eq!(
            args.sandbox_warm_pool_readiness_grace_period,
            Duration::from_secs(300)
        );
        assert_eq!(
            args.sandbox_warm_pool_unschedulable_recheck_interval,
            Duration::from_secs(60)
        );
        assert!(args.enable_warm_pool_eviction);
        assert!(!args.disable_claim_events);
        assert!(!args.claim_adoption_events, "SandboxAdopted is opt-in");
        assert!(!args.disable_claim_observability_annotations);
        assert_eq!(
            args.allowed_label_domains_file,
            PathBuf::from(DEFAULT_ALLOWED_LABEL_DOMAINS_FILE)
        );
    }

    #[test]
    fn reference_flags_parse_go_style() {
        let args = Args::try_parse_from([
            "extensions-controller",
            "--extensions",
            "--sandbox-claim-concurrent-workers=7",
            "--sandbox-warm-pool-max-batch-size=20",
            "--sandbox-warm-pool-max-refill-rate=2.5",
            "--sandbox-warm-pool-replenish-delay=1m30s",
            "--sandbox-warm-pool-readiness-grace-period=90s",
            "--sandbox-warm-pool-unschedulable-recheck-interval=500ms",
            "--enable-warm-pool-eviction=false",
            "--disable-claim-events",
            "--disable-claim-observability-annotations=true",
            "--claim-adoption-events",
        ])
        .unwrap();
        assert_eq!(args.sandbox_claim_concurrent_workers, 7);
        assert_eq!(args.sandbox_warm_pool_max_batch_size, 20);
        assert_eq!(args.sandbox_warm_pool_max_refill_rate, 2.5);
        assert_eq!(
            args.sandbox_warm_pool_replenish_delay,
            Duration::from_secs(90)
        );
        assert_eq!(
            args.sandbox_warm_pool_readiness_grace_period,
            Duration::from_secs(90)
        );
        assert_eq!(
            args.sandbox_warm_pool_unschedulable_recheck_interval,
            Duration::from_millis(500)
        );
        assert!(!args.enable_warm_pool_eviction);
        assert!(args.disable_claim_events && args.disable_claim_observability_annotations);
        assert!(args.claim_adoption_events);
    }

    #[test]
    fn invalid_values_are_usage_errors() {
        for bad in [
            "--sandbox-claim-concurrent-workers=0",
            "--sandbox-warm-pool-concurrent-workers=0",
            "--sandbox-warm-pool-max-batch-size=0",
            "--sandbox-warm-pool-max-refill-rate=-1",
            "--sandbox-warm-pool-max-refill-rate=NaN",
            "--sandbox-warm-pool-max-refill-rate=inf",
            "--sandbox-warm-pool-readiness-grace-period=0",
            "--sandbox-warm-pool-unschedulable-recheck-interval=5",
            "--sandbox-warm-pool-replenish-delay=-1s",
        ] {
            let err = Args::try_parse_from(["extensions-controller", bad]).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::ValueValidation, "{bad}");
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_go_duration("5m0s").unwrap(), Duration::from_secs(300));
        assert_eq!(
            parse_go_duration("1.5h").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("250ms").unwrap(),
            Duration::from_millis(250)
        );
        assert!(parse_go_duration("5").is_err());
        assert!(parse_go_duration("5d").is_err());
        assert!(parse_go_duration("").is_err());
    }
}
