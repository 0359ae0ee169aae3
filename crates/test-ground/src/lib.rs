//! The control plane under a test, chosen by `AGENT_SANDBOX_CLUSTER` ([`Ground`]): devcluster
//! (the default: in process, one per test) or the real one of `realcluster` (etcd,
//! kube-apiserver, kube-controller-manager, kube-scheduler and kwok: a fresh one per test, one
//! at a time per test process).
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

/// A real control plane of one test, and its turn: one real cluster at a time per process, as
/// every test assumes a cluster of its own (and two would share 2 cores badly).
pub struct RealGround {
    pub cluster: realcluster::RealCluster,
    kubeconfig: PathBuf,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl RealGround {
    /// A fresh real control plane, once the previous test's in this process has stopped.
    pub async fn start(options: realcluster::Options) -> RealGround {
        static TURN: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
        let turn = TURN.get_or_init(Arc::default).clone().lock_owned().await;
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
