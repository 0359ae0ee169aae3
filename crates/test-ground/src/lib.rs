//! The control plane under a test, chosen by `AGENT_SANDBOX_CLUSTER` ([`Ground`]): devcluster
//! (the default: in process, one per test) or the real one of `realcluster` (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler and kwok: a fresh one per test, at
//! most [`DEFAULT_REAL_AT_ONCE`] at a time per test process).
//!
//! devcluster's API tests and the end-to-end suites both assert the same behaviour on both
//! grounds; this is what they share, so the two cannot drift apart in how a ground is chosen,
//! started, taken turns on and stopped.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

pub use realcluster::Ground;

/// The ground of this run (`AGENT_SANDBOX_CLUSTER`); a bad value fails the test.
pub fn ground() -> Ground {
    Ground::from_env().unwrap_or_else(|e| panic!("{e}"))
}

/// Whether this run is on the real control plane.
pub fn on_real() -> bool {
    ground() == Ground::Real
}

/// `true` on devcluster; on the real control plane prints one line saying why `test` does not
/// run there (`why`: what only devcluster offers, e.g. fault injection) and returns false.
pub fn devcluster_only(test: &str, why: &str) -> bool {
    if !on_real() {
        return true;
    }
    eprintln!("skipping {test} on the real control plane: {why}");
    false
}

/// The control plane of one test. Stop it with [`Cluster::shutdown`].
pub enum Cluster {
    Dev(Box<devcluster::Running>),
    Real(Box<RealGround>),
}

/// Sets how many real control planes one test process runs at once ([`DEFAULT_REAL_AT_ONCE`]
/// when unset; `1` runs the tests of a binary one after another).
pub const REAL_AT_ONCE_ENV: &str = "AGENT_SANDBOX_REAL_CLUSTERS";

/// Real control planes per test process at once, by default. Each test has one of its own;
/// a test on one mostly waits (for the controllers, for kube-controller-manager), so with one
/// at a time about half of 2 cores sat idle through `.ci/run`'s real-cluster suites (vmstat:
/// 47-63 % idle). With two, on the same machine, the core controller's lifecycle and expiry
/// suites on the real ground took 71 and 49 s instead of 97 and 84 s.
pub const DEFAULT_REAL_AT_ONCE: usize = 2;

/// A real control plane of one test, and its turn among the [`REAL_AT_ONCE_ENV`] this process
/// may run at once.
pub struct RealGround {
    pub cluster: realcluster::RealCluster,
    kubeconfig: PathBuf,
    _turn: tokio::sync::OwnedSemaphorePermit,
}

/// How many real control planes at once: [`REAL_AT_ONCE_ENV`], else the default; a value that
/// is not a positive whole number fails the test.
fn real_at_once() -> usize {
    match std::env::var(REAL_AT_ONCE_ENV) {
        Err(_) => DEFAULT_REAL_AT_ONCE,
        Ok(value) => match value.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!("{REAL_AT_ONCE_ENV}={value:?}: want a whole number of clusters, 1 or more"),
        },
    }
}

impl RealGround {
    /// A fresh real control plane, once this process runs fewer than `real_at_once` others.
    pub async fn start(options: realcluster::Options) -> RealGround {
        static TURNS: OnceLock<Arc<tokio::sync::Semaphore>> = OnceLock::new();
        let turn = TURNS
            .get_or_init(|| Arc::new(tokio::sync::Semaphore::new(real_at_once())))
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let cluster = realcluster::RealCluster::start(options)
            .await
            .expect("the real control plane starts (docs/cluster.md)");
        let kubeconfig = cluster.kubeconfig_path();
        RealGround {
            cluster,
            kubeconfig,
            _turn: turn,
        }
    }
}

/// The real control plane's options for a test written against devcluster's `config`: a
/// `history_limit` below devcluster's default asks for a short watch history
/// ([`realcluster::Options::short_history`]); the rest of `config` is devcluster's own, so a
/// test that depends on it is [`devcluster_only`].
pub fn real_options(config: &devcluster::Config) -> realcluster::Options {
    realcluster::Options {
        short_history: config.history_limit < devcluster::Config::ephemeral().history_limit,
        ..realcluster::Options::default()
    }
}

impl Cluster {
    /// A bare control plane of [`ground`] (no CRDs, RBAC or controllers of ours): devcluster
    /// with `config`, or a fresh real one with [`real_options`] of it.
    pub async fn start(config: devcluster::Config) -> Cluster {
        match ground() {
            Ground::DevCluster => Cluster::Dev(Box::new(
                devcluster::DevCluster::start(config)
                    .await
                    .expect("devcluster starts"),
            )),
            Ground::Real => Cluster::Real(Box::new(RealGround::start(real_options(&config)).await)),
        }
    }

    /// The admin kubeconfig.
    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            Cluster::Dev(c) => c.kubeconfig_path(),
            Cluster::Real(r) => &r.kubeconfig,
        }
    }

    /// devcluster's own handle (fault injection, request counters); `None` on the real one.
    pub fn devcluster(&self) -> Option<&devcluster::Running> {
        match self {
            Cluster::Dev(c) => Some(c),
            Cluster::Real(_) => None,
        }
    }

    /// Fault injection (devcluster only; see [`devcluster_only`]).
    pub fn compact_history(&self) {
        self.devcluster()
            .expect("compact_history is devcluster's; guard the test with devcluster_only")
            .compact_history();
    }

    /// devcluster's request observer (devcluster only; see [`devcluster_only`]).
    pub fn observer(&self) -> &Arc<devcluster::observe::Observer> {
        self.devcluster()
            .expect("the observer is devcluster's; guard the test with devcluster_only")
            .observer()
    }

    /// Stops the control plane and removes its data.
    pub async fn shutdown(self) {
        match self {
            Cluster::Dev(c) => c.shutdown().await,
            Cluster::Real(r) => {
                let RealGround { cluster, _turn, .. } = *r;
                let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
            }
        }
    }
}
