//! An OCI image (configuration, manifest) from layers, and its OCI image-layout archive.
//!
//! The JSON documents are the `oci-spec` crate's types. Its maps are `HashMap`s, whose
//! iteration order changes from one map to the next, so every document is written through
//! [`canonical_json`] (keys sorted at every level): the same image always has the same bytes,
//! and so the same digest.

use std::collections::BTreeMap;

use oci_spec::image::{
    Arch, ConfigBuilder, Descriptor, DescriptorBuilder, HistoryBuilder, ImageConfigurationBuilder,
    ImageIndexBuilder, ImageManifestBuilder, MediaType, Os, PlatformBuilder, RootFsBuilder,
};
use serde::Serialize;

use crate::image::ImageError;
use crate::image::layer::{Entry, Layer, Tree, sha256_digest, tar_bytes};

/// The annotation keys of the image-spec that the release fills in.
pub mod annotation {
    pub const SOURCE: &str = "org.opencontainers.image.source";
    pub const VERSION: &str = "org.opencontainers.image.version";
    pub const REVISION: &str = "org.opencontainers.image.revision";
    pub const LICENSES: &str = "org.opencontainers.image.licenses";
    pub const CREATED: &str = "org.opencontainers.image.created";
    pub const TITLE: &str = "org.opencontainers.image.title";
    pub const DESCRIPTION: &str = "org.opencontainers.image.description";
    pub const REF_NAME: &str = "org.opencontainers.image.ref.name";
}

/// What the image says about itself (annotations, labels, history).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageMeta {
    /// The binary's name, also the image's title.
    pub title: String,
    pub description: String,
    /// The repository URL.
    pub source: String,
    /// The release version (`v1.2.3`), also the image's tag.
    pub version: String,
    /// The commit the binaries were built from.
    pub revision: String,
    /// SPDX license expression.
    pub licenses: String,
    /// Seconds since the epoch (`SOURCE_DATE_EPOCH`): the `created` time and every file's
    /// modification time.
    pub created_epoch: u64,
}

/// `epoch` (seconds since 1970) as an RFC 3339 time.
pub fn rfc3339(epoch: u64) -> Result<String, ImageError> {
    let seconds = i64::try_from(epoch)
        .map_err(|_| ImageError::Invalid(format!("epoch {epoch} too large")))?;
    jiff::Timestamp::from_second(seconds)
        .map(|t| t.to_string())
        .map_err(|e| ImageError::Invalid(format!("epoch {epoch}: {e}")))
}

impl ImageMeta {
    /// `created` as RFC 3339 in UTC.
    pub fn created_rfc3339(&self) -> Result<String, ImageError> {
        rfc3339(self.created_epoch)
    }

    /// The annotations of the manifest (and the labels of the configuration).
    pub fn annotations(&self) -> Result<BTreeMap<String, String>, ImageError> {
        Ok(BTreeMap::from([
            (annotation::SOURCE.to_string(), self.source.clone()),
            (annotation::VERSION.to_string(), self.version.clone()),
            (annotation::REVISION.to_string(), self.revision.clone()),
            (annotation::LICENSES.to_string(), self.licenses.clone()),
            (annotation::CREATED.to_string(), self.created_rfc3339()?),
            (annotation::TITLE.to_string(), self.title.clone()),
            (
                annotation::DESCRIPTION.to_string(),
                self.description.clone(),
            ),
        ]))
    }
}

/// How the image runs its binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    pub entrypoint: Vec<String>,
    /// `uid:gid`.
    pub user: String,
    pub env: Vec<String>,
}

/// One layer with the history line that says where it came from.
#[derive(Debug, Clone)]
pub struct HistoryLayer {
    pub layer: Layer,
    pub created_by: String,
}

/// A finished image: every blob, and the manifest that ties them together.
#[derive(Debug, Clone)]
pub struct OciImage {
    pub config: Vec<u8>,
    pub config_digest: String,
    pub layers: Vec<Layer>,
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    /// The release version, recorded as the manifest's `ref.name` in the layout.
    pub ref_name: String,
}

impl OciImage {
    /// Total compressed size of the layers: what a node downloads.
    pub fn compressed_size(&self) -> u64 {
        self.layers.iter().map(|l| l.gzip.len() as u64).sum()
    }

    /// Total uncompressed size of the layers: what the image takes on a node's disk.
    pub fn uncompressed_size(&self) -> u64 {
        self.layers.iter().map(|l| l.tar_size).sum()
    }
}

/// Serializes `value` as compact JSON with the keys of every object sorted.
pub fn canonical_json(value: &impl Serialize) -> Result<Vec<u8>, ImageError> {
    let mut value = serde_json::to_value(value)
        .map_err(|e| ImageError::Invalid(format!("cannot serialize an OCI document: {e}")))?;
    value.sort_all_objects();
    serde_json::to_vec(&value)
        .map_err(|e| ImageError::Invalid(format!("cannot serialize an OCI document: {e}")))
}

fn spec_error(e: impl std::fmt::Display) -> ImageError {
    ImageError::Invalid(format!("invalid OCI document: {e}"))
}

fn descriptor(
    media_type: MediaType,
    bytes_len: usize,
    digest: &str,
) -> Result<Descriptor, ImageError> {
    DescriptorBuilder::default()
        .media_type(media_type)
        .size(bytes_len as u64)
        .digest(oci_spec::image::Digest::try_from(digest).map_err(spec_error)?)
        .build()
        .map_err(spec_error)
}

/// Assembles a linux/amd64 image from `layers` (bottom first).
pub fn assemble(
    layers: Vec<HistoryLayer>,
    run: &RunConfig,
    meta: &ImageMeta,
) -> Result<OciImage, ImageError> {
    let created = meta.created_rfc3339()?;
    let annotations: std::collections::HashMap<String, String> =
        meta.annotations()?.into_iter().collect();
    let config = ConfigBuilder::default()
        .user(run.user.clone())
        .entrypoint(run.entrypoint.clone())
        .env(run.env.clone())
        .working_dir("/".to_string())
        .labels(annotations.clone())
        .build()
        .map_err(spec_error)?;
    let history = layers
        .iter()
        .map(|l| {
            HistoryBuilder::default()
                .created(created.clone())
                .created_by(l.created_by.clone())
                .build()
                .map_err(spec_error)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rootfs = RootFsBuilder::default()
        .typ("layers".to_string())
        .diff_ids(
            layers
                .iter()
                .map(|l| l.layer.diff_id.clone())
                .collect::<Vec<_>>(),
        )
        .build()
        .map_err(spec_error)?;
    let configuration = ImageConfigurationBuilder::default()
        .created(created)
        .architecture(Arch::Amd64)
        .os(Os::Linux)
        .config(config)
        .rootfs(rootfs)
        .history(history)
        .build()
        .map_err(spec_error)?;
    let config_bytes = canonical_json(&configuration)?;
    let config_digest = sha256_digest(&config_bytes);

    let layer_descriptors = layers
        .iter()
        .map(|l| {
            descriptor(
                MediaType::ImageLayerGzip,
                l.layer.gzip.len(),
                &l.layer.digest,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(
            MediaType::ImageConfig,
            config_bytes.len(),
            &config_digest,
        )?)
        .layers(layer_descriptors)
        .annotations(annotations)
        .build()
        .map_err(spec_error)?;
    let manifest_bytes = canonical_json(&manifest)?;
    Ok(OciImage {
        manifest_digest: sha256_digest(&manifest_bytes),
        manifest: manifest_bytes,
        config: config_bytes,
        config_digest,
        layers: layers.into_iter().map(|l| l.layer).collect(),
        ref_name: meta.version.clone(),
    })
}

/// Media type of a CycloneDX JSON document.
pub const CYCLONEDX_MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";

/// The empty JSON blob (`{}`) an artifact manifest uses as its configuration.
pub const EMPTY_JSON: &[u8] = b"{}";

/// An OCI artifact that refers to an image (image-spec 1.1 `subject`): the manifest and the
/// blobs it names besides the shared [`EMPTY_JSON`] configuration.
#[derive(Debug, Clone)]
pub struct Referrer {
    pub manifest: Vec<u8>,
    pub manifest_digest: String,
    /// `(digest, bytes)` of the artifact's one layer.
    pub blob: (String, Vec<u8>),
}

/// The SBOM `sbom` as an artifact whose subject is `image` (found through the registry's
/// referrers API, e.g. `oras discover`).
pub fn sbom_referrer(image: &OciImage, sbom: &[u8], created: &str) -> Result<Referrer, ImageError> {
    let sbom_digest = sha256_digest(sbom);
    let mut layer = descriptor(
        MediaType::Other(CYCLONEDX_MEDIA_TYPE.into()),
        sbom.len(),
        &sbom_digest,
    )?;
    layer.set_annotations(Some(
        [(annotation::TITLE.to_string(), "sbom.cdx.json".to_string())].into(),
    ));
    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .artifact_type(MediaType::Other(CYCLONEDX_MEDIA_TYPE.into()))
        .config(descriptor(
            MediaType::EmptyJSON,
            EMPTY_JSON.len(),
            &sha256_digest(EMPTY_JSON),
        )?)
        .layers(vec![layer])
        .subject(descriptor(
            MediaType::ImageManifest,
            image.manifest.len(),
            &image.manifest_digest,
        )?)
        .annotations(std::collections::HashMap::from([(
            annotation::CREATED.to_string(),
            created.to_string(),
        )]))
        .build()
        .map_err(spec_error)?;
    let manifest = canonical_json(&manifest)?;
    Ok(Referrer {
        manifest_digest: sha256_digest(&manifest),
        manifest,
        blob: (sbom_digest, sbom.to_vec()),
    })
}

/// The tag of the referrers tag schema (OCI distribution-spec 1.1) for the subject
/// `subject_digest`: the digest with `:` replaced by `-` (`sha256:ab…` → `sha256-ab…`). A
/// registry without the referrers API keeps the subject's referrers list under that tag.
pub fn referrers_tag(subject_digest: &str) -> String {
    subject_digest.replace(':', "-")
}

/// The descriptor of `referrer` as a referrers list holds it: media type, digest and size of
/// its manifest, with the manifest's `artifactType` (its config's media type when it has none)
/// and its annotations.
pub fn referrer_descriptor(referrer: &Referrer) -> Result<serde_json::Value, ImageError> {
    let manifest: serde_json::Value = serde_json::from_slice(&referrer.manifest)
        .map_err(|e| ImageError::Invalid(format!("the referrer's manifest is not JSON: {e}")))?;
    let artifact_type = manifest
        .get("artifactType")
        .or_else(|| manifest.pointer("/config/mediaType"))
        .cloned()
        .ok_or_else(|| {
            ImageError::Invalid("the referrer's manifest has no artifactType or config".into())
        })?;
    let mut descriptor = serde_json::json!({
        "mediaType": manifest.get("mediaType").cloned()
            .unwrap_or_else(|| MediaType::ImageManifest.to_string().into()),
        "digest": referrer.manifest_digest,
        "size": referrer.manifest.len(),
        "artifactType": artifact_type,
    });
    if let Some(annotations) = manifest.get("annotations") {
        descriptor["annotations"] = annotations.clone();
    }
    Ok(descriptor)
}

/// The referrers tag schema's index once `referrer` is listed in it. `current` is what the tag
/// holds (`None` when the registry has no such tag: the list starts empty). Returns `None` when
/// `referrer` is listed already (pushing twice must not list it twice), and an error when the
/// tag holds something other than an image index (it is left alone, as the spec asks). Every
/// other entry and field of `current` is kept as it is.
pub fn referrers_index_with(
    current: Option<&[u8]>,
    referrer: &Referrer,
) -> Result<Option<Vec<u8>>, ImageError> {
    let index_type = MediaType::ImageIndex.to_string();
    let mut index = match current {
        None => serde_json::json!({
            "schemaVersion": 2,
            "mediaType": index_type,
            "manifests": [],
        }),
        Some(bytes) => serde_json::from_slice(bytes).map_err(|e| {
            ImageError::Invalid(format!("the referrers tag holds no JSON document: {e}"))
        })?,
    };
    let media_type = index.get("mediaType").and_then(|t| t.as_str());
    if media_type != Some(index_type.as_str()) || !index["manifests"].is_array() {
        return Err(ImageError::Invalid(format!(
            "the referrers tag holds a {}, not an image index with manifests; left as it is",
            media_type.unwrap_or("document without mediaType")
        )));
    }
    let manifests = index["manifests"]
        .as_array_mut()
        .expect("checked to be an array above");
    if manifests
        .iter()
        .any(|entry| entry["digest"] == referrer.manifest_digest.as_str())
    {
        return Ok(None);
    }
    manifests.push(referrer_descriptor(referrer)?);
    canonical_json(&index).map(Some)
}

/// `index.json` of a layout holding `image` under its `ref.name`.
pub fn layout_index(image: &OciImage) -> Result<Vec<u8>, ImageError> {
    let mut entry = descriptor(
        MediaType::ImageManifest,
        image.manifest.len(),
        &image.manifest_digest,
    )?;
    entry.set_platform(Some(
        PlatformBuilder::default()
            .architecture(Arch::Amd64)
            .os(Os::Linux)
            .build()
            .map_err(spec_error)?,
    ));
    entry.set_annotations(Some(
        [(annotation::REF_NAME.to_string(), image.ref_name.clone())].into(),
    ));
    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![entry])
        .build()
        .map_err(spec_error)?;
    canonical_json(&index)
}

/// The OCI image layout of `image` (`oci-layout`, `index.json`, `blobs/sha256/*`) as a file
/// tree.
pub fn layout_tree(image: &OciImage) -> Result<Tree, ImageError> {
    let mut tree = Tree::default();
    let blob = |tree: &mut Tree, digest: &str, bytes: &[u8]| {
        let hex = digest.trim_start_matches("sha256:");
        tree.insert(&format!("blobs/sha256/{hex}"), Entry::file(bytes, 0o644));
    };
    tree.insert(
        "oci-layout",
        Entry::file(r#"{"imageLayoutVersion":"1.0.0"}"#, 0o644),
    );
    tree.insert("index.json", Entry::file(layout_index(image)?, 0o644));
    blob(&mut tree, &image.manifest_digest, &image.manifest);
    blob(&mut tree, &image.config_digest, &image.config);
    for layer in &image.layers {
        blob(&mut tree, &layer.digest, &layer.gzip);
    }
    Ok(tree)
}

/// The layout as an uncompressed tar (what `skopeo` calls `oci-archive:`), its entries stamped
/// with `mtime`.
pub fn archive(image: &OciImage, mtime: u64) -> Result<Vec<u8>, ImageError> {
    tar_bytes(&layout_tree(image)?, mtime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::layer::build_layer;

    fn meta() -> ImageMeta {
        ImageMeta {
            title: "demo".into(),
            description: "a demo".into(),
            source: "https://example.invalid/demo".into(),
            version: "v1.2.3".into(),
            revision: "0123456789abcdef0123456789abcdef01234567".into(),
            licenses: "Apache-2.0".into(),
            created_epoch: 1_700_000_000,
        }
    }

    fn image() -> OciImage {
        let mut tree = Tree::default();
        tree.insert("demo", Entry::file("binary", 0o555));
        let layer = build_layer(&tree, 1_700_000_000).unwrap();
        assemble(
            vec![HistoryLayer {
                layer,
                created_by: "test".into(),
            }],
            &RunConfig {
                entrypoint: vec!["/demo".into()],
                user: "65532:65532".into(),
                env: vec!["PATH=/".into()],
            },
            &meta(),
        )
        .unwrap()
    }

    #[test]
    fn documents_are_byte_identical_across_builds() {
        let (a, b) = (image(), image());
        assert_eq!(a.config, b.config);
        assert_eq!(a.manifest, b.manifest);
        assert_eq!(archive(&a, 1).unwrap(), archive(&b, 1).unwrap());
    }

    #[test]
    fn configuration_runs_as_non_root_and_carries_the_annotations() {
        let image = image();
        let config: serde_json::Value = serde_json::from_slice(&image.config).unwrap();
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"][0], "/demo");
        assert_eq!(config["created"], "2023-11-14T22:13:20Z");
        assert_eq!(config["architecture"], "amd64");
        let manifest: serde_json::Value = serde_json::from_slice(&image.manifest).unwrap();
        let annotations = &manifest["annotations"];
        assert_eq!(annotations[annotation::CREATED], "2023-11-14T22:13:20Z");
        assert_eq!(annotations[annotation::VERSION], "v1.2.3");
        assert_eq!(annotations[annotation::LICENSES], "Apache-2.0");
        assert_eq!(manifest["config"]["digest"], image.config_digest);
        assert_eq!(
            manifest["layers"][0]["mediaType"],
            "application/vnd.oci.image.layer.v1.tar+gzip"
        );
    }

    #[test]
    fn the_layout_names_the_image_by_its_version() {
        let image = image();
        let tree = layout_tree(&image).unwrap();
        let hex = image.manifest_digest.trim_start_matches("sha256:");
        assert!(tree.get(&format!("blobs/sha256/{hex}")).is_some());
        let crate::image::layer::EntryKind::File(index) = &tree.get("index.json").unwrap().kind
        else {
            panic!("index.json is a file")
        };
        let index: serde_json::Value = serde_json::from_slice(index).unwrap();
        assert_eq!(index["manifests"][0]["digest"], image.manifest_digest);
        assert_eq!(
            index["manifests"][0]["annotations"][annotation::REF_NAME],
            "v1.2.3"
        );
    }

    fn sbom(text: &str) -> Referrer {
        sbom_referrer(&image(), text.as_bytes(), "2023-11-14T22:13:20Z").unwrap()
    }

    #[test]
    fn the_referrers_tag_is_the_subject_digest_with_a_dash() {
        assert_eq!(referrers_tag("sha256:0123abcd"), "sha256-0123abcd");
    }

    #[test]
    fn a_missing_referrers_tag_becomes_an_index_listing_the_sbom_with_its_type() {
        let referrer = sbom("{}");
        let index = referrers_index_with(None, &referrer).unwrap().unwrap();
        let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
        assert_eq!(index["schemaVersion"], 2);
        assert_eq!(
            index["mediaType"],
            "application/vnd.oci.image.index.v1+json"
        );
        let entries = index["manifests"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["digest"], referrer.manifest_digest);
        assert_eq!(entries[0]["size"], referrer.manifest.len());
        assert_eq!(
            entries[0]["mediaType"],
            "application/vnd.oci.image.manifest.v1+json"
        );
        assert_eq!(entries[0]["artifactType"], CYCLONEDX_MEDIA_TYPE);
        assert_eq!(
            entries[0]["annotations"][annotation::CREATED],
            "2023-11-14T22:13:20Z"
        );
    }

    #[test]
    fn a_referrer_already_listed_is_not_listed_twice() {
        let referrer = sbom("{}");
        let index = referrers_index_with(None, &referrer).unwrap().unwrap();
        assert_eq!(referrers_index_with(Some(&index), &referrer).unwrap(), None);
    }

    #[test]
    fn other_referrers_and_unknown_fields_of_the_index_are_kept() {
        let old = sbom(r#"{"old":true}"#);
        let mut index: serde_json::Value =
            serde_json::from_slice(&referrers_index_with(None, &old).unwrap().unwrap()).unwrap();
        index["manifests"][0]["x-other-tool"] = "kept".into();
        index["annotations"] = serde_json::json!({"note": "kept"});
        let new = sbom(r#"{"new":true}"#);
        let updated = referrers_index_with(Some(&serde_json::to_vec(&index).unwrap()), &new)
            .unwrap()
            .unwrap();
        let updated: serde_json::Value = serde_json::from_slice(&updated).unwrap();
        let entries = updated["manifests"].as_array().unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0]["digest"], old.manifest_digest);
        assert_eq!(entries[0]["x-other-tool"], "kept");
        assert_eq!(entries[1]["digest"], new.manifest_digest);
        assert_eq!(updated["annotations"]["note"], "kept");
    }

    #[test]
    fn a_referrers_tag_holding_an_image_is_an_error_not_overwritten() {
        let error = referrers_index_with(Some(&image().manifest), &sbom("{}")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("application/vnd.oci.image.manifest.v1+json, not an image index"),
            "{error}"
        );
    }
}
