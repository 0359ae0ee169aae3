//! The core agent-sandbox controller: for each `agents.x-k8s.io/v1beta1` Sandbox it keeps a Pod,
//! the Pod's PVCs and (on request) a headless Service, and reports what it observes in status.
//!
//! Layout: [`desired`] and [`status`] are pure (what the children and the status should be);
//! [`reconcile`] observes the reflector stores, computes, and writes only the difference;
//! [`controller`] wires the watches, triggers and the reconcile loop
//! (`controller_common::runner`); [`metrics`] holds the reference's metric families.
pub mod args;
pub mod cached_pod;
pub mod cached_sandbox;
pub mod coalesce;
pub mod context;
pub mod controller;
pub mod created;
pub mod desired;
pub mod error;
pub mod keys;
pub mod metrics;
pub mod ownership;
pub mod pod_index;
pub mod reconcile;
pub mod sandbox_counts;
pub mod status;
pub mod tracing_context;
pub mod triggers;

pub use context::Settings;
pub use controller::{ControllerOptions, SandboxController};
pub use error::Error;

use controller_common::runtime::{RunSpec, Runtime};

/// Runs the controller binary: telemetry, client, admin servers and leader election from
/// `controller_common`, then the Sandbox controller on the leader until SIGTERM/SIGINT (`Ok`) or
/// a lost Lease (`Err`).
pub async fn run(args: args::Args) -> Result<(), Error> {
    let runtime = Runtime::init(
        &args.common,
        RunSpec::new("sandbox-controller", args::LEASE_NAME),
    )
    .await?;
    run_with(runtime, &args).await
}

/// [`run`] on an already set-up runtime (tests build one around their own client).
pub async fn run_with(mut runtime: Runtime, args: &args::Args) -> Result<(), Error> {
    // Every replica serves conversions, so the certificates are set up outside the Lease's
    // fence (a standby's writes to its own Secret and the CRDs' caBundle are not reconciles).
    let (client, shutdown) = (runtime.replica_client().clone(), runtime.shutdown_token());
    let webhook = controller_common::webhook::start(
        &args.webhook,
        &args.common.cluster_domain,
        "sandbox-controller",
        client,
        conversions(),
        runtime.registry_mut(),
        shutdown,
    )
    .await
    .map_err(controller_common::Error::from)?;
    let options = ControllerOptions {
        settings: Settings {
            cluster_domain: args.common.cluster_domain.clone(),
            events: !args.disable_sandbox_events,
            ..Settings::default()
        },
        workers: args.sandbox_concurrent_workers,
        label_scoped_cache: args.cache_label_selectors,
        instance: Some(runtime.identity().to_string()),
    };
    let controller =
        SandboxController::new(runtime.client().clone(), options, runtime.registry_mut());
    runtime.liveness().watch_queue(controller.work_queue());
    let gate = runtime.readiness().gate("sandbox-caches");
    let stores = controller.stores();
    tokio::spawn(async move {
        if stores.wait_until_ready().await {
            tracing::info!("caches synced");
            gate.set_ready();
        } else {
            tracing::warn!("caches stopped before syncing");
        }
    });
    let result = runtime
        .run(move |ctx| async move { controller.run(ctx.shutdown).await })
        .await;
    // After a signal the webhook stops with the process' shutdown token: let it finish the
    // reviews in flight. After an error the process exits at once.
    if let (Some(webhook), Ok(())) = (webhook, &result) {
        webhook.stopped().await;
    }
    result?;
    Ok(())
}

/// What this controller's conversion webhook converts: the Sandbox kind, v1alpha1 <-> v1beta1
/// (`api_types::conversion`).
pub fn conversions() -> controller_common::webhook::Conversions {
    use api_types::conversion::{CORE_KINDS, SERVED_VERSIONS, convert};
    use controller_common::webhook::{Conversions, ConvertibleKind};
    Conversions::new(
        CORE_KINDS
            .iter()
            .map(|k| ConvertibleKind::new(k.group, k.kind, &k.crd_name(), &SERVED_VERSIONS))
            .collect(),
        |object, desired| convert(object, desired).map_err(|e| e.to_string()),
    )
}
