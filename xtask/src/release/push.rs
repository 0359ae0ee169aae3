//! `cargo xtask release --push`: the images to a registry, with the `oci-client` crate (the
//! ORAS project's OCI distribution client).
//!
//! Each image's blobs and manifest are pushed as the exact bytes of the archive (the manifest
//! through `push_manifest_raw`), so the digest in the registry is the digest the release
//! computed; the registry's answer is checked against it. The SBOM follows as an OCI referrer
//! of the image (an artifact manifest whose `subject` is the image), listed by the registry's
//! referrers API or, on a registry without one, in the referrers tag schema's index
//! (`list_referrer`).

use std::str::FromStr;

use http::HeaderValue;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};

use crate::error::XtaskError;
use crate::image::BuiltImage;
use crate::image::layer::sha256_digest;
use crate::image::oci::{self, EMPTY_JSON};
use crate::release::options::ImageRegistry;

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";

/// Credentials from `REGISTRY_USERNAME` and `REGISTRY_PASSWORD`, else anonymous.
fn auth() -> RegistryAuth {
    match (
        std::env::var("REGISTRY_USERNAME"),
        std::env::var("REGISTRY_PASSWORD"),
    ) {
        (Ok(user), Ok(password)) if !user.is_empty() => RegistryAuth::Basic(user, password),
        _ => RegistryAuth::Anonymous,
    }
}

/// Pushes every image; returns `(binary, manifest digest)` for each.
pub fn push_images(
    images: &[BuiltImage],
    registry: &ImageRegistry,
    plain_http: bool,
) -> Result<Vec<(String, String)>, XtaskError> {
    let fail = |message: String| XtaskError::Push {
        registry: registry.as_str().to_string(),
        message,
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(format!("cannot start a runtime: {e}")))?;
    let client = Client::new(ClientConfig {
        protocol: if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        ..ClientConfig::default()
    });
    let auth = auth();
    runtime.block_on(async {
        let mut pushed = Vec::new();
        for image in images {
            let digest = push_one(&client, &auth, image)
                .await
                .map_err(|message| fail(format!("{}: {message}", image.reference)))?;
            println!("pushed {}@{digest}", image.reference);
            pushed.push((image.binary.clone(), digest));
        }
        Ok(pushed)
    })
}

async fn push_blob(
    client: &Client,
    reference: &Reference,
    digest: &str,
    bytes: &[u8],
) -> Result<(), String> {
    if client
        .blob_exists(reference, digest)
        .await
        .map_err(|e| format!("checking blob {digest}: {e}"))?
    {
        return Ok(());
    }
    client
        .push_blob(reference, bytes.to_vec(), digest)
        .await
        .map_err(|e| format!("pushing blob {digest}: {e}"))?;
    Ok(())
}

async fn push_one(
    client: &Client,
    auth: &RegistryAuth,
    built: &BuiltImage,
) -> Result<String, String> {
    let reference = Reference::from_str(&built.reference)
        .map_err(|e| format!("not an image reference: {e}"))?;
    client
        .auth(&reference, auth, RegistryOperation::Push)
        .await
        .map_err(|e| format!("authentication: {e}"))?;
    let image = &built.image;
    for layer in &image.layers {
        push_blob(client, &reference, &layer.digest, &layer.gzip).await?;
    }
    push_blob(client, &reference, &image.config_digest, &image.config).await?;
    client
        .push_manifest_raw(
            &reference,
            image.manifest.clone(),
            HeaderValue::from_static(MANIFEST_TYPE),
        )
        .await
        .map_err(|e| format!("pushing the manifest: {e}"))?;
    let stored = client
        .fetch_manifest_digest(&reference, auth)
        .await
        .map_err(|e| format!("reading back the manifest digest: {e}"))?;
    if stored != image.manifest_digest {
        return Err(format!(
            "the registry stores the manifest as {stored}, not {}; it rewrote the image",
            image.manifest_digest
        ));
    }

    // The SBOM, as a referrer of the image.
    let sbom = std::fs::read(&built.sbom)
        .map_err(|e| format!("cannot read {}: {e}", built.sbom.display()))?;
    let created = image_created(image)?;
    let referrer = oci::sbom_referrer(image, &sbom, &created).map_err(|e| e.to_string())?;
    push_blob(client, &reference, &sha256_digest(EMPTY_JSON), EMPTY_JSON).await?;
    push_blob(client, &reference, &referrer.blob.0, &referrer.blob.1).await?;
    let by_digest = reference.clone_with_digest(referrer.manifest_digest.clone());
    client
        .push_manifest_raw(
            &by_digest,
            referrer.manifest.clone(),
            HeaderValue::from_static(MANIFEST_TYPE),
        )
        .await
        .map_err(|e| format!("pushing the SBOM referrer: {e}"))?;
    list_referrer(client, auth, &reference, &image.manifest_digest, &referrer).await?;
    Ok(image.manifest_digest.clone())
}

/// Makes `referrer` (pushed already, its `subject` being `subject_digest`) visible to clients
/// that list the subject's referrers, on registries without the OCI referrers API too.
///
/// A registry with the API (distribution-spec 1.1) lists a manifest with a `subject` by
/// itself. Without it (the CNCF Distribution registry up to v3 among others), the client that
/// pushed must maintain the *referrers tag schema*: an image index tagged
/// [`oci::referrers_tag`] of the subject, listing the referrers' descriptors. The spec tells a
/// client which case it is in by the `OCI-Subject` header of the manifest PUT's response, but
/// `oci-client` does not return the response headers of `push_manifest_raw` (only its
/// `Location`). So this asks what a client reading referrers sees, through the same crate:
/// `pull_referrers` queries the referrers API and, when the registry answers 404, reads the
/// tag schema index. When `referrer` is listed there (by the API, or in the index by an
/// earlier push) nothing is written; otherwise it is added to the tag's index (created when
/// the tag does not exist) and the index is pushed back under the tag. Pushing twice thus lists
/// it once. The index the tag held before stays in the registry, untagged, until the
/// registry's garbage collection; two releases pushing the same image at the same moment could
/// each write an index without the other's entry (the spec's tag schema has no locking), which
/// a second `--push` repairs.
async fn list_referrer(
    client: &Client,
    auth: &RegistryAuth,
    reference: &Reference,
    subject_digest: &str,
    referrer: &oci::Referrer,
) -> Result<(), String> {
    let subject = reference.clone_with_digest(subject_digest.to_string());
    let listed = client
        .pull_referrers(&subject, None)
        .await
        .map_err(|e| format!("listing the referrers of {subject_digest}: {e}"))?;
    if listed
        .manifests
        .iter()
        .any(|entry| entry.digest == referrer.manifest_digest)
    {
        return Ok(());
    }
    let tag = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        oci::referrers_tag(subject_digest),
    );
    let current = match client
        .pull_manifest_raw(&tag, auth, &[INDEX_TYPE, MANIFEST_TYPE])
        .await
    {
        Ok((bytes, _)) => Some(bytes),
        Err(e) if not_found(&e) => None,
        Err(e) => return Err(format!("reading the referrers tag {tag}: {e}")),
    };
    let Some(index) = oci::referrers_index_with(current.as_deref(), referrer)
        .map_err(|e| format!("the referrers tag {tag}: {e}"))?
    else {
        return Ok(());
    };
    client
        .push_manifest_raw(&tag, index, HeaderValue::from_static(INDEX_TYPE))
        .await
        .map_err(|e| format!("pushing the referrers tag {tag}: {e}"))?;
    Ok(())
}

/// Whether a manifest pull failed because the registry has no such manifest.
fn not_found(error: &OciDistributionError) -> bool {
    match error {
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NotFound
            )
        }),
        OciDistributionError::ServerError { code: 404, .. }
        | OciDistributionError::ImageManifestNotFoundError(_) => true,
        _ => false,
    }
}

/// The `created` annotation of an image's manifest.
fn image_created(image: &oci::OciImage) -> Result<String, String> {
    let manifest: serde_json::Value =
        serde_json::from_slice(&image.manifest).map_err(|e| e.to_string())?;
    manifest["annotations"][oci::annotation::CREATED]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| "the manifest has no created annotation".to_string())
}
