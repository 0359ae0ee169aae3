//! The conversion-webhook flags, with the reference's names and defaults (plus
//! `--webhook-host` and `--webhook-cert-secret`, which the reference hard-codes). Both binaries
//! flatten [`WebhookArgs`] into their own flags and give `--webhook-service-name` and
//! `--webhook-cert-secret` their own defaults (each controller has its own Service and Secret):
//! `#[command(mut_arg("webhook_service_name", |a| a.default_value("...").required(false)))]`.

use std::path::PathBuf;

use clap::{ArgAction, Args};

use crate::args::parse_go_bool;

/// The reference's certificate directory.
pub const DEFAULT_CERT_DIR: &str = "/tmp/k8s-webhook-server/serving-certs";
/// The reference's webhook port.
pub const DEFAULT_PORT: u16 = 9443;

/// Flags of the conversion webhook.
#[derive(Args, Debug, Clone, PartialEq)]
#[command(next_help_heading = "Conversion webhook")]
pub struct WebhookArgs {
    /// Serve the v1alpha1 <-> v1beta1 conversion webhook of this controller's CRDs over HTTPS,
    /// on every replica. With `false` nothing is served: the CRDs must then use
    /// `conversion.strategy: None`, and every request that needs a conversion fails.
    #[arg(long, env = "ENABLE_WEBHOOK", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub enable_webhook: bool,

    /// Generate the webhook's CA and serving certificate, keep them in the Secret
    /// --webhook-cert-secret (shared by the replicas, renewed 30 days before they expire or
    /// when the Service name changes) and patch the CA into this controller's CRDs. With
    /// `false`, read the certificate from --webhook-cert-dir (e.g. mounted by cert-manager,
    /// re-read when it changes) and leave the CRDs' caBundle to whoever provides it.
    #[arg(long, env = "MANAGE_WEBHOOK_CERTS", default_value = "true", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = parse_go_bool,
          action = ArgAction::Set)]
    pub manage_webhook_certs: bool,

    /// Port of the webhook's HTTPS server (`0` picks a free port).
    #[arg(long, env = "WEBHOOK_PORT", default_value_t = DEFAULT_PORT)]
    pub webhook_port: u16,

    /// Address the webhook server listens on; empty means all interfaces.
    #[arg(long, env = "WEBHOOK_HOST", default_value = "")]
    pub webhook_host: String,

    /// Directory of the serving certificate and key with --manage-webhook-certs=false. Unused
    /// with managed certificates, which are kept in memory (the root filesystem stays
    /// read-only).
    #[arg(long, env = "WEBHOOK_CERT_DIR", default_value = DEFAULT_CERT_DIR)]
    pub webhook_cert_dir: PathBuf,

    /// File name of the certificate in --webhook-cert-dir (only with
    /// --manage-webhook-certs=false). When it and --webhook-key-name keep their defaults and
    /// both files are absent, a combined `cert.pem` is read for both.
    #[arg(long, env = "WEBHOOK_CERT_NAME", default_value = "tls.crt", value_parser = parse_file_name)]
    pub webhook_cert_name: String,

    /// File name of the private key in --webhook-cert-dir (only with
    /// --manage-webhook-certs=false).
    #[arg(long, env = "WEBHOOK_KEY_NAME", default_value = "tls.key", value_parser = parse_file_name)]
    pub webhook_key_name: String,

    /// Name of the Service the API server calls: in the certificate's DNS names and in the CRDs'
    /// `conversion.webhook.clientConfig.service`.
    #[arg(long, env = "WEBHOOK_SERVICE_NAME", value_parser = parse_dns_label)]
    pub webhook_service_name: String,

    /// Namespace of the webhook Service (--webhook-service-name) and of the certificate Secret.
    #[arg(long, env = "WEBHOOK_NAMESPACE", default_value = "agent-sandbox-system",
          value_parser = parse_dns_label)]
    pub webhook_namespace: String,

    /// Secret holding the managed CA and serving certificate (`ca.crt`, `tls.crt`, `tls.key`).
    #[arg(long, env = "WEBHOOK_CERT_SECRET", value_parser = parse_dns_subdomain)]
    pub webhook_cert_secret: String,
}

impl WebhookArgs {
    /// Flag values that have no effect with these settings, to log at startup (the reference
    /// logs the same cases).
    pub fn ignored(&self) -> Vec<&'static str> {
        let mut ignored = Vec::new();
        if !self.enable_webhook && self.manage_webhook_certs {
            ignored.push("--manage-webhook-certs (the webhook is disabled)");
        }
        if self.enable_webhook && self.manage_webhook_certs {
            if self.webhook_cert_name != "tls.crt" || self.webhook_key_name != "tls.key" {
                ignored.push(
                    "--webhook-cert-name/--webhook-key-name (managed certificates are kept in memory)",
                );
            }
            if self.webhook_cert_dir != std::path::Path::new(DEFAULT_CERT_DIR) {
                ignored.push("--webhook-cert-dir (managed certificates are kept in memory)");
            }
        }
        ignored
    }
}

fn parse_file_name(s: &str) -> Result<String, String> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Err("must not be empty".into());
    }
    if trimmed.contains('/') {
        return Err(format!(
            "must be a file name in --webhook-cert-dir, got {s:?}"
        ));
    }
    Ok(trimmed.to_owned())
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn parse_dns_label(s: &str) -> Result<String, String> {
    let trimmed = s.trim();
    if is_dns_label(trimmed) {
        Ok(trimmed.to_owned())
    } else {
        Err(format!(
            "must be a DNS label (lowercase letters, digits and '-', at most 63), got {s:?}"
        ))
    }
}

fn parse_dns_subdomain(s: &str) -> Result<String, String> {
    let trimmed = s.trim();
    if trimmed.len() <= 253 && trimmed.split('.').all(is_dns_label) {
        Ok(trimmed.to_owned())
    } else {
        Err(format!(
            "must be a DNS subdomain (a Secret name), got {s:?}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "test-controller")]
    #[command(mut_arg("webhook_service_name", |a| a.default_value("test-webhook").required(false)))]
    #[command(mut_arg("webhook_cert_secret", |a| a.default_value("test-webhook-certs").required(false)))]
    struct Cli {
        #[command(flatten)]
        webhook: WebhookArgs,
    }

    fn parse(args: &[&str]) -> Result<WebhookArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("test-controller").chain(args.iter().copied()))
            .map(|c| c.webhook)
    }

    #[test]
    fn defaults_follow_the_reference_and_the_binary() {
        let a = parse(&[]).unwrap();
        assert!(a.enable_webhook && a.manage_webhook_certs);
        assert_eq!(a.webhook_port, 9443);
        assert_eq!(a.webhook_host, "");
        assert_eq!(a.webhook_cert_dir, PathBuf::from(DEFAULT_CERT_DIR));
        assert_eq!(
            (a.webhook_cert_name.as_str(), a.webhook_key_name.as_str()),
            ("tls.crt", "tls.key")
        );
        assert_eq!(a.webhook_service_name, "test-webhook");
        assert_eq!(a.webhook_namespace, "agent-sandbox-system");
        assert_eq!(a.webhook_cert_secret, "test-webhook-certs");
        assert!(a.ignored().is_empty());
    }

    #[test]
    fn the_reference_helm_arguments_parse() {
        let a = parse(&[
            "--enable-webhook=true",
            "--manage-webhook-certs=false",
            "--webhook-port=9444",
            "--webhook-cert-dir=/certs",
            "--webhook-cert-name=cert.pem",
            "--webhook-key-name=cert.pem",
            "--webhook-service-name=agent-sandbox-webhook-service",
            "--webhook-namespace=agent-sandbox-system",
        ])
        .unwrap();
        assert!(!a.manage_webhook_certs);
        assert_eq!(a.webhook_port, 9444);
        assert_eq!(a.webhook_service_name, "agent-sandbox-webhook-service");
        assert!(a.ignored().is_empty());
    }

    #[test]
    fn blank_or_invalid_names_are_usage_errors() {
        for bad in [
            "--webhook-cert-name= ",
            "--webhook-key-name=",
            "--webhook-cert-name=a/b",
            "--webhook-service-name=Bad_Name",
            "--webhook-namespace=",
            "--webhook-cert-secret=-x",
            "--enable-webhook=maybe",
            "--webhook-port=70000",
        ] {
            let error = parse(&[bad]).expect_err(bad);
            assert_eq!(error.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn flags_without_effect_are_reported() {
        let a = parse(&["--enable-webhook=false"]).unwrap();
        assert_eq!(a.ignored().len(), 1);
        let a = parse(&["--webhook-cert-name=x.crt", "--webhook-cert-dir=/elsewhere"]).unwrap();
        assert_eq!(a.ignored().len(), 2, "{:?}", a.ignored());
    }
}
