//! The agent-sandbox v1beta1 API types. No tokio, no client code.
//!
//! - [`sandbox`]: [`Sandbox`] (`agents.x-k8s.io/v1beta1`) and the building blocks the
//!   extensions reuse ([`SandboxBlueprint`], [`PodTemplate`], [`PodMetadata`],
//!   [`PersistentVolumeClaimTemplate`], [`EmbeddedObjectMetadata`]).
//! - [`template`], [`warm_pool`], [`claim`]: [`SandboxTemplate`], [`SandboxWarmPool`] and
//!   [`SandboxClaim`] (`extensions.agents.x-k8s.io/v1beta1`).
//! - [`crds`]: [`core_crds`] and [`extension_crds`], the CustomResourceDefinitions to install.
//!   Use these rather than `K::crd()`: only they carry the reference-identical schema.
//! - [`keys`]: label and annotation keys; [`conditions`]: condition types, reasons and helpers;
//!   [`hash`]: [`name_hash`] (32-bit FNV-1a, 8 hex digits).
//!
//! Wire format follows the reference's Go JSON tags: fields Go omits when empty are `String`/
//! `Vec`/`BTreeMap` skipped when empty; pointer fields are `Option`; tri-state
//! `service` is `Option<bool>`. Only v1beta1 exists here (no v1alpha1, no conversion webhook).

pub mod claim;
pub mod conditions;
pub mod crds;
pub mod hash;
pub mod keys;
pub mod sandbox;
pub mod template;
pub mod warm_pool;

pub use claim::*;
pub use crds::{core_crds, extension_crds};
pub use hash::name_hash;
pub use sandbox::*;
pub use template::*;
pub use warm_pool::*;
