//! The `cargo xtask` command line. `main.rs` parses [`Cli`] and dispatches on [`Command`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::release::{DEFAULT_REGISTRY, default_version};

/// Project automation for agent-sandbox.
#[derive(Debug, Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs of `cargo xtask`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write deploy/crds/*.yaml from the Rust API types (one file per CRD).
    Crds(CrdsArgs),
    /// Write the release: the manifests sandbox.yaml, extensions.yaml and
    /// sandbox-with-extensions.yaml, the two controller images as OCI archives (with SBOMs and
    /// debug information), and the Helm chart.
    Release(ReleaseArgs),
    /// Write the generated files of the Helm chart charts/agent-sandbox from deploy/, the CRDs
    /// and the controllers' flags.
    Chart(crate::chart::ChartArgs),
    /// Benchmark claim latency, throughput, API writes and footprint against devcluster.
    Bench(crate::bench::BenchArgs),
    /// Run devcluster with both controllers and a quickstart warm pool (Ctrl-C stops it).
    Dev(crate::dev::DevArgs),
    /// Run a real control plane (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, kwok) on loopback, built from pinned upstream releases (Ctrl-C stops it).
    Cluster(crate::cluster::ClusterArgs),
    /// Regenerate the controller flags tables in docs/configuration.md and README.md.
    Docs(crate::docs::DocsArgs),
    /// Run the controllers through kills, API faults, leader pauses, churn and bad input on
    /// devcluster and check the invariants after each (fails on any violation).
    Chaos(crate::chaos::ChaosArgs),
    /// Move an install that stored v1alpha1 objects to v1beta1: `--phase=bootstrap` before
    /// applying the new CRDs, `--phase=migrate` after (docs/upgrade.md).
    Migrate(crate::migrate::MigrateArgs),
}

/// Arguments of `cargo xtask crds`.
#[derive(Debug, Args)]
pub struct CrdsArgs {
    /// Do not write anything; fail (exit 1) when the committed deploy/crds/*.yaml differ from
    /// what the Rust types generate. CI runs this.
    #[arg(long)]
    pub check: bool,
}

/// Arguments of `cargo xtask release`.
#[derive(Debug, Args)]
// The field docs are `--help` text, where `<workspace>` names a placeholder, not HTML.
#[allow(rustdoc::invalid_html_tags)]
pub struct ReleaseArgs {
    /// Release version: `v` followed by a semantic version without build metadata
    /// (e.g. v0.3.1, v1.0.0-rc.1). Used as the image tag.
    /// [default: v + the workspace version]
    #[arg(long, value_name = "vX.Y.Z")]
    pub version: Option<String>,

    /// Image registry and repository prefix; images are REGISTRY/sandbox-controller:VERSION
    /// and REGISTRY/extensions-controller:VERSION. The default is a placeholder under the
    /// reserved `.invalid` domain that no cluster can pull from: pass your registry.
    #[arg(long, value_name = "REGISTRY", default_value = DEFAULT_REGISTRY)]
    pub registry: String,

    /// Output directory, created if missing. [default: <workspace>/dist]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Write the manifests and the chart only: no images (no Rust build).
    #[arg(long, conflicts_with = "push")]
    pub no_images: bool,

    /// Push both images to --registry (tag VERSION, with their SBOMs attached as OCI
    /// referrers); the manifests and the chart then pin the images by digest as well as tag.
    /// Credentials: REGISTRY_USERNAME and REGISTRY_PASSWORD, else anonymous.
    #[arg(long)]
    pub push: bool,

    /// Talk to the registry over plain HTTP instead of HTTPS (a local test registry).
    #[arg(long, requires = "push")]
    pub plain_http: bool,
}

impl ReleaseArgs {
    /// The version to release: the flag, or `v` + the workspace version.
    pub fn version_or_default(&self) -> String {
        self.version.clone().unwrap_or_else(default_version)
    }
}
