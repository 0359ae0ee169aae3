//! The agent-sandbox v1beta1 API types.
//!
//! - [`Sandbox`] in `agents.x-k8s.io`; [`SandboxTemplate`], [`SandboxWarmPool`] and
//!   [`SandboxClaim`] in `extensions.agents.x-k8s.io`.
//! - [`crds::core_crds`] / [`crds::extension_crds`]: the CustomResourceDefinitions to install.

pub mod claim;
pub mod crds;
pub mod sandbox;
pub mod template;
pub mod warm_pool;

pub use claim::*;
pub use crds::{core_crds, extension_crds};
pub use sandbox::*;
pub use template::*;
pub use warm_pool::*;
