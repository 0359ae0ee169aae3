//! `cargo xtask release`: the release assets.
//!
//! The three manifests (below), the two controller images as OCI archives with their SBOMs
//! and debug information ([`crate::image`]), the Helm chart ([`crate::chart`]) and
//! `SHA256SUMS`. With `--push` the images go to the registry first ([`push`]) and the
//! manifests and the chart pin them by digest.
//!
//! - `sandbox.yaml`: Namespace `agent-sandbox-system`, the Sandbox CRD and the core controller
//!   (ServiceAccount, RBAC, metrics Service, Deployment). Works alone.
//! - `extensions.yaml`: the SandboxTemplate, SandboxWarmPool and SandboxClaim CRDs and the
//!   extensions controller. Applied after `sandbox.yaml`; shares no object with it.
//! - `sandbox-with-extensions.yaml`: both, each object exactly once.
//!
//! Every document is parsed strictly into its k8s-openapi type before anything is written
//! (see [`crate::manifest`]), and no (kind, namespace, name) may appear twice in a file or in
//! both `sandbox.yaml` and `extensions.yaml`. The output depends only on the inputs (no
//! timestamps, fixed order), so it is byte-for-byte reproducible.

pub mod options;
pub mod pieces;
pub mod push;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

pub use options::{ImageRegistry, ReleaseVersion};

use crate::chart::{ChartInputs, chart_dir, package, package_file_name};
use crate::cli::ReleaseArgs;
use crate::crds::{CrdFile, core_crd_files, extension_crd_files};
use crate::error::XtaskError;
use crate::image::{ImageSettings, build_images, git_revision, source_date_epoch};
use crate::manifest::{ObjectKey, parse_typed_manifest};
use crate::workspace::{default_dist_dir, deploy_dir, workspace_root};
use pieces::{CORE_PIECES, EXTENSIONS_PIECES, NAMESPACE_PIECE, load_piece};

/// The default `--registry`: a placeholder under the reserved `.invalid` top-level domain, so
/// a manifest rendered without `--registry` can never pull an unintended image.
pub const DEFAULT_REGISTRY: &str = "registry.example.invalid/agent-sandbox";

/// File names of the three release manifests.
pub const SANDBOX_FILE: &str = "sandbox.yaml";
pub const EXTENSIONS_FILE: &str = "extensions.yaml";
pub const SANDBOX_WITH_EXTENSIONS_FILE: &str = "sandbox-with-extensions.yaml";

/// `v` + the workspace version (xtask inherits it from `[workspace.package]`).
pub fn default_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// What a release is rendered from, besides `deploy/` and the Rust types.
#[derive(Debug, Clone)]
pub struct ReleaseOptions {
    pub version: ReleaseVersion,
    pub registry: ImageRegistry,
    /// Digests of pushed images by binary name: their references become
    /// `<registry>/<binary>:<version>@<digest>`.
    pub digests: BTreeMap<String, String>,
}

impl ReleaseOptions {
    /// Validates the raw `--version` and `--registry` values.
    pub fn parse(version: &str, registry: &str) -> Result<Self, XtaskError> {
        Ok(ReleaseOptions {
            version: ReleaseVersion::parse(version)?,
            registry: ImageRegistry::parse(registry)?,
            digests: BTreeMap::new(),
        })
    }

    /// The chart's inputs for this release.
    pub fn chart_inputs(&self) -> ChartInputs {
        ChartInputs {
            version: self.version.to_string(),
            registry: self.registry.as_str().to_string(),
            digests: self.digests.clone(),
        }
    }
}

/// The three rendered manifests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseManifests {
    pub sandbox: String,
    pub extensions: String,
    pub sandbox_with_extensions: String,
}

impl ReleaseManifests {
    /// `(file name, contents)` of each manifest, in a fixed order.
    pub fn files(&self) -> [(&'static str, &str); 3] {
        [
            (SANDBOX_FILE, &self.sandbox),
            (EXTENSIONS_FILE, &self.extensions),
            (SANDBOX_WITH_EXTENSIONS_FILE, &self.sandbox_with_extensions),
        ]
    }
}

/// One source text of a release file, with where it came from (for error messages).
struct Section {
    origin: String,
    text: String,
}

fn crd_sections(files: Vec<CrdFile>) -> Vec<Section> {
    files
        .into_iter()
        .map(|file| Section {
            origin: format!("CRD {}", file.file_name),
            text: file.contents,
        })
        .collect()
}

fn piece_sections(
    deploy: &Path,
    relatives: &[&str],
    options: &ReleaseOptions,
) -> Result<Vec<Section>, XtaskError> {
    relatives
        .iter()
        .map(|relative| {
            let mut text = load_piece(deploy, relative, &options.registry, &options.version)?;
            for (binary, digest) in &options.digests {
                let image = options.registry.image(binary, &options.version);
                text = text.replace(
                    &format!("image: {image}\n"),
                    &format!("image: {image}@{digest}\n"),
                );
            }
            Ok(Section {
                origin: format!("deploy/{relative}"),
                text,
            })
        })
        .collect()
}

/// Validates every section and joins them into one multi-document file under `header`.
/// Returns the text and the keys of its objects.
fn assemble(
    file: &str,
    header: &str,
    sections: &[Section],
) -> Result<(String, Vec<ObjectKey>), XtaskError> {
    let mut keys = Vec::new();
    let mut seen = BTreeSet::new();
    let mut text = String::from(header);
    for (index, section) in sections.iter().enumerate() {
        for object in parse_typed_manifest(&section.text, &section.origin)? {
            let key = object.key();
            if !seen.insert(key.clone()) {
                return Err(XtaskError::DuplicateObject {
                    file: file.to_string(),
                    object: key.to_string(),
                });
            }
            keys.push(key);
        }
        if index > 0 {
            text.push_str("---\n");
        }
        let body = section.text.strip_prefix("---\n").unwrap_or(&section.text);
        text.push_str(body.trim_end());
        text.push('\n');
    }
    Ok((text, keys))
}

fn header(version: &ReleaseVersion, file: &str, about: &[&str]) -> String {
    let mut header = format!("# agent-sandbox {version}: {file}\n");
    for line in about {
        header.push_str("# ");
        header.push_str(line);
        header.push('\n');
    }
    header.push_str(
        "# Generated by `cargo xtask release` from deploy/ and the Rust API types; do not edit.\n\n",
    );
    header
}

/// Renders the three manifests from the pieces in `deploy` and the CRDs of the Rust types.
pub fn render_release(
    deploy: &Path,
    options: &ReleaseOptions,
) -> Result<ReleaseManifests, XtaskError> {
    let version = &options.version;
    let mut core = piece_sections(deploy, &[NAMESPACE_PIECE], options)?;
    core.extend(crd_sections(core_crd_files()?));
    core.extend(piece_sections(deploy, CORE_PIECES, options)?);

    let mut extensions = crd_sections(extension_crd_files()?);
    extensions.extend(piece_sections(deploy, EXTENSIONS_PIECES, options)?);

    let (sandbox, _) = assemble(
        SANDBOX_FILE,
        &header(
            version,
            SANDBOX_FILE,
            &[
                "Core install: the Sandbox CRD and the sandbox-controller. Works on its own.",
                "Apply extensions.yaml after it for SandboxTemplate, SandboxWarmPool and SandboxClaim.",
            ],
        ),
        &core,
    )?;
    let (extensions_text, _) = assemble(
        EXTENSIONS_FILE,
        &header(
            version,
            EXTENSIONS_FILE,
            &[
                "Extensions: the SandboxTemplate, SandboxWarmPool and SandboxClaim CRDs and the",
                "extensions-controller. Apply after sandbox.yaml; it changes no object of it.",
            ],
        ),
        &extensions,
    )?;
    let mut everything = core;
    everything.extend(extensions);
    let (sandbox_with_extensions, _) = assemble(
        SANDBOX_WITH_EXTENSIONS_FILE,
        &header(
            version,
            SANDBOX_WITH_EXTENSIONS_FILE,
            &["Core and extensions in one file, each object exactly once (for GitOps tools)."],
        ),
        &everything,
    )?;
    Ok(ReleaseManifests {
        sandbox,
        extensions: extensions_text,
        sandbox_with_extensions,
    })
}

/// Writes the manifests into `out` (created if missing); returns the paths written.
pub fn write_release(out: &Path, manifests: &ReleaseManifests) -> Result<Vec<PathBuf>, XtaskError> {
    fs::create_dir_all(out)
        .map_err(|e| XtaskError::io("cannot create output directory", out, e))?;
    let mut written = Vec::new();
    for (name, contents) in manifests.files() {
        let path = out.join(name);
        fs::write(&path, contents).map_err(|e| XtaskError::io("cannot write", &path, e))?;
        written.push(path);
    }
    Ok(written)
}

/// Writes `SHA256SUMS` (the format `sha256sum -c` reads) for `files` in `out`.
fn write_checksums(out: &Path, files: &[PathBuf]) -> Result<PathBuf, XtaskError> {
    let mut names: Vec<(String, PathBuf)> = files
        .iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, path.clone())
        })
        .collect();
    names.sort();
    let mut text = String::new();
    for (name, path) in names {
        let bytes = fs::read(&path).map_err(|e| XtaskError::io("cannot read", &path, e))?;
        let digest = crate::image::layer::sha256_digest(&bytes);
        text.push_str(&format!(
            "{}  {name}\n",
            digest.trim_start_matches("sha256:")
        ));
    }
    let path = out.join("SHA256SUMS");
    fs::write(&path, text).map_err(|e| XtaskError::io("cannot write", &path, e))?;
    Ok(path)
}

/// `cargo xtask release`: validate the flags, build and (with `--push`) push the images,
/// render the manifests and the chart, write everything, and list what was written.
pub fn run(args: &ReleaseArgs) -> Result<(), XtaskError> {
    let mut options = ReleaseOptions::parse(&args.version_or_default(), &args.registry)?;
    let out = args.out.clone().unwrap_or_else(default_dist_dir);
    let root = workspace_root();
    // Everything that can be checked without building is checked first.
    render_release(&deploy_dir(), &options)?;
    let epoch = source_date_epoch(&root)?;
    package(&chart_dir(), &options.chart_inputs(), epoch)?;
    fs::create_dir_all(&out)
        .map_err(|e| XtaskError::io("cannot create output directory", &out, e))?;

    let mut written = Vec::new();
    if !args.no_images {
        if options.version.as_str() != default_version() {
            eprintln!(
                "note: the binaries report their crate version {} (--version); the images are tagged {}",
                env!("CARGO_PKG_VERSION"),
                options.version
            );
        }
        let settings = ImageSettings {
            workspace: root.clone(),
            profile: "release".to_string(),
            version: options.version.to_string(),
            registry: options.registry.as_str().to_string(),
            revision: git_revision(&root)?,
            source_date_epoch: epoch,
        };
        let images = build_images(&settings, &out)?;
        for image in &images {
            println!(
                "image {} {} ({:.1} MiB compressed)",
                image.reference,
                image.image.manifest_digest,
                image.image.compressed_size() as f64 / (1024.0 * 1024.0)
            );
            written.extend([
                image.archive.clone(),
                image.sbom.clone(),
                image.debug.clone(),
            ]);
        }
        if args.push {
            let pushed = push::push_images(&images, &options.registry, args.plain_http)?;
            for (binary, digest) in pushed {
                options.digests.insert(binary, digest);
            }
        }
    }

    let manifests = render_release(&deploy_dir(), &options)?;
    written.extend(write_release(&out, &manifests)?);
    let chart = out.join(package_file_name(options.version.as_str()));
    let bytes = package(&chart_dir(), &options.chart_inputs(), epoch)?;
    fs::write(&chart, bytes).map_err(|e| XtaskError::io("cannot write", &chart, e))?;
    written.push(chart);
    written.push(write_checksums(&out, &written)?);
    for path in &written {
        println!("wrote {}", path.display());
    }
    if options.registry.as_str() == DEFAULT_REGISTRY {
        eprintln!(
            "note: images point at the placeholder registry {DEFAULT_REGISTRY}; pass --registry to publish"
        );
    }
    Ok(())
}
