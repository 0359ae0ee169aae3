//! What happens to each pod, decided from the run's seed and the pod's uid alone.
//!
//! Deciding per pod (instead of drawing from one RNG in event order) keeps the agent
//! deterministic and restart-safe: a restarted agent, or a pod seen twice, gets the same node,
//! the same startup delay and the same failure decision.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use pod_lifecycle::status::fnv1a;

use super::config::NodeConfig;

/// The simulated destiny of one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodFate {
    /// Index of the node it is bound to (when schedulable).
    pub node_index: u32,
    /// Whether it stays Pending with `PodScheduled=False/Unschedulable`.
    pub unschedulable: bool,
    /// Whether its first container fails.
    pub fails: bool,
    /// Time from binding to the status patch that starts it.
    pub startup_delay: Duration,
}

/// Decides a pod's fate from the configuration and its uid.
pub fn pod_fate(cfg: &NodeConfig, uid: &str) -> PodFate {
    let mut rng = StdRng::seed_from_u64(cfg.seed ^ fnv1a(uid.as_bytes()));
    let unschedulable = rng.random::<f64>() < cfg.unschedulable_fraction;
    let fails = rng.random::<f64>() < cfg.failure_fraction;
    let startup_delay = cfg.startup_delay.sample(rng.random::<f64>());
    let node_index = if cfg.nodes == 0 {
        0
    } else {
        rng.random_range(0..cfg.nodes)
    };
    PodFate {
        node_index,
        unschedulable,
        fails,
        startup_delay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::Delay;

    #[test]
    fn fate_is_a_function_of_seed_and_uid() {
        let cfg = NodeConfig {
            failure_fraction: 0.5,
            startup_delay: Delay::Uniform {
                min: Duration::from_millis(10),
                max: Duration::from_millis(20),
            },
            ..NodeConfig::default()
        };
        assert_eq!(pod_fate(&cfg, "uid-1"), pod_fate(&cfg, "uid-1"));
        let other_seed = NodeConfig {
            seed: 99,
            ..cfg.clone()
        };
        let differ = (0..50).any(|i| {
            let uid = format!("uid-{i}");
            pod_fate(&cfg, &uid) != pod_fate(&other_seed, &uid)
        });
        assert!(differ, "the seed changes fates");
    }

    #[test]
    fn fractions_and_delays_hold_over_many_pods() {
        let cfg = NodeConfig {
            nodes: 4,
            unschedulable_fraction: 0.25,
            failure_fraction: 0.1,
            startup_delay: Delay::Uniform {
                min: Duration::from_millis(100),
                max: Duration::from_millis(300),
            },
            ..NodeConfig::default()
        };
        let fates: Vec<_> = (0..2000)
            .map(|i| pod_fate(&cfg, &format!("pod-uid-{i}")))
            .collect();
        let unschedulable = fates.iter().filter(|f| f.unschedulable).count();
        let failing = fates.iter().filter(|f| f.fails).count();
        assert!(
            (400..=600).contains(&unschedulable),
            "{unschedulable} of 2000"
        );
        assert!((140..=260).contains(&failing), "{failing} of 2000");
        assert!(
            fates
                .iter()
                .all(|f| f.startup_delay >= Duration::from_millis(100)
                    && f.startup_delay <= Duration::from_millis(300))
        );
        for node in 0..4 {
            assert!(
                fates.iter().any(|f| f.node_index == node),
                "node {node} gets pods"
            );
        }
        assert!(fates.iter().all(|f| f.node_index < 4));
    }

    #[test]
    fn zero_and_one_fractions_are_absolute() {
        let never = NodeConfig::default();
        let always = NodeConfig {
            unschedulable_fraction: 1.0,
            failure_fraction: 1.0,
            ..NodeConfig::default()
        };
        for i in 0..200 {
            let uid = format!("u{i}");
            let f = pod_fate(&never, &uid);
            assert!(!f.unschedulable && !f.fails);
            assert_eq!(f.startup_delay, Duration::ZERO);
            let f = pod_fate(&always, &uid);
            assert!(f.unschedulable && f.fails);
        }
    }
}
