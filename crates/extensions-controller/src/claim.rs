//! SandboxClaim: bind a claim to a warm pool member (ownership transfer) or a cold Sandbox made
//! from the pool's template, mirror its readiness, and apply the claim's lifecycle.
//!
//! A pass is [`reconcile`]: [`observe`] (caches and the claim's [`ledger`] into one immutable
//! observation) → [`plan`] (pure: what to do and why) → [`apply`] (every write, in order).
//!
//! Pure pieces the plan uses: [`metadata`] (additionalPodMetadata rules), [`injection`] (env and
//! volume claim template policies), [`candidate`] (warm candidate order, kept by
//! [`candidate_queue`]), [`adoption`] (the guarded ownership-transfer patch), [`cold`] (the cold
//! Sandbox), [`status`] (conditions), [`lifecycle`] (expiry). [`state`] holds the controller's
//! in-memory state; [`trace`] shapes its spans.

pub mod adoption;
pub mod apply;
pub mod candidate;
pub mod candidate_queue;
pub mod cold;
pub mod injection;
pub mod ledger;
pub mod lifecycle;
pub mod metadata;
pub mod observe;
pub mod plan;
pub mod pod_metadata;
pub mod reconcile;
pub mod state;
pub mod status;
pub mod trace;
