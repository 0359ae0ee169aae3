//! Command-line flags shared by both controller binaries.
//!
//! Flag names and defaults follow the reference controller where the meaning is the same, so
//! operators can carry their Deployment `args` over. Every flag can also be set through the
//! environment variable shown in `--help`; a command-line value wins over the environment.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Args, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Namespace used for the leader-election Lease when neither the flag, the in-cluster
/// service-account namespace file nor `POD_NAMESPACE` provide one.
pub const DEFAULT_LEADER_ELECTION_NAMESPACE: &str = "agent-sandbox-system";

/// Where Kubernetes mounts the namespace of the pod's service account.
pub const IN_CLUSTER_NAMESPACE_FILE: &str =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// Flags common to both controller binaries. Add it to a binary's own parser with
/// `#[command(flatten)] common: CommonArgs`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct CommonArgs {
    /// Elect a leader through a coordination.k8s.io/v1 Lease so only one replica runs the
    /// reconcilers. Accepts Go-style booleans: `--leader-elect`, `--leader-elect=false`.
    #[arg(
        long,
        env = "LEADER_ELECT",
        default_value = "true",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_go_bool,
        action = ArgAction::Set,
    )]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease. Default (also when empty): the in-cluster
    /// service-account namespace, else the POD_NAMESPACE variable, else `agent-sandbox-system`.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// Address of the Prometheus `/metrics` endpoint, Go style (`:8080` = all interfaces,
    /// `127.0.0.1:8080`, `[::1]:8080`); `0` disables the metrics server.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8080")]
    pub metrics_bind_address: BindAddress,

    /// Address of the `/healthz` and `/readyz` probe endpoints (same syntax as
    /// --metrics-bind-address; `0` disables).
    #[arg(long, env = "HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: BindAddress,

    /// How long work may wait undone before `/healthz` fails (so the kubelet restarts the
    /// process): keys due in a work queue while no reconcile started or finished, or a watch
    /// event not taken by its controller, for this long (Go duration; `0` disables the check).
    /// A long queue that is draining is healthy.
    #[arg(long, env = "HEALTH_STALL_THRESHOLD", default_value = "60s",
          value_parser = parse_go_duration)]
    pub health_stall_threshold: Duration,

    /// Client-side limit on Kubernetes API requests per second. Negative disables client-side
    /// limiting; 0 means the client-go default of 5.
    #[arg(long, env = "KUBE_API_QPS", default_value_t = -1.0, allow_negative_numbers = true,
          value_parser = parse_finite_f64)]
    pub kube_api_qps: f64,

    /// Burst of Kubernetes API requests allowed above --kube-api-qps (must be at least 1).
    #[arg(long, env = "KUBE_API_BURST", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub kube_api_burst: u32,

    /// DNS domain of the cluster, used to build service FQDNs.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local", value_parser = parse_non_blank)]
    pub cluster_domain: String,

    /// Path to a kubeconfig file (a `:`-separated list is merged). Default: ~/.kube/config
    /// when it exists, else the in-cluster service account.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Log output format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,

    /// Log filter in `tracing` EnvFilter syntax, e.g. `info` or `info,kube=debug`.
    /// Default `info` (or the level given by --zap-log-level); empty means `info`.
    #[arg(long, env = "RUST_LOG", value_parser = parse_log_filter)]
    pub log_level: Option<String>,

    /// Compatibility with the reference's zap flag: `debug`, `info`, `error`, `panic`, or a
    /// verbosity integer > 0 (1 = debug, 2 and more = trace). Ignored when --log-level is set.
    #[arg(long, env = "ZAP_LOG_LEVEL", value_parser = parse_zap_level)]
    pub zap_log_level: Option<ZapLevel>,

    /// Compatibility with the reference's zap flag: `json` or `console` (= text). Overrides
    /// --log-format when given.
    #[arg(long, env = "ZAP_ENCODER", value_enum)]
    pub zap_encoder: Option<ZapEncoder>,
}

impl CommonArgs {
    /// The Lease namespace: the flag, else the in-cluster namespace file, else `POD_NAMESPACE`,
    /// else [`DEFAULT_LEADER_ELECTION_NAMESPACE`].
    pub fn leader_election_namespace(&self) -> String {
        let from_file = std::fs::read_to_string(IN_CLUSTER_NAMESPACE_FILE).ok();
        let from_env = std::env::var("POD_NAMESPACE").ok();
        resolve_namespace(
            self.leader_election_namespace.as_deref(),
            from_file.as_deref(),
            from_env.as_deref(),
        )
    }

    /// The effective log format after applying `--zap-encoder`.
    pub fn effective_log_format(&self) -> LogFormat {
        match self.zap_encoder {
            Some(ZapEncoder::Json) => LogFormat::Json,
            Some(ZapEncoder::Console) => LogFormat::Text,
            None => self.log_format,
        }
    }

    /// The effective `EnvFilter` directive string: `--log-level`, else `--zap-log-level`
    /// translated, else `info`.
    pub fn effective_log_filter(&self) -> String {
        if let Some(filter) = &self.log_level {
            return filter.clone();
        }
        match self.zap_log_level {
            Some(level) => level.as_filter().to_owned(),
            None => "info".to_owned(),
        }
    }
}

impl CommonArgs {
    /// The reference's non-fatal concurrency warnings for a binary running `total_workers`
    /// reconcile workers in all: more than 1000 workers, or (with a client-side limit) more
    /// workers than `--kube-api-burst`. Log each one at startup.
    pub fn concurrency_warnings(&self, total_workers: u64) -> Vec<String> {
        let mut warnings = Vec::new();
        if total_workers > 1000 {
            warnings.push(format!(
                "{total_workers} concurrent workers in total is more than 1000; the API server may be overloaded"
            ));
        }
        if self.kube_api_qps > 0.0 && total_workers > u64::from(self.kube_api_burst) {
            warnings.push(format!(
                "{total_workers} concurrent workers exceed --kube-api-burst={}; workers will wait on the client-side rate limit (--kube-api-qps={})",
                self.kube_api_burst, self.kube_api_qps
            ));
        }
        warnings
    }
}

/// Pure resolution order for the Lease namespace (see [`CommonArgs::leader_election_namespace`]).
pub fn resolve_namespace(flag: Option<&str>, file: Option<&str>, env: Option<&str>) -> String {
    [flag, file, env]
        .into_iter()
        .flatten()
        .map(str::trim)
        .find(|s| !s.is_empty())
        .unwrap_or(DEFAULT_LEADER_ELECTION_NAMESPACE)
        .to_owned()
}

/// Log line format.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable single lines.
    Text,
    /// One JSON object per line (the reference's production default).
    Json,
}

/// Values of the reference's `--zap-encoder`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZapEncoder {
    /// JSON lines.
    Json,
    /// Human-readable lines.
    Console,
}

/// A level given with the reference's `--zap-log-level`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZapLevel {
    /// `debug` or verbosity 1.
    Debug,
    /// `info`.
    Info,
    /// `error` or `panic`.
    Error,
    /// Verbosity 2 and more.
    Trace,
}

impl ZapLevel {
    /// The equivalent `tracing` filter directive.
    pub fn as_filter(self) -> &'static str {
        match self {
            ZapLevel::Debug => "debug",
            ZapLevel::Info => "info",
            ZapLevel::Error => "error",
            ZapLevel::Trace => "trace",
        }
    }
}

fn parse_zap_level(s: &str) -> Result<ZapLevel, String> {
    match s {
        "debug" => Ok(ZapLevel::Debug),
        "info" => Ok(ZapLevel::Info),
        "error" | "panic" => Ok(ZapLevel::Error),
        other => match other.parse::<u32>() {
            Ok(1) => Ok(ZapLevel::Debug),
            Ok(n) if n > 1 => Ok(ZapLevel::Trace),
            _ => Err(format!(
                "expected debug, info, error, panic or an integer > 0, got {other:?}"
            )),
        },
    }
}

fn parse_log_filter(s: &str) -> Result<String, String> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        return Ok("info".to_owned());
    }
    // EnvFilter reads a bare word as a target name, so `warning` or `verbose` would silently
    // turn all logs off. Require each directive to be a level, TARGET=LEVEL or a span filter.
    const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];
    for directive in trimmed.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let is_level = LEVELS.iter().any(|l| l.eq_ignore_ascii_case(directive));
        if !is_level && !directive.contains('=') && !directive.contains('[') {
            return Err(format!(
                "unknown log level {directive:?}: use trace, debug, info, warn, error, off or TARGET=LEVEL"
            ));
        }
    }
    EnvFilter::builder()
        .parse(trimmed)
        .map(|_| trimmed.to_owned())
        .map_err(|e| format!("invalid log filter {trimmed:?}: {e}"))
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

/// Go `strconv.ParseBool` spellings.
pub fn parse_go_bool(s: &str) -> Result<bool, String> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        other => Err(format!("expected true or false, got {other:?}")),
    }
}

fn parse_finite_f64(s: &str) -> Result<f64, String> {
    let value: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, got {s:?}"))?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(format!("expected a finite number, got {s:?}"))
    }
}

fn parse_non_blank(s: &str) -> Result<String, String> {
    let trimmed = s.trim();
    if trimmed.is_empty() {
        Err("must not be empty".to_owned())
    } else {
        Ok(trimmed.to_owned())
    }
}

/// A listen address in Go `net.Listen` syntax, or disabled (`0`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindAddress {
    /// `0`: do not serve.
    Disabled,
    /// Listen on `host:port`; an empty host (`:8080`) means all interfaces: `[::]` (which
    /// also accepts IPv4 on Linux), or `0.0.0.0` where IPv6 is unavailable.
    Listen {
        /// Host name or IP address (IPv6 without brackets); empty for all interfaces.
        host: String,
        /// TCP port; 0 picks a free port.
        port: u16,
    },
}

impl BindAddress {
    /// The `(host, port)` candidates to try in order with [`tokio::net::TcpListener::bind`]
    /// (empty when disabled): all interfaces is `::` then `0.0.0.0`.
    pub fn bind_candidates(&self) -> Vec<(String, u16)> {
        match self {
            BindAddress::Disabled => Vec::new(),
            BindAddress::Listen { host, port } if host.is_empty() => {
                vec![("::".to_owned(), *port), ("0.0.0.0".to_owned(), *port)]
            }
            BindAddress::Listen { host, port } => vec![(host.clone(), *port)],
        }
    }
}

impl FromStr for BindAddress {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s == "0" {
            return Ok(BindAddress::Disabled);
        }
        let Some((host, port)) = s.rsplit_once(':') else {
            return Err(format!(
                "expected HOST:PORT, :PORT or 0 (disabled), got {s:?}"
            ));
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("invalid port {port:?} in {s:?} (expected 0-65535)"))?;
        let host = if let Some(inner) = host.strip_prefix('[') {
            let Some(inner) = inner.strip_suffix(']') else {
                return Err(format!("unbalanced brackets in {s:?}"));
            };
            if inner.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!("invalid IPv6 address {inner:?} in {s:?}"));
            }
            inner.to_owned()
        } else if host.contains(':') {
            return Err(format!(
                "IPv6 addresses need brackets, e.g. [::1]:8080; got {s:?}"
            ));
        } else {
            host.to_owned()
        };
        Ok(BindAddress::Listen { host, port })
    }
}

impl fmt::Display for BindAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindAddress::Disabled => f.write_str("0"),
            BindAddress::Listen { host, port } if host.is_empty() => write!(f, ":{port}"),
            BindAddress::Listen { host, port } if host.contains(':') => {
                write!(f, "[{host}]:{port}")
            }
            BindAddress::Listen { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    #[command(name = "test-controller")]
    struct Cli {
        #[command(flatten)]
        common: CommonArgs,
    }

    const ENV_NAMES: &[&str] = &[
        "LEADER_ELECT",
        "LEADER_ELECTION_NAMESPACE",
        "METRICS_BIND_ADDRESS",
        "HEALTH_PROBE_BIND_ADDRESS",
        "KUBE_API_QPS",
        "KUBE_API_BURST",
        "CLUSTER_DOMAIN",
        "KUBECONFIG",
        "LOG_FORMAT",
        "RUST_LOG",
        "ZAP_LOG_LEVEL",
        "ZAP_ENCODER",
    ];

    /// `set_var` is `unsafe` in edition 2024 and the workspace forbids unsafe code, so tests that
    /// depend on the environment re-run this test binary as a child, filtered to
    /// `env_child_parses_flags`, with a controlled environment; this variable marks the child.
    const CHILD_MARKER: &str = "CONTROLLER_COMMON_ARGS_ENV_CHILD";

    fn parse(args: &[&str]) -> Result<CommonArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("test-controller").chain(args.iter().copied()))
            .map(|c| c.common)
    }

    /// Runs `env_child_parses_flags` in a child process with exactly `vars` set (of the
    /// variables this crate reads) and returns what it parsed, as one line.
    fn parse_in_child(vars: &[(&str, &str)]) -> String {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            "args::tests::env_child_parses_flags",
            "--nocapture",
            "--test-threads=1",
        ]);
        for name in ENV_NAMES {
            cmd.env_remove(name);
        }
        cmd.env(CHILD_MARKER, "1");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
            .lines()
            .find_map(|l| l.split_once("PARSED ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("child printed no PARSED line: {stdout}"))
            .to_owned()
    }

    #[test]
    fn defaults_match_the_reference() {
        assert_eq!(
            parse_in_child(&[]),
            "leader_elect=true ns=None metrics=:8080 probes=:8081 qps=-1 \
             burst=10 domain=cluster.local kubeconfig=None format=Json filter=info"
        );
    }

    #[test]
    fn go_style_booleans_parse() {
        assert!(!parse(&["--leader-elect=false"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect"]).unwrap().leader_elect);
        assert!(parse(&["--leader-elect=true"]).unwrap().leader_elect);
        assert!(!parse(&["--leader-elect=0"]).unwrap().leader_elect);
        assert!(!parse(&["--leader-elect=F"]).unwrap().leader_elect);
        let err = parse(&["--leader-elect=maybe"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("maybe"), "{err}");
    }

    #[test]
    fn bind_addresses_accept_go_syntax() {
        let a = parse(&[
            "--metrics-bind-address=0",
            "--health-probe-bind-address",
            "127.0.0.1:9000",
        ])
        .unwrap();
        assert_eq!(a.metrics_bind_address, BindAddress::Disabled);
        assert_eq!(a.metrics_bind_address.bind_candidates(), vec![]);
        assert_eq!(
            a.health_probe_bind_address.bind_candidates(),
            vec![("127.0.0.1".to_owned(), 9000)]
        );
        let all: BindAddress = ":8080".parse().unwrap();
        assert_eq!(
            all.bind_candidates(),
            vec![("::".to_owned(), 8080), ("0.0.0.0".to_owned(), 8080)]
        );
        let v6: BindAddress = "[::1]:8443".parse().unwrap();
        assert_eq!(v6.to_string(), "[::1]:8443");
        assert_eq!(":8080".parse::<BindAddress>().unwrap().to_string(), ":8080");
        for bad in ["8080", ":http", "::1:80", "[::1:80", "host:70000", "[zz]:1"] {
            assert!(
                bad.parse::<BindAddress>().is_err(),
                "{bad} should be rejected"
            );
        }
    }

    #[test]
    fn invalid_values_are_one_line_errors_with_exit_code_2() {
        for args in [
            &["--kube-api-burst=0"][..],
            &["--kube-api-burst=-3"][..],
            &["--kube-api-qps=fast"][..],
            &["--kube-api-qps=NaN"][..],
            &["--kube-api-qps=inf"][..],
            &["--metrics-bind-address=8080"][..],
            &["--log-format=xml"][..],
            &["--log-level=info,=="][..],
            &["--log-level=verbose"][..],
            &["--log-level=info,warning"][..],
            &["--zap-log-level=0"][..],
            &["--cluster-domain="][..],
            &["--no-such-flag"][..],
        ] {
            let err = parse(args).expect_err(&format!("{args:?} must be rejected"));
            assert_eq!(err.exit_code(), 2, "{args:?}");
            let rendered = err.render().to_string();
            let first_line = rendered.lines().next().unwrap_or_default();
            assert!(first_line.starts_with("error:"), "{args:?}: {rendered}");
        }
    }

    #[test]
    fn numeric_flags_accept_reference_values() {
        let a = parse(&["--kube-api-qps=1000", "--kube-api-burst=2000"]).unwrap();
        assert_eq!(a.kube_api_qps, 1000.0);
        assert_eq!(a.kube_api_burst, 2000);
        let a = parse(&["--kube-api-qps", "-1"]).unwrap();
        assert_eq!(a.kube_api_qps, -1.0);
    }

    #[test]
    fn zap_flags_map_to_our_logging() {
        // `log_level` also reads RUST_LOG; clear it so the developer's environment cannot leak in.
        let mut a = parse(&["--zap-log-level=debug", "--zap-encoder=console"]).unwrap();
        a.log_level = None;
        assert_eq!(a.effective_log_filter(), "debug");
        assert_eq!(a.effective_log_format(), LogFormat::Text);
        let a = parse(&["--log-level=INFO,kube=debug,controller_common[reconcile]"]).unwrap();
        assert_eq!(
            a.log_level.as_deref(),
            Some("INFO,kube=debug,controller_common[reconcile]")
        );
        let a = parse(&["--zap-log-level=3", "--log-level=warn"]).unwrap();
        assert_eq!(a.effective_log_filter(), "warn");
        let mut a = parse(&["--zap-log-level=2"]).unwrap();
        a.log_level = None;
        assert_eq!(a.effective_log_filter(), "trace");
    }

    #[test]
    fn help_names_every_flag_and_its_environment_variable() {
        let err = parse(&["--help"]).unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
        let help = err.render().to_string();
        for flag in [
            "--leader-elect",
            "--leader-election-namespace",
            "--metrics-bind-address",
            "--health-probe-bind-address",
            "--kube-api-qps",
            "--kube-api-burst",
            "--cluster-domain",
            "--kubeconfig",
            "--log-format",
            "--log-level",
            "--zap-log-level",
            "--zap-encoder",
        ] {
            assert!(help.contains(flag), "help lacks {flag}:\n{help}");
        }
        for env in ENV_NAMES {
            assert!(
                help.contains(&format!("env: {env}")),
                "help lacks env {env}:\n{help}"
            );
        }
    }

    #[test]
    fn concurrency_warnings_follow_the_reference() {
        let unlimited = parse(&["--kube-api-qps=-1", "--kube-api-burst=10"]).unwrap();
        assert!(
            unlimited.concurrency_warnings(152).is_empty(),
            "no limit, no burst warning"
        );
        assert_eq!(unlimited.concurrency_warnings(1001).len(), 1);
        let limited = parse(&["--kube-api-qps=50", "--kube-api-burst=100"]).unwrap();
        assert!(limited.concurrency_warnings(100).is_empty());
        let w = limited.concurrency_warnings(152);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("--kube-api-burst=100"), "{w:?}");
        assert_eq!(limited.concurrency_warnings(2000).len(), 2);
    }

    #[test]
    fn namespace_resolution_order() {
        assert_eq!(
            resolve_namespace(Some("ns-flag"), Some("ns-file"), Some("ns-env")),
            "ns-flag"
        );
        assert_eq!(
            resolve_namespace(None, Some("ns-file\n"), Some("ns-env")),
            "ns-file"
        );
        assert_eq!(resolve_namespace(None, None, Some("ns-env")), "ns-env");
        assert_eq!(
            resolve_namespace(None, Some("  "), None),
            DEFAULT_LEADER_ELECTION_NAMESPACE
        );
    }

    #[test]
    fn environment_variables_set_flags() {
        let line = parse_in_child(&[
            ("LEADER_ELECT", "false"),
            ("LEADER_ELECTION_NAMESPACE", "ops"),
            ("METRICS_BIND_ADDRESS", "127.0.0.1:9090"),
            ("HEALTH_PROBE_BIND_ADDRESS", "0"),
            ("KUBE_API_QPS", "50"),
            ("KUBE_API_BURST", "100"),
            ("CLUSTER_DOMAIN", "example.internal"),
            ("KUBECONFIG", "/tmp/kc"),
            ("LOG_FORMAT", "text"),
            ("RUST_LOG", "debug,kube=warn"),
        ]);
        assert_eq!(
            line,
            "leader_elect=false ns=Some(\"ops\") metrics=127.0.0.1:9090 probes=0 qps=50 \
             burst=100 domain=example.internal kubeconfig=Some(\"/tmp/kc\") format=Text \
             filter=debug,kube=warn"
        );
    }

    /// Child half of `environment_variables_set_flags`; without the marker it checks that a
    /// command-line value wins over nothing set (the plain default path).
    #[test]
    fn env_child_parses_flags() {
        if std::env::var_os(CHILD_MARKER).is_none() {
            let a = parse(&["--cluster-domain=flag.local"]).unwrap();
            assert_eq!(a.cluster_domain, "flag.local");
            return;
        }
        let a = parse(&[]).unwrap();
        println!(
            "PARSED leader_elect={} ns={:?} metrics={} probes={} qps={} burst={} domain={} \
             kubeconfig={:?} format={:?} filter={}",
            a.leader_elect,
            a.leader_election_namespace,
            a.metrics_bind_address,
            a.health_probe_bind_address,
            a.kube_api_qps,
            a.kube_api_burst,
            a.cluster_domain,
            a.kubeconfig,
            a.effective_log_format(),
            a.effective_log_filter()
        );
        // A flag on the command line wins over the variable.
        let a = parse(&["--kube-api-burst=7"]).unwrap();
        assert_eq!(a.kube_api_burst, 7);
    }
}
