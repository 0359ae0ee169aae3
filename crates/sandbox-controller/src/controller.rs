//! Wiring of the kube-runtime `Controller`: one reflector per kind (Sandboxes, Pods, Services,
//! PVCs), owner-reference triggers for the children, and the Sandbox watch filtered so the
//! controller's own status writes do not trigger it again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use api_types::Sandbox;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, PodSpec, PodStatus, Service};
use kube::Client;
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::utils::{PredicateConfig, WatchStreamExt};
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, Settings, Stores};
use crate::error::Error;
use crate::keys::NAME_HASH_LABEL;
use crate::metrics::Metrics;
use crate::reconcile::{error_policy, reconcile};
use crate::triggers::settled;

/// How to run the Sandbox controller.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    pub settings: Settings,
    /// Sandboxes reconciled concurrently (a Sandbox is never reconciled twice at once).
    pub workers: u16,
    /// Watch only Pods and Services that carry the tracking label (less memory on busy
    /// clusters; pre-existing objects must then carry the tracking label to be adopted).
    pub label_scoped_cache: bool,
    /// Identity of this replica in published events.
    pub instance: Option<String>,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            settings: Settings::default(),
            workers: 100,
            label_scoped_cache: false,
            instance: None,
        }
    }
}

/// A built, not yet running, Sandbox controller.
pub struct SandboxController {
    client: Client,
    options: ControllerOptions,
    stores: Stores,
    writers: (
        Writer<Sandbox>,
        Writer<Pod>,
        Writer<Service>,
        Writer<PersistentVolumeClaim>,
    ),
    metrics: Metrics,
}

/// What a Sandbox change must touch to trigger a reconcile: spec (generation), labels,
/// annotations, owner references, deletion. Status-only updates (our own writes) do not.
fn sandbox_trigger(sb: &Sandbox) -> Option<u64> {
    let mut h = DefaultHasher::new();
    sb.metadata.generation.hash(&mut h);
    sb.metadata.labels.hash(&mut h);
    sb.metadata.annotations.hash(&mut h);
    sb.metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
        .hash(&mut h);
    if let Some(refs) = &sb.metadata.owner_references {
        for r in refs {
            (&r.uid, &r.kind, &r.api_version, r.controller).hash(&mut h);
        }
    }
    Some(h.finish())
}

/// The cached Pod keeps what the controller reads: metadata (without managedFields), the node
/// name, and of the status the phase, the `PodScheduled` and `Ready` conditions and the IPs.
/// Pod writes are merge patches of labels, annotations and owner references only, so nothing
/// dropped here is ever written back.
fn slim_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    pod.spec = Some(PodSpec {
        node_name,
        containers: Vec::new(),
        ..Default::default()
    });
    if let Some(status) = pod.status.take() {
        let conditions = status.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "PodScheduled" || c.type_ == "Ready")
                .collect()
        });
        pod.status = Some(PodStatus {
            phase: status.phase,
            conditions,
            pod_ip: status.pod_ip,
            pod_ips: status.pod_ips,
            ..Default::default()
        });
    }
}

/// The cached Sandbox drops managedFields and kubectl's last-applied copy of the whole object;
/// the controller reads neither and never writes the cached object back.
fn slim_sandbox(sandbox: &mut Sandbox) {
    sandbox.metadata.managed_fields = None;
    if let Some(annotations) = sandbox.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
}

const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

impl SandboxController {
    /// Builds the stores and registers the metrics (including `agent_sandboxes` over the
    /// Sandbox store) in `registry`.
    pub fn new(client: Client, options: ControllerOptions, registry: &mut Registry) -> Self {
        let (sandboxes, sb_w) = reflector::store::<Sandbox>();
        let (pods, pod_w) = reflector::store::<Pod>();
        let (services, svc_w) = reflector::store::<Service>();
        let (pvcs, pvc_w) = reflector::store::<PersistentVolumeClaim>();
        let metrics = Metrics::register(registry, Some(sandboxes.clone()));
        metrics.set_max_concurrent(options.workers);
        SandboxController {
            client,
            options,
            stores: Stores {
                sandboxes,
                pods,
                services,
                pvcs,
            },
            writers: (sb_w, pod_w, svc_w, pvc_w),
            metrics,
        }
    }

    /// The reflector stores (read-only views), e.g. to wait until they are synced.
    pub fn stores(&self) -> Stores {
        self.stores.clone()
    }

    /// Runs until `shutdown` is cancelled; in-flight reconciles finish first.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        let SandboxController {
            client,
            options,
            stores,
            writers: (sb_w, pod_w, svc_w, pvc_w),
            metrics,
        } = self;
        let child_config = if options.label_scoped_cache {
            watcher::Config::default().labels(NAME_HASH_LABEL)
        } else {
            watcher::Config::default()
        };

        // Every trigger is emitted only once the store it came from reflects it (a relist's
        // triggers wait for the relist to complete), and no Sandbox is reconciled before the
        // child stores finished their first list: see `triggers`.
        let children = stores.clone();
        let sandbox_stream = settled(
            watcher(
                Api::<Sandbox>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(slim_sandbox)
            .reflect(sb_w),
            stores.sandboxes.clone(),
            false,
        )
        .gated(async move {
            children.wait_until_children_ready().await;
        })
        .predicate_filter(sandbox_trigger, PredicateConfig::default());
        let pod_stream = settled(
            watcher(Api::<Pod>::all(client.clone()), child_config.clone())
                .default_backoff()
                .modify(slim_pod)
                .reflect(pod_w),
            stores.pods.clone(),
            true,
        );
        let svc_stream = settled(
            watcher(Api::<Service>::all(client.clone()), child_config)
                .default_backoff()
                .modify(|s: &mut Service| s.metadata.managed_fields = None)
                .reflect(svc_w),
            stores.services.clone(),
            true,
        );
        let pvc_stream = settled(
            watcher(
                Api::<PersistentVolumeClaim>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .modify(|p: &mut PersistentVolumeClaim| p.metadata.managed_fields = None)
            .reflect(pvc_w),
            stores.pvcs.clone(),
            true,
        );

        let recorder = options.settings.events.then(|| {
            Recorder::new(
                client.clone(),
                Reporter {
                    controller: crate::context::FIELD_MANAGER.to_string(),
                    instance: options.instance.clone(),
                },
            )
        });
        let ctx = Arc::new(Context::new(
            client,
            stores.clone(),
            options.settings.clone(),
            metrics,
            recorder,
        ));

        // Forget per-Sandbox memory of deleted Sandboxes once a minute.
        let janitor = {
            let ctx = ctx.clone();
            let stop = shutdown.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => break,
                        _ = tick.tick() => ctx.prune_departed(),
                    }
                }
            })
        };

        let mut config = controller::Config::default().concurrency(options.workers);
        config = config.debounce(std::time::Duration::from_millis(0));
        Controller::for_stream(sandbox_stream, stores.sandboxes.clone())
            .owns_stream(pod_stream)
            .owns_stream(svc_stream)
            .owns_stream(pvc_stream)
            .with_config(config)
            .graceful_shutdown_on(shutdown.cancelled_owned())
            .run(reconcile, error_policy, ctx)
            .for_each(|res| async move {
                if let Err(err) = res {
                    match err {
                        controller::Error::ObjectNotFound(_) => {}
                        controller::Error::QueueError(err) => {
                            // The watcher retries with backoff and relists after a 410; the
                            // relist's changes trigger reconciles once the store holds them.
                            tracing::warn!(error = %err, "watch failed; retrying");
                        }
                        other => tracing::debug!(error = %other, "controller event"),
                    }
                }
            })
            .await;
        janitor.abort();
        Ok(())
    }
}

/// Waits for one store's initial list. kube's readiness signal wakes only the most recent waiter
/// (the controller itself waits on the same store), so poll with a short timeout: each new poll
/// sees the readiness once any waiter has observed it.
async fn wait_store<K>(store: &kube::runtime::reflector::Store<K>) -> bool
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    loop {
        match tokio::time::timeout(
            std::time::Duration::from_millis(200),
            store.wait_until_ready(),
        )
        .await
        {
            Ok(res) => return res.is_ok(),
            Err(_elapsed) => continue,
        }
    }
}

/// Stores are synced when every reflector has completed its initial list.
impl Stores {
    pub async fn wait_until_ready(&self) -> bool {
        wait_store(&self.sandboxes).await && self.wait_until_children_ready().await
    }

    /// The Pod, Service and PVC stores completed their first list.
    pub async fn wait_until_children_ready(&self) -> bool {
        wait_store(&self.pods).await
            && wait_store(&self.services).await
            && wait_store(&self.pvcs).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api_types::{SandboxSpec, SandboxStatus};

    #[test]
    fn status_only_changes_do_not_trigger_but_spec_and_metadata_do() {
        let mut sb = Sandbox::new("sb", SandboxSpec::default());
        sb.metadata.generation = Some(1);
        let base = sandbox_trigger(&sb);
        let mut status_only = sb.clone();
        status_only.status = Some(SandboxStatus {
            node_name: "node-1".into(),
            ..Default::default()
        });
        status_only.metadata.resource_version = Some("42".into());
        assert_eq!(sandbox_trigger(&status_only), base);
        let mut spec = sb.clone();
        spec.metadata.generation = Some(2);
        assert_ne!(sandbox_trigger(&spec), base);
        let mut annotated = sb.clone();
        annotated.metadata.annotations = Some([("k".to_string(), "v".to_string())].into());
        assert_ne!(sandbox_trigger(&annotated), base);
    }

    #[test]
    fn cached_pods_keep_metadata_node_and_the_status_fields_read() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"a": "b"}, "managedFields": [{"manager": "x"}]},
            "spec": {"nodeName": "node-7", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
                       "hostIP": "10.0.0.1", "qosClass": "BestEffort",
                       "conditions": [
                           {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                           {"type": "Initialized", "status": "True"},
                           {"type": "Ready", "status": "False", "message": "probe"}],
                       "containerStatuses": [{"name": "c", "image": "i", "imageID": "x",
                           "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        slim_pod(&mut pod);
        assert_eq!(pod.metadata.managed_fields, None);
        assert_eq!(pod.metadata.labels.as_ref().unwrap()["a"], "b");
        let spec = pod.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("node-7"));
        assert!(spec.containers.is_empty());
        let status = serde_json::to_value(pod.status.unwrap()).unwrap();
        assert_eq!(
            status,
            serde_json::json!({"phase": "Running", "podIP": "127.0.0.1",
                "podIPs": [{"ip": "127.0.0.1"}],
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "reason": "Scheduled"},
                    {"type": "Ready", "status": "False", "message": "probe"}]})
        );
    }

    #[test]
    fn cached_sandboxes_drop_managed_fields_and_the_last_applied_copy() {
        let mut sb = Sandbox::new("sb", SandboxSpec::default());
        sb.metadata.managed_fields = Some(vec![Default::default()]);
        sb.metadata.annotations = Some(
            [
                (LAST_APPLIED_ANNOTATION.to_string(), "{...}".to_string()),
                ("agents.x-k8s.io/pod-name".to_string(), "p".to_string()),
            ]
            .into(),
        );
        slim_sandbox(&mut sb);
        assert_eq!(sb.metadata.managed_fields, None);
        assert_eq!(
            sb.metadata.annotations,
            Some([("agents.x-k8s.io/pod-name".to_string(), "p".to_string())].into())
        );
    }
}
