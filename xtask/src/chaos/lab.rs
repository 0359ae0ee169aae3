//! The cluster an experiment runs in: the API server (devcluster today), the controller
//! processes (named, so a Lease holder can be found), and the audit log.
//!
//! The seam for the real control plane: an experiment only asks a [`Lab`] for a client, the
//! controllers' processes (to kill, pause and resume them) and the audit log's requests. A
//! `--cluster real` lab starts kube-apiserver with an audit policy at the `Metadata` level
//! writing `audit.k8s.io/v1` JSON lines (what [`super::audit`] reads), etcd, kwok for the
//! nodes, and the two controllers as processes with its kubeconfig. Fault injection has no
//! equivalent there (an injecting proxy in front of the server would be one), so `api-faults`
//! stays devcluster's.

use std::path::{Path, PathBuf};

use crate::bench::BenchError;
use crate::bench::cluster::{
    Binaries, Controller, ControllerKind, ControllerOptions, DevclusterOptions, Stack, wait_ready,
};

use super::audit;

/// Why `--cluster real` cannot run yet.
pub const REAL_CLUSTER_UNAVAILABLE: &str = "--cluster real needs the real control plane of \
    `cargo xtask cluster` (kube-apiserver, etcd and kwok from pinned Go modules), which is not \
    in this tree yet; run with --cluster devcluster";

/// What the experiment needs of the cluster.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// Fraction of requests devcluster fails with a 500 (0: none).
    pub error_rate: f64,
    /// Probability that devcluster closes a watch early (after 1-30 s).
    pub watch_close_probability: f64,
    /// Run the controllers with leader election (and name their processes).
    pub leader_elect: bool,
    /// Replicas of the extensions controller (1 without leader election).
    pub extensions_replicas: usize,
}

/// One running cluster with its controllers.
pub struct Lab {
    stack: Stack,
    audit_log: PathBuf,
    /// The instance name (`POD_NAME`) of each of `stack.controllers`, in the same order.
    instances: Vec<Option<String>>,
    spawned: usize,
}

impl Lab {
    /// Starts devcluster (audit log on, faults as asked), installs the CRDs and starts the
    /// controllers, waiting until each answers `/readyz`.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        options: &LabOptions,
    ) -> Result<Lab, BenchError> {
        let audit_log = dir.join("audit.log");
        let mut extra_args = vec![format!("--audit-log={}", audit_log.display())];
        if options.error_rate > 0.0 {
            extra_args.push(format!("--error-rate={}", options.error_rate));
        }
        if options.watch_close_probability > 0.0 {
            extra_args.push(format!(
                "--watch-close-probability={}",
                options.watch_close_probability
            ));
        }
        let devcluster = DevclusterOptions {
            nodes: 20,
            pod_startup_delay: "20ms..200ms".into(),
            extra_args,
        };
        let controllers = ControllerOptions {
            log_level: "info".into(),
            sandbox_args: Vec::new(),
            extensions_args: Vec::new(),
            leader_elect: options.leader_elect,
        };
        let stack = Stack::start(binaries, dir, &devcluster, &controllers).await?;
        super::experiments::retry("installing the CRDs", || {
            crate::bench::workload::install_crds(&stack.client)
        })
        .await?;
        let mut lab = Lab {
            stack,
            audit_log,
            instances: Vec::new(),
            spawned: 0,
        };
        lab.spawn(ControllerKind::Sandbox).await?;
        for _ in 0..options.extensions_replicas.max(1) {
            lab.spawn(ControllerKind::Extensions).await?;
        }
        Ok(lab)
    }

    pub fn client(&self) -> &kube::Client {
        &self.stack.client
    }

    /// Starts one more controller of `kind` under a new instance name and waits for
    /// `/readyz` (a standby answers it too). Returns the instance name.
    pub async fn spawn(&mut self, kind: ControllerKind) -> Result<String, BenchError> {
        self.spawned += 1;
        let instance = format!("{}-{}", short(kind), self.spawned);
        let mut controller = self
            .stack
            .spawn_controller(kind, None, Some(&instance))
            .await?;
        wait_ready(&mut controller).await?;
        self.stack.controllers.push(controller);
        self.instances.push(Some(instance.clone()));
        Ok(instance)
    }

    /// The running controller named `instance`.
    pub fn controller(&mut self, instance: &str) -> Option<&mut Controller> {
        let index = self
            .instances
            .iter()
            .position(|i| i.as_deref() == Some(instance))?;
        self.stack.controllers.get_mut(index)
    }

    /// The instances of `kind` running now.
    pub fn instances(&self, kind: ControllerKind) -> Vec<String> {
        self.stack
            .controllers
            .iter()
            .zip(&self.instances)
            .filter(|(c, _)| c.kind == kind)
            .filter_map(|(_, i)| i.clone())
            .collect()
    }

    /// Takes `instance` out of the lab (to kill it, or because it exited).
    pub fn remove(&mut self, instance: &str) -> Option<Controller> {
        let index = self
            .instances
            .iter()
            .position(|i| i.as_deref() == Some(instance))?;
        self.instances.remove(index);
        Some(self.stack.controllers.remove(index))
    }

    /// SIGKILLs `instance` and starts a replacement of the same kind (as the kubelet would),
    /// waiting until it answers `/readyz`.
    pub async fn kill_and_replace(&mut self, instance: &str) -> Result<String, BenchError> {
        let Some(controller) = self.remove(instance) else {
            return Err(BenchError::Unavailable(format!("no controller {instance}")));
        };
        let kind = controller.kind;
        controller.kill().await;
        self.spawn(kind).await
    }

    /// Fails when devcluster or a controller exited.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        self.stack.check_alive()
    }

    /// The audit log's requests so far, in the order the server received them.
    pub fn audit(&self) -> Vec<audit::Request> {
        std::fs::read_to_string(&self.audit_log)
            .map(|text| audit::read(&text))
            .unwrap_or_default()
    }

    /// The Sandboxes the extensions controllers took for claims, from their logs.
    pub fn takes(&self) -> Vec<audit::Take> {
        let Ok(entries) = std::fs::read_dir(&self.stack.dir) else {
            return Vec::new();
        };
        let mut takes = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(ControllerKind::Extensions.name())
                && name.ends_with(".log")
                && let Ok(text) = std::fs::read_to_string(entry.path())
            {
                takes.extend(audit::takes(&text));
            }
        }
        takes
    }

    pub async fn shutdown(self) {
        self.stack.shutdown().await;
    }
}

fn short(kind: ControllerKind) -> &'static str {
    match kind {
        ControllerKind::Sandbox => "core",
        ControllerKind::Extensions => "ext",
    }
}
