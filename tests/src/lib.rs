//! Shared harness for the end-to-end tests: a control plane, the CRDs installed from
//! `api_types`, and the controllers run in-process.
//!
//! The control plane is chosen by `AGENT_SANDBOX_CLUSTER` ([`realcluster::Ground`]):
//! `devcluster` (the default: in-process API server plus simulated nodes, one per test) or
//! `real` (kube-apiserver, etcd, kube-controller-manager, kube-scheduler and kwok from
//! `crates/realcluster`: one fresh cluster per test, two at a time per test process, with the
//! release's RBAC installed and the core controller running on a token of its own
//! ServiceAccount, never admin).
//!
//! ```no_run
//! # async fn demo() {
//! let env = e2e_tests::Env::start(e2e_tests::EnvOptions::default()).await;
//! let sandboxes = env.sandboxes("default");
//! // ... create objects, then:
//! e2e_tests::wait_for("something", e2e_tests::DEADLINE, || async { Some(()) }).await;
//! env.stop().await;
//! # }
//! ```

pub mod controller_process;
pub mod http_probe;
pub mod otlp_receiver;
pub mod release_rbac;
pub mod webhook_client;
/// The SVG (and text) waterfall of a captured trace.
pub use otlp_capture::waterfall as trace_waterfall;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use api_types::Sandbox;
use devcluster::nodes::NodeConfig;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use prometheus_client::registry::Registry;
use sandbox_controller::{ControllerOptions, SandboxController, Settings};
pub use test_ground::{Cluster, Ground, RealGround, devcluster_only, ground};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How long a test waits for a condition before failing.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// How long a test waits for kube-controller-manager's garbage collector to remove the
/// dependents of a deleted Sandbox. It learns of a kind added after it started (our CRDs, which
/// each test installs) only at its discovery resync, every 30 s (fixed in
/// kube-controller-manager), and until then cannot resolve an owner reference to that kind; so on
/// the real ground a first collection can take [`DEADLINE`] plus that period. devcluster
/// collects at once.
pub const GC_DEADLINE: Duration = Duration::from_secs(75);

/// Polls `probe` every 25 ms until it yields `Some`, panicking with `what` after `deadline`.
pub async fn wait_for<T, F, Fut>(what: &str, deadline: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct EnvOptions {
    /// Run the core controller in-process.
    pub sandbox_controller: bool,
    /// Simulated nodes that make Pods Running and Ready.
    pub nodes: Option<NodeConfig>,
    /// Settings of the core controller.
    pub controller: ControllerOptions,
}

impl Default for EnvOptions {
    fn default() -> Self {
        EnvOptions {
            sandbox_controller: true,
            nodes: Some(NodeConfig::default()),
            controller: ControllerOptions {
                settings: Settings::default(),
                workers: 16,
                ..ControllerOptions::default()
            },
        }
    }
}

struct ControllerTask {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

/// A running test environment.
pub struct Env {
    pub cluster: Cluster,
    /// Admin.
    pub client: kube::Client,
    /// What the in-process core controller uses: admin on devcluster, a token of the
    /// release's `sandbox-controller` ServiceAccount on the real control plane.
    pub controller_client: kube::Client,
    options: EnvOptions,
    controller: Option<ControllerTask>,
}

impl Env {
    /// Starts the control plane of [`ground`], installs the core CRDs (only: core must work
    /// without the extensions), the nodes and the controller, as `options` say.
    pub async fn start(options: EnvOptions) -> Env {
        let (cluster, client, controller_client) = match ground() {
            Ground::DevCluster => {
                let (cluster, client) = start_devcluster(&options).await;
                (cluster, client.clone(), client)
            }
            Ground::Real => start_real().await,
        };
        install_crds(&client, api_types::core_crds()).await;
        let mut env = Env {
            cluster,
            client,
            controller_client,
            options,
            controller: None,
        };
        if env.options.sandbox_controller {
            env.start_controller();
        }
        env
    }

    /// A kubeconfig (in `dir`) for the controller `account` of the release: the admin one on
    /// devcluster, a token of its ServiceAccount on the real control plane.
    pub async fn controller_kubeconfig(
        &self,
        account: &release_rbac::ControllerAccount,
        dir: &Path,
    ) -> PathBuf {
        match &self.cluster {
            Cluster::Dev(c) => c.kubeconfig_path().to_path_buf(),
            Cluster::Real(r) => {
                let text = r
                    .cluster
                    .service_account_kubeconfig(
                        release_rbac::SYSTEM_NAMESPACE,
                        account.account,
                        Duration::from_secs(3600),
                    )
                    .await
                    .expect("a token of the controller's ServiceAccount");
                let path = dir.join(format!("{}.kubeconfig", account.account));
                std::fs::write(&path, text).expect("write the controller's kubeconfig");
                path
            }
        }
    }

    /// Starts (another incarnation of) the core controller.
    pub fn start_controller(&mut self) {
        let mut registry = Registry::default();
        let controller = SandboxController::new(
            self.controller_client.clone(),
            self.options.controller.clone(),
            &mut registry,
        );
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            let _ = controller.run(token).await;
        });
        self.controller = Some(ControllerTask { shutdown, task });
    }

    /// Stops the core controller (graceful: in-flight reconciles finish).
    pub async fn stop_controller(&mut self) {
        if let Some(c) = self.controller.take() {
            c.shutdown.cancel();
            let _ = tokio::time::timeout(DEADLINE, c.task).await;
        }
    }

    /// Kills the core controller at once, mid-reconcile (no graceful shutdown).
    pub fn kill_controller(&mut self) {
        if let Some(c) = self.controller.take() {
            c.task.abort();
        }
    }

    pub fn sandboxes(&self, ns: &str) -> Api<Sandbox> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), ns)
    }

    pub async fn stop(mut self) {
        self.stop_controller().await;
        self.cluster.shutdown().await;
    }
}

async fn start_devcluster(options: &EnvOptions) -> (Cluster, kube::Client) {
    // devcluster's own simulated nodes, with `options.nodes`: with them the server leaves a
    // deleted Pod's graceful termination to its kubelet, as a real one does.
    let cluster = devcluster::DevCluster::start(devcluster::Config {
        node_agent: options.nodes.is_some(),
        nodes: options.nodes.clone().unwrap_or_default(),
        ..devcluster::Config::ephemeral()
    })
    .await
    .expect("devcluster starts");
    let client = cluster.client();
    (Cluster::Dev(Box::new(cluster)), client)
}

/// A fresh real control plane (after the previous test's is stopped), the release's RBAC, and
/// the `default` namespace ready for Pods. Returns the admin client and the core controller's.
async fn start_real() -> (Cluster, kube::Client, kube::Client) {
    let ground = RealGround::start(realcluster::Options::default()).await;
    let cluster = &ground.cluster;
    let client = cluster.client().await.expect("admin client");
    release_rbac::install(&client).await;
    // The ServiceAccount admission plugin wants the namespace's `default` ServiceAccount,
    // which kube-controller-manager creates.
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "default");
    wait_for("default/default ServiceAccount", DEADLINE, || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await;
    let controller_client = cluster
        .service_account_client(
            release_rbac::SYSTEM_NAMESPACE,
            release_rbac::SANDBOX_CONTROLLER.account,
        )
        .await
        .expect("a client with the sandbox-controller ServiceAccount's token");
    (Cluster::Real(Box::new(ground)), client, controller_client)
}

/// Creates the CRDs and waits until each is `Established` (kube-apiserver serves a new CRD's
/// resource only then, a moment after the create; devcluster at once).
pub async fn install_crds(client: &kube::Client, crds: Vec<CustomResourceDefinition>) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for crd in crds {
        names.push(crd.metadata.name.clone().expect("a CRD has a name"));
        api.create(&PostParams::default(), &crd)
            .await
            .expect("CRD created");
    }
    for name in names {
        wait_for(&format!("CRD {name} established"), DEADLINE, || async {
            let crd = api.get(&name).await.ok()?;
            let established = crd
                .status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            established.then_some(())
        })
        .await;
    }
}

/// Creates, in `default`, the SandboxTemplate `template` whose pod runs `containers`, and one
/// SandboxWarmPool per `(name, replicas)` drawing from it.
pub async fn create_template_and_pools(
    env: &Env,
    template: &str,
    containers: serde_json::Value,
    pools: &[(&str, i32)],
) {
    let templates: Api<api_types::SandboxTemplate> = env.api("default");
    let body = serde_json::json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": template},
        "spec": {"podTemplate": {"spec": {"containers": containers}}},
    });
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).expect("a valid SandboxTemplate"),
        )
        .await
        .expect("template created");
    let pool_api: Api<api_types::SandboxWarmPool> = env.api("default");
    for (name, replicas) in pools {
        let body = serde_json::json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
        });
        pool_api
            .create(
                &PostParams::default(),
                &serde_json::from_value(body).expect("a valid SandboxWarmPool"),
            )
            .await
            .expect("pool created");
    }
}

/// Where the controllers' Leases are in these tests: `default` on devcluster; on the real
/// control plane the release's namespace, the only one their Roles grant Leases in.
pub fn lease_namespace() -> &'static str {
    match ground() {
        Ground::DevCluster => "default",
        Ground::Real => release_rbac::SYSTEM_NAMESPACE,
    }
}

/// Waits until the leader-election Lease `name` in [`lease_namespace`] names a holder (a standby replica
/// answers `/readyz` before it leads, so readiness alone does not say the Lease exists).
pub async fn wait_lease_holder(env: &Env, name: &str) -> String {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = env.api(lease_namespace());
    wait_for("the Lease names its holder", DEADLINE, || async {
        leases
            .get_opt(name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec)
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty())
    })
    .await
}

/// A Sandbox named `name` in `default` running one busybox container, with `spec` merged in
/// (JSON merge patch semantics).
pub fn sandbox(name: &str, spec: serde_json::Value) -> Sandbox {
    let mut full = serde_json::json!({
        "apiVersion": "agents.x-k8s.io/v1beta1",
        "kind": "Sandbox",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}},
    });
    merge(&mut full["spec"], &spec);
    serde_json::from_value(full).expect("valid Sandbox")
}

fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The condition of `type_` in the Sandbox's status.
pub fn condition(
    sb: &Sandbox,
    type_: &str,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    sb.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .cloned()
}

/// `(status, reason)` of the Ready condition.
pub fn ready(sb: &Sandbox) -> Option<(String, String)> {
    condition(sb, "Ready").map(|c| (c.status, c.reason))
}

/// Waits until the Sandbox `name` satisfies `pred`, and returns it.
pub async fn wait_sandbox(
    api: &Api<Sandbox>,
    name: &str,
    what: &str,
    pred: impl Fn(&Sandbox) -> bool,
) -> Sandbox {
    wait_for(what, DEADLINE, || async {
        api.get_opt(name).await.ok().flatten().filter(|s| pred(s))
    })
    .await
}

/// Read-modify-replace of a Sandbox's spec, as a user's client does it: re-read and retry when
/// the controller wrote the object in between (409 Conflict), a bounded number of times.
pub async fn update_sandbox(api: &Api<Sandbox>, name: &str, change: impl Fn(&mut Sandbox)) {
    for _ in 0..20 {
        let mut sb = api.get(name).await.expect("get the Sandbox to update");
        change(&mut sb);
        match api.replace(name, &PostParams::default(), &sb).await {
            Ok(_) => return,
            Err(kube::Error::Api(status)) if status.code == 409 => continue,
            Err(e) => panic!("replace Sandbox {name}: {e}"),
        }
    }
    panic!("replace Sandbox {name}: still conflicting after 20 attempts");
}

/// Waits until the Sandbox `name` has Ready with this reason.
pub async fn wait_ready_reason(api: &Api<Sandbox>, name: &str, reason: &str) -> Sandbox {
    wait_sandbox(api, name, &format!("{name} Ready reason {reason}"), |s| {
        ready(s).is_some_and(|(_, r)| r == reason)
    })
    .await
}
