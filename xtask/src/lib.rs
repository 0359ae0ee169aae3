//! Project automation behind `cargo xtask`.
//!
//! The binary (`src/main.rs`) only parses the command line and dispatches; everything it does
//! lives here so tests and later verbs (`dev`, `bench`, `docs`) can reuse it:
//!
//! - [`crds`]: render the CustomResourceDefinitions from the Rust types in `api-types` into
//!   `deploy/crds/*.yaml`, or check that the committed files are up to date.
//! - [`release`]: assemble `sandbox.yaml`, `extensions.yaml` and `sandbox-with-extensions.yaml`
//!   from the hand-written pieces in `deploy/` plus the generated CRDs.
//! - [`manifest`]: multi-document YAML handling and strict parsing of every document into the
//!   k8s-openapi type its `apiVersion`/`kind` claims.
//! - [`workspace`]: where the repository's files are.
//! - [`dev`]: `cargo xtask dev`, devcluster + both controllers + the quickstart pool locally.
//! - [`cluster`]: `cargo xtask cluster`, a real control plane (the `realcluster` crate) in the
//!   foreground.
//! - [`docs`]: the controller flags tables of `docs/configuration.md` and `README.md`.
//! - [`chaos`]: `cargo xtask chaos`, the controllers under kills, faults, pauses, churn and bad
//!   input, with the invariants checked.
//! - [`image`]: the controller images (OCI archives, SBOMs), built without a container daemon.
//! - [`chart`]: the Helm chart `charts/agent-sandbox`, generated from `deploy/`.
//! - [`migrate`]: `cargo xtask migrate`, moving an install that stored v1alpha1 objects to
//!   v1beta1 storage (docs/upgrade.md).

pub mod bench;
pub mod chaos;
pub mod chart;
pub mod cli;
pub mod cluster;
pub mod crds;
pub mod dev;
pub mod docs;
pub mod error;
pub mod gotools;
pub mod image;
pub mod manifest;
pub mod migrate;
pub mod release;
pub mod workspace;

pub use error::XtaskError;
