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
    /// Its standard input held open until this process exits: see [`remove_after_exit`].
    _remover: std::process::Child,
    images: Vec<BuiltImage>,
}

/// Starts a process that removes `dir` once this test binary has exited, however it ends:
/// it waits for the end of a pipe whose writing end only this process holds (the kernel closes
/// it at exit, a crash or a kill included), then removes `dir`. The shared build lives in a
/// `static`, which Rust never drops, so its `TempDir` alone left both images, their SBOMs and
/// their debug files (about 500 MB) under target/image-tests after every run. The remover has a
/// process group of its own, so the Ctrl-C that interrupts `cargo test` does not stop it.
fn remove_after_exit(dir: &Path) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args([
            "-c",
            "cat >/dev/null; rm -rf -- \"$1\"",
            "remove-image-tests",
        ])
        .arg(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("sh starts")
}

/// Both images, built once per test binary (removed when it exits).
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = scratch("first");
        let remover = remove_after_exit(dir.path());
        let images = build_images(&settings(), dir.path()).expect("images build");
        Built {
            _dir: dir,
            _remover: remover,
            images,
        }
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

/// What [`a_run_leaves_no_build_output_behind`] starts in a child test process: a directory
/// handed to [`remove_after_exit`], then (named in `PROBE_READY`) a file saying so, then it
/// waits for its standard input to end.
#[test]
#[ignore = "a helper of a_run_leaves_no_build_output_behind, which runs it in a child process"]
fn remover_probe() {
    let dir = std::path::PathBuf::from(std::env::var_os("PROBE_DIR").expect("PROBE_DIR"));
    // Not waited for: it ends only after this process does, which is the point.
    #[allow(clippy::zombie_processes)]
    let _remover = remove_after_exit(&dir);
    std::fs::write(
        std::env::var_os("PROBE_READY").expect("PROBE_READY"),
        "ready",
    )
    .unwrap();
    std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new()).unwrap();
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what} within 30 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The shared build output is removed when the test binary ends, whether it exits or is killed
/// (a `static` is never dropped: it used to stay under target/image-tests, about 500 MB a run).
#[test]
fn a_run_leaves_no_build_output_behind() {
    for killed in [false, true] {
        let dir = scratch("probe");
        std::fs::write(dir.path().join("image.oci.tar"), "bytes").unwrap();
        let ready = dir.path().with_extension("ready");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["remover_probe", "--exact", "--ignored", "--nocapture"])
            .env("PROBE_DIR", dir.path())
            .env("PROBE_READY", &ready)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_until("the probe ready", || ready.exists());
        assert!(dir.path().exists());
        if killed {
            child.kill().unwrap();
        } else {
            drop(child.stdin.take());
        }
        let status = child.wait().unwrap();
        assert_eq!(status.success(), !killed, "{status}");
        wait_until(
            &format!("{} removed (killed: {killed})", dir.path().display()),
            || !dir.path().exists(),
        );
        std::fs::remove_file(&ready).unwrap();
    }
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

/// A `git worktree` of HEAD in a scratch directory, removed (with its build) when dropped.
struct Checkout {
    dir: tempfile::TempDir,
}

impl Checkout {
    fn path(&self) -> PathBuf {
        self.dir.path().join("agent-sandbox")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let _ = Command::new("git")
            .current_dir(workspace_root())
            .args(["worktree", "remove", "--force"])
            .arg(self.path())
            .status();
    }
}

/// The reproducibility the test above checks, across checkouts: HEAD checked out at another
/// path and built there with its own target directory (so nothing Cargo cached here is
/// reused) gives the same archives, digests and SBOMs as this checkout.
///
/// Ignored because it builds both controllers from nothing (a full release build for musl,
/// 9 minutes with the images here on 2 cores), which would add that to CI. Run by hand before
/// a release (docs/release.md, "Reproducible") with
/// `cargo test -p xtask --test images -- --ignored --exact
/// a_checkout_at_another_path_gives_the_same_archives_and_digests` from a clean work tree
/// (committed changes only: the other checkout is HEAD) and without `CARGO_TARGET_DIR`; commit
/// nothing while it runs (the revision is in the binaries).
#[test]
#[ignore = "tracking: run by hand before a release (docs/release.md); a full second release build, too slow for CI"]
fn a_checkout_at_another_path_gives_the_same_archives_and_digests() {
    if skipped() {
        return;
    }
    let here = settings();
    assert!(
        !here.revision.ends_with("-dirty"),
        "commit first: the other checkout is HEAD, this work tree has changes"
    );
    assert!(
        std::env::var_os("CARGO_TARGET_DIR").is_none(),
        "unset CARGO_TARGET_DIR: each checkout must build into its own target/"
    );
    let checkout = Checkout {
        dir: scratch("checkout"),
    };
    run(Command::new("git")
        .current_dir(&here.workspace)
        .args(["worktree", "add", "--detach"])
        .arg(checkout.path())
        .arg("HEAD"));
    let there = ImageSettings {
        workspace: checkout.path(),
        ..settings()
    };
    assert_eq!(git_revision(&there.workspace).unwrap(), here.revision);
    let out = scratch("checkout-out");
    let theirs = build_images(&there, out.path()).expect("the other checkout builds");
    // The revision is in the binaries: a commit or an edit while the other checkout built
    // would make the two builds differ by it, not by their path (it happened once).
    assert_eq!(
        settings().revision,
        here.revision,
        "HEAD or the work tree changed during the run; commit nothing while this test runs"
    );
    for (ours, theirs) in built().images.iter().zip(&theirs) {
        assert_eq!(
            ours.image.manifest_digest,
            theirs.image.manifest_digest,
            "{}: {} here, {} in {}",
            ours.binary,
            ours.image.manifest_digest,
            theirs.image.manifest_digest,
            there.workspace.display()
        );
        for (a, b) in [(&ours.archive, &theirs.archive), (&ours.sbom, &theirs.sbom)] {
            assert!(
                std::fs::read(a).unwrap() == std::fs::read(b).unwrap(),
                "{} and {} differ",
                a.display(),
                b.display()
            );
        }
    }
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
