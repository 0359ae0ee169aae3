//! Plumbing shared by both controller binaries. Knows no CRD.
pub mod args;
