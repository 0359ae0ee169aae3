//! The agent-sandbox API types (v1beta1, and the deprecated v1alpha1) and the conversion
//! between them. No tokio, no client code.
//!
//! - [`sandbox`]: [`Sandbox`] (`agents.x-k8s.io/v1beta1`) and the building blocks the
//!   extensions reuse ([`SandboxBlueprint`], [`PodTemplate`], [`PodMetadata`],
//!   [`PersistentVolumeClaimTemplate`], [`EmbeddedObjectMetadata`]).
//! - [`template`], [`warm_pool`], [`claim`]: [`SandboxTemplate`], [`SandboxWarmPool`] and
//!   [`SandboxClaim`] (`extensions.agents.x-k8s.io/v1beta1`).
//! - [`v1alpha1`]: the deprecated v1alpha1 version of the four kinds, still served.
//! - [`conversion`]: v1alpha1 ↔ v1beta1 conversion as pure functions ([`conversion::convert`]
//!   is what the conversion webhooks run).
//! - [`crds`]: [`core_crds`] and [`extension_crds`], the CustomResourceDefinitions to install
//!   (both versions, v1beta1 stored, conversion by the controllers' webhooks). Use these rather
//!   than `K::crd()`: only they carry the reference-identical schema.
//! - [`keys`]: label and annotation keys; [`conditions`]: condition types, reasons and helpers;
//!   [`hash`]: [`name_hash`] (32-bit FNV-1a, 8 hex digits).
//!
//! Wire format follows the reference's Go JSON tags: fields Go omits when empty are `String`/
//! `Vec`/`BTreeMap` skipped when empty; pointer fields are `Option`; tri-state
//! `service` is `Option<bool>`.

pub mod claim;
pub mod conditions;
pub mod conversion;
pub mod crds;
pub mod hash;
pub mod keys;
pub mod sandbox;
pub mod template;
pub mod v1alpha1;
pub mod warm_pool;

pub use claim::*;
pub use crds::{conversion_service_mut, core_crds, extension_crds};
pub use hash::name_hash;
pub use sandbox::*;
pub use template::*;
pub use warm_pool::*;
