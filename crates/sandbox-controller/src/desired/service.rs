//! The headless Service of a Sandbox: its ports, the object to create and the drift repair of
//! an owned Service. Pure functions, no I/O.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{PodSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use crate::keys::NAME_HASH_LABEL;

/// The ports the Service exposes, derived from the Pod template: every container port and the
/// ports of native sidecars (init containers with `restartPolicy: Always`), deduplicated by
/// `(port, protocol)`, sorted by port then protocol. `None` when there is no port at all.
pub fn service_ports(spec: &PodSpec) -> Option<Vec<ServicePort>> {
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    let declared = spec
        .containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten());

    // (port, protocol) -> explicit name, in first-seen order of explicit names.
    let mut keys: BTreeMap<(i32, String), Option<String>> = BTreeMap::new();
    let mut claimed_names: HashSet<String> = HashSet::new();
    for p in declared {
        if p.container_port == 0 {
            continue;
        }
        let protocol = p.protocol.clone().unwrap_or_else(|| "TCP".to_string());
        let entry = keys.entry((p.container_port, protocol)).or_insert(None);
        if entry.is_none()
            && let Some(name) = p.name.as_ref().filter(|n| !n.is_empty())
            && claimed_names.insert(name.clone())
        {
            *entry = Some(name.clone());
        }
    }
    if keys.is_empty() {
        return None;
    }

    let mut reserved: HashSet<String> = claimed_names;
    let ports = keys
        .into_iter()
        .map(|((port, protocol), name)| {
            let name = name.unwrap_or_else(|| {
                let base = format!("p-{port}-{}", protocol.to_lowercase());
                let mut candidate = base.clone();
                let mut suffix = 2;
                while reserved.contains(&candidate) {
                    candidate = format!("{base}-{suffix}");
                    suffix += 1;
                }
                reserved.insert(candidate.clone());
                candidate
            });
            ServicePort {
                name: Some(name),
                protocol: Some(protocol),
                port,
                target_port: Some(IntOrString::Int(port)),
                ..Default::default()
            }
        })
        .collect();
    Some(ports)
}

fn hash_map(name_hash: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(NAME_HASH_LABEL.to_string(), name_hash.to_string())])
}

/// The Service to create: headless, named and namespaced like the Sandbox, selecting the Pod by
/// the tracking label only.
pub fn desired_service(
    name: &str,
    namespace: &str,
    name_hash: &str,
    ports: Option<Vec<ServicePort>>,
    owner: OwnerReference,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            labels: Some(hash_map(name_hash)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(hash_map(name_hash)),
            ports,
            ..Default::default()
        }),
        status: None,
    }
}

/// The fields of a port the controller manages; others (nodePort, appProtocol) are left alone.
fn port_identity(p: &ServicePort) -> (Option<String>, String, i32, IntOrString) {
    (
        p.name.clone().filter(|n| !n.is_empty()),
        p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
        p.port,
        p.target_port.clone().unwrap_or(IntOrString::Int(p.port)),
    )
}

fn ports_match(existing: Option<&Vec<ServicePort>>, desired: Option<&Vec<ServicePort>>) -> bool {
    let existing = existing.map(Vec::as_slice).unwrap_or_default();
    let desired = desired.map(Vec::as_slice).unwrap_or_default();
    existing.len() == desired.len()
        && existing
            .iter()
            .zip(desired)
            .all(|(a, b)| port_identity(a) == port_identity(b))
}

/// The merge patch that repairs an owned Service, or `None` when it needs nothing: the tracking
/// label value, a selector of exactly the tracking label, and — when `manage_ports` (the Sandbox
/// asked for a Service explicitly) — the ports.
pub fn owned_service_repair(
    existing: &Service,
    name_hash: &str,
    desired_ports: Option<&Vec<ServicePort>>,
    manage_ports: bool,
) -> Option<Value> {
    let mut patch = Map::new();
    let labels = existing.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get(NAME_HASH_LABEL))
        .map(String::as_str)
        != Some(name_hash)
    {
        patch.insert(
            "metadata".to_string(),
            json!({ "labels": { NAME_HASH_LABEL: name_hash } }),
        );
    }
    let spec = existing.spec.clone().unwrap_or_default();
    let mut spec_patch = Map::new();
    let selector = spec.selector.unwrap_or_default();
    if selector != hash_map(name_hash) {
        let mut sel = Map::new();
        for key in selector.keys().filter(|k| *k != NAME_HASH_LABEL) {
            sel.insert(key.clone(), Value::Null);
        }
        sel.insert(
            NAME_HASH_LABEL.to_string(),
            Value::String(name_hash.to_string()),
        );
        spec_patch.insert("selector".to_string(), Value::Object(sel));
    }
    if manage_ports && !ports_match(spec.ports.as_ref(), desired_ports) {
        let value = match desired_ports {
            Some(ports) => serde_json::to_value(ports).unwrap_or(Value::Null),
            None => Value::Null,
        };
        spec_patch.insert("ports".to_string(), value);
    }
    if !spec_patch.is_empty() {
        patch.insert("spec".to_string(), Value::Object(spec_patch));
    }
    (!patch.is_empty()).then_some(Value::Object(patch))
}

/// `<service>.<namespace>.svc.<cluster domain>`.
pub fn service_fqdn(service: &str, namespace: &str, cluster_domain: &str) -> String {
    format!("{service}.{namespace}.svc.{cluster_domain}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort};

    fn port(n: Option<&str>, p: i32, proto: Option<&str>) -> ContainerPort {
        ContainerPort {
            name: n.map(String::from),
            container_port: p,
            protocol: proto.map(String::from),
            ..Default::default()
        }
    }

    fn container(name: &str, ports: Vec<ContainerPort>) -> Container {
        Container {
            name: name.into(),
            ports: Some(ports),
            ..Default::default()
        }
    }

    fn summary(ports: &[ServicePort]) -> Vec<(String, i32, String)> {
        ports
            .iter()
            .map(|p| (p.name.clone().unwrap(), p.port, p.protocol.clone().unwrap()))
            .collect()
    }

    #[test]
    fn no_container_ports_means_no_service_ports() {
        let spec = PodSpec {
            containers: vec![Container::default()],
            ..Default::default()
        };
        assert_eq!(service_ports(&spec), None);
    }

    #[test]
    fn unnamed_port_gets_a_generated_name_and_tcp() {
        let spec = PodSpec {
            containers: vec![container("c", vec![port(None, 8080, None)])],
            ..Default::default()
        };
        let ports = service_ports(&spec).unwrap();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].name.as_deref(), Some("p-8080-tcp"));
        assert_eq!(ports[0].protocol.as_deref(), Some("TCP"));
        assert_eq!(ports[0].target_port, Some(IntOrString::Int(8080)));
    }

    #[test]
    fn only_native_sidecar_init_containers_contribute() {
        let mut sidecar = container("proxy", vec![port(Some("metrics"), 15020, None)]);
        sidecar.restart_policy = Some("Always".into());
        let spec = PodSpec {
            containers: vec![Container::default()],
            init_containers: Some(vec![
                container("setup", vec![port(Some("setup"), 7070, None)]),
                sidecar,
            ]),
            ..Default::default()
        };
        assert_eq!(
            summary(&service_ports(&spec).unwrap()),
            vec![("metrics".into(), 15020, "TCP".into())]
        );
    }

    #[test]
    fn ports_are_deduplicated_sorted_and_zero_skipped() {
        let spec = PodSpec {
            containers: vec![container(
                "c",
                vec![
                    port(None, 9090, Some("UDP")),
                    port(None, 8080, Some("TCP")),
                    port(Some("http"), 8080, None),
                    port(None, 9090, Some("TCP")),
                    port(None, 0, Some("TCP")),
                ],
            )],
            ..Default::default()
        };
        assert_eq!(
            summary(&service_ports(&spec).unwrap()),
            vec![
                ("http".into(), 8080, "TCP".into()),
                ("p-9090-tcp".into(), 9090, "TCP".into()),
                ("p-9090-udp".into(), 9090, "UDP".into()),
            ]
        );
    }

    #[test]
    fn first_occurrence_keeps_a_duplicated_name() {
        let spec = PodSpec {
            containers: vec![
                container("a", vec![port(Some("http"), 9090, None)]),
                container("b", vec![port(Some("http"), 8080, None)]),
            ],
            ..Default::default()
        };
        assert_eq!(
            summary(&service_ports(&spec).unwrap()),
            vec![
                ("p-8080-tcp".into(), 8080, "TCP".into()),
                ("http".into(), 9090, "TCP".into())
            ]
        );
    }

    #[test]
    fn generated_names_avoid_explicit_ones() {
        let spec = PodSpec {
            containers: vec![container(
                "a",
                vec![port(Some("p-8080-tcp"), 9090, None), port(None, 8080, None)],
            )],
            ..Default::default()
        };
        assert_eq!(
            summary(&service_ports(&spec).unwrap()),
            vec![
                ("p-8080-tcp-2".into(), 8080, "TCP".into()),
                ("p-8080-tcp".into(), 9090, "TCP".into())
            ]
        );
    }

    fn owned_service(
        labels: &[(&str, &str)],
        selector: &[(&str, &str)],
        ports: Option<Vec<ServicePort>>,
    ) -> Service {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Service {
            metadata: ObjectMeta {
                labels: Some(map(labels)),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some("None".into()),
                selector: Some(map(selector)),
                ports,
                ..Default::default()
            }),
            status: None,
        }
    }

    fn svc_port(name: &str, port: i32) -> ServicePort {
        ServicePort {
            name: Some(name.into()),
            port,
            protocol: Some("TCP".into()),
            target_port: Some(IntOrString::Int(port)),
            ..Default::default()
        }
    }

    #[test]
    fn owned_service_without_drift_needs_no_write() {
        let ports = vec![svc_port("p-8080-tcp", 8080)];
        let svc = owned_service(
            &[(NAME_HASH_LABEL, "h")],
            &[(NAME_HASH_LABEL, "h")],
            Some(ports.clone()),
        );
        assert_eq!(owned_service_repair(&svc, "h", Some(&ports), true), None);
    }

    #[test]
    fn owned_service_drift_is_repaired_and_extra_selector_keys_removed() {
        let svc = owned_service(
            &[("keep", "me")],
            &[("app", "something-else")],
            Some(vec![svc_port("x", 9090)]),
        );
        let patch = owned_service_repair(&svc, "h", None, true).unwrap();
        assert_eq!(
            patch,
            json!({
                "metadata": {"labels": {NAME_HASH_LABEL: "h"}},
                "spec": {"selector": {"app": null, NAME_HASH_LABEL: "h"}, "ports": null}
            })
        );
    }

    #[test]
    fn ports_are_replaced_when_they_differ() {
        let svc = owned_service(
            &[(NAME_HASH_LABEL, "h")],
            &[(NAME_HASH_LABEL, "h")],
            Some(vec![svc_port("x", 9090)]),
        );
        let desired = vec![svc_port("p-8080-tcp", 8080)];
        let patch = owned_service_repair(&svc, "h", Some(&desired), true).unwrap();
        assert_eq!(patch["spec"]["ports"][0]["port"], 8080);
        assert_eq!(patch["spec"]["ports"][0]["name"], "p-8080-tcp");
    }

    #[test]
    fn app_protocol_set_by_others_is_not_drift() {
        let mut existing = svc_port("p-8080-tcp", 8080);
        existing.app_protocol = Some("http".into());
        let svc = owned_service(
            &[(NAME_HASH_LABEL, "h")],
            &[(NAME_HASH_LABEL, "h")],
            Some(vec![existing]),
        );
        let desired = vec![svc_port("p-8080-tcp", 8080)];
        assert_eq!(owned_service_repair(&svc, "h", Some(&desired), true), None);
    }

    #[test]
    fn ports_are_not_managed_when_the_service_field_is_unset() {
        let svc = owned_service(&[], &[], Some(vec![svc_port("x", 9090)]));
        let desired = vec![svc_port("p-8080-tcp", 8080)];
        let patch = owned_service_repair(&svc, "h", Some(&desired), false).unwrap();
        assert!(patch["spec"].get("ports").is_none());
        assert_eq!(patch["spec"]["selector"][NAME_HASH_LABEL], "h");
    }

    #[test]
    fn fqdn_uses_the_cluster_domain() {
        assert_eq!(
            service_fqdn("my-svc", "my-ns", "cluster.local"),
            "my-svc.my-ns.svc.cluster.local"
        );
        assert_eq!(
            service_fqdn("my-svc", "my-ns", "custom.domain"),
            "my-svc.my-ns.svc.custom.domain"
        );
    }
}
