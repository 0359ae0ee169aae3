//! The cluster an experiment runs in: the API server (devcluster, or the real control plane of
//! the `realcluster` crate), the controller processes (named, so a Lease holder can be found),
//! and the audit log.
//!
//! An experiment only asks a [`Lab`] for a client, the controllers' processes (to kill, pause and
//! resume them) and the audit log's requests. On devcluster the controllers use its admin
//! kubeconfig; on the real control plane (`--cluster real`: kube-apiserver, etcd,
//! kube-controller-manager, kube-scheduler and kwok nodes, as `cargo xtask cluster` runs them)
//! the release's RBAC is installed and each controller runs on a token of its own
//! ServiceAccount, as the release's Deployments do. Both servers write `audit.k8s.io/v1` JSON
//! lines at the `Metadata` level; the real one's policy logs only the controllers'
//! ServiceAccounts, which is every request the audit checks look at (faults, watches, Lease
//! holders, late writes). Fault injection has no equivalent on the real server, so
//! `api-faults` stays devcluster's ([`REAL_CLUSTER_NO_FAULTS`]).

use std::path::{Path, PathBuf};

use crate::bench::BenchError;
use crate::bench::cluster::{
    Binaries, Controller, ControllerKind, ControllerOptions, ControllerSpawn, DevclusterOptions,
    RealStart, Stack, spawn_controller, start_real_control_plane, wait_ready,
};

use super::ClusterKind;
use super::audit;

/// Why `api-faults` does not run on the real control plane.
pub const REAL_CLUSTER_NO_FAULTS: &str = "api-faults needs devcluster's fault injection \
    (injected 500s, watches closed early), which a real kube-apiserver has no equivalent of; \
    run it with --cluster devcluster";

/// Simulated nodes and their Pods' startup time, on either server.
const NODES: u32 = 20;
const POD_STARTUP_DELAY: &str = "20ms..200ms";

/// What the experiment needs of the cluster.
#[derive(Debug, Clone, Default)]
pub struct LabOptions {
    /// Fraction of requests devcluster fails with a 500 (0: none).
    pub error_rate: f64,
    /// Probability that devcluster closes a watch early.
    pub watch_close_probability: f64,
    /// When devcluster closes such a watch, from its start (`--watch-close-after`: `5s` or
    /// `1s..30s`; `None`: devcluster's default, 1-30 s).
    pub watch_close_after: Option<&'static str>,
    /// Run the controllers with leader election (and name their processes).
    pub leader_elect: bool,
    /// Replicas of the extensions controller (1 without leader election).
    pub extensions_replicas: usize,
}

impl LabOptions {
    /// Whether the experiment needs devcluster's fault injection.
    pub fn injects_faults(&self) -> bool {
        self.error_rate > 0.0 || self.watch_close_probability > 0.0
    }
}

/// The API server of a lab.
enum Server {
    /// devcluster (its `Stack` runs no controller: the lab's own list holds them).
    Dev(Box<Stack>),
    Real {
        cluster: Box<realcluster::RealCluster>,
        /// Each controller's kubeconfig, on its ServiceAccount's token.
        kubeconfigs: [(ControllerKind, PathBuf); 2],
    },
}

/// One running cluster with its controllers.
pub struct Lab {
    server: Server,
    binaries: Binaries,
    dir: PathBuf,
    client: kube::Client,
    controller_options: ControllerOptions,
    audit_log: PathBuf,
    controllers: Vec<Controller>,
    /// The instance name (`POD_NAME`) of each of `controllers`, in the same order.
    instances: Vec<String>,
    spawned: usize,
}

impl Lab {
    /// Starts the API server (audit log on; on devcluster faults as asked), installs the CRDs
    /// (and on the real server the release's RBAC) and starts the controllers, waiting until
    /// each answers `/readyz`.
    pub async fn start(
        binaries: &Binaries,
        dir: &Path,
        cluster: ClusterKind,
        options: &LabOptions,
    ) -> Result<Lab, BenchError> {
        let audit_log = dir.join("audit.log");
        let controller_options = ControllerOptions {
            log_level: "info".into(),
            sandbox_args: Vec::new(),
            extensions_args: Vec::new(),
            leader_elect: options.leader_elect,
        };
        let (server, client) = match cluster {
            ClusterKind::Devcluster => {
                let stack =
                    start_devcluster(binaries, dir, &audit_log, options, &controller_options)
                        .await?;
                let client = stack.client.clone();
                (Server::Dev(Box::new(stack)), client)
            }
            ClusterKind::Real => {
                if options.injects_faults() {
                    return Err(BenchError::Unavailable(REAL_CLUSTER_NO_FAULTS.into()));
                }
                start_real(dir, &audit_log).await?
            }
        };
        super::experiments::retry("installing the CRDs", || {
            crate::bench::workload::install_crds(&client)
        })
        .await?;
        let mut lab = Lab {
            server,
            binaries: binaries.clone(),
            dir: dir.to_path_buf(),
            client,
            controller_options,
            audit_log,
            controllers: Vec::new(),
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
        &self.client
    }

    /// Starts one more controller of `kind` under a new instance name and waits for
    /// `/readyz` (a standby answers it too). Returns the instance name.
    pub async fn spawn(&mut self, kind: ControllerKind) -> Result<String, BenchError> {
        self.spawned += 1;
        let instance = format!("{}-{}", short(kind), self.spawned);
        let mut controller = match &self.server {
            Server::Dev(stack) => stack.spawn_controller(kind, None, Some(&instance)).await?,
            Server::Real { kubeconfigs, .. } => {
                let kubeconfig = kubeconfigs
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map(|(_, path)| path.as_path())
                    .unwrap_or(Path::new(""));
                spawn_controller(
                    &ControllerSpawn {
                        binaries: &self.binaries,
                        dir: &self.dir,
                        kubeconfig,
                        // The chaos CRDs name no conversion webhook.
                        webhook_args: &["--enable-webhook=false".to_owned()],
                        options: &self.controller_options,
                    },
                    kind,
                    None,
                    Some(&instance),
                )?
            }
        };
        wait_ready(&mut controller).await?;
        self.controllers.push(controller);
        self.instances.push(instance.clone());
        Ok(instance)
    }

    /// The running controller named `instance`.
    pub fn controller(&mut self, instance: &str) -> Option<&mut Controller> {
        let index = self.instances.iter().position(|i| i == instance)?;
        self.controllers.get_mut(index)
    }

    /// The instances of `kind` running now.
    pub fn instances(&self, kind: ControllerKind) -> Vec<String> {
        self.controllers
            .iter()
            .zip(&self.instances)
            .filter(|(c, _)| c.kind == kind)
            .map(|(_, i)| i.clone())
            .collect()
    }

    /// Takes `instance` out of the lab (to kill it, or because it exited).
    pub fn remove(&mut self, instance: &str) -> Option<Controller> {
        let index = self.instances.iter().position(|i| i == instance)?;
        self.instances.remove(index);
        Some(self.controllers.remove(index))
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

    /// Fails when the API server (a component of the real control plane) or a controller
    /// exited.
    pub fn check_alive(&mut self) -> Result<(), BenchError> {
        match &mut self.server {
            Server::Dev(stack) => stack.check_alive()?,
            Server::Real { cluster, .. } => {
                if let Some(exit) = cluster.exited() {
                    return Err(BenchError::Unavailable(format!(
                        "the real control plane stopped: {exit}"
                    )));
                }
            }
        }
        for controller in &mut self.controllers {
            if let Some(status) = controller.exited() {
                return Err(BenchError::Exited {
                    what: controller.kind.name().into(),
                    status: status.to_string(),
                    log: controller.log.clone(),
                });
            }
        }
        Ok(())
    }

    /// The audit log's requests so far, in the order the server received them.
    pub fn audit(&self) -> Vec<audit::Request> {
        std::fs::read_to_string(&self.audit_log)
            .map(|text| audit::read(&text))
            .unwrap_or_default()
    }

    /// The Sandboxes the extensions controllers took for claims, from their logs.
    pub fn takes(&self) -> Vec<audit::Take> {
        self.extensions_logs()
            .iter()
            .flat_map(|text| audit::takes(text))
            .collect()
    }

    /// The takes the extensions controllers abandoned, from their logs.
    pub fn abandoned_takes(&self) -> usize {
        self.extensions_logs()
            .iter()
            .map(|text| audit::abandoned_takes(text))
            .sum()
    }

    /// Every extensions controller's log.
    fn extensions_logs(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut logs = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(ControllerKind::Extensions.name())
                && name.ends_with(".log")
                && let Ok(text) = std::fs::read_to_string(entry.path())
            {
                logs.push(text);
            }
        }
        logs
    }

    pub async fn shutdown(self) {
        for controller in self.controllers {
            controller.kill().await;
        }
        match self.server {
            Server::Dev(stack) => (*stack).shutdown().await,
            Server::Real { cluster, .. } => {
                // Stops every component and removes its data directory (blocking: SIGTERM,
                // then waits).
                let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
            }
        }
    }
}

/// devcluster with the audit log on and the faults `options` ask for.
async fn start_devcluster(
    binaries: &Binaries,
    dir: &Path,
    audit_log: &Path,
    options: &LabOptions,
    controller_options: &ControllerOptions,
) -> Result<Stack, BenchError> {
    let mut extra_args = vec![format!("--audit-log={}", audit_log.display())];
    if options.error_rate > 0.0 {
        extra_args.push(format!("--error-rate={}", options.error_rate));
    }
    if options.watch_close_probability > 0.0 {
        extra_args.push(format!(
            "--watch-close-probability={}",
            options.watch_close_probability
        ));
        if let Some(after) = options.watch_close_after {
            extra_args.push(format!("--watch-close-after={after}"));
        }
    }
    let devcluster = DevclusterOptions {
        nodes: NODES,
        pod_startup_delay: POD_STARTUP_DELAY.into(),
        extra_args,
    };
    Stack::start(binaries, dir, &devcluster, controller_options).await
}

/// The real control plane with its audit log in `audit_log`, the release's RBAC, the
/// controllers' kubeconfigs (ServiceAccount tokens, written in `dir`) and the harness's admin
/// client: the benchmark's start ([`start_real_control_plane`]), without its webhooks.
async fn start_real(dir: &Path, audit_log: &Path) -> Result<(Server, kube::Client), BenchError> {
    let options = realcluster::Options {
        nodes: NODES,
        pod_startup_delay: realcluster::Delay::parse(POD_STARTUP_DELAY)
            .map_err(BenchError::Unavailable)?,
        audit_log: Some(audit_log.to_path_buf()),
        ..realcluster::Options::default()
    };
    let RealStart {
        cluster,
        client,
        controller_kubeconfigs,
        ..
    } = start_real_control_plane(dir, options).await?;
    let kubeconfigs: [(ControllerKind, PathBuf); 2] = controller_kubeconfigs
        .try_into()
        .map_err(|_| BenchError::Unavailable("two controllers".into()))?;
    Ok((
        Server::Real {
            cluster,
            kubeconfigs,
        },
        client,
    ))
}

fn short(kind: ControllerKind) -> &'static str {
    match kind {
        ControllerKind::Sandbox => "core",
        ControllerKind::Extensions => "ext",
    }
}
