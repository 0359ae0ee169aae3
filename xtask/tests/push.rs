//! `cargo xtask release --push` against a real OCI registry: the CNCF Distribution registry
//! (built from the Go module proxy at the version in upstream/registry/go.mod) on 127.0.0.1,
//! with its storage in a temporary directory. `skopeo` reads back what was pushed; the
//! released manifests and chart name the images by tag and digest; each image has exactly one
//! SBOM referrer, listed the way a client lists referrers (the referrers API when the registry
//! answers it, else the referrers tag schema's index: that registry has no referrers API), and
//! pushing the release again does not list it twice.
//!
//! Needs what tests/images.rs needs (the images are built the same way; the release build is
//! shared) and Go (without it the test skips with one line, except under `CI` or
//! `AGENT_SANDBOX_REQUIRE_GO=1`, where it fails); `XTASK_SKIP_IMAGES=1` skips.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use oci_client::manifest::{ImageIndexEntry, OciManifest};
use oci_client::secrets::RegistryAuth;
use xtask::image::oci::{CYCLONEDX_MEDIA_TYPE, referrers_tag};
use xtask::image::{git_revision, source_date_epoch};
use xtask::workspace::workspace_root;

const VERSION: &str = "v1.2.3";

/// A registry on 127.0.0.1, stopped when dropped.
struct Registry {
    child: Child,
    address: String,
    _storage: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_registry() -> Registry {
    let binary = xtask::gotools::REGISTRY.binary().expect("registry builds");
    let storage = tempfile::tempdir().unwrap();
    let config = storage.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n",
            storage.path().join("data").display()
        ),
    )
    .unwrap();
    let mut child = Command::new(binary)
        .args(["serve"])
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("registry starts");
    // It logs the address it listens on; port 0 lets the kernel pick a free one.
    let stderr = child.stderr.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on ").nth(1) {
                let address = rest
                    .trim_matches(|c: char| c == '"' || c.is_whitespace())
                    .split_whitespace()
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches('"')
                    .to_string();
                let _ = sender.send(address);
            }
        }
    });
    let address = receiver
        .recv_timeout(Duration::from_secs(30))
        .expect("the registry says where it listens within 30 s");
    Registry {
        child,
        address,
        _storage: storage,
    }
}

fn skopeo_digest(reference: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let output = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false", "--format", "{{.Digest}}"])
            .arg(format!("docker://{reference}"))
            .output()
            .expect("skopeo runs");
        if output.status.success() {
            return String::from_utf8_lossy(&output.stdout).trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "skopeo inspect {reference}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Runs `cargo xtask release --push` into `out`; returns its standard output.
fn release_push(prefix: &str, out: &Path) -> String {
    let root = workspace_root();
    let run = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args([
            "release",
            "--version",
            VERSION,
            "--registry",
            prefix,
            "--push",
            "--plain-http",
        ])
        .arg("--out")
        .arg(out)
        .env(
            "SOURCE_DATE_EPOCH",
            source_date_epoch(&root).unwrap().to_string(),
        )
        .output()
        .expect("xtask runs");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        run.status.success(),
        "release --push: {stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    stdout
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

fn client() -> oci_client::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    })
}

/// The CycloneDX referrers of `image` (`registry/repository@digest`) as a client lists them:
/// `pull_referrers` asks the referrers API and, when the registry answers 404 (it does not
/// have the API), reads the index under the referrers tag schema's tag.
fn sbom_referrers(image: &str) -> Vec<ImageIndexEntry> {
    let image = oci_client::Reference::from_str(image).unwrap();
    block_on(client().pull_referrers(&image, Some(CYCLONEDX_MEDIA_TYPE)))
        .expect("the referrers can be listed")
        .manifests
}

/// The one blob of the artifact `referrer` (`registry/repository@digest`), checked to be a
/// CycloneDX document.
fn sbom_blob(referrer: &str) -> Vec<u8> {
    let referrer = oci_client::Reference::from_str(referrer).unwrap();
    block_on(async {
        let client = client();
        let (manifest, _) = client
            .pull_manifest(&referrer, &RegistryAuth::Anonymous)
            .await
            .expect("the referrer's manifest");
        let OciManifest::Image(manifest) = manifest else {
            panic!("the referrer is an image index: {manifest:?}")
        };
        assert_eq!(
            manifest.artifact_type.as_deref(),
            Some(CYCLONEDX_MEDIA_TYPE)
        );
        assert_eq!(manifest.layers.len(), 1, "{manifest:?}");
        assert_eq!(manifest.layers[0].media_type, CYCLONEDX_MEDIA_TYPE);
        let mut blob = Vec::new();
        client
            .pull_blob(&referrer, &manifest.layers[0], &mut blob)
            .await
            .expect("the SBOM blob");
        blob
    })
}

/// Checks that the image `{prefix}/{binary}@{digest}` has exactly one SBOM referrer, whose
/// blob is the SBOM shipped beside the archive in `out`; returns the referrer's digest.
fn check_one_sbom(prefix: &str, binary: &str, digest: &str, out: &Path) -> String {
    let referrers = sbom_referrers(&format!("{prefix}/{binary}@{digest}"));
    assert_eq!(referrers.len(), 1, "{binary}: {referrers:?}");
    let shipped = std::fs::read(out.join(format!("{binary}-{VERSION}.cdx.json"))).unwrap();
    assert!(
        sbom_blob(&format!("{prefix}/{binary}@{}", referrers[0].digest)) == shipped,
        "{binary}: the SBOM referrer's blob is not the SBOM beside the archive"
    );
    referrers[0].digest.clone()
}

#[test]
fn release_push_stores_the_exact_images_and_pins_them_by_digest() {
    if std::env::var_os("XTASK_SKIP_IMAGES").is_some() {
        eprintln!("XTASK_SKIP_IMAGES is set: push test skipped");
        return;
    }
    if !realcluster::go_or_skip("release_push_stores_the_exact_images_and_pins_them_by_digest") {
        return;
    }
    let registry = start_registry();
    let prefix = format!("{}/agent-sandbox", registry.address);
    let out = tempfile::tempdir().unwrap();
    let root = workspace_root();
    let stdout = release_push(&prefix, out.path());
    let combined = read(out.path(), "sandbox-with-extensions.yaml");
    let revision = git_revision(&root).unwrap();
    let mut pushed = Vec::new();
    for binary in ["sandbox-controller", "extensions-controller"] {
        let reference = format!("{prefix}/{binary}:{VERSION}");
        let digest = skopeo_digest(&reference);
        assert!(digest.starts_with("sha256:"), "{digest}");
        assert!(
            stdout.contains(&format!("pushed {reference}@{digest}")),
            "{stdout}"
        );
        // The registry holds the archive's manifest, byte for byte.
        let archive = out.path().join(format!("{binary}-{VERSION}.oci.tar"));
        let local = Command::new("skopeo")
            .args(["inspect", "--format", "{{.Digest}}"])
            .arg(format!("oci-archive:{}:{VERSION}", archive.display()))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&local.stdout).trim(), digest);
        // The manifests pin tag and digest.
        assert!(
            combined.contains(&format!("image: {reference}@{digest}\n")),
            "{binary} pinned in sandbox-with-extensions.yaml"
        );
        // The SBOM is attached as the image's one referrer...
        let referrer = check_one_sbom(&prefix, binary, &digest, out.path());
        // ...which this registry (no referrers API) lists in the referrers tag schema's index,
        // as another client (skopeo) reads it.
        let index = Command::new("skopeo")
            .args(["inspect", "--tls-verify=false", "--raw"])
            .arg(format!(
                "docker://{prefix}/{binary}:{}",
                referrers_tag(&digest)
            ))
            .output()
            .unwrap();
        assert!(
            index.status.success(),
            "{}",
            String::from_utf8_lossy(&index.stderr)
        );
        let index: serde_json::Value = serde_json::from_slice(&index.stdout).unwrap();
        assert_eq!(
            index["mediaType"],
            "application/vnd.oci.image.index.v1+json"
        );
        assert_eq!(
            index["manifests"][0]["digest"],
            referrer.as_str(),
            "{index}"
        );
        assert_eq!(index["manifests"][0]["artifactType"], CYCLONEDX_MEDIA_TYPE);
        let labels = Command::new("skopeo")
            .args([
                "inspect",
                "--tls-verify=false",
                "--format",
                "{{index .Labels \"org.opencontainers.image.revision\"}}",
            ])
            .arg(format!("docker://{reference}"))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&labels.stdout).trim(), revision);
        pushed.push((binary, digest, referrer));
    }
    // The chart's values carry the digests too.
    let chart = out.path().join("agent-sandbox-1.2.3.tgz");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&chart).unwrap(),
    ));
    let mut values = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_string_lossy() == "agent-sandbox/values.yaml" {
            std::io::Read::read_to_string(&mut entry, &mut values).unwrap();
        }
    }
    assert_eq!(values.matches("digest: \"sha256:").count(), 2, "{values}");
    assert!(values.contains(&format!("registry: {prefix}\n")));

    // The same release pushed again: the same images, still one SBOM referrer each.
    let again = tempfile::tempdir().unwrap();
    release_push(&prefix, again.path());
    for (binary, digest, referrer) in pushed {
        assert_eq!(
            skopeo_digest(&format!("{prefix}/{binary}:{VERSION}")),
            digest
        );
        assert_eq!(
            check_one_sbom(&prefix, binary, &digest, again.path()),
            referrer,
            "{binary}"
        );
    }
}
