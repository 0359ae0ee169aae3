//! SandboxWarmPool: keeps `spec.replicas` unclaimed, template-made Sandboxes.
//!
//! - [`blueprint`]: the member a pool creates, blueprint hashes and staleness;
//! - [`in_flight`]: creates and deletes the cache has not shown yet (the expectations that
//!   prevent over-creation);
//! - [`refill`]: the per-pool token bucket behind `--sandbox-warm-pool-max-refill-rate` and the
//!   replenish-delay hold;
//! - [`plan`]: the pure decision for one pass (who is a member, what to create, delete, adopt,
//!   the status);
//! - [`status`]: when a status change is written, held, or not written at all;
//! - [`reconcile`]: reads the caches, runs the plan, writes the difference.

pub mod blueprint;
pub mod census;
pub mod in_flight;
pub mod plan;
pub mod reconcile;
pub mod refill;
pub mod state;
pub mod status;
