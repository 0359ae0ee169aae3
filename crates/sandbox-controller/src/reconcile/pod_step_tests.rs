//! The Pod a create builds from the cached template spec against the one it builds from the
//! whole Sandbox read from the API server (the path it replaces), and when the cached spec may
//! be used at all.

use super::*;
use serde_json::{Value, json};

/// A generated Sandbox as the API server would send it: template spec fields drawn from a
/// seeded generator (containers, init containers, volumes, env, nulls, nested objects), with
/// or without claim templates, labels, owner and status.
fn generated(rng: &mut fastrand::Rng, with_status: bool) -> Value {
    let containers: Vec<Value> = (0..rng.usize(1..4))
        .map(|i| {
            let mut c = json!({"name": format!("c{i}"), "image": format!("img:{}", rng.u32(..))});
            if rng.bool() {
                c["command"] = json!(["sh", "-c", format!("sleep {}", rng.u8(..))]);
            }
            if rng.bool() {
                c["env"] = json!([{"name": "A", "value": "b"}, {"name": "N", "value": null}]);
            }
            if rng.bool() {
                c["ports"] = json!([{"containerPort": rng.u16(1..), "name": "p"}]);
            }
            if rng.bool() {
                c["resources"] = json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
            }
            if rng.bool() {
                c["readinessProbe"] = json!({"exec": {"command": ["true"]}, "periodSeconds": 1});
            }
            c
        })
        .collect();
    let mut spec = json!({"containers": containers});
    if rng.bool() {
        spec["initContainers"] = json!([{"name": "init", "image": "i", "restartPolicy": "Always"}]);
    }
    if rng.bool() {
        spec["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
    }
    if rng.bool() {
        spec["terminationGracePeriodSeconds"] = json!(rng.u8(..));
    }
    if rng.bool() {
        spec["nodeSelector"] = json!({"zone": "a"});
    }
    if rng.bool() {
        spec["hostname"] = Value::Null;
    }
    let mut sandbox = json!({
        "apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
        "metadata": {"name": "sb", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                     "generation": 1, "labels": {"app": "x"},
                     "managedFields": [{"manager": "kubectl"}]},
        "spec": {"podTemplate": {"metadata": {"labels": {"team": "a"},
                                              "annotations": {"note": "n"}},
                                 "spec": spec}}
    });
    if rng.bool() {
        sandbox["spec"]["volumeClaimTemplates"] =
            json!([{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]);
    }
    if rng.bool() {
        sandbox["spec"]["service"] = json!(true);
    }
    if rng.bool() {
        sandbox["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
            "name": "pool", "uid": "p-1", "controller": true}]);
        sandbox["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"] = json!("h");
    }
    if with_status {
        sandbox["status"] = json!({"conditions": [{
            "type": "Ready", "status": "True", "reason": "DependenciesReady", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]});
    }
    sandbox
}

/// The cached form, decoded from the watch's text as the reflector does.
fn watched(text: &str) -> CachedSandbox {
    let mut cached: CachedSandbox = serde_json::from_str(text).expect("a valid Sandbox");
    cached.slim();
    cached
}

fn context_with(cached: &[CachedSandbox]) -> Context {
    crate::context::offline_context(cached.iter().cloned())
}

#[tokio::test]
async fn a_pod_built_from_the_cached_spec_is_the_pod_built_from_the_read_sandbox() {
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    for _ in 0..300 {
        let text = generated(&mut rng, false).to_string();
        let cached = watched(&text);
        let ctx = context_with(std::slice::from_ref(&cached));
        let spec = cached_pod_spec(&ctx, &cached).expect("a new Sandbox keeps its spec");
        let owner = controller_ref("sb", "u-1");
        let from_cache = desired_pod_with_spec(&cached.to_sandbox(), spec, "h", owner.clone());
        // The path it replaces: the whole Sandbox as a GET decodes it.
        let Lean(read): Lean<Sandbox> = serde_json::from_str(&text).expect("a valid Sandbox");
        let from_read = desired_pod(&read, "h", owner);
        assert_eq!(from_cache, from_read, "sandbox {text}");
        // And the request body the server receives is the same.
        assert_eq!(
            serde_json::to_value(&from_cache).expect("serializable"),
            serde_json::to_value(&from_read).expect("serializable")
        );
    }
}

#[tokio::test]
async fn a_sandbox_with_a_status_keeps_no_spec_and_is_read_before_a_create() {
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..50 {
        let cached = watched(&generated(&mut rng, true).to_string());
        assert!(cached.pending_pod_spec().is_none());
        let ctx = context_with(std::slice::from_ref(&cached));
        assert!(cached_pod_spec(&ctx, &cached).is_none());
    }
}

#[tokio::test]
async fn a_snapshot_the_cache_has_moved_past_is_not_built_from() {
    let mut rng = fastrand::Rng::with_seed(11);
    let mut old = generated(&mut rng, false);
    let reconciled = watched(&old.to_string());
    // The template changed after the event this pass reconciles; the cache holds the change.
    old["metadata"]["resourceVersion"] = json!("8");
    old["metadata"]["generation"] = json!(2);
    old["spec"]["podTemplate"]["spec"]["containers"][0]["image"] = json!("changed");
    let newer = watched(&old.to_string());
    let ctx = context_with(std::slice::from_ref(&newer));
    assert!(
        cached_pod_spec(&ctx, &reconciled).is_none(),
        "a stale snapshot must send the create to the API server's copy"
    );
    assert!(cached_pod_spec(&ctx, &newer).is_some());
    // Replaced by a namesake (another UID, same resourceVersion by chance): not built from.
    let mut namesake = newer.clone();
    namesake.metadata.uid = Some("u-2".into());
    let ctx = context_with(std::slice::from_ref(&namesake));
    assert!(cached_pod_spec(&ctx, &newer).is_none());
    // Gone from the cache (deleted): not built from either.
    let ctx = context_with(&[]);
    assert!(cached_pod_spec(&ctx, &newer).is_none());
}

#[test]
fn the_first_status_drops_the_cached_spec() {
    let mut rng = fastrand::Rng::with_seed(3);
    let mut sandbox = generated(&mut rng, false);
    assert!(watched(&sandbox.to_string()).pending_pod_spec().is_some());
    // A status without conditions (only a selector, say) is not a pass's first write yet.
    sandbox["status"] = json!({"selector": "x=y"});
    assert!(watched(&sandbox.to_string()).pending_pod_spec().is_some());
    sandbox["status"] = json!({"conditions": [{
        "type": "Ready", "status": "False", "reason": "DependenciesNotReady", "message": "m",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    assert!(watched(&sandbox.to_string()).pending_pod_spec().is_none());
}
