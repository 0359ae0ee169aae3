//! Pure builders of the objects a Sandbox owns: what they should look like, computed from the
//! Sandbox and what is observed. No I/O here.

pub mod pod;
pub mod pvc;
pub mod service;
