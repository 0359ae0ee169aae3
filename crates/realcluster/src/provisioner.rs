//! A volume provisioner for the real cluster: kwok runs no kubelet and mounts nothing, so a
//! PersistentVolumeClaim only needs a PersistentVolume to bind to for its Pod to schedule (the
//! scheduler's VolumeBinding plugin waits for it). The cluster gets one StorageClass,
//! [`STORAGE_CLASS`], marked default (the `DefaultStorageClass` admission plugin gives it to
//! every claim that names none), and this provisioner answers each pending claim of it with a
//! `hostPath` PersistentVolume of the requested size and access modes, pre-bound to the claim
//! (`claimRef`); kube-controller-manager's PV controller then binds the two, as it does for any
//! external provisioner. It serves every StorageClass whose `provisioner` is [`PROVISIONER`],
//! so a test can add one a manifest names ([`storage_class`]), as a user adds a class a
//! manifest needs to their cluster. When a claim is deleted, its volume is `Released` and the provisioner
//! deletes it (reclaim policy `Delete`).
//!
//! Written here rather than running an upstream provisioner (e.g. local-path-provisioner):
//! those create directories through helper Pods, which kwok never runs. It is a thread with a
//! runtime of its own, so it outlives the runtime of the test that started the cluster (a
//! cluster may be shared by several `#[tokio::test]`s).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

use crate::error::Error;
use crate::process::InProcess;

/// The default StorageClass of the real cluster.
pub const STORAGE_CLASS: &str = "standard";
/// Its `provisioner`, also written on each volume as `pv.kubernetes.io/provisioned-by`.
pub const PROVISIONER: &str = "realcluster.agent-sandbox.dev/hostpath";

/// A StorageClass `name` served by this provisioner (immediate binding, volumes deleted with
/// their claims), the cluster's default when `default`.
pub fn storage_class(name: &str, default: bool) -> serde_json::Value {
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            "annotations": {"storageclass.kubernetes.io/is-default-class": default.to_string()},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    })
}

/// The StorageClass of `claim`, if it is pending with no volume yet (the one to provision for).
pub fn pending_class(claim: &PersistentVolumeClaim) -> Option<&str> {
    let spec = claim.spec.as_ref()?;
    if spec.volume_name.as_deref().is_some_and(|v| !v.is_empty())
        || claim.metadata.deletion_timestamp.is_some()
    {
        return None;
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref());
    if phase.is_some_and(|p| p != "Pending") {
        return None;
    }
    spec.storage_class_name.as_deref().filter(|c| !c.is_empty())
}

/// The volume for `claim`, if it is pending with no volume yet, of a class `ours` says this
/// provisioner serves.
pub fn volume_for(
    claim: &PersistentVolumeClaim,
    ours: impl Fn(&str) -> bool,
) -> Option<serde_json::Value> {
    let class = pending_class(claim).filter(|c| ours(c))?;
    let spec = claim.spec.as_ref()?;
    let uid = claim.metadata.uid.as_deref()?;
    let name = claim.metadata.name.as_deref()?;
    let namespace = claim.metadata.namespace.as_deref()?;
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map_or_else(|| "1Gi".to_owned(), |q| q.0.clone());
    let modes = spec
        .access_modes
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_owned()]);
    let volume = format!("pvc-{uid}");
    Some(json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume,
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "storageClassName": class,
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".to_owned()),
            "hostPath": {"path": format!("/var/lib/realcluster/volumes/{volume}")},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": namespace, "name": name, "uid": uid},
        },
    }))
}

/// True for a volume of ours whose claim is gone.
pub fn is_released(volume: &PersistentVolume) -> bool {
    let ours = volume
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
        .is_some_and(|p| p == PROVISIONER);
    let phase = volume.status.as_ref().and_then(|s| s.phase.as_deref());
    ours && volume.metadata.deletion_timestamp.is_none() && phase == Some("Released")
}

/// The running provisioner; stops when dropped.
pub struct Provisioner {
    _thread: InProcess,
}

impl Provisioner {
    /// Creates the StorageClass (with `client`) and starts the provisioner on its own thread,
    /// with a client from the admin kubeconfig at `kubeconfig`.
    pub async fn start(
        client: &kube::Client,
        kubeconfig: std::path::PathBuf,
    ) -> Result<Provisioner, Error> {
        let classes: Api<StorageClass> = Api::all(client.clone());
        let class: StorageClass = serde_json::from_value(storage_class(STORAGE_CLASS, true))
            .map_err(|e| Error::Invalid(format!("the StorageClass does not parse: {e}")))?;
        classes
            .create(&PostParams::default(), &class)
            .await
            .map_err(|source| Error::Kube {
                action: format!("create StorageClass {STORAGE_CLASS}"),
                source,
            })?;
        let thread = InProcess::spawn("provisioner", run(kubeconfig), |status| {
            eprintln!("realcluster: the volume provisioner {status}");
        })?;
        Ok(Provisioner { _thread: thread })
    }
}

/// Watches claims and volumes until stopped; a failed request is retried on the next event
/// of that object or the watcher's next relist.
async fn run(kubeconfig: std::path::PathBuf) {
    let client = loop {
        match crate::cluster::client_from_kubeconfig(&kubeconfig).await {
            Ok(client) => break client,
            Err(e) => {
                eprintln!("realcluster: the volume provisioner has no client yet: {e}");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let classes: Api<StorageClass> = Api::all(client.clone());
    let volumes: Api<PersistentVolume> = Api::all(client);
    let provision = {
        let volumes = volumes.clone();
        watcher(claims, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .for_each(move |claim| {
                let (volumes, classes) = (volumes.clone(), classes.clone());
                async move {
                    let Ok(claim) = claim else { return };
                    // Which class serves it: read when a claim is pending (rare; a class made
                    // after the claim is seen on the claim's next event or relist).
                    let Some(class) = pending_class(&claim) else {
                        return;
                    };
                    let ours = match classes.get_opt(class).await {
                        Ok(found) => found.is_some_and(|c| c.provisioner == PROVISIONER),
                        Err(e) => {
                            eprintln!("realcluster: reading StorageClass {class} failed: {e}");
                            false
                        }
                    };
                    let Some(volume) = volume_for(&claim, |_| ours) else {
                        return;
                    };
                    let Ok(volume) = serde_json::from_value::<PersistentVolume>(volume) else {
                        return;
                    };
                    match volumes.create(&PostParams::default(), &volume).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(s)) if s.code == 409 => {}
                        Err(e) => eprintln!("realcluster: provisioning a volume failed: {e}"),
                    }
                }
            })
    };
    let reclaim = {
        let volumes = volumes.clone();
        watcher(volumes.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .for_each(move |volume| {
                let volumes = volumes.clone();
                async move {
                    let Some(volume) = volume.ok().filter(is_released) else {
                        return;
                    };
                    let name = volume.metadata.name.unwrap_or_default();
                    if let Err(e) = volumes.delete(&name, &DeleteParams::default()).await {
                        eprintln!("realcluster: deleting released volume {name} failed: {e}");
                    }
                }
            })
    };
    // Neither ends while the API server answers: both watchers retry with backoff.
    let _ = futures::join!(provision, reclaim);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(value: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(value).unwrap()
    }

    fn pending(class: &str) -> PersistentVolumeClaim {
        claim(json!({
            "metadata": {"name": "home", "namespace": "ns", "uid": "u-1"},
            "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Pending"},
        }))
    }

    #[test]
    fn a_pending_claim_of_the_class_gets_a_volume_bound_to_it() {
        let ours = |c: &str| c == STORAGE_CLASS || c == "dynamic-rwo";
        let volume = volume_for(&pending("dynamic-rwo"), ours).expect("a volume");
        assert_eq!(volume["spec"]["storageClassName"], "dynamic-rwo");
        assert_eq!(volume["metadata"]["name"], "pvc-u-1");
        assert_eq!(volume["spec"]["capacity"]["storage"], "2Gi");
        assert_eq!(volume["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(
            volume["spec"]["claimRef"],
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "namespace": "ns", "name": "home", "uid": "u-1"})
        );
        serde_json::from_value::<PersistentVolume>(volume).expect("a PersistentVolume");
    }

    #[test]
    fn other_classes_and_bound_claims_are_left_alone() {
        let ours = |c: &str| c == STORAGE_CLASS;
        assert!(volume_for(&pending("fast"), ours).is_none());
        let mut bound = pending(STORAGE_CLASS);
        bound.spec.as_mut().unwrap().volume_name = Some("pv-1".into());
        assert!(volume_for(&bound, ours).is_none());
        assert_eq!(pending_class(&bound), None);
        assert!(volume_for(&pending(STORAGE_CLASS), ours).is_some());
    }

    #[test]
    fn only_our_released_volumes_are_reclaimed() {
        let volume = |by: &str, phase: &str| -> PersistentVolume {
            serde_json::from_value(json!({
                "metadata": {"name": "v", "annotations": {"pv.kubernetes.io/provisioned-by": by}},
                "status": {"phase": phase},
            }))
            .unwrap()
        };
        assert!(is_released(&volume(PROVISIONER, "Released")));
        assert!(!is_released(&volume(PROVISIONER, "Bound")));
        assert!(!is_released(&volume("someone.else/csi", "Released")));
    }
}
