//! Property tests: random valid objects of all four kinds survive
//! v1beta1 → v1alpha1 → v1beta1 and v1alpha1 → v1beta1 → v1alpha1 unchanged after
//! normalisation.
//!
//! Normalisation removes what a round trip adds or loses by design, exactly as the reference:
//! - the state annotations (up-conversion writes one on every v1beta1 object);
//! - an empty `annotations` map or `status` (`{}` and absent are the same object);
//! - v1beta1 defaults: `operatingMode` unset = `Running`, pool `replicas` unset = 1;
//! - the v1beta1 fields v1alpha1 has no place for: Sandbox `status.nodeName`, SandboxWarmPool
//!   `status.observedGeneration`, SandboxClaim `spec.volumeClaimTemplates`.
//!
//! Everything else must come back byte for byte, in particular a SandboxClaim's pool (random
//! pool names, unbound claims, claims bound to a Sandbox named like the claim (cold start) or
//! to a member of their pool, `<pool>-<suffix>` (warm start), with and without an earlier state
//! annotation) and a Sandbox's replicas in both views.
//!
//! Two losses the reference has too are left out of the generator and pinned by named tests in
//! `conversion_checklist.rs`: a v1beta1 claim whose pool is named `default` or `none` (or is
//! empty), and a claim bound to a warm Sandbox of one pool and then re-pointed through v1beta1
//! at a shadow pool (down-conversion turns the shadow pool into `warmpool: default`, which
//! up-conversion resolves to the bound Sandbox's pool).

use api_types::conversion::{self, claim, sandbox, template, warm_pool};
use api_types::keys::{
    V1ALPHA1_SANDBOX_STATE_ANNOTATION, V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION,
    V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION, V1ALPHA1_SANDBOXWARMPOOL_STATE_ANNOTATION,
    V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY_ANNOTATION,
};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

const STATE_KEYS: [&str; 4] = [
    V1ALPHA1_SANDBOX_STATE_ANNOTATION,
    V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION,
    V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION,
    V1ALPHA1_SANDBOXWARMPOOL_STATE_ANNOTATION,
];

// --- Generators ---------------------------------------------------------------------------------

fn dns_name() -> impl Strategy<Value = String> {
    "[a-z]([a-z0-9-]{0,12}[a-z0-9])?"
}

fn string_map() -> impl Strategy<Value = Map<String, Value>> {
    btree_map("[a-z]{1,6}(/[a-z]{1,6})?", "[ -~]{0,12}", 0..3)
        .prop_map(|m| m.into_iter().map(|(k, v)| (k, Value::String(v))).collect())
}

fn metadata() -> impl Strategy<Value = Value> {
    (
        dns_name(),
        dns_name(),
        option::of(string_map()),
        string_map(),
        option::of(1..1000u32),
    )
        .prop_map(|(name, namespace, labels, annotations, generation)| {
            let mut meta = json!({"name": name, "namespace": namespace,
                                  "uid": format!("uid-{name}"), "resourceVersion": "42"});
            if let Some(labels) = labels {
                meta["labels"] = Value::Object(labels);
            }
            if !annotations.is_empty() {
                meta["annotations"] = Value::Object(annotations);
            }
            if let Some(generation) = generation {
                meta["generation"] = json!(generation);
                meta["managedFields"] = json!([{"manager": "kubectl", "operation": "Update",
                    "apiVersion": "x/v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]);
            }
            meta
        })
}

fn pod_template() -> impl Strategy<Value = Value> {
    (
        "[a-z]{1,8}(:[0-9.]{1,5})?",
        option::of(string_map()),
        option::of(prop_oneof![Just("Always"), Just("Never")]),
        option::of(vec("[a-z]{1,5}", 0..3)),
    )
        .prop_map(|(image, labels, restart, args)| {
            let mut container = json!({"name": "main", "image": image});
            if let Some(args) = args {
                container["args"] = json!(args);
            }
            let mut spec = json!({"containers": [container]});
            if let Some(restart) = restart {
                spec["restartPolicy"] = json!(restart);
            }
            let mut template = json!({"spec": spec});
            if let Some(labels) = labels {
                template["metadata"] = json!({"labels": labels});
            }
            template
        })
}

fn volume_claim_templates() -> impl Strategy<Value = Option<Value>> {
    option::of(vec(dns_name(), 0..3).prop_map(|names| {
        Value::Array(
            names
                .into_iter()
                .map(|n| {
                    json!({"metadata": {"name": n}, "spec": {"accessModes": ["ReadWriteOnce"],
                                 "resources": {"requests": {"storage": "1Gi"}}}})
                })
                .collect(),
        )
    }))
}

fn conditions() -> impl Strategy<Value = Option<Value>> {
    option::of(
        vec(("[A-Z][a-z]{1,8}", any::<bool>()), 0..3).prop_map(|conditions| {
            Value::Array(
                conditions
                    .into_iter()
                    .map(|(t, s)| {
                        json!({"type": t, "status": if s {"True"} else {"False"}, "reason": "R",
                       "message": "", "lastTransitionTime": "2026-02-03T04:05:06Z"})
                    })
                    .collect(),
            )
        }),
    )
}

/// Sets `key` on `object` when `value` is `Some`.
fn put(object: &mut Value, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        object[key] = value;
    }
}

fn object(
    api_version: &str,
    kind: &str,
    metadata: Value,
    spec: Value,
    status: Option<Value>,
) -> Value {
    let mut object = json!({"apiVersion": api_version, "kind": kind, "metadata": metadata,
                            "spec": spec});
    put(&mut object, "status", status);
    object
}

/// Adds a snapshot as an earlier up-conversion would have written it.
fn with_state(mut object: Value, key: &str, state: Option<Value>) -> Value {
    if let Some(state) = state {
        if object["metadata"].get("annotations").is_none() {
            object["metadata"]["annotations"] = json!({});
        }
        object["metadata"]["annotations"][key] = json!(state.to_string());
    }
    object
}

/// Metadata, pod template, volume claim templates, service, shutdown time and policy.
type SandboxParts = (
    Value,
    Value,
    Option<Value>,
    Option<bool>,
    Option<&'static str>,
    Option<&'static str>,
);

fn sandbox_common() -> impl Strategy<Value = SandboxParts> {
    (
        metadata(),
        pod_template(),
        volume_claim_templates(),
        option::of(any::<bool>()),
        option::of(Just("2026-05-06T07:08:09.5+02:00")),
        option::of(prop_oneof![Just("Delete"), Just("Retain")]),
    )
}

fn sandbox_status_common() -> impl Strategy<Value = Value> {
    (
        option::of(dns_name()),
        conditions(),
        option::of(vec("127\\.0\\.0\\.[0-9]{1,2}", 0..2)),
    )
        .prop_map(|(service, conditions, ips)| {
            let mut status = json!({});
            if let Some(service) = service {
                status["service"] = json!(service);
                status["serviceFQDN"] = json!(format!("{service}.ns.svc.cluster.local"));
                status["selector"] = json!("agents.x-k8s.io/sandbox-name-hash=0a0b0c0d");
            }
            put(&mut status, "conditions", conditions);
            put(&mut status, "podIPs", ips.map(|ips| json!(ips)));
            status
        })
}

fn sandbox_spec(
    pod: Value,
    vcts: Option<Value>,
    service: Option<bool>,
    time: Option<&str>,
    policy: Option<&str>,
) -> Value {
    let mut spec = json!({"podTemplate": pod});
    put(&mut spec, "volumeClaimTemplates", vcts);
    put(&mut spec, "service", service.map(Value::from));
    put(&mut spec, "shutdownTime", time.map(Value::from));
    put(&mut spec, "shutdownPolicy", policy.map(Value::from));
    spec
}

fn beta_sandbox() -> impl Strategy<Value = Value> {
    (
        sandbox_common(),
        option::of(prop_oneof![Just("Running"), Just("Suspended")]),
        option::of((sandbox_status_common(), option::of(dns_name()))),
        option::of((option::of(0..=1i64), 0..=1i64)),
    )
        .prop_map(
            |((meta, pod, vcts, service, time, policy), mode, status, state)| {
                let mut spec = sandbox_spec(pod, vcts, service, time, policy);
                put(&mut spec, "operatingMode", mode.map(Value::from));
                let status = status.map(|(mut status, node)| {
                    put(&mut status, "nodeName", node.map(Value::from));
                    status
                });
                let state = state.map(|(replicas, status_replicas)| {
                let mut state = json!({"apiVersion": "agents.x-k8s.io/v1alpha1", "kind": "Sandbox",
                                       "spec": {}, "status": {}});
                put(&mut state["spec"], "replicas", replicas.map(Value::from));
                if status_replicas != 0 {
                    state["status"]["replicas"] = json!(status_replicas);
                }
                state
            });
                with_state(
                    object("agents.x-k8s.io/v1beta1", "Sandbox", meta, spec, status),
                    V1ALPHA1_SANDBOX_STATE_ANNOTATION,
                    state,
                )
            },
        )
}

fn alpha_sandbox() -> impl Strategy<Value = Value> {
    (
        sandbox_common(),
        option::of(0..=1i64),
        option::of((sandbox_status_common(), 0..=1i64)),
    )
        .prop_map(
            |((meta, pod, vcts, service, time, policy), replicas, status)| {
                let mut spec = sandbox_spec(pod, vcts, service, time, policy);
                put(&mut spec, "replicas", replicas.map(Value::from));
                let status = status.map(|(mut status, replicas)| {
                    if replicas != 0 {
                        status["replicas"] = json!(replicas);
                    }
                    status
                });
                object("agents.x-k8s.io/v1alpha1", "Sandbox", meta, spec, status)
            },
        )
}

fn template_spec() -> impl Strategy<Value = Value> {
    (
        pod_template(),
        volume_claim_templates(),
        option::of(any::<bool>()),
        option::of(prop_oneof![
            Just(json!({})),
            Just(json!({"ingress": [{}]})),
            Just(json!({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]})),
        ]),
        option::of(prop_oneof![Just("Managed"), Just("Unmanaged")]),
        option::of(prop_oneof![
            Just("Allowed"),
            Just("Overrides"),
            Just("Disallowed")
        ]),
    )
        .prop_map(|(pod, vcts, service, network, management, env)| {
            let mut spec = json!({"podTemplate": pod});
            put(&mut spec, "volumeClaimTemplates", vcts);
            put(&mut spec, "service", service.map(Value::from));
            put(&mut spec, "networkPolicy", network);
            put(
                &mut spec,
                "networkPolicyManagement",
                management.map(Value::from),
            );
            put(&mut spec, "envVarsInjectionPolicy", env.map(Value::from));
            spec
        })
}

fn vct_policy() -> impl Strategy<Value = Option<&'static str>> {
    option::of(prop_oneof![
        Just("Disallowed"),
        Just("Allowed"),
        Just("Overrides")
    ])
}

fn beta_template() -> impl Strategy<Value = Value> {
    (metadata(), template_spec(), vct_policy(), any::<bool>()).prop_map(
        |(meta, mut spec, policy, state)| {
            put(
                &mut spec,
                "volumeClaimTemplatesPolicy",
                policy.map(Value::from),
            );
            let state = state.then(|| {
                json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                                          "kind": "SandboxTemplate"})
            });
            with_state(
                object(
                    "extensions.agents.x-k8s.io/v1beta1",
                    "SandboxTemplate",
                    meta,
                    spec,
                    None,
                ),
                V1ALPHA1_SANDBOXTEMPLATE_STATE_ANNOTATION,
                state,
            )
        },
    )
}

fn alpha_template() -> impl Strategy<Value = Value> {
    (metadata(), template_spec(), vct_policy()).prop_map(|(mut meta, spec, policy)| {
        if let Some(policy) = policy {
            if meta.get("annotations").is_none() {
                meta["annotations"] = json!({});
            }
            meta["annotations"][V1BETA1_VOLUME_CLAIM_TEMPLATES_POLICY_ANNOTATION] = json!(policy);
        }
        object(
            "extensions.agents.x-k8s.io/v1alpha1",
            "SandboxTemplate",
            meta,
            spec,
            None,
        )
    })
}

/// Metadata, template name, update strategy, status (replicas, ready, selector).
type PoolParts = (Value, String, Option<Value>, Option<(i64, i64, bool)>);

fn pool_parts() -> impl Strategy<Value = PoolParts> {
    (
        metadata(),
        dns_name(),
        option::of(prop_oneof![
            Just(json!({"type": "Recreate"})),
            Just(json!({"type": "OnReplenish"})),
            Just(json!({}))
        ]),
        option::of((0..5i64, 0..5i64, any::<bool>())),
    )
}

fn pool_status(replicas: i64, ready: i64, selector: bool) -> Value {
    let mut status = json!({});
    if replicas != 0 {
        status["replicas"] = json!(replicas);
    }
    if ready != 0 {
        status["readyReplicas"] = json!(ready);
    }
    if selector {
        status["selector"] = json!("agents.x-k8s.io/warm-pool-sandbox=01020304");
    }
    status
}

fn beta_pool() -> impl Strategy<Value = Value> {
    (pool_parts(), option::of(0..10i64), option::of(1..10i64)).prop_map(
        |((meta, template, strategy, status), replicas, generation)| {
            let mut spec = json!({"sandboxTemplateRef": {"name": template}});
            put(&mut spec, "replicas", replicas.map(Value::from));
            put(&mut spec, "updateStrategy", strategy);
            let status = status.map(|(r, ready, selector)| {
                let mut status = pool_status(r, ready, selector);
                put(
                    &mut status,
                    "observedGeneration",
                    generation.map(Value::from),
                );
                status
            });
            object(
                "extensions.agents.x-k8s.io/v1beta1",
                "SandboxWarmPool",
                meta,
                spec,
                status,
            )
        },
    )
}

fn alpha_pool() -> impl Strategy<Value = Value> {
    (pool_parts(), 0..10i64).prop_map(|((meta, template, strategy, status), replicas)| {
        let mut spec = json!({"replicas": replicas, "sandboxTemplateRef": {"name": template}});
        put(&mut spec, "updateStrategy", strategy);
        let status = status.map(|(r, ready, selector)| pool_status(r, ready, selector));
        object(
            "extensions.agents.x-k8s.io/v1alpha1",
            "SandboxWarmPool",
            meta,
            spec,
            status,
        )
    })
}

fn claim_spec_common() -> impl Strategy<Value = Value> {
    (
        option::of(prop_oneof![
            Just(json!({"shutdownPolicy": "Delete"})),
            Just(json!({"shutdownPolicy": "DeleteForeground", "ttlSecondsAfterFinished": 0})),
            Just(json!({"shutdownPolicy": "Retain", "shutdownTime": "2026-01-01T00:00:00Z"})),
        ]),
        option::of(string_map()),
        option::of(vec(("[A-Z]{1,4}", "[a-z]{0,4}"), 0..3)),
    )
        .prop_map(|(lifecycle, labels, env)| {
            let mut spec = json!({"additionalPodMetadata": {}});
            put(&mut spec, "lifecycle", lifecycle);
            if let Some(labels) = labels {
                spec["additionalPodMetadata"]["labels"] = Value::Object(labels);
            }
            put(
                &mut spec,
                "env",
                env.map(|env| {
                    Value::Array(
                        env.into_iter()
                            .map(|(n, v)| json!({"name": n, "value": v}))
                            .collect(),
                    )
                }),
            );
            spec
        })
}

/// A claim's status: bound to nothing, to a Sandbox named like the claim (cold), or to a pool
/// member (`<pool>-<suffix>`, warm).
#[derive(Debug, Clone)]
enum Bound {
    Nothing,
    Cold,
    Warm(String),
}

/// Bound to nothing, cold, or warm to a member of `pool` (any pool when `None`).
fn bound(pool: Option<String>) -> impl Strategy<Value = Bound> {
    let pool = match pool {
        Some(pool) => Just(pool).boxed(),
        None => "[a-z]{1,6}(-[a-z]{1,4})?".boxed(),
    };
    prop_oneof![
        Just(Bound::Nothing),
        Just(Bound::Cold),
        (pool, "[a-z0-9]{5}").prop_map(|(p, s)| Bound::Warm(format!("{p}-{s}"))),
    ]
}

fn claim_status(claim: &str, bound: &Bound, conditions: Option<Value>) -> Option<Value> {
    let name = match bound {
        Bound::Nothing => return conditions.map(|c| json!({"conditions": c, "sandbox": {}})),
        Bound::Cold => claim.to_owned(),
        Bound::Warm(name) => name.clone(),
    };
    let mut status = json!({"sandbox": {"name": name, "podIPs": ["127.0.0.7"]}});
    put(&mut status, "conditions", conditions);
    Some(status)
}

/// A v1beta1 pool name that reads back as a pool (not `default`, `none` or empty).
fn pool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        dns_name(),
        dns_name().prop_map(|t| format!("shadow-pool-{t}")),
    ]
    .prop_filter("reads back as a policy", |n| {
        !matches!(n.as_str(), "default" | "none")
    })
}

fn warmpool_policy() -> impl Strategy<Value = Option<String>> {
    option::of(prop_oneof![
        Just("default".to_owned()),
        Just("none".to_owned()),
        Just(String::new()),
        dns_name(),
    ])
}

fn beta_claim() -> impl Strategy<Value = Value> {
    pool_name()
        .prop_flat_map(|pool| (Just(pool.clone()), bound(Some(pool))))
        .prop_flat_map(|(pool, bound)| {
            (
                metadata(),
                claim_spec_common(),
                Just(pool),
                volume_claim_templates(),
                Just(bound),
                conditions(),
                option::of((option::of(dns_name()), warmpool_policy())),
            )
        })
        .prop_map(|(meta, mut spec, pool, vcts, bound, conditions, state)| {
            spec["warmPoolRef"] = json!({"name": pool});
            put(&mut spec, "volumeClaimTemplates", vcts);
            let name = meta["name"].as_str().unwrap().to_owned();
            let status = claim_status(&name, &bound, conditions);
            let state = state.map(|(template, warmpool)| {
                let mut state = json!({"apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                                       "kind": "SandboxClaim", "spec": {}});
                put(
                    &mut state["spec"],
                    "sandboxTemplateRef",
                    template.map(|t| json!({"name": t})),
                );
                put(&mut state["spec"], "warmpool", warmpool.map(Value::from));
                state
            });
            with_state(
                object(
                    "extensions.agents.x-k8s.io/v1beta1",
                    "SandboxClaim",
                    meta,
                    spec,
                    status,
                ),
                V1ALPHA1_SANDBOXCLAIM_STATE_ANNOTATION,
                state,
            )
        })
}

fn alpha_claim() -> impl Strategy<Value = Value> {
    (
        metadata(),
        claim_spec_common(),
        dns_name(),
        warmpool_policy(),
        bound(None),
        conditions(),
    )
        .prop_map(|(meta, mut spec, template, warmpool, bound, conditions)| {
            spec["sandboxTemplateRef"] = json!({"name": template});
            put(&mut spec, "warmpool", warmpool.map(Value::from));
            let name = meta["name"].as_str().unwrap().to_owned();
            let status = claim_status(&name, &bound, conditions);
            object(
                "extensions.agents.x-k8s.io/v1alpha1",
                "SandboxClaim",
                meta,
                spec,
                status,
            )
        })
}

// --- Normalisation ------------------------------------------------------------------------------

fn normalise(mut object: Value) -> Value {
    let kind = object["kind"].as_str().unwrap().to_owned();
    let beta = object["apiVersion"].as_str().unwrap().ends_with("/v1beta1");
    let metadata = object["metadata"].as_object_mut().unwrap();
    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
        for key in STATE_KEYS {
            annotations.remove(key);
        }
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
    let remove = |object: &mut Value, section: &str, field: &str| {
        if let Some(Value::Object(map)) = object.get_mut(section) {
            map.remove(field);
        }
    };
    match (kind.as_str(), beta) {
        ("Sandbox", true) => {
            if object["spec"].get("operatingMode").is_none() {
                object["spec"]["operatingMode"] = json!("Running");
            }
            remove(&mut object, "status", "nodeName");
        }
        ("SandboxWarmPool", true) => {
            if object["spec"].get("replicas").is_none() {
                object["spec"]["replicas"] = json!(1);
            }
            remove(&mut object, "status", "observedGeneration");
        }
        ("SandboxClaim", true) => remove(&mut object, "spec", "volumeClaimTemplates"),
        _ => {}
    }
    if object.get("status") == Some(&json!({})) {
        object.as_object_mut().unwrap().remove("status");
    }
    object
}

type Converter = fn(&Value) -> Result<Value, conversion::ConversionError>;

fn assert_round_trip(
    object: &Value,
    first: Converter,
    second: Converter,
) -> Result<(), TestCaseError> {
    let there = first(object).map_err(|e| TestCaseError::fail(format!("first leg: {e}")))?;
    let back = second(&there).map_err(|e| TestCaseError::fail(format!("second leg: {e}")))?;
    prop_assert_eq!(normalise(back), normalise(object.clone()), "via {}", there);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sandbox_v1beta1_survives_a_trip_through_v1alpha1(object in beta_sandbox()) {
        assert_round_trip(&object, sandbox::down, sandbox::up)?;
    }

    #[test]
    fn sandbox_v1alpha1_survives_a_trip_through_v1beta1(object in alpha_sandbox()) {
        assert_round_trip(&object, sandbox::up, sandbox::down)?;
    }

    #[test]
    fn template_v1beta1_survives_a_trip_through_v1alpha1(object in beta_template()) {
        assert_round_trip(&object, template::down, template::up)?;
    }

    #[test]
    fn template_v1alpha1_survives_a_trip_through_v1beta1(object in alpha_template()) {
        assert_round_trip(&object, template::up, template::down)?;
    }

    #[test]
    fn warm_pool_v1beta1_survives_a_trip_through_v1alpha1(object in beta_pool()) {
        assert_round_trip(&object, warm_pool::down, warm_pool::up)?;
    }

    #[test]
    fn warm_pool_v1alpha1_survives_a_trip_through_v1beta1(object in alpha_pool()) {
        assert_round_trip(&object, warm_pool::up, warm_pool::down)?;
    }

    #[test]
    fn claim_v1beta1_survives_a_trip_through_v1alpha1(object in beta_claim()) {
        assert_round_trip(&object, claim::down, claim::up)?;
    }

    #[test]
    fn claim_v1alpha1_survives_a_trip_through_v1beta1(object in alpha_claim()) {
        assert_round_trip(&object, claim::up, claim::down)?;
    }

    /// What the webhook calls: the generic entry point agrees with the per-kind functions.
    #[test]
    fn convert_agrees_with_the_kind_functions(object in alpha_claim()) {
        let up = conversion::convert(&object, "extensions.agents.x-k8s.io/v1beta1").unwrap();
        prop_assert_eq!(&up, &claim::up(&object).unwrap());
        let down = conversion::convert(&up, "extensions.agents.x-k8s.io/v1alpha1").unwrap();
        prop_assert_eq!(down, claim::down(&up).unwrap());
    }
}
