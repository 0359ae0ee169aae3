//! End-to-end harness for the extensions controller: the shared environment of the end-to-end
//! suites (devcluster with its simulated nodes, or with `AGENT_SANDBOX_CLUSTER=real` a real
//! control plane with kwok; the core controller in-process) plus the extension CRDs and this
//! controller, run in-process so a test can kill and restart it. On the real control plane the
//! controller runs on a token of the release's `extensions-controller` ServiceAccount, and
//! write counts come from kube-apiserver's audit log.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use e2e_tests::{Cluster, DEADLINE, Env, EnvOptions, install_crds, release_rbac, wait_for};
use extensions_controller::metrics::ClaimMetrics;
use extensions_controller::{ExtensionsController, Options};
use kube::api::{Api, ListParams, PostParams};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const NS: &str = "default";

/// User agent of this controller's requests, so write counts can be attributed.
pub const USER_AGENT: &str = "extensions-controller-test";

async fn client_with_agent(kubeconfig: &std::path::Path, agent: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let mut cfg =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("client config");
    cfg.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(if agent.is_empty() { "x" } else { USER_AGENT }),
    ));
    kube::Client::try_from(cfg).expect("client")
}

pub struct ExtEnv {
    pub env: Env,
    /// The extensions controller's own client (user agent [`USER_AGENT`]).
    pub client: kube::Client,
    pub options: Options,
    pub registry: Registry,
    controller: Option<(CancellationToken, JoinHandle<()>)>,
    /// On the real control plane: where write counts start in the audit log.
    audit_mark: std::sync::Mutex<Option<realcluster::audit::Mark>>,
    /// The controller's kubeconfig on the real control plane (a ServiceAccount token).
    _kubeconfig_dir: tempfile::TempDir,
}

impl ExtEnv {
    pub async fn start(options: Options) -> ExtEnv {
        Self::start_with(EnvOptions::default(), options).await
    }

    /// [`ExtEnv::start`] with custom devcluster / core controller options.
    pub async fn start_with(env_options: EnvOptions, options: Options) -> ExtEnv {
        let env = Env::start(env_options).await;
        install_crds(&env.client, api_types::extension_crds()).await;
        let claims: Api<SandboxClaim> = Api::all(env.client.clone());
        wait_for("extension CRDs served", DEADLINE, || async {
            claims.list(&ListParams::default()).await.ok().map(|_| ())
        })
        .await;
        let dir = tempfile::tempdir().expect("temp dir");
        let kubeconfig = env
            .controller_kubeconfig(&release_rbac::EXTENSIONS_CONTROLLER, dir.path())
            .await;
        let client = client_with_agent(&kubeconfig, USER_AGENT).await;
        let mut ext = ExtEnv {
            env,
            client,
            options,
            registry: Registry::default(),
            controller: None,
            audit_mark: std::sync::Mutex::new(None),
            _kubeconfig_dir: dir,
        };
        ext.reset_counts();
        ext.start_controller();
        ext
    }

    /// Starts (another incarnation of) the extensions controller, with fresh in-memory state.
    pub fn start_controller(&mut self) {
        self.registry = Registry::default();
        let metrics = ClaimMetrics::register(&mut self.registry);
        let reconciles = controller_common::ControllerMetrics::register(&mut self.registry);
        let controller = ExtensionsController::new(
            self.client.clone(),
            self.options.clone(),
            metrics,
            Some(reconciles),
        );
        let token = CancellationToken::new();
        let stop = token.clone();
        let task = tokio::spawn(async move { controller.run(stop, || {}).await });
        self.controller = Some((token, task));
    }

    /// Kills the extensions controller at once (no graceful shutdown).
    pub fn kill_controller(&mut self) {
        if let Some((_, task)) = self.controller.take() {
            task.abort();
        }
    }

    /// Reconcile passes of one of this controller's controllers so far (any result), e.g.
    /// `sandboxclaim` or `sandboxwarmpool`, from its metrics.
    pub fn passes(&self, controller: &str) -> u64 {
        let label = format!("controller=\"{controller}\"");
        self.metrics_text()
            .lines()
            .filter(|l| l.starts_with("controller_runtime_reconcile_total") && l.contains(&label))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    pub fn metrics_text(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("metrics encode");
        text
    }

    /// For "nothing else happens" checks: waits until this controller's work queues are empty
    /// with nothing running, lets [`SETTLE`] pass (a later write, e.g. a delayed requeue, would
    /// land in it), and waits for idle queues again. Never used to wait for a result.
    pub async fn settle(&self) {
        self.wait_queues_idle().await;
        tokio::time::sleep(SETTLE).await;
        self.wait_queues_idle().await;
    }

    async fn wait_queues_idle(&self) {
        wait_for(
            "the extensions controller's work queues idle",
            DEADLINE,
            || async { queues_idle(&self.metrics_text()).then_some(()) },
        )
        .await;
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.env.client.clone(), NS)
    }

    pub async fn stop(mut self) {
        if let Some((token, task)) = self.controller.take() {
            token.cancel();
            let _ = tokio::time::timeout(DEADLINE, task).await;
        }
        self.env.stop().await;
    }

    /// Write requests (create, update, patch, delete) seen by the API server since the last
    /// reset, as `verb resource[/subresource]` → count: every client's on devcluster, the
    /// controllers' on the real control plane (its audit log records only their requests).
    pub fn writes(&self) -> BTreeMap<String, u64> {
        self.writes_by(|_| true)
    }

    /// [`ExtEnv::writes`] of this controller only.
    pub fn our_writes(&self) -> BTreeMap<String, u64> {
        self.writes_by(|agent| agent == USER_AGENT)
    }

    fn writes_by(&self, agent: impl Fn(&str) -> bool) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        match &self.env.cluster {
            Cluster::Dev(_) => {
                for (key, count) in self.env.cluster.observer().counts() {
                    if matches!(key.verb.as_str(), "create" | "update" | "patch" | "delete")
                        && agent(&key.user_agent)
                    {
                        let resource = if key.subresource.is_empty() {
                            key.resource.clone()
                        } else {
                            format!("{}/{}", key.resource, key.subresource)
                        };
                        *out.entry(format!("{} {resource}", key.verb)).or_default() += count;
                    }
                }
            }
            Cluster::Real(real) => {
                let mark = self.audit_mark.lock().expect("mark lock").clone();
                let mark = mark.expect("set at start");
                let requests = mark
                    .requests_since(real.cluster.audit_log_path())
                    .expect("read the audit log");
                for r in requests {
                    if r.is_write() && agent(&r.user_agent) {
                        *out.entry(format!("{} {}", r.verb, r.resource_path()))
                            .or_default() += 1;
                    }
                }
            }
        }
        out
    }

    pub fn reset_counts(&self) {
        match &self.env.cluster {
            Cluster::Dev(_) => self.env.cluster.observer().reset_counts(),
            Cluster::Real(real) => {
                let mark = realcluster::audit::Mark::now(real.cluster.audit_log_path());
                *self.audit_mark.lock().expect("mark lock") = Some(mark);
            }
        }
    }

    pub async fn create_template(
        &self,
        name: &str,
        extra_spec: serde_json::Value,
    ) -> SandboxTemplate {
        let mut value = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"podTemplate": {"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}},
        });
        merge(&mut value["spec"], &extra_spec);
        let template: SandboxTemplate = serde_json::from_value(value).expect("valid template");
        self.api::<SandboxTemplate>()
            .create(&PostParams::default(), &template)
            .await
            .expect("template created")
    }

    pub async fn create_pool(&self, name: &str, template: &str, replicas: i32) -> SandboxWarmPool {
        let pool: SandboxWarmPool = serde_json::from_value(json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxWarmPool",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
        }))
        .expect("valid pool");
        self.api::<SandboxWarmPool>()
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool created")
    }

    pub async fn create_claim(
        &self,
        name: &str,
        pool: &str,
        extra_spec: serde_json::Value,
    ) -> SandboxClaim {
        let mut value = json!({
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
            "kind": "SandboxClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"warmPoolRef": {"name": pool}},
        });
        merge(&mut value["spec"], &extra_spec);
        let claim: SandboxClaim = serde_json::from_value(value).expect("valid claim");
        self.api::<SandboxClaim>()
            .create(&PostParams::default(), &claim)
            .await
            .expect("claim created")
    }

    /// Waits until the pool reports `ready` ready replicas (and as many replicas); on timeout,
    /// fails showing the pool status and every Sandbox.
    /// Waits until template `name`'s NetworkPolicy exists and the controller is idle: write
    /// counts taken after this see only what a claim costs. A pool can be Ready before its
    /// template's policy is made (separate passes), and until it is, claims are held back with
    /// a status write of their own (NetworkPolicyNotReady).
    pub async fn wait_template_settled(&self, name: &str) {
        let policy = format!("{name}-network-policy");
        wait_for("the template's NetworkPolicy", DEADLINE, || async {
            self.api::<k8s_openapi::api::networking::v1::NetworkPolicy>()
                .get_opt(&policy)
                .await
                .ok()
                .flatten()
        })
        .await;
        self.settle().await;
    }

    pub async fn wait_pool_ready(&self, name: &str, ready: i32) -> SandboxWarmPool {
        let pools = self.api::<SandboxWarmPool>();
        let start = std::time::Instant::now();
        loop {
            let pool = pools.get_opt(name).await.ok().flatten();
            if let Some(p) = pool.as_ref().filter(|p| {
                p.status
                    .as_ref()
                    .is_some_and(|s| s.ready_replicas == ready && s.replicas == ready)
            }) {
                return p.clone();
            }
            if start.elapsed() > DEADLINE {
                panic!(
                    "timed out waiting for pool {name} with {ready} ready members; pool: {:?}; sandboxes: {}",
                    pool.map(|p| (p.spec, p.status)),
                    self.describe_sandboxes().await
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// One line per Sandbox: name, owner, deletion, Ready status, pod IPs.
    pub async fn describe_sandboxes(&self) -> String {
        let list = self
            .api::<Sandbox>()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        list.iter()
            .map(|s| {
                let owner = s
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .map(|o| format!("{}/{}", o.kind, o.name))
                    .collect::<Vec<_>>();
                let ready = s
                    .status
                    .as_ref()
                    .and_then(|st| st.conditions.iter().find(|c| c.type_ == "Ready"))
                    .map(|c| format!("{}:{}", c.status, c.reason));
                format!(
                    "\n  {:?} owner={owner:?} deleting={} ready={ready:?} ips={:?}",
                    s.metadata.name,
                    s.metadata.deletion_timestamp.is_some(),
                    s.status.as_ref().map(|st| st.pod_ips.clone())
                )
            })
            .collect()
    }

    /// Waits until the claim's Ready condition has `reason`; on timeout, fails showing the
    /// claim and the Sandboxes as last seen.
    pub async fn wait_claim_reason(&self, name: &str, reason: &str) -> SandboxClaim {
        let claims = self.api::<SandboxClaim>();
        let start = std::time::Instant::now();
        loop {
            let claim = claims.get_opt(name).await.ok().flatten();
            if let Some(c) = claim
                .as_ref()
                .filter(|c| claim_ready(c).is_some_and(|(_, r, _)| r == reason))
            {
                return c.clone();
            }
            if start.elapsed() > DEADLINE {
                let sandboxes: Vec<_> = self
                    .api::<Sandbox>()
                    .list(&ListParams::default())
                    .await
                    .map(|l| {
                        l.items
                            .into_iter()
                            .map(|s| (s.metadata.name, s.status))
                            .collect()
                    })
                    .unwrap_or_default();
                panic!(
                    "timed out waiting for claim {name} Ready reason {reason}; claim status: {:?}; sandboxes: {sandboxes:?}",
                    claim.map(|c| c.status)
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Sandboxes controlled by the pool `pool` (its members).
    pub async fn pool_members(&self, pool: &SandboxWarmPool) -> Vec<Sandbox> {
        let uid = pool.metadata.uid.clone().unwrap_or_default();
        self.api::<Sandbox>()
            .list(&ListParams::default())
            .await
            .expect("list sandboxes")
            .items
            .into_iter()
            .filter(|s| {
                s.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.controller == Some(true) && o.uid == uid)
            })
            .collect()
    }
}

/// `(status, reason, message)` of a claim's Ready condition.
pub fn claim_ready(claim: &SandboxClaim) -> Option<(String, String, String)> {
    claim
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

pub fn merge(target: &mut serde_json::Value, patch: &serde_json::Value) {
    match (target, patch) {
        (serde_json::Value::Object(t), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// The window of [`ExtEnv::settle`] for "nothing else happens" checks.
pub const SETTLE: Duration = Duration::from_millis(1500);

/// Whether the `/metrics` text shows every work queue empty (`workqueue_depth` 0) with nothing
/// running (`workqueue_unfinished_work_seconds` 0); false when it has no queue at all.
pub fn queues_idle(metrics_text: &str) -> bool {
    let mut queues = 0;
    for line in metrics_text.lines() {
        let gauge = ["workqueue_depth{", "workqueue_unfinished_work_seconds{"]
            .iter()
            .any(|name| line.starts_with(name));
        if !gauge {
            continue;
        }
        queues += 1;
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if value != Some(0.0) {
            return false;
        }
    }
    queues > 0
}
