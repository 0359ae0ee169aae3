//! The core agent-sandbox controller: for each `agents.x-k8s.io/v1beta1` Sandbox it keeps a Pod,
//! the Pod's PVCs and (on request) a headless Service, and reports what it observes in status.
//!
//! Layout: [`desired`] and [`status`] are pure (what the children and the status should be);
//! [`reconcile`] observes the reflector stores, computes, and writes only the difference;
//! [`controller`] wires kube-runtime; [`metrics`] holds the reference's metric families.
pub mod context;
pub mod controller;
pub mod desired;
pub mod error;
pub mod keys;
pub mod metrics;
pub mod ownership;
pub mod reconcile;
pub mod status;
pub mod tracing_context;

pub use context::Settings;
pub use controller::{ControllerOptions, SandboxController};
pub use error::Error;
