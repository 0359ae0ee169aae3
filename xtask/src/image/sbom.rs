//! The software bill of materials of an image, in CycloneDX 1.5 JSON (`cyclonedx-bom`).
//!
//! It lists the binary's Rust crates (the normal-dependency closure of its package in
//! `cargo metadata`, resolved for linux/amd64: build scripts, proc-macros with their own
//! dependencies, and dev dependencies are build-time tools and are left out, as they do not end
//! up in the image),
//! each with its version, license expression, package URL and the SHA-256 that `Cargo.lock`
//! pins, the dependency edges between them, and the components of the base layer.
//!
//! The document is reproducible: no serial number (a random one would change the bytes of
//! every build) and `metadata.timestamp` is the image's `created` time.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use cargo_metadata::{DependencyKind, Metadata, MetadataCommand, Package, PackageId};
use cyclonedx_bom::external_models::normalized_string::NormalizedString;
use cyclonedx_bom::external_models::uri::{Purl, Uri};
use cyclonedx_bom::models::bom::Bom;
use cyclonedx_bom::models::component::{Classification, Component, Components};
use cyclonedx_bom::models::dependency::{Dependencies, Dependency};
use cyclonedx_bom::models::external_reference::{
    ExternalReference, ExternalReferenceType, ExternalReferences,
};
use cyclonedx_bom::models::hash::{Hash, HashAlgorithm, HashValue, Hashes};
use cyclonedx_bom::models::license::{LicenseChoice, Licenses};
use cyclonedx_bom::models::metadata::Metadata as BomMetadata;
use cyclonedx_bom::models::property::{Properties, Property};
use cyclonedx_bom::models::tool::{Tool, Tools};

use crate::image::ImageError;

use crate::image::TARGET;

/// One Rust crate of a binary.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CrateComponent {
    pub name: String,
    pub version: String,
    pub license: Option<String>,
    /// `None` for a workspace (path) crate.
    pub registry: bool,
    pub checksum: Option<String>,
    pub repository: Option<String>,
    /// Names (`name@version`) of the crates it depends on.
    pub depends_on: BTreeSet<String>,
}

impl CrateComponent {
    /// The `bom-ref`: `name@version`, unique in one dependency graph.
    pub fn reference(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// A component of the base layer (a file set the image carries besides the binary).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseComponent {
    pub name: String,
    pub version: String,
    /// Package URL, e.g. `pkg:deb/debian/libc6@2.36-9?arch=amd64`.
    pub purl: String,
    pub license: String,
    pub description: String,
    /// SHA-256 (hex) of what was taken, when it is one file or package.
    pub sha256: Option<String>,
}

/// Runs `cargo metadata` on the workspace for the image target.
pub fn workspace_metadata(workspace: &Path) -> Result<Metadata, ImageError> {
    MetadataCommand::new()
        .manifest_path(workspace.join("Cargo.toml"))
        .other_options(vec![
            "--filter-platform".to_string(),
            TARGET.to_string(),
            "--locked".to_string(),
        ])
        .exec()
        .map_err(|e| ImageError::Tool(format!("cargo metadata failed: {e}")))
}

/// `name@version` of every crate compiled into `package`'s binary for the image target, with
/// the features Cargo enables for that package alone.
///
/// `cargo metadata` resolves features for the whole workspace at once (dev dependencies and
/// the tools of xtask included), so its graph reaches crates the binary never links: the
/// first image build listed `bit-vec`, `rand_core` 0.10 and `jiff-static` in the SBOM, which
/// `cargo tree` showed were not in the binary. `cargo tree -e normal,no-proc-macro` resolves
/// as the build does and leaves out the proc-macros (run on the build machine, not linked).
pub fn target_crates(workspace: &Path, package: &str) -> Result<BTreeSet<String>, ImageError> {
    let output = crate::workspace::nested_cargo(workspace)
        .args([
            "tree",
            "--locked",
            "-p",
            package,
            "-e",
            "normal,no-proc-macro",
        ])
        .args(["--target", TARGET, "--prefix", "none", "--format", "{p}"])
        .output()
        .map_err(|e| ImageError::Tool(format!("cannot run cargo tree: {e}")))?;
    if !output.status.success() {
        return Err(ImageError::Tool(format!(
            "cargo tree -p {package} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(tree_crates(&String::from_utf8_lossy(&output.stdout)))
}

/// `name@version` of each line `name vX.Y.Z [...]` of `cargo tree --format {p}`.
pub fn tree_crates(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some(format!("{name}@{version}"))
        })
        .collect()
}

/// `name@version` → SHA-256 of the `.crate`, from `Cargo.lock`.
pub fn lock_checksums(lock_text: &str) -> Result<BTreeMap<String, String>, ImageError> {
    #[derive(serde::Deserialize)]
    struct Lock {
        #[serde(default)]
        package: Vec<LockedPackage>,
    }
    #[derive(serde::Deserialize)]
    struct LockedPackage {
        name: String,
        version: String,
        checksum: Option<String>,
    }
    let lock: Lock =
        toml::from_str(lock_text).map_err(|e| ImageError::Invalid(format!("Cargo.lock: {e}")))?;
    Ok(lock
        .package
        .into_iter()
        .filter_map(|p| Some((format!("{}@{}", p.name, p.version), p.checksum?)))
        .collect())
}

/// The crates of the binary of package `root`: its normal-dependency closure, itself first.
/// The crates of `root`'s binary: its normal-dependency closure in `metadata`, kept to the
/// crates `linked` names ([`target_crates`]).
pub fn binary_crates(
    metadata: &Metadata,
    root: &str,
    linked: &BTreeSet<String>,
    checksums: &BTreeMap<String, String>,
) -> Result<Vec<CrateComponent>, ImageError> {
    let resolve = metadata
        .resolve
        .as_ref()
        .ok_or_else(|| ImageError::Invalid("cargo metadata has no resolve graph".into()))?;
    let packages: BTreeMap<&PackageId, &Package> =
        metadata.packages.iter().map(|p| (&p.id, p)).collect();
    let nodes: BTreeMap<&PackageId, _> = resolve.nodes.iter().map(|n| (&n.id, n)).collect();
    let root_id = metadata
        .workspace_packages()
        .into_iter()
        .find(|p| p.name == root)
        .map(|p| &p.id)
        .ok_or_else(|| ImageError::Invalid(format!("no workspace package {root:?}")))?;

    let reference = |id: &PackageId| -> Result<String, ImageError> {
        let package = packages
            .get(id)
            .ok_or_else(|| ImageError::Invalid(format!("unknown package {id}")))?;
        Ok(format!("{}@{}", package.name, package.version))
    };
    let mut order = vec![root_id];
    let mut seen: BTreeSet<&PackageId> = BTreeSet::from([root_id]);
    let mut components = Vec::new();
    let mut next = 0;
    while let Some(&id) = order.get(next) {
        next += 1;
        let node = nodes
            .get(id)
            .ok_or_else(|| ImageError::Invalid(format!("package {id} is not in the graph")))?;
        let package = packages[id];
        let mut depends_on = BTreeSet::new();
        for dep in &node.deps {
            let normal = dep
                .dep_kinds
                .iter()
                .any(|kind| kind.kind == DependencyKind::Normal);
            let dep_reference = reference(&dep.pkg)?;
            if !normal || !linked.contains(&dep_reference) {
                continue;
            }
            depends_on.insert(dep_reference);
            if seen.insert(&dep.pkg) {
                order.push(&dep.pkg);
            }
        }
        let key = format!("{}@{}", package.name, package.version);
        components.push(CrateComponent {
            name: package.name.to_string(),
            version: package.version.to_string(),
            license: package.license.clone(),
            registry: package.source.as_ref().is_some_and(|s| s.is_crates_io()),
            checksum: checksums.get(&key).cloned(),
            repository: package.repository.clone(),
            depends_on,
        });
    }
    components[1..].sort();
    Ok(components)
}

fn nstr(text: &str) -> NormalizedString {
    NormalizedString::new(text)
}

fn sbom_error(e: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("SBOM: {e}"))
}

fn crate_component(
    krate: &CrateComponent,
    classification: Classification,
) -> Result<Component, ImageError> {
    let mut component = Component::new(
        classification,
        &krate.name,
        &krate.version,
        Some(krate.reference()),
    );
    component.purl = Some(Purl::new("cargo", &krate.name, &krate.version).map_err(sbom_error)?);
    component.licenses = krate
        .license
        .as_deref()
        .map(|license| Licenses(vec![LicenseChoice::expression(license)]));
    component.hashes = krate.checksum.as_ref().map(|sum| {
        Hashes(vec![Hash {
            alg: HashAlgorithm::SHA_256,
            content: HashValue(sum.clone()),
        }])
    });
    component.external_references = krate.repository.as_ref().map(|url| {
        ExternalReferences(vec![ExternalReference::new(
            ExternalReferenceType::Vcs,
            Uri::new(url),
        )])
    });
    if !krate.registry {
        component.properties = Some(Properties(vec![Property {
            name: "cdx:cargo:source".into(),
            value: nstr("workspace"),
        }]));
    }
    Ok(component)
}

fn base_component(base: &BaseComponent) -> Component {
    let mut component = Component::new(
        Classification::Library,
        &base.name,
        &base.version,
        Some(format!("base:{}@{}", base.name, base.version)),
    );
    component.purl = base.purl.parse::<Purl>().ok();
    component.licenses = Some(Licenses(vec![LicenseChoice::expression(&base.license)]));
    component.description = Some(nstr(&base.description));
    component.hashes = base.sha256.as_ref().map(|sum| {
        Hashes(vec![Hash {
            alg: HashAlgorithm::SHA_256,
            content: HashValue(sum.clone()),
        }])
    });
    component
}

/// What the SBOM describes.
#[derive(Debug, Clone)]
pub struct SbomInput<'a> {
    /// The binary's crate first (it becomes `metadata.component`), then its dependencies.
    pub crates: &'a [CrateComponent],
    pub base: &'a [BaseComponent],
    /// RFC 3339 `created` time of the image.
    pub created: &'a str,
    /// The image reference it describes (`registry/name:version`).
    pub image: &'a str,
}

/// The CycloneDX 1.5 JSON document.
pub fn cyclonedx_json(input: &SbomInput<'_>) -> Result<Vec<u8>, ImageError> {
    let (root, dependencies) = input
        .crates
        .split_first()
        .ok_or_else(|| ImageError::Invalid("SBOM of no crate".into()))?;
    let mut root_component = crate_component(root, Classification::Application)?;
    root_component.description = Some(nstr(&format!("container image {}", input.image)));

    let mut components: Vec<Component> = dependencies
        .iter()
        .map(|krate| crate_component(krate, Classification::Library))
        .collect::<Result<_, _>>()?;
    components.extend(input.base.iter().map(base_component));

    let mut edges: Vec<Dependency> = input
        .crates
        .iter()
        .map(|krate| Dependency {
            dependency_ref: krate.reference(),
            dependencies: krate.depends_on.iter().cloned().collect(),
        })
        .collect();
    if let Some(first) = edges.first_mut() {
        first.dependencies.extend(
            input
                .base
                .iter()
                .map(|b| format!("base:{}@{}", b.name, b.version)),
        );
    }

    let bom = Bom {
        serial_number: None,
        metadata: Some(BomMetadata {
            timestamp: Some(
                cyclonedx_bom::external_models::date_time::DateTime::try_from(
                    input.created.to_string(),
                )
                .map_err(sbom_error)?,
            ),
            tools: Some(Tools::List(vec![Tool {
                vendor: None,
                name: Some(nstr("cargo xtask release")),
                version: Some(nstr(env!("CARGO_PKG_VERSION"))),
                hashes: None,
                external_references: None,
            }])),
            authors: None,
            component: Some(root_component),
            manufacture: None,
            supplier: None,
            licenses: None,
            properties: None,
            lifecycles: None,
        }),
        components: Some(Components(components)),
        dependencies: Some(Dependencies(edges)),
        ..Bom::default()
    };
    let mut out = Vec::new();
    bom.output_as_json_v1_5(&mut out).map_err(sbom_error)?;
    let value: serde_json::Value = serde_json::from_slice(&out).map_err(sbom_error)?;
    let mut pretty = serde_json::to_vec_pretty(&value).map_err(sbom_error)?;
    pretty.push(b'\n');
    Ok(pretty)
}
