//! Schemas of the built-in kinds devcluster serves, generated from the k8s-openapi types (their
//! `schemars` implementations carry the upstream OpenAPI definitions and names, e.g.
//! `io.k8s.api.core.v1.Pod`) with OpenAPI 3 settings, so a `$ref` with a description becomes
//! `allOf: [{$ref}]` as in a real server's documents.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};

/// Adds `T`'s schema (and everything it refers to) to the generator; returns its name.
fn add<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// The schema-adding function of a served built-in kind, by group, version and kind.
fn schema_of(group: &str, version: &str, kind: &str) -> Option<fn(&mut SchemaGenerator) -> String> {
    use k8s_openapi::api::{
        apps, autoscaling, coordination, core, events, networking, policy, rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    Some(match (group, version, kind) {
        ("", "v1", "Namespace") => add::<core::v1::Namespace>,
        ("", "v1", "Node") => add::<core::v1::Node>,
        ("", "v1", "Pod") => add::<core::v1::Pod>,
        ("", "v1", "Service") => add::<core::v1::Service>,
        ("", "v1", "PersistentVolumeClaim") => add::<core::v1::PersistentVolumeClaim>,
        ("", "v1", "ServiceAccount") => add::<core::v1::ServiceAccount>,
        ("", "v1", "ConfigMap") => add::<core::v1::ConfigMap>,
        ("", "v1", "Secret") => add::<core::v1::Secret>,
        ("", "v1", "Event") => add::<core::v1::Event>,
        ("", "v1", "Endpoints") => add::<core::v1::Endpoints>,
        ("events.k8s.io", "v1", "Event") => add::<events::v1::Event>,
        ("networking.k8s.io", "v1", "NetworkPolicy") => add::<networking::v1::NetworkPolicy>,
        ("coordination.k8s.io", "v1", "Lease") => add::<coordination::v1::Lease>,
        ("apps", "v1", "Deployment") => add::<apps::v1::Deployment>,
        ("apps", "v1", "ReplicaSet") => add::<apps::v1::ReplicaSet>,
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => {
            add::<autoscaling::v2::HorizontalPodAutoscaler>
        }
        ("policy", "v1", "PodDisruptionBudget") => add::<policy::v1::PodDisruptionBudget>,
        ("rbac.authorization.k8s.io", "v1", "Role") => add::<rbac::v1::Role>,
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => add::<rbac::v1::RoleBinding>,
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => add::<rbac::v1::ClusterRole>,
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            add::<rbac::v1::ClusterRoleBinding>
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            add::<apiext::CustomResourceDefinition>
        }
        _ => return None,
    })
}

/// Generated schema sets by group, version and kinds.
type Cache = Mutex<HashMap<(String, String, Vec<String>), Arc<Map<String, Value>>>>;

/// The `components.schemas` of built-in `kinds` at `group`/`version`: each kind's schema
/// (tagged with `x-kubernetes-group-version-kind`) and every schema it refers to. The set of
/// built-in kinds is fixed, so each group-version's schemas are generated once.
pub fn schemas(group: &str, version: &str, kinds: &[String]) -> Arc<Map<String, Value>> {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (group.to_string(), version.to_string(), kinds.to_vec());
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return hit.clone();
    }
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut named = Vec::new();
    for kind in kinds {
        if let Some(add_schema) = schema_of(group, version, kind) {
            named.push((add_schema(&mut generator), kind.clone()));
        }
    }
    let mut definitions = generator.take_definitions(true);
    for (name, kind) in named {
        if let Some(Value::Object(schema)) = definitions.get_mut(&name) {
            schema.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "version": version, "kind": kind}]),
            );
        }
    }
    let built = Arc::new(definitions);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, built.clone());
    built
}

/// The name of the object metadata schema custom resources refer to.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// `ObjectMeta` and the schemas it refers to (for the documents of custom resources).
pub fn object_meta() -> Arc<Map<String, Value>> {
    static META: OnceLock<Arc<Map<String, Value>>> = OnceLock::new();
    META.get_or_init(|| {
        let mut generator = SchemaSettings::openapi3().into_generator();
        add::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(&mut generator);
        Arc::new(generator.take_definitions(true))
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_have_their_schema_and_the_schemas_it_refers_to() {
        let s = schemas("", "v1", &["Pod".to_string(), "NoSuchKind".to_string()]);
        let pod = &s["io.k8s.api.core.v1.Pod"];
        assert_eq!(
            pod["x-kubernetes-group-version-kind"],
            json!([{"group": "", "version": "v1", "kind": "Pod"}])
        );
        // A described reference is wrapped in allOf, as real servers publish it.
        assert_eq!(
            pod["properties"]["spec"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.api.core.v1.PodSpec"
        );
        assert!(s.contains_key("io.k8s.api.core.v1.PodSpec"));
        assert!(s.contains_key("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
        assert!(
            s["io.k8s.api.core.v1.PodSpec"]
                .get("x-kubernetes-group-version-kind")
                .is_none(),
            "only kinds carry a GVK"
        );
    }
}
