//! A real Kubernetes control plane on loopback for `cargo xtask cluster` and the tests:
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (simulated nodes and
//! Pods, with the [pod finisher](finisher) beside it ending Pods whose commands end), built with
//! `go build` from the releases pinned in `upstream/go.mod` and cached per user (see
//! `docs/cluster.md`).
//!
//! ```no_run
//! # async fn demo() -> Result<(), realcluster::Error> {
//! // One cluster per test process, shared by its tests, stopped after the last one drops it:
//! let cluster = realcluster::shared().await?;
//! let client = cluster.client().await?; // admin
//! let audit = std::fs::read_to_string(cluster.audit_log_path()).unwrap_or_default();
//! # let _ = (client, audit);
//! # Ok(()) }
//! ```
//!
//! The settings are production-like: TLS everywhere (etcd too), client-certificate and
//! service-account-token authentication, `Node,RBAC` authorization, the default admission
//! plugins with PodSecurity, and an audit log of every request of a ServiceAccount in
//! `agent-sandbox-system` (the controllers').
//!
//! Which control plane the end-to-end suites use is chosen by [`GROUND_ENV`] ([`Ground`]).

pub mod audit;
pub mod cluster;
pub mod config;
pub mod error;
pub mod finisher;
pub mod pki;
pub mod process;
pub mod provisioner;
pub mod release_rbac;
pub mod sweep;
pub mod upstream;

use std::sync::{Arc, Weak};

pub use cluster::{Options, RealCluster, client_from_kubeconfig};
pub use config::Delay;
pub use error::Error;
pub use process::{ComponentInfo, Exit, ExitReporter};
pub use upstream::{Component, Versions};

/// Where progress lines go: each says what is being built or waited for.
pub type Progress = Arc<dyn Fn(&str) + Send + Sync>;

/// Progress lines on stderr, as `==> line`.
pub fn stderr_progress() -> Progress {
    Arc::new(|line: &str| eprintln!("==> {line}"))
}

/// The environment variable that picks the control plane of the end-to-end suites:
/// `devcluster` (the default) or `real`.
pub const GROUND_ENV: &str = "AGENT_SANDBOX_CLUSTER";

/// A control plane the suites can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ground {
    /// devcluster, in-process: fast, nothing to build.
    DevCluster,
    /// This crate's real control plane.
    Real,
}

impl Ground {
    /// Reads [`GROUND_ENV`]: unset or empty is [`Ground::DevCluster`]; anything but
    /// `devcluster` or `real` is an error (a typo must not silently test the other ground).
    pub fn from_env() -> Result<Ground, Error> {
        match std::env::var(GROUND_ENV) {
            Err(std::env::VarError::NotPresent) => Ok(Ground::DevCluster),
            Ok(value) => Ground::parse(&value),
            Err(std::env::VarError::NotUnicode(value)) => Err(Error::Invalid(format!(
                "{GROUND_ENV}={value:?}: want `devcluster` or `real`"
            ))),
        }
    }

    /// Parses `devcluster`, `real` or the empty string (devcluster).
    pub fn parse(value: &str) -> Result<Ground, Error> {
        match value.trim() {
            "" | "devcluster" => Ok(Ground::DevCluster),
            "real" => Ok(Ground::Real),
            other => Err(Error::Invalid(format!(
                "{GROUND_ENV}={other:?}: want `devcluster` or `real`"
            ))),
        }
    }
}

/// The variable that makes a missing `go` fail a test instead of skipping it (`CI` does too).
pub const REQUIRE_GO_ENV: &str = "AGENT_SANDBOX_REQUIRE_GO";

/// Whether a test that needs Go (the real control plane is built with it; the protobuf client
/// fixture is a Go program) may run: `true` when `go version` works. When it does not, the test
/// is skipped with one line on stderr, except under `CI` or [`REQUIRE_GO_ENV`]`=1`, where it
/// panics saying so (CI must never skip the real lane silently).
pub fn go_or_skip(test: &str) -> bool {
    let works = std::process::Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|out| out.status.success());
    go_decision(
        test,
        works,
        std::env::var_os("CI").is_some(),
        require_go_env(),
    )
}

fn require_go_env() -> bool {
    std::env::var(REQUIRE_GO_ENV).is_ok_and(|v| v == "1")
}

fn go_decision(test: &str, works: bool, ci: bool, required: bool) -> bool {
    if works {
        return true;
    }
    if ci || required {
        panic!("{test}: `go` is not on PATH, and CI / {REQUIRE_GO_ENV}=1 requires it");
    }
    eprintln!("skipping {test}: `go` is not on PATH (needed to build the real control plane)");
    false
}

/// The cluster shared by the tests of this process: the first caller starts it (default
/// [`Options`]), later callers get the same one while any holds it, and it stops when the last
/// holder drops it (a later caller then starts a new one). Each caller makes its own clients
/// with [`RealCluster::client`]: a client belongs to the runtime that made it, and every
/// `#[tokio::test]` has its own.
///
/// Tests that share it isolate themselves by namespace.
pub async fn shared() -> Result<Arc<RealCluster>, Error> {
    static SHARED: tokio::sync::Mutex<Weak<RealCluster>> =
        tokio::sync::Mutex::const_new(Weak::new());
    let mut slot = SHARED.lock().await;
    if let Some(cluster) = slot.upgrade() {
        return Ok(cluster);
    }
    let cluster = Arc::new(RealCluster::start(Options::default()).await?);
    *slot = Arc::downgrade(&cluster);
    Ok(cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_go_skips_locally_and_fails_under_ci() {
        assert!(go_decision("t", true, true, true));
        assert!(!go_decision("t", false, false, false));
        for (ci, required) in [(true, false), (false, true)] {
            let panic = std::panic::catch_unwind(|| go_decision("t", false, ci, required))
                .expect_err("a missing go must fail under CI or when required");
            let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
            assert!(message.contains("`go` is not on PATH"), "{message}");
        }
    }

    #[test]
    fn the_ground_is_devcluster_unless_real_is_asked() {
        assert_eq!(Ground::parse("").unwrap(), Ground::DevCluster);
        assert_eq!(Ground::parse("devcluster").unwrap(), Ground::DevCluster);
        assert_eq!(Ground::parse("real").unwrap(), Ground::Real);
        let error = Ground::parse("rael").unwrap_err().to_string();
        assert!(error.contains("AGENT_SANDBOX_CLUSTER=\"rael\""), "{error}");
    }
}
