//! Fixtures shared by the plan's unit tests and the census equivalence test: template
//! `ns/tmpl`, pool `ns/pool` of three, and a member's status with only its Ready condition.

use std::sync::Arc;

use api_types::conditions::{READY, new_condition};
use api_types::{
    SandboxStatus, SandboxTemplate, SandboxTemplateRef, SandboxTemplateSpec, SandboxWarmPool,
    SandboxWarmPoolSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::TemplateFacts;
use crate::warm_pool::blueprint::blueprint_hash;

/// The clock of every pass in these tests (epoch seconds).
pub const NOW: i64 = 1_800_000_000;
pub const NS: &str = "ns";

/// Template `ns/tmpl`; a `hostname` in its Pod spec tells versions of the blueprint apart.
pub fn template(hostname: Option<&str>) -> TemplateFacts {
    let mut t = SandboxTemplate::new("tmpl", SandboxTemplateSpec::default());
    t.metadata.namespace = Some(NS.into());
    t.spec.blueprint.pod_template.spec.hostname = hostname.map(Into::into);
    TemplateFacts {
        blueprint_hash: blueprint_hash(&t.spec.blueprint),
        template: Arc::new(t),
    }
}

/// Pool `ns/pool` (UID `pool-uid`) of three members of `tmpl`.
pub fn pool() -> SandboxWarmPool {
    let mut p = SandboxWarmPool::new(
        "pool",
        SandboxWarmPoolSpec {
            replicas: Some(3),
            sandbox_template_ref: SandboxTemplateRef {
                name: "tmpl".into(),
            },
            update_strategy: None,
        },
    );
    p.metadata.namespace = Some(NS.into());
    p.metadata.uid = Some("pool-uid".into());
    p
}

/// A status whose only condition is Ready (`True` or `False`), set at [`NOW`].
pub fn ready_status(ready: bool) -> SandboxStatus {
    SandboxStatus {
        conditions: vec![new_condition(
            READY,
            if ready { "True" } else { "False" },
            "R",
            "",
            None,
            Time(Timestamp::from_second(NOW).expect("NOW is a valid time")),
        )],
        ..SandboxStatus::default()
    }
}
