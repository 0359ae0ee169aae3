//! SandboxClaim: bind a claim to a warm pool member (ownership transfer) or a cold Sandbox made
//! from the pool's template, mirror its readiness, and apply the claim's lifecycle.

pub mod injection;
pub mod metadata;
