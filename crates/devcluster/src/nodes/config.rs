//! Configuration of the simulated nodes, and the node names and addresses derived from it.

use std::net::Ipv4Addr;
use std::time::Duration;

/// A distribution of durations.
#[derive(Debug, Clone, PartialEq)]
pub enum Delay {
    /// Always the same.
    Fixed(Duration),
    /// Uniform between `min` and `max` (inclusive).
    Uniform { min: Duration, max: Duration },
}

impl Default for Delay {
    fn default() -> Self {
        Delay::Fixed(Duration::ZERO)
    }
}

impl Delay {
    /// The duration at quantile `unit` (`0.0..1.0`).
    pub fn sample(&self, unit: f64) -> Duration {
        match self {
            Delay::Fixed(d) => *d,
            Delay::Uniform { min, max } => {
                if max <= min {
                    *min
                } else {
                    *min + (*max - *min).mul_f64(unit.clamp(0.0, 1.0))
                }
            }
        }
    }

    /// Parses `200ms`, `1.5s`, `0`, or a range `100ms..2s` (uniform).
    pub fn parse(text: &str) -> Result<Self, NodeConfigError> {
        match text.split_once("..") {
            Some((min, max)) => Ok(Delay::Uniform {
                min: parse_duration(min)?,
                max: parse_duration(max)?,
            }),
            None => Ok(Delay::Fixed(parse_duration(text)?)),
        }
    }
}

impl std::str::FromStr for Delay {
    type Err = NodeConfigError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Delay::parse(text)
    }
}

/// Parses `250ms`, `2s`, `1.5s`, `1m` or a bare `0`.
pub fn parse_duration(text: &str) -> Result<Duration, NodeConfigError> {
    let text = text.trim();
    let invalid = || NodeConfigError::Duration(text.to_string());
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        return Err(invalid());
    };
    let value: f64 = number.trim().parse().map_err(|_| invalid())?;
    if !value.is_finite() || value < 0.0 {
        return Err(invalid());
    }
    Duration::try_from_secs_f64(value * scale).map_err(|_| invalid())
}

/// How a pod chosen to fail fails.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailureMode {
    /// As a kubelet would: `restartPolicy: Never` pods end `Failed`; the others crash-loop.
    #[default]
    ByRestartPolicy,
    /// Always phase `Failed` (container terminated with exit code 1).
    Failed,
    /// Always `CrashLoopBackOff` (phase `Running`, not ready).
    CrashLoop,
}

impl std::str::FromStr for FailureMode {
    type Err = NodeConfigError;
    /// `by-restart-policy`, `failed` or `crash-loop`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "by-restart-policy" => Ok(FailureMode::ByRestartPolicy),
            "failed" => Ok(FailureMode::Failed),
            "crash-loop" => Ok(FailureMode::CrashLoop),
            other => Err(NodeConfigError::FailureMode(other.to_string())),
        }
    }
}

/// Settings of the simulated scheduler, kubelets and volume binder.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// Number of nodes, named `devcluster-node-0..N`.
    pub nodes: u32,
    /// Time from binding to Running/Ready.
    pub startup_delay: Delay,
    /// Fraction (`0.0..=1.0`) of pods that stay Pending with `PodScheduled=False/Unschedulable`.
    pub unschedulable_fraction: f64,
    /// Fraction (`0.0..=1.0`) of scheduled pods whose first container fails.
    pub failure_fraction: f64,
    pub failure_mode: FailureMode,
    /// Time a container of a deleted pod takes to exit after TERM (after its `preStop` hook);
    /// the pod's grace period caps it (KILL). Zero (the default): at once.
    pub termination_delay: Duration,
    /// Seed of every random decision (per pod: see `fate.rs`).
    pub seed: u64,
    /// Pods (and claims) handled at the same time.
    pub concurrency: u16,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            nodes: 3,
            startup_delay: Delay::default(),
            unschedulable_fraction: 0.0,
            failure_fraction: 0.0,
            failure_mode: FailureMode::default(),
            termination_delay: Duration::ZERO,
            seed: 0,
            concurrency: 64,
        }
    }
}

/// A node configuration that cannot work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NodeConfigError {
    #[error("nodes: Invalid value: {0}: must be between 1 and {MAX_NODES}")]
    NodeCount(u32),
    #[error("{field}: Invalid value: {value}: must be between 0 and 1")]
    Fraction { field: &'static str, value: f64 },
    #[error("startupDelay: Invalid value: the minimum exceeds the maximum")]
    DelayRange,
    #[error("concurrency: Invalid value: 0: must be at least 1")]
    Concurrency,
    #[error("invalid duration {0:?}: use a number with ms, s or m (e.g. 250ms, 1.5s), or 0")]
    Duration(String),
    #[error("invalid failure mode {0:?}: use by-restart-policy, failed or crash-loop")]
    FailureMode(String),
}

/// Node IPs are `127.0.X.Y` with `X` in `1..=254`, so the count is bounded.
pub const MAX_NODES: u32 = 254 * 254;

impl NodeConfig {
    /// Checks the settings; the agent refuses to start with an invalid configuration.
    pub fn validate(&self) -> Result<(), NodeConfigError> {
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return Err(NodeConfigError::NodeCount(self.nodes));
        }
        for (field, value) in [
            ("unschedulableFraction", self.unschedulable_fraction),
            ("failureFraction", self.failure_fraction),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(NodeConfigError::Fraction { field, value });
            }
        }
        if let Delay::Uniform { min, max } = &self.startup_delay
            && min > max
        {
            return Err(NodeConfigError::DelayRange);
        }
        if self.concurrency == 0 {
            return Err(NodeConfigError::Concurrency);
        }
        Ok(())
    }

    /// `devcluster-node-<index>`.
    pub fn node_name(index: u32) -> String {
        format!("devcluster-node-{index}")
    }

    /// The index of one of our node names, if it is one.
    pub fn node_index(&self, name: &str) -> Option<u32> {
        let index: u32 = name.strip_prefix("devcluster-node-")?.parse().ok()?;
        (index < self.nodes && Self::node_name(index) == name).then_some(index)
    }

    /// `127.0.1.1` for node 0, `127.0.1.2` for node 1, ... (254 per third octet).
    pub fn node_ip(index: u32) -> Ipv4Addr {
        let third = 1 + (index / 254) as u8;
        let fourth = 1 + (index % 254) as u8;
        Ipv4Addr::new(127, 0, third, fourth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_and_ips() {
        let cfg = NodeConfig {
            nodes: 300,
            ..NodeConfig::default()
        };
        assert_eq!(NodeConfig::node_name(0), "devcluster-node-0");
        assert_eq!(cfg.node_index("devcluster-node-299"), Some(299));
        assert_eq!(cfg.node_index("devcluster-node-300"), None);
        assert_eq!(cfg.node_index("devcluster-node-01"), None);
        assert_eq!(cfg.node_index("kind-worker"), None);
        assert_eq!(NodeConfig::node_ip(0), Ipv4Addr::new(127, 0, 1, 1));
        assert_eq!(NodeConfig::node_ip(253), Ipv4Addr::new(127, 0, 1, 254));
        assert_eq!(NodeConfig::node_ip(254), Ipv4Addr::new(127, 0, 2, 1));
        assert!(NodeConfig::node_ip(MAX_NODES - 1).is_loopback());
    }

    #[test]
    fn validation_names_the_field() {
        assert_eq!(NodeConfig::default().validate(), Ok(()));
        let bad = NodeConfig {
            failure_fraction: 1.2,
            ..NodeConfig::default()
        };
        let err = bad.validate().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("failureFraction: Invalid value: 1.2"),
            "{err}"
        );
        assert_eq!(
            NodeConfig {
                nodes: 0,
                ..NodeConfig::default()
            }
            .validate(),
            Err(NodeConfigError::NodeCount(0))
        );
        let range = NodeConfig {
            startup_delay: Delay::Uniform {
                min: Duration::from_secs(2),
                max: Duration::from_secs(1),
            },
            ..NodeConfig::default()
        };
        assert_eq!(range.validate(), Err(NodeConfigError::DelayRange));
    }

    #[test]
    fn delays_parse_and_sample() {
        assert_eq!(Delay::parse("0").unwrap(), Delay::Fixed(Duration::ZERO));
        assert_eq!(
            Delay::parse("250ms").unwrap(),
            Delay::Fixed(Duration::from_millis(250))
        );
        assert_eq!(
            Delay::parse("1.5s").unwrap(),
            Delay::Fixed(Duration::from_millis(1500))
        );
        let uniform = Delay::parse("100ms..2s").unwrap();
        assert_eq!(
            uniform,
            Delay::Uniform {
                min: Duration::from_millis(100),
                max: Duration::from_secs(2)
            }
        );
        assert_eq!(uniform.sample(0.0), Duration::from_millis(100));
        assert_eq!(uniform.sample(1.0), Duration::from_secs(2));
        assert_eq!(uniform.sample(0.5), Duration::from_millis(1050));
        assert_eq!(
            "2s".parse::<Delay>().unwrap(),
            Delay::Fixed(Duration::from_secs(2))
        );
        assert_eq!(
            "crash-loop".parse::<FailureMode>().unwrap(),
            FailureMode::CrashLoop
        );
        assert_eq!(
            "failed".parse::<FailureMode>().unwrap(),
            FailureMode::Failed
        );
        assert!(
            "sometimes"
                .parse::<FailureMode>()
                .unwrap_err()
                .to_string()
                .contains("crash-loop")
        );
        for bad in ["", "fast", "10", "-1s", "1h", "NaNs"] {
            let err = Delay::parse(bad).unwrap_err();
            assert!(matches!(err, NodeConfigError::Duration(_)), "{bad}: {err}");
        }
    }
}
