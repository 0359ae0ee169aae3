//! Plumbing shared by both controller binaries. Knows no CRD.
pub mod admin;
pub mod args;
pub mod client;
pub mod error;
pub mod leader_election;
pub mod rate_limit;
pub mod runtime;
pub mod telemetry;

pub use error::Error;

#[cfg(test)]
mod test_support;
