//! The agent-sandbox extensions controller: SandboxTemplate, SandboxWarmPool and SandboxClaim.
//!
//! | module | what it holds |
//! |---|---|
//! | [`args`] | the binary's flags (reference names and defaults) |
//! | [`template`] | shared NetworkPolicy builder, secure pod defaults, template reconcile |
//! | [`warm_pool`] | member builder and staleness, in-flight writes, refill shaping, the pool plan, pool reconcile |
//! | [`claim`] | metadata rules, injection policies, candidate order, adoption patch, cold builder, status, lifecycle, claim reconcile |
//! | [`metrics`] | the reference's claim metrics |
//! | [`controller`] | shared watches, the triggers, and the three controllers' runners |
//! | [`stores`] | the shared caches and the Sandbox cache's indexes |
//! | [`context`] | what every reconcile shares: client, caches, recorders, backoff |
//!
//! [`run`] is the whole binary; [`run_with`] runs it on a prepared
//! [`controller_common::Runtime`] (tests build one around their own client).

pub mod args;
pub mod claim;
pub mod context;
pub mod controller;
pub mod error;
pub mod metrics;
pub mod ownership;
pub mod stores;
pub mod template;
pub mod warm_pool;

pub use controller::{ExtensionsController, Options};
pub use error::Error;

use std::path::Path;

use controller_common::{RunSpec, Runtime};

use crate::claim::metadata::{DEFAULT_LABEL_DOMAIN, parse_allowed_domains};
use crate::claim::state::ClaimSettings;
use crate::metrics::ClaimMetrics;
use crate::warm_pool::state::PoolSettings;

/// Reads the label-domain allow-list; a missing file means the default domain only.
pub fn load_allowed_domains(path: &Path) -> Result<Vec<String>, Error> {
    match std::fs::read_to_string(path) {
        Ok(content) => Ok(parse_allowed_domains(&content)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(vec![DEFAULT_LABEL_DOMAIN.to_owned()])
        }
        Err(source) => Err(Error::LabelDomainsFile {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The controller options the flags describe.
pub fn options_from_args(
    args: &args::Args,
    allowed_label_domains: Vec<String>,
    instance: Option<String>,
) -> Options {
    Options {
        pool: PoolSettings {
            max_batch_size: args.sandbox_warm_pool_max_batch_size,
            replenish_delay: args.sandbox_warm_pool_replenish_delay,
            max_refill_rate: args.sandbox_warm_pool_max_refill_rate,
            readiness_grace_period: args.sandbox_warm_pool_readiness_grace_period,
            unschedulable_recheck_interval: args.sandbox_warm_pool_unschedulable_recheck_interval,
            enable_eviction: args.enable_warm_pool_eviction,
            ..PoolSettings::default()
        },
        claim: ClaimSettings {
            allowed_label_domains,
            events: !args.disable_claim_events,
            adoption_events: args.claim_adoption_events,
            observability_annotations: !args.disable_claim_observability_annotations,
        },
        claim_workers: args.sandbox_claim_concurrent_workers,
        pool_workers: args.sandbox_warm_pool_concurrent_workers,
        template_workers: args.sandbox_template_concurrent_workers,
        instance,
    }
}

/// Runs the binary: telemetry, client, admin servers and leader election (Lease
/// `extensions.agent-sandbox.x-k8s.io`) from `controller_common`, then the three controllers
/// on the leader until SIGTERM/SIGINT (`Ok`) or a lost Lease (`Err`).
pub async fn run(args: args::Args) -> Result<(), Error> {
    let runtime = Runtime::init(
        &args.common,
        RunSpec::new("extensions-controller", args::LEASE_NAME),
    )
    .await?;
    run_with(runtime, &args).await
}

/// [`run`] on an already set-up runtime.
pub async fn run_with(mut runtime: Runtime, args: &args::Args) -> Result<(), Error> {
    let domains = load_allowed_domains(&args.allowed_label_domains_file)?;
    // Every replica serves conversions, so the certificates are set up outside the Lease's
    // fence (a standby's writes to its own Secret and the CRDs' caBundle are not reconciles).
    let (client, shutdown) = (runtime.replica_client().clone(), runtime.shutdown_token());
    let webhook = controller_common::webhook::start(
        &args.webhook,
        &args.common.cluster_domain,
        "extensions-controller",
        client,
        conversions(),
        runtime.registry_mut(),
        shutdown,
    )
    .await
    .map_err(controller_common::Error::from)?;
    for warning in args.common.concurrency_warnings(args.total_workers()) {
        tracing::warn!("{warning}");
    }
    let options = options_from_args(args, domains, Some(runtime.identity().to_owned()));
    let claim_metrics = ClaimMetrics::register(runtime.registry_mut());
    let reconcile_metrics = runtime.controller_metrics();
    let gate = runtime.readiness().gate("extensions-caches");
    let client = runtime.client().clone();
    let result = runtime
        .run(move |ctx| async move {
            let controller =
                ExtensionsController::new(client, options, claim_metrics, Some(reconcile_metrics));
            controller.run(ctx.shutdown, move || gate.set_ready()).await;
            Ok::<(), std::io::Error>(())
        })
        .await;
    if let (Some(webhook), Ok(())) = (webhook, &result) {
        webhook.stopped().await;
    }
    result?;
    Ok(())
}

/// What this controller's conversion webhook converts: SandboxTemplate, SandboxWarmPool and
/// SandboxClaim, v1alpha1 <-> v1beta1 (`api_types::conversion`).
pub fn conversions() -> controller_common::webhook::Conversions {
    use api_types::conversion::{EXTENSION_KINDS, SERVED_VERSIONS, convert};
    use controller_common::webhook::{Conversions, ConvertibleKind};
    Conversions::new(
        EXTENSION_KINDS
            .iter()
            .map(|k| ConvertibleKind::new(k.group, k.kind, &k.crd_name(), &SERVED_VERSIONS))
            .collect(),
        |object, desired| convert(object, desired).map_err(|e| e.to_string()),
    )
}
