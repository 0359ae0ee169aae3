//! SandboxTemplate: the shared NetworkPolicy per template, the template-ref-hash label on the
//! template itself, and the secure pod-spec defaults applied to every Sandbox made from a
//! template (by pools and claims).

pub mod network_policy;

pub mod secure_defaults;

pub use secure_defaults::apply_secure_defaults;
pub mod reconcile;
pub mod state;
