//! The controller images, built without a container daemon.
//!
//! `cargo xtask release` builds each controller as a fully static binary
//! (`x86_64-unknown-linux-musl`) and packs it into an OCI image archive of two layers:
//!
//! 1. the base ([`rootfs`]): `/etc/passwd` and `/etc/group` with the `nonroot` user (65532),
//!    its home, `/tmp`, and Mozilla's CA certificates; the same bytes, so the same digest, in
//!    both images (a registry and a node store it once);
//! 2. the binary, stripped of its debug information ([`binaries`]), at `/<binary>`.
//!
//! The image runs `/<binary>` as `65532:65532`, has no shell and nothing to write, so it works
//! on a read-only root file system. Its manifest and configuration carry the
//! `org.opencontainers.image.*` annotations ([`oci`]); beside each archive the release writes
//! the CycloneDX SBOM ([`sbom`]) and the debug information.
//!
//! Why static on an empty base rather than glibc with a base of Debian packages: see
//! docs/release.md ("Images"), which has the measurements.
//!
//! Everything is reproducible: the same sources, `Cargo.lock`, toolchain, revision and
//! `SOURCE_DATE_EPOCH` give the same archive bytes and so the same digests (tests/images.rs
//! builds twice and compares).

pub mod binaries;
pub mod layer;
pub mod oci;
pub mod rootfs;
pub mod sbom;

use std::path::{Path, PathBuf};

use binaries::{BuildSettings, cargo_build, split_debug_info};
use layer::{Entry, Tree, build_layer};
use oci::{HistoryLayer, ImageMeta, OciImage, RunConfig};

/// What can go wrong while building an image.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An external program (cargo, objcopy, git) failed or is missing.
    #[error("{0}")]
    Tool(String),
    /// A document or input is not what it must be.
    #[error("{0}")]
    Invalid(String),
    /// Writing a tar or gzip stream failed.
    #[error("{0}")]
    Archive(String),
    /// An image is larger than its budget.
    #[error("{0}")]
    OverBudget(String),
}

impl ImageError {
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ImageError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// The Rust target of the image binaries: static, so the image needs no libc.
pub const TARGET: &str = "x86_64-unknown-linux-musl";

/// The controllers that become images: binary (= package, image name) and description.
pub const CONTROLLERS: [(&str, &str); 2] = [
    (
        "sandbox-controller",
        "Agent Sandbox core controller: Sandbox to Pod, Service and PVCs",
    ),
    (
        "extensions-controller",
        "Agent Sandbox extensions controller: SandboxTemplate, SandboxWarmPool, SandboxClaim",
    ),
];

/// The most an image may weigh compressed (what a node pulls), checked by every build and
/// stated in docs/release.md. The images are about a third of it; the budget leaves room to
/// grow but fails a build that, say, ships debug information or a second copy of the binary.
pub const COMPRESSED_BUDGET: u64 = 16 * 1024 * 1024;

/// The most an image may take unpacked on a node's disk.
pub const UNCOMPRESSED_BUDGET: u64 = 40 * 1024 * 1024;

/// Everything an image build depends on besides the sources.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    pub workspace: PathBuf,
    /// Cargo profile of the binaries (`release` for a release).
    pub profile: String,
    /// `v1.2.3`: the image tag and `org.opencontainers.image.version`.
    pub version: String,
    /// `registry/prefix`: images are `<registry>/<binary>:<version>`.
    pub registry: String,
    /// The commit built.
    pub revision: String,
    /// `SOURCE_DATE_EPOCH`: image `created` time and every file's time.
    pub source_date_epoch: u64,
}

/// One built image and the files written for it.
#[derive(Debug, Clone)]
pub struct BuiltImage {
    pub binary: String,
    /// `<registry>/<binary>:<version>`.
    pub reference: String,
    pub image: OciImage,
    /// `<binary>-<version>.oci.tar`.
    pub archive: PathBuf,
    /// `<binary>-<version>.cdx.json`.
    pub sbom: PathBuf,
    /// `<binary>-<version>.debug`.
    pub debug: PathBuf,
}

/// The archive's file name.
pub fn archive_name(binary: &str, version: &str) -> String {
    format!("{binary}-{version}.oci.tar")
}

/// The commit of `HEAD` in `workspace` (with `-dirty` when tracked files differ from it).
pub fn git_revision(workspace: &Path) -> Result<String, ImageError> {
    let git = |args: &[&str]| -> Result<String, ImageError> {
        let output = std::process::Command::new("git")
            .current_dir(workspace)
            .args(args)
            .output()
            .map_err(|e| ImageError::Tool(format!("cannot run git: {e}")))?;
        if !output.status.success() {
            return Err(ImageError::Tool(format!(
                "git {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "HEAD"])?;
    let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Ok(if dirty { format!("{head}-dirty") } else { head })
}

/// `SOURCE_DATE_EPOCH` when set (it must be a whole number of seconds), else the commit time
/// of `HEAD`, so two builds of one commit agree without being told.
pub fn source_date_epoch(workspace: &Path) -> Result<u64, ImageError> {
    if let Ok(value) = std::env::var("SOURCE_DATE_EPOCH") {
        return value.trim().parse().map_err(|_| {
            ImageError::Invalid(format!(
                "SOURCE_DATE_EPOCH={value:?} is not a whole number of seconds since 1970"
            ))
        });
    }
    let output = std::process::Command::new("git")
        .current_dir(workspace)
        .args(["log", "-1", "--format=%ct"])
        .output()
        .map_err(|e| ImageError::Tool(format!("cannot run git: {e}")))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| {
            ImageError::Tool(
                "no SOURCE_DATE_EPOCH and no commit time from git; set SOURCE_DATE_EPOCH".into(),
            )
        })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    std::fs::write(path, bytes).map_err(|e| ImageError::io("cannot write", path, e))
}

/// Checks an image against [`COMPRESSED_BUDGET`] and [`UNCOMPRESSED_BUDGET`].
pub fn check_budget(binary: &str, image: &OciImage) -> Result<(), ImageError> {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    if image.compressed_size() > COMPRESSED_BUDGET
        || image.uncompressed_size() > UNCOMPRESSED_BUDGET
    {
        return Err(ImageError::OverBudget(format!(
            "image {binary} is {:.1} MiB compressed / {:.1} MiB unpacked; the budget is {:.0} / {:.0} MiB (docs/release.md)",
            mib(image.compressed_size()),
            mib(image.uncompressed_size()),
            mib(COMPRESSED_BUDGET),
            mib(UNCOMPRESSED_BUDGET),
        )));
    }
    Ok(())
}

/// Builds both controller images into `out`: the archives, SBOMs and debug files.
pub fn build_images(settings: &ImageSettings, out: &Path) -> Result<Vec<BuiltImage>, ImageError> {
    std::fs::create_dir_all(out).map_err(|e| ImageError::io("cannot create", out, e))?;
    let meta_for = |binary: &str, description: &str| ImageMeta {
        title: binary.to_string(),
        description: description.to_string(),
        source: env!("CARGO_PKG_REPOSITORY").to_string(),
        version: settings.version.clone(),
        revision: settings.revision.clone(),
        licenses: env!("CARGO_PKG_LICENSE").to_string(),
        created_epoch: settings.source_date_epoch,
    };
    let build = BuildSettings {
        workspace: settings.workspace.clone(),
        target: TARGET.to_string(),
        profile: settings.profile.clone(),
        revision: settings.revision.clone(),
        source_date_epoch: settings.source_date_epoch,
    };
    let packages: Vec<&str> = CONTROLLERS.iter().map(|(binary, _)| *binary).collect();
    cargo_build(&build, &packages)?;

    let metadata = sbom::workspace_metadata(&settings.workspace)?;
    let lock_path = settings.workspace.join("Cargo.lock");
    let lock = std::fs::read_to_string(&lock_path)
        .map_err(|e| ImageError::io("cannot read", &lock_path, e))?;
    let checksums = sbom::lock_checksums(&lock)?;
    let certs_version = metadata
        .packages
        .iter()
        .find(|p| p.name == "webpki-root-certs")
        .map(|p| p.version.to_string())
        .ok_or_else(|| ImageError::Invalid("webpki-root-certs is not in Cargo.lock".into()))?;
    let base_components = rootfs::base_components(&certs_version);
    let base = build_layer(&rootfs::base_tree(), settings.source_date_epoch)?;

    let mut built = Vec::new();
    for (binary, description) in CONTROLLERS {
        let version = &settings.version;
        let debug = out.join(format!("{binary}-{version}.debug"));
        let stripped = split_debug_info(&build.output_dir().join(binary), &debug, out)?;
        let mut tree = Tree::default();
        tree.insert(binary, Entry::file(stripped, 0o555));
        let app = build_layer(&tree, settings.source_date_epoch)?;
        let meta = meta_for(binary, description);
        let image = oci::assemble(
            vec![
                HistoryLayer {
                    layer: base.clone(),
                    created_by: "cargo xtask release: base (passwd, group, CA certificates, /tmp)"
                        .to_string(),
                },
                HistoryLayer {
                    layer: app,
                    created_by: format!(
                        "cargo xtask release: /{binary} (cargo build --profile {} --target {TARGET}, debug information stripped)",
                        settings.profile
                    ),
                },
            ],
            &RunConfig {
                entrypoint: vec![format!("/{binary}")],
                user: format!("{}:{}", rootfs::NONROOT, rootfs::NONROOT),
                env: vec![
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                    format!("SSL_CERT_FILE=/{}", rootfs::CA_BUNDLE),
                ],
            },
            &meta,
        )?;
        check_budget(binary, &image)?;

        let archive = out.join(archive_name(binary, version));
        write(&archive, &oci::archive(&image, settings.source_date_epoch)?)?;

        let reference = format!("{}/{binary}:{version}", settings.registry);
        let linked = sbom::target_crates(&settings.workspace, binary)?;
        let crates = sbom::binary_crates(&metadata, binary, &linked, &checksums)?;
        let sbom_path = out.join(format!("{binary}-{version}.cdx.json"));
        write(
            &sbom_path,
            &sbom::cyclonedx_json(&sbom::SbomInput {
                crates: &crates,
                base: &base_components,
                created: &meta.created_rfc3339()?,
                image: &reference,
            })?,
        )?;
        built.push(BuiltImage {
            binary: binary.to_string(),
            reference,
            image,
            archive,
            sbom: sbom_path,
            debug,
        });
    }
    Ok(built)
}
