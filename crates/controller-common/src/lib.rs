//! Plumbing shared by both agent-sandbox controller binaries: command-line flags, the kube
//! client, telemetry, the admin HTTP server, leader election and graceful shutdown.
//!
//! This crate knows no CRD and holds no controller logic.
//!
//! | module | what it gives the binaries |
//! |---|---|
//! | [`args`] | [`CommonArgs`], the flags both binaries share (`#[command(flatten)]`) |
//! | [`client`] | [`client::build_client`]: kubeconfig or in-cluster config + QPS/burst limit; [`client::event_recorder`] |
//! | [`rate_limit`] | the token-bucket tower layer behind `--kube-api-qps`/`--kube-api-burst` |
//! | [`request_metrics`] | `rest_client_requests_total{code,host,method}` for every API request |
//! | [`telemetry`] | logs (text/JSON), OTLP trace export (gRPC or HTTP/protobuf, bounded queue) when `OTEL_EXPORTER_OTLP_*` is set, W3C context helpers, spans with explicit times and derived ids |
//! | [`events`] | [`events::EventRecorder`]: Kubernetes Events as kube's recorder publishes them, without its per-publish sweep of every recent Event |
//! | [`lean`] | [`lean::Lean`] and [`lean::object_meta`]: objects decoded without `metadata.managedFields` (watches and responses) |
//! | [`first_seen`] | [`first_seen::FirstSeen`], a bounded once-per-key set for warnings logged once per object |
//! | [`admin`] | `/metrics`, `/healthz`, `/readyz`; [`Readiness`] gates |
//! | [`leader_election`] | client-go style Lease election |
//! | [`metrics`] | controller-runtime named reconcile/workqueue metrics ([`ControllerMetrics`]) |
//! | [`runtime`] | [`Runtime`]: the whole lifecycle in one call |
//! | [`runner`] | [`runner::Runner`]: the reconcile loop, a first come, first served work queue (client-go semantics) |
//! | [`webhook`] | the CRD conversion webhook: `ConversionReview` handling, HTTPS on every replica, managed or mounted certificates, the caBundle of the binary's own CRDs (the conversion functions come from the binary) |
//!
//! # Example: a binary's `main`
//!
//! ```no_run
//! use std::process::ExitCode;
//!
//! use clap::Parser;
//! use controller_common::{CommonArgs, Context, ControllerMetrics, RunSpec, Runtime};
//!
//! #[derive(Parser)]
//! #[command(name = "sandbox-controller")]
//! struct Cli {
//!     #[command(flatten)]
//!     common: CommonArgs,
//!     /// The binary's own flags live next to the common ones.
//!     #[arg(long, env = "SANDBOX_CONCURRENT_WORKERS", default_value_t = 100)]
//!     sandbox_concurrent_workers: u16,
//! }
//!
//! #[tokio::main]
//! async fn main() -> ExitCode {
//!     // An invalid flag prints a one-line error and exits with code 2.
//!     let cli = Cli::parse();
//!     let spec = RunSpec::new("sandbox-controller", "a3317529.agent-sandbox.x-k8s.io");
//!     let mut runtime = match Runtime::init(&cli.common, spec).await {
//!         Ok(runtime) => runtime,
//!         Err(e) => {
//!             eprintln!("error: {e}");
//!             return ExitCode::from(e.exit_code());
//!         }
//!     };
//!     // Setup on every replica, before anything is served.
//!     let metrics = ControllerMetrics::register(runtime.registry_mut());
//!     let cache_synced = runtime.readiness().gate("sandbox cache");
//!
//!     // `start` runs only on the leader.
//!     let result = runtime
//!         .run(move |ctx: Context| async move {
//!             metrics.set_max_concurrent_reconciles("sandbox", 100);
//!             // Build watchers and `runner::Runner`s from ctx.client here, stop them with
//!             // `ctx.shutdown`, and call `cache_synced.set_ready()` once their stores are
//!             // ready.
//!             cache_synced.set_ready();
//!             ctx.shutdown.cancelled().await;
//!             Ok::<(), std::io::Error>(())
//!         })
//!         .await;
//!     match result {
//!         Ok(()) => ExitCode::SUCCESS,          // signal, controllers stopped, Lease released
//!         Err(e) => ExitCode::from(e.exit_code()), // lost Lease, controller error, ...
//!     }
//! }
//! ```

pub mod admin;
pub mod args;
pub mod client;
pub mod error;
pub mod events;
pub mod first_seen;
pub mod json_text;
pub mod leader_election;
pub mod lean;
pub mod metrics;
pub mod own_writes;
pub mod rate_limit;
pub mod request_metrics;
pub mod runner;
pub mod runtime;
pub mod telemetry;
pub mod webhook;
pub mod work_queue;

pub use admin::{Readiness, ReadyGate};
pub use args::{BindAddress, CommonArgs, LogFormat};
pub use error::Error;
pub use metrics::{ControllerMetrics, ReconcileResult};
pub use runtime::{Context, RunSpec, Runtime};

#[cfg(test)]
mod test_support;
