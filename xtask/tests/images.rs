//! The controller images as a user gets them from `cargo xtask release`, checked with tools
//! that share no code with ours: `skopeo` and `umoci` (Debian packages) read the archives, and
//! the unpacked root file system runs each binary as UID/GID 65532 with the root mounted
//! read-only (`unshare` + `chroot`, as root).
//!
//! The first test to run builds both images (a release build of both controllers for
//! x86_64-unknown-linux-musl; `cargo xtask release` adds that target with rustup when it is
//! missing). Needs root, `skopeo`, `umoci`, `unshare`, `chroot` and binutils, which `.ci/run`
//! installs; `XTASK_SKIP_IMAGES=1` skips these tests on a machine without them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use xtask::image::oci::annotation;
use xtask::image::{
    BuiltImage, COMPRESSED_BUDGET, CONTROLLERS, ImageSettings, UNCOMPRESSED_BUDGET, build_images,
    git_revision, source_date_epoch,
};
use xtask::workspace::workspace_root;

const VERSION: &str = "v1.2.3";

fn skipped() -> bool {
    if std::env::var_os("XTASK_SKIP_IMAGES").is_some() {
        eprintln!("XTASK_SKIP_IMAGES is set: image tests skipped");
        return true;
    }
    false
}

/// The settings `cargo xtask release` would use in this checkout (the revision and the time
/// also reach the binaries' build info, so any other value would rebuild them).
fn settings() -> ImageSettings {
    let workspace = workspace_root();
    ImageSettings {
        profile: "release".to_string(),
        version: VERSION.to_string(),
        registry: "registry.test/agent-sandbox".to_string(),
        revision: git_revision(&workspace).unwrap(),
        source_date_epoch: source_date_epoch(&workspace).unwrap(),
        workspace,
    }
}

/// The images' `created` time, RFC 3339.
fn created() -> String {
    let seconds = i64::try_from(settings().source_date_epoch).unwrap();
    jiff::Timestamp::from_second(seconds).unwrap().to_string()
}

/// A directory under target/ for this test binary's outputs (removed when it is dropped).
fn scratch(name: &str) -> tempfile::TempDir {
    let base = workspace_root().join("target").join("image-tests");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new()
        .prefix(name)
        .tempdir_in(base)
        .unwrap()
}

struct Built {
    _dir: tempfile::TempDir,
    images: Vec<BuiltImage>,
}

/// Both images, built once per test binary.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = scratch("first");
        let images = build_images(&settings(), dir.path()).expect("images build");
        Built { _dir: dir, images }
    })
}

fn run(command: &mut Command) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?}: {e} (see the doc of tests/images.rs)"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn the_same_inputs_give_the_same_archives_and_digests() {
    if skipped() {
        return;
    }
    let first = built();
    let dir = scratch("second");
    let second = build_images(&settings(), dir.path()).expect("second build");
    for (a, b) in first.images.iter().zip(&second) {
        assert_eq!(
            a.image.manifest_digest, b.image.manifest_digest,
            "{}",
            a.binary
        );
        assert_eq!(
            std::fs::read(&a.archive).unwrap(),
            std::fs::read(&b.archive).unwrap(),
            "{} archive bytes",
            a.binary
        );
        assert_eq!(
            std::fs::read(&a.sbom).unwrap(),
            std::fs::read(&b.sbom).unwrap(),
            "{} SBOM bytes",
            a.binary
        );
    }
    // The base layer is shared: one blob for both images.
    assert_eq!(
        first.images[0].image.layers[0].digest,
        first.images[1].image.layers[0].digest
    );
}

#[test]
fn skopeo_reads_each_archive_as_a_non_root_linux_amd64_image_with_its_annotations() {
    if skipped() {
        return;
    }
    for image in &built().images {
        let location = format!("oci-archive:{}:{VERSION}", image.archive.display());
        let inspect = json(&run(Command::new("skopeo").args(["inspect", &location])));
        assert_eq!(
            inspect["Digest"], image.image.manifest_digest,
            "{}",
            image.binary
        );
        assert_eq!(inspect["Architecture"], "amd64");
        assert_eq!(inspect["Os"], "linux");
        let labels = &inspect["Labels"];
        assert_eq!(labels[annotation::VERSION], VERSION);
        assert_eq!(labels[annotation::REVISION], settings().revision);
        assert_eq!(labels[annotation::CREATED], created());
        assert_eq!(labels[annotation::LICENSES], "Apache-2.0");
        assert!(
            labels[annotation::SOURCE]
                .as_str()
                .unwrap()
                .starts_with("https://")
        );
        let raw = json(&run(
            Command::new("skopeo").args(["inspect", "--raw", &location])
        ));
        for key in [
            annotation::SOURCE,
            annotation::VERSION,
            annotation::REVISION,
            annotation::LICENSES,
            annotation::CREATED,
        ] {
            assert!(
                raw["annotations"][key].is_string(),
                "manifest annotation {key}"
            );
        }
        let config = json(&run(
            Command::new("skopeo").args(["inspect", "--config", &location])
        ));
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(
            config["config"]["Entrypoint"],
            serde_json::json!([format!("/{}", image.binary)])
        );
        assert_eq!(config["created"], created());
    }
}

/// Extracts an OCI archive into a layout directory.
fn extract(archive: &Path, into: &Path) {
    let file = std::fs::File::open(archive).unwrap();
    tar::Archive::new(file).unpack(into).unwrap();
}

/// Every path of a root file system, relative, with its owner.
fn walk(root: &Path) -> Vec<(PathBuf, u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push((
                path.strip_prefix(root).unwrap().to_path_buf(),
                meta.uid(),
                meta.gid(),
            ));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn umoci_unpacks_each_image_and_its_binary_runs_as_65532_on_a_read_only_root() {
    if skipped() {
        return;
    }
    for image in &built().images {
        let work = scratch("unpack");
        let layout = work.path().join("layout");
        extract(&image.archive, &layout);
        let bundle = work.path().join("bundle");
        run(Command::new("umoci").args([
            "unpack",
            "--image",
            &format!("{}:{VERSION}", layout.display()),
            bundle.to_str().unwrap(),
        ]));
        let rootfs = bundle.join("rootfs");
        let files: BTreeSet<String> = walk(&rootfs)
            .iter()
            .map(|(path, _, _)| path.to_string_lossy().into_owned())
            .collect();
        for shell in ["bin/sh", "bin/bash", "bin/busybox", "usr/bin/sh"] {
            assert!(
                !files.contains(shell),
                "{}: {shell} in the image",
                image.binary
            );
        }
        assert!(files.contains(&image.binary), "{files:?}");
        assert!(files.contains("etc/ssl/certs/ca-certificates.crt"));

        // umoci's runtime config says who runs it.
        let config = json(&std::fs::read_to_string(bundle.join("config.json")).unwrap());
        assert_eq!(config["process"]["user"]["uid"], 65532);
        assert_eq!(config["process"]["user"]["gid"], 65532);

        // In a mount namespace of its own: bind the root file system onto itself read-only,
        // show that it refuses a write, and run the binary there as 65532:65532.
        let script = format!(
            "set -e\n\
             mount --bind \"$1\" \"$1\"\n\
             mount -o remount,bind,ro \"$1\"\n\
             if touch \"$1/probe\" 2>/dev/null; then echo 'root is writable' >&2; exit 9; fi\n\
             exec chroot --userspec=65532:65532 \"$1\" /{} --version",
            image.binary
        );
        // Mount namespaces and chroot need root (CI runs as root; elsewhere sudo -n).
        let mut command = if rustix::process::geteuid().is_root() {
            Command::new("unshare")
        } else {
            let mut sudo = Command::new("sudo");
            sudo.args(["-n", "unshare"]);
            sudo
        };
        let output = run(command.args([
            "--mount",
            "--propagation",
            "private",
            "--fork",
            "sh",
            "-c",
            &script,
            "sh",
            rootfs.to_str().unwrap(),
        ]));
        assert_eq!(
            output.trim(),
            format!("{} {}", image.binary, env!("CARGO_PKG_VERSION")),
            "{}",
            image.binary
        );
    }
}

fn sections(binary: &[u8], work: &Path) -> String {
    let path = work.join("binary");
    std::fs::write(&path, binary).unwrap();
    run(Command::new("readelf")
        .args(["--section-headers", "--wide"])
        .arg(&path))
}

#[test]
fn binaries_are_stripped_and_their_debug_information_is_beside_the_archive() {
    if skipped() {
        return;
    }
    for image in &built().images {
        let work = scratch("elf");
        let binary = binary_in_image(image);
        let in_image = sections(&binary, work.path());
        assert!(!in_image.contains(".debug_info"), "{in_image}");
        assert!(!in_image.contains(".debug_line"), "{in_image}");
        assert!(in_image.contains(".gnu_debuglink"), "{in_image}");
        let beside = run(Command::new("readelf")
            .args(["--section-headers", "--wide"])
            .arg(&image.debug));
        assert!(beside.contains(".debug_line"), "{beside}");
        // Static: no interpreter, no shared library.
        let headers = run(Command::new("readelf")
            .args(["--program-headers", "--dynamic"])
            .arg(work.path().join("binary")));
        assert!(!headers.contains("INTERP"), "{headers}");
        assert!(!headers.contains("(NEEDED)"), "{headers}");
    }
}

#[test]
fn each_image_fits_its_size_budget() {
    if skipped() {
        return;
    }
    for image in &built().images {
        let compressed = image.image.compressed_size();
        let unpacked = image.image.uncompressed_size();
        eprintln!(
            "{}: {compressed} bytes compressed, {unpacked} unpacked",
            image.binary
        );
        assert!(
            compressed <= COMPRESSED_BUDGET,
            "{}: {compressed}",
            image.binary
        );
        assert!(
            unpacked <= UNCOMPRESSED_BUDGET,
            "{}: {unpacked}",
            image.binary
        );
        // And the budget is not slack enough to hide the debug information.
        let debug = std::fs::metadata(&image.debug).unwrap().len();
        assert!(
            unpacked + debug > UNCOMPRESSED_BUDGET,
            "{}: the budget would not notice the debug information ({debug} bytes)",
            image.binary
        );
    }
}

/// `name@version` of every crate `cargo tree` lists for the binary's package (normal
/// dependencies for the image target, without the proc-macros, which run at build time).
fn cargo_tree(package: &str) -> BTreeSet<String> {
    xtask::image::sbom::target_crates(&workspace_root(), package).expect("cargo tree runs")
}

fn tokio_version(components: &[serde_json::Value]) -> String {
    components
        .iter()
        .find(|c| c["name"] == "tokio")
        .and_then(|c| c["version"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The binary of an image, read from its layer.
fn binary_in_image(image: &BuiltImage) -> Vec<u8> {
    let layer = &image.image.layers[1];
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(layer.gzip.as_slice()));
    let mut binary = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_string_lossy() == image.binary {
            std::io::Read::read_to_end(&mut entry, &mut binary).unwrap();
        }
    }
    assert!(!binary.is_empty(), "{} not in its layer", image.binary);
    binary
}

/// `name@version` of every registry crate whose source path the binary carries (panic
/// locations, remapped to `/cargo/registry/src/<index>/<name>-<version>/`): crates that are
/// certainly in it, found without Cargo.
fn crates_named_in(binary: &[u8]) -> BTreeSet<String> {
    let marker = b"/cargo/registry/src/";
    let mut found = BTreeSet::new();
    let mut rest = binary;
    while let Some(at) = rest.windows(marker.len()).position(|w| w == marker) {
        rest = &rest[at + marker.len()..];
        let path: Vec<u8> = rest
            .iter()
            .take_while(|b| b.is_ascii_graphic())
            .copied()
            .collect();
        let path = String::from_utf8_lossy(&path);
        let Some(dir) = path.split('/').nth(1) else {
            continue;
        };
        // `<name>-<version>`: the version is the first `-`-suffix that is a semver version.
        for (index, _) in dir.match_indices('-') {
            if let Ok(version) = semver::Version::parse(&dir[index + 1..]) {
                found.insert(format!("{}@{version}", &dir[..index]));
                break;
            }
        }
    }
    found
}

#[test]
fn each_sbom_lists_exactly_its_binarys_crates_and_the_base() {
    if skipped() {
        return;
    }
    for (image, (binary, _)) in built().images.iter().zip(CONTROLLERS) {
        let sbom = json(&std::fs::read_to_string(&image.sbom).unwrap());
        assert_eq!(sbom["bomFormat"], "CycloneDX");
        assert_eq!(sbom["specVersion"], "1.5");
        assert_eq!(sbom["metadata"]["component"]["name"], binary);
        assert_eq!(sbom["metadata"]["timestamp"], created());
        let components = sbom["components"].as_array().unwrap();
        let mut listed: BTreeSet<String> = components
            .iter()
            .filter(|c| {
                c["purl"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("pkg:cargo/"))
            })
            .filter(|c| {
                c["bom-ref"]
                    .as_str()
                    .is_some_and(|r| !r.starts_with("base:"))
            })
            .map(|c| {
                format!(
                    "{}@{}",
                    c["name"].as_str().unwrap(),
                    c["version"].as_str().unwrap()
                )
            })
            .collect();
        listed.insert(format!("{binary}@{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(listed, cargo_tree(binary), "{binary}");
        // Every crate the binary itself names is listed (an independent check of the above).
        let named = crates_named_in(&binary_in_image(image));
        assert!(
            named.len() > 50 && named.contains(&format!("tokio@{}", tokio_version(components))),
            "{binary}: {named:?}"
        );
        let unlisted: Vec<&String> = named.difference(&listed).collect();
        assert!(
            unlisted.is_empty(),
            "{binary}: in the binary, not in its SBOM: {unlisted:?}"
        );
        // Proc-macros run at build time and are not in it.
        assert!(
            !listed.iter().any(|c| c.starts_with("serde_derive@")),
            "{listed:?}"
        );
        let tokio = components
            .iter()
            .find(|c| c["name"] == "tokio")
            .expect("tokio is listed");
        assert_eq!(tokio["licenses"][0]["expression"], "MIT");
        assert_eq!(tokio["hashes"][0]["alg"], "SHA-256");
        assert!(
            components.iter().any(|c| c["bom-ref"]
                .as_str()
                .is_some_and(|r| r.starts_with("base:webpki-root-certs@"))),
            "the CA certificates of the base are listed"
        );
    }
}
