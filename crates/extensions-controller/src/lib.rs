//! The agent-sandbox extensions controller: SandboxTemplate, SandboxWarmPool and SandboxClaim.

pub mod args;
pub mod claim;
pub mod context;
pub mod error;
pub mod metrics;
pub mod ownership;
pub mod template;
pub mod warm_pool;

pub use error::Error;
