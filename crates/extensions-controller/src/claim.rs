//! SandboxClaim: bind a claim to a warm pool member (ownership transfer) or a cold Sandbox made
//! from the pool's template, mirror its readiness, and apply the claim's lifecycle.
//!
//! Pure pieces: [`metadata`] (additionalPodMetadata rules), [`injection`] (env and volume claim
//! template policies), [`candidate`] (warm candidate order), [`adoption`] (the guarded
//! ownership-transfer patch), [`cold`] (the cold Sandbox), [`status`] (conditions),
//! [`lifecycle`] (expiry). [`reconcile`] does the I/O; [`trace`] shapes its spans.

pub mod adoption;
pub mod candidate;
pub mod candidate_queue;
pub mod cold;
pub mod injection;
pub mod lifecycle;
pub mod metadata;
pub mod pod_metadata;
pub mod reconcile;
pub mod state;
pub mod status;
pub mod trace;
