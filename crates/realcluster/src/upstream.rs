//! The upstream binaries: which releases (read from `upstream/go.mod`, the one place they are
//! pinned), where the built binaries are cached, and `go build` when they are missing.
//!
//! The cache is per user, shared by every checkout, and keyed by the pinned versions: its
//! directory is `<cache root>/k8s-<v>_etcd-<v>_kwok-<v>-<hash>`, where the hash covers
//! `go.mod`, `go.sum`, the Go version and [`RECIPE`], so editing a version (or the build flags)
//! builds again while the Go build cache (`GOCACHE`) keeps the rebuild of unchanged packages quick.
//! A lock file serializes concurrent first starts (tests and other checkouts start clusters at
//! the same time); binaries are written under a temporary name and renamed when complete.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Progress;
use crate::error::Error;

/// Environment variable that overrides the cache root
/// (default `$XDG_CACHE_HOME/agent-sandbox/upstream`, else `~/.cache/agent-sandbox/upstream`).
pub const CACHE_ENV: &str = "AGENT_SANDBOX_UPSTREAM_CACHE";

/// How the binaries are built; part of the cache key, so changing it rebuilds.
pub const RECIPE: &str = "go build -trimpath -ldflags=-s -w +version stamps; v1";

/// The module paths whose versions `upstream/go.mod` pins.
const KUBERNETES_MODULE: &str = "k8s.io/kubernetes";
const ETCD_MODULE: &str = "go.etcd.io/etcd/server/v3";
const KWOK_MODULE: &str = "sigs.k8s.io/kwok";

/// One upstream program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Component {
    Etcd,
    KubeApiserver,
    KubeControllerManager,
    KubeScheduler,
    Kwok,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: [Component; 5] = [
        Component::Etcd,
        Component::KubeApiserver,
        Component::KubeControllerManager,
        Component::KubeScheduler,
        Component::Kwok,
    ];

    /// The program's name (also its binary's file name and its log's).
    pub fn name(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::KubeApiserver => "kube-apiserver",
            Component::KubeControllerManager => "kube-controller-manager",
            Component::KubeScheduler => "kube-scheduler",
            Component::Kwok => "kwok",
        }
    }

    /// The Go package `go build` compiles (listed in go.mod's `tool` block).
    pub fn package(self) -> &'static str {
        match self {
            Component::Etcd => "go.etcd.io/etcd/server/v3",
            Component::KubeApiserver => "k8s.io/kubernetes/cmd/kube-apiserver",
            Component::KubeControllerManager => "k8s.io/kubernetes/cmd/kube-controller-manager",
            Component::KubeScheduler => "k8s.io/kubernetes/cmd/kube-scheduler",
            Component::Kwok => "sigs.k8s.io/kwok/cmd/kwok",
        }
    }

    /// The release of this component in `versions`.
    pub fn version(self, versions: &Versions) -> &str {
        match self {
            Component::Etcd => &versions.etcd,
            Component::Kwok => &versions.kwok,
            _ => &versions.kubernetes,
        }
    }

    /// `-ldflags` stamps so `--version` and the API server's `/version` report the release
    /// instead of `v0.0.0-master` (kubectl and client version-skew checks read it).
    fn version_ldflags(self, versions: &Versions) -> Vec<String> {
        match self {
            // etcd's version is a constant of its module; kwok's is not read by anything here.
            Component::Etcd | Component::Kwok => Vec::new(),
            _ => {
                let v = &versions.kubernetes;
                let (major, minor) = major_minor(v);
                [
                    "k8s.io/component-base/version",
                    "k8s.io/client-go/pkg/version",
                ]
                .iter()
                .flat_map(|pkg| {
                    [
                        format!("-X {pkg}.gitVersion={v}"),
                        format!("-X {pkg}.gitMajor={major}"),
                        format!("-X {pkg}.gitMinor={minor}"),
                        format!("-X {pkg}.gitTreeState=clean"),
                    ]
                })
                .collect()
            }
        }
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `("1", "36")` of `v1.36.3`.
fn major_minor(version: &str) -> (String, String) {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or_default().to_owned();
    let minor = parts.next().unwrap_or_default().to_owned();
    (major, minor)
}

/// The pinned releases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versions {
    /// `k8s.io/kubernetes` (kube-apiserver, kube-controller-manager, kube-scheduler).
    pub kubernetes: String,
    /// `go.etcd.io/etcd/server/v3`.
    pub etcd: String,
    /// `sigs.k8s.io/kwok`.
    pub kwok: String,
}

impl Versions {
    /// Reads the versions from the text of a go.mod (`module version` in a require).
    pub fn from_go_mod(text: &str) -> Result<Versions, Error> {
        let find = |module: &str| {
            text.lines()
                .filter_map(|line| {
                    let line = line.trim().trim_start_matches("require").trim();
                    let mut words = line.split_whitespace();
                    (words.next() == Some(module)).then(|| words.next())?
                })
                .find(|version| version.starts_with('v'))
                .map(str::to_owned)
                .ok_or_else(|| Error::GoMod {
                    message: format!("no `require {module} <version>` line"),
                })
        };
        Ok(Versions {
            kubernetes: find(KUBERNETES_MODULE)?,
            etcd: find(ETCD_MODULE)?,
            kwok: find(KWOK_MODULE)?,
        })
    }
}

impl std::fmt::Display for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Kubernetes {}, etcd {}, kwok {}",
            self.kubernetes, self.etcd, self.kwok
        )
    }
}

/// The Go module that pins the versions: `upstream/` at the repository root.
pub fn module_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
        .join("upstream")
}

/// The built binaries of one set of pinned versions.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
    versions: Versions,
}

impl Binaries {
    /// The binary of `component`.
    pub fn path(&self, component: Component) -> PathBuf {
        self.dir.join(component.name())
    }

    /// The directory holding them.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The releases they were built from.
    pub fn versions(&self) -> &Versions {
        &self.versions
    }
}

/// The root of the per-user cache (see [`CACHE_ENV`]).
pub fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|home| PathBuf::from(home).join(".cache"))
        })
        .ok_or(Error::NoCacheDir)?;
    Ok(base.join("agent-sandbox").join("upstream"))
}

/// The `go` command's view of the toolchain, checked before anything is built.
#[derive(Debug, Clone)]
pub struct GoEnv {
    /// e.g. `go1.26.8`.
    pub version: String,
    /// e.g. `linux/amd64`.
    pub platform: String,
}

/// Runs `go env` to check Go is installed and the module proxy is not turned off.
pub fn go_env() -> Result<GoEnv, Error> {
    let output = Command::new("go")
        .args(["env", "GOVERSION", "GOOS", "GOARCH", "GOPROXY"])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::GoMissing { source })?;
    if !output.status.success() {
        return Err(Error::GoFailed {
            action: "go env".to_owned(),
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let [version, os, arch, proxy] = lines[..] else {
        return Err(Error::GoFailed {
            action: "go env".to_owned(),
            status: output.status.to_string(),
            output: text.into_owned(),
        });
    };
    if proxy == "off" {
        return Err(Error::ProxyOff);
    }
    Ok(GoEnv {
        version: version.to_owned(),
        platform: format!("{os}/{arch}"),
    })
}

/// What decides the cache directory.
#[derive(Debug, Clone)]
pub struct CacheKey {
    pub versions: Versions,
    /// Hex SHA-256 over go.mod, go.sum, the Go version, the platform and [`RECIPE`].
    pub hash: String,
}

impl CacheKey {
    /// The key of the module in `module_dir` built with `go`.
    pub fn of(module_dir: &Path, go: &GoEnv) -> Result<CacheKey, Error> {
        let go_mod = read(&module_dir.join("go.mod"))?;
        let go_sum = read(&module_dir.join("go.sum"))?;
        let versions = Versions::from_go_mod(&String::from_utf8_lossy(&go_mod))?;
        let mut context = ring::digest::Context::new(&ring::digest::SHA256);
        for part in [
            &go_mod[..],
            &go_sum[..],
            go.version.as_bytes(),
            go.platform.as_bytes(),
            RECIPE.as_bytes(),
        ] {
            context.update(&(part.len() as u64).to_le_bytes());
            context.update(part);
        }
        let hash = context
            .finish()
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(CacheKey { versions, hash })
    }

    /// The directory name under the cache root.
    pub fn dir_name(&self) -> String {
        format!(
            "k8s-{}_etcd-{}_kwok-{}-{}",
            self.versions.kubernetes,
            self.versions.etcd,
            self.versions.kwok,
            &self.hash[..12]
        )
    }
}

fn read(path: &Path) -> Result<Vec<u8>, Error> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|mut file| file.read_to_end(&mut bytes))
        .map_err(|source| Error::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        })?;
    Ok(bytes)
}

/// Returns the cached binaries of the pinned versions, building the missing ones first with
/// `go build` (blocking; minutes on a cold Go cache, which `progress` says).
pub fn ensure_built(progress: &Progress) -> Result<Binaries, Error> {
    let module = module_dir();
    let go = go_env()?;
    let key = CacheKey::of(&module, &go)?;
    let root = cache_root()?;
    let dir = root.join(key.dir_name());
    let bin = dir.join("bin");
    let binaries = Binaries {
        dir: bin.clone(),
        versions: key.versions.clone(),
    };
    if Component::ALL.iter().all(|c| binaries.path(*c).is_file()) {
        return Ok(binaries);
    }
    create_dir(&bin)?;
    let lock_path = dir.join("build.lock");
    let lock = File::create(&lock_path).map_err(|source| Error::Io {
        action: "create",
        path: lock_path.clone(),
        source,
    })?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            progress(&format!(
                "waiting for another process to finish building the upstream components \
                 (lock {})",
                lock_path.display()
            ));
            lock.lock().map_err(|source| Error::Io {
                action: "lock",
                path: lock_path.clone(),
                source,
            })?;
        }
        Err(std::fs::TryLockError::Error(source)) => {
            return Err(Error::Io {
                action: "lock",
                path: lock_path,
                source,
            });
        }
    }
    let missing: Vec<Component> = Component::ALL
        .into_iter()
        .filter(|c| !binaries.path(*c).is_file())
        .collect();
    if !missing.is_empty() {
        progress(&format!(
            "building {} from the Go module proxy with {} into {} (first time only: \
             minutes on a cold Go cache)",
            key.versions,
            go.version,
            bin.display()
        ));
    }
    for component in missing {
        build_one(&module, &binaries, component, progress)?;
    }
    // The lock is released when `lock` is dropped.
    Ok(binaries)
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        action: "create directory",
        path: dir.to_path_buf(),
        source,
    })
}

/// How often a long `go build` reports that it is still running.
const PROGRESS_EVERY: Duration = Duration::from_secs(30);

fn build_one(
    module: &Path,
    binaries: &Binaries,
    component: Component,
    progress: &Progress,
) -> Result<(), Error> {
    let target = binaries.path(component);
    let partial = target.with_extension("partial");
    let mut ldflags = vec!["-s".to_owned(), "-w".to_owned()];
    ldflags.extend(component.version_ldflags(&binaries.versions));
    progress(&format!(
        "compiling {component} {} (go build {})",
        component.version(&binaries.versions),
        component.package()
    ));
    let started = Instant::now();
    let mut child = Command::new("go")
        .current_dir(module)
        .args(["build", "-trimpath", "-mod=readonly"])
        .arg(format!("-ldflags={}", ldflags.join(" ")))
        .arg("-o")
        .arg(&partial)
        .arg(component.package())
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|source| Error::GoMissing { source })?;
    let mut reported = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(source) => {
                return Err(Error::Io {
                    action: "wait for go build of",
                    path: PathBuf::from(component.package()),
                    source,
                });
            }
        }
        if reported.elapsed() >= PROGRESS_EVERY {
            progress(&format!(
                "    still compiling {component} ({}s)",
                started.elapsed().as_secs()
            ));
            reported = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(Error::GoFailed {
            action: format!("go build {}", component.package()),
            status: status.to_string(),
            output: "its output is above".to_owned(),
        });
    }
    std::fs::rename(&partial, &target).map_err(|source| Error::Io {
        action: "rename into place",
        path: target.clone(),
        source,
    })?;
    progress(&format!(
        "    {component} built in {}s",
        started.elapsed().as_secs()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_come_from_the_require_lines() {
        let text = "module x\n\ngo 1.26.0\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 v3.6.16 // indirect\n\
                    \tk8s.io/kubernetes v1.36.3\n)\n\nrequire sigs.k8s.io/kwok v0.8.0\n\n\
                    replace k8s.io/api => k8s.io/api v0.36.3\n";
        let versions = Versions::from_go_mod(text).unwrap();
        assert_eq!(
            versions,
            Versions {
                kubernetes: "v1.36.3".into(),
                etcd: "v3.6.16".into(),
                kwok: "v0.8.0".into(),
            }
        );
    }

    #[test]
    fn a_missing_module_is_named() {
        let error = Versions::from_go_mod("module x\nrequire k8s.io/kubernetes v1.36.3\n")
            .unwrap_err()
            .to_string();
        assert!(error.contains("go.etcd.io/etcd/server/v3"), "{error}");
    }

    #[test]
    fn the_committed_go_mod_pins_the_kubernetes_minor_of_k8s_openapi() {
        let text = std::fs::read_to_string(module_dir().join("go.mod")).unwrap();
        let versions = Versions::from_go_mod(&text).unwrap();
        // k8s-openapi's `v1_36` feature (workspace Cargo.toml) and the staging modules.
        assert!(versions.kubernetes.starts_with("v1.36."), "{versions}");
        let staging = format!("v0.{}", versions.kubernetes.trim_start_matches("v1."));
        let replaces: Vec<&str> = text.lines().filter(|l| l.contains(" => k8s.io/")).collect();
        assert!(replaces.len() > 20, "{replaces:?}");
        for line in replaces {
            assert!(
                line.trim_end().ends_with(&staging),
                "{line} is not {staging}"
            );
        }
    }

    #[test]
    fn the_key_changes_with_go_mod() {
        let dir = tempfile::tempdir().unwrap();
        let go = GoEnv {
            version: "go1.26.8".into(),
            platform: "linux/amd64".into(),
        };
        let write = |k8s: &str| {
            std::fs::write(
                dir.path().join("go.mod"),
                format!(
                    "require (\n k8s.io/kubernetes {k8s}\n go.etcd.io/etcd/server/v3 v3.6.16\n \
                     sigs.k8s.io/kwok v0.8.0\n)\n"
                ),
            )
            .unwrap();
            std::fs::write(dir.path().join("go.sum"), "").unwrap();
            CacheKey::of(dir.path(), &go).unwrap()
        };
        let a = write("v1.36.3");
        let b = write("v1.36.4");
        assert_ne!(a.hash, b.hash);
        assert!(
            b.dir_name()
                .starts_with("k8s-v1.36.4_etcd-v3.6.16_kwok-v0.8.0-")
        );
        assert_eq!(write("v1.36.3").hash, a.hash);
    }

    #[test]
    fn major_and_minor() {
        assert_eq!(major_minor("v1.36.3"), ("1".into(), "36".into()));
    }
}
