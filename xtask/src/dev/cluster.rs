//! What `cargo xtask dev` does through the Kubernetes API: connect with the kubeconfig
//! devcluster wrote, apply manifest files (server-side apply, like `kubectl apply
//! --server-side`), wait for the CRDs and the warm pool, and create claims and time them.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use api_types::{Sandbox, SandboxClaim, SandboxTemplate, SandboxWarmPool};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};

use crate::dev::DevError;

/// Field manager of everything `cargo xtask dev` applies.
pub const FIELD_MANAGER: &str = "xtask-dev";

/// A client for the API server in `kubeconfig`.
pub async fn connect(kubeconfig: &Path) -> Result<Client, DevError> {
    let text = std::fs::read_to_string(kubeconfig).map_err(|source| DevError::Io {
        action: "read kubeconfig",
        path: kubeconfig.to_path_buf(),
        source,
    })?;
    let parsed = Kubeconfig::from_yaml(&text).map_err(|e| DevError::Kube {
        action: format!("parse kubeconfig {}", kubeconfig.display()),
        message: e.to_string(),
    })?;
    let config = Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .map_err(|e| DevError::Kube {
            action: format!("load kubeconfig {}", kubeconfig.display()),
            message: e.to_string(),
        })?;
    Client::try_from(config).map_err(|e| DevError::Kube {
        action: "create a Kubernetes client".to_owned(),
        message: e.to_string(),
    })
}

/// Whether the API server answers (a namespace list succeeds).
pub async fn is_serving(client: &Client) -> bool {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .list(&ListParams::default().limit(1))
        .await
        .is_ok()
}

/// The kinds `cargo xtask dev` knows how to apply, by `(apiVersion, kind)`.
fn known_resource(api_version: &str, kind: &str) -> Option<(ApiResource, bool)> {
    let candidates = [
        (ApiResource::erase::<CustomResourceDefinition>(&()), false),
        (ApiResource::erase::<Sandbox>(&()), true),
        (ApiResource::erase::<SandboxTemplate>(&()), true),
        (ApiResource::erase::<SandboxWarmPool>(&()), true),
        (ApiResource::erase::<SandboxClaim>(&()), true),
    ];
    candidates
        .into_iter()
        .find(|(resource, _)| resource.api_version == api_version && resource.kind == kind)
}

/// Server-side applies every document of every file, in order. Namespaced objects without a
/// namespace go to `default`. Returns `kind/name` of each applied object.
pub async fn apply_files(client: &Client, files: &[&Path]) -> Result<Vec<String>, DevError> {
    let mut applied = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).map_err(|source| DevError::Io {
            action: "read manifest",
            path: file.to_path_buf(),
            source,
        })?;
        for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let origin = format!("{} (document {})", file.display(), index + 1);
            let value: serde_json::Value =
                serde::Deserialize::deserialize(document).map_err(|e| DevError::Manifest {
                    origin: origin.clone(),
                    message: e.to_string(),
                })?;
            if value.is_null() {
                continue;
            }
            applied.push(apply_document(client, &origin, value).await?);
        }
    }
    Ok(applied)
}

/// The annotation `kubectl apply` keeps its last applied configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// `value` with the annotation client-side `kubectl apply` would record, so a later
/// `kubectl apply -f` of the same file by the user patches it without warnings.
pub fn with_last_applied(mut value: serde_json::Value) -> serde_json::Value {
    let recorded = value.to_string();
    if let Some(metadata) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(LAST_APPLIED.to_owned(), serde_json::Value::String(recorded));
        }
    }
    value
}

async fn apply_document(
    client: &Client,
    origin: &str,
    value: serde_json::Value,
) -> Result<String, DevError> {
    let value = with_last_applied(value);
    let field = |path: &str| {
        value
            .pointer(path)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| DevError::Manifest {
                origin: origin.to_owned(),
                message: format!("missing string field {path}"),
            })
    };
    let api_version = field("/apiVersion")?;
    let kind = field("/kind")?;
    let name = field("/metadata/name")?;
    let (resource, namespaced) =
        known_resource(&api_version, &kind).ok_or_else(|| DevError::Manifest {
            origin: origin.to_owned(),
            message: format!(
                "kind {kind} ({api_version}) is not one cargo xtask dev applies \
                 (CustomResourceDefinition and the four agent-sandbox kinds)"
            ),
        })?;
    let api: Api<DynamicObject> = if namespaced {
        let namespace = value
            .pointer("/metadata/namespace")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("default");
        Api::namespaced_with(client.clone(), namespace, &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&value),
    )
    .await
    .map_err(|e| DevError::Kube {
        action: format!("apply {kind}/{name} from {origin}"),
        message: e.to_string(),
    })?;
    Ok(format!("{kind}/{name}"))
}

/// Waits until every CRD named in `names` reports `Established=True`.
pub async fn wait_crds_established(
    client: &Client,
    names: &[String],
    deadline: Instant,
) -> Result<(), DevError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in names {
        loop {
            let established = crds
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .and_then(|crd| crd.status)
                .and_then(|status| status.conditions)
                .is_some_and(|conditions| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if Instant::now() >= deadline {
                return Err(DevError::Timeout {
                    what: format!("CustomResourceDefinition {name} to be Established"),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// A warm pool's ready and desired replicas.
pub async fn pool_readiness(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<(i32, i32), DevError> {
    let pools: Api<SandboxWarmPool> = Api::namespaced(client.clone(), namespace);
    let pool = pools.get(name).await.map_err(|e| DevError::Kube {
        action: format!("read SandboxWarmPool {namespace}/{name}"),
        message: e.to_string(),
    })?;
    let ready = pool.status.map(|s| s.ready_replicas).unwrap_or_default();
    Ok((ready, pool.spec.desired_replicas()))
}

/// One claim created by `--claims N`, once it is bound.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundClaim {
    pub claim: String,
    pub sandbox: String,
    pub time_to_bound: Duration,
}

/// Creates `count` claims named `dev-claim-<n>` on `pool` (deleting leftovers of an earlier
/// run first is not needed: devcluster starts empty) and waits until each one is bound: `Ready`
/// is `True` and `status.sandbox.name` is set. The time is from just before its create request
/// to the watch event that showed it bound.
pub async fn create_and_time_claims(
    client: &Client,
    namespace: &str,
    pool: &str,
    count: u32,
    deadline: Instant,
) -> Result<Vec<BoundClaim>, DevError> {
    let claims: Api<SandboxClaim> = Api::namespaced(client.clone(), namespace);
    let kube_error = |action: String| {
        move |e: kube::Error| DevError::Kube {
            action,
            message: e.to_string(),
        }
    };
    let list = claims
        .list(&ListParams::default().limit(1))
        .await
        .map_err(kube_error("list SandboxClaims".to_owned()))?;
    let resource_version = list.metadata.resource_version.unwrap_or_default();
    let mut events = claims
        .watch(&WatchParams::default(), &resource_version)
        .await
        .map_err(kube_error("watch SandboxClaims".to_owned()))?
        .boxed();

    let mut started: BTreeMap<String, Instant> = BTreeMap::new();
    for n in 1..=count {
        let name = format!("dev-claim-{n}");
        let claim: SandboxClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": SandboxClaim::api_version(&()),
            "kind": SandboxClaim::kind(&()),
            "metadata": { "name": name, "namespace": namespace },
            "spec": { "warmPoolRef": { "name": pool } },
        }))
        .map_err(|e| DevError::Manifest {
            origin: format!("claim {name}"),
            message: e.to_string(),
        })?;
        started.insert(name.clone(), Instant::now());
        claims
            .create(&PostParams::default(), &claim)
            .await
            .map_err(kube_error(format!(
                "create SandboxClaim {namespace}/{name}"
            )))?;
    }

    let mut bound: Vec<BoundClaim> = Vec::new();
    while bound.len() < started.len() {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let event = match tokio::time::timeout(remaining, events.try_next()).await {
            Err(_) => {
                let waiting: Vec<&String> = started
                    .keys()
                    .filter(|name| !bound.iter().any(|b| &&b.claim == name))
                    .collect();
                return Err(DevError::Timeout {
                    what: format!("claims {waiting:?} to be bound"),
                });
            }
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) | Ok(Err(_)) => {
                // The watch ended or broke: start a new one from now on.
                events = claims
                    .watch(&WatchParams::default(), "0")
                    .await
                    .map_err(kube_error("watch SandboxClaims".to_owned()))?
                    .boxed();
                continue;
            }
        };
        let claim = match event {
            WatchEvent::Added(claim) | WatchEvent::Modified(claim) => claim,
            _ => continue,
        };
        let now = Instant::now();
        let name = claim.metadata.name.clone().unwrap_or_default();
        let Some(start) = started.get(&name) else {
            continue;
        };
        if bound.iter().any(|b| b.claim == name) {
            continue;
        }
        if let Some(sandbox) = bound_sandbox(&claim) {
            bound.push(BoundClaim {
                claim: name,
                sandbox,
                time_to_bound: now.duration_since(*start),
            });
        }
    }
    bound.sort_by(|a, b| a.claim.cmp(&b.claim));
    Ok(bound)
}

/// The bound Sandbox's name when the claim is `Ready=True` with a Sandbox named in its status.
pub fn bound_sandbox(claim: &SandboxClaim) -> Option<String> {
    let status = claim.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (ready && !status.sandbox.name.is_empty()).then(|| status.sandbox.name.clone())
}
