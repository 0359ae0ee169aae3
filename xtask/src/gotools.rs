//! Upstream Go tools the release tests run (`helm`, the CNCF `registry`), built from the Go
//! module proxy at the versions pinned in `upstream/<tool>/go.mod` (and `go.sum`, which Go
//! checks every download against).
//!
//! Each tool is a module of its own with a `tool` directive, so its dependency graph is its
//! own; the binary is cached in `target/upstream/<tool>-<hash>/` where the hash covers
//! `go.mod` and `go.sum`, so a version bump (an edit of go.mod plus `go mod tidy`) rebuilds it
//! and nothing else does. The Kubernetes components of `cargo xtask cluster` follow the same
//! scheme in `upstream/go.mod`.

use std::path::PathBuf;
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::workspace::workspace_root;

/// A Go tool this repository builds.
#[derive(Debug, Clone, Copy)]
pub struct GoTool {
    /// Directory under `upstream/` holding its go.mod, and the binary's name.
    pub name: &'static str,
    /// The package path of its `main`, as in the `tool` directive.
    pub package: &'static str,
    /// `-X` settings the tool's own release build passes to the linker (part of the cache key).
    pub ldflags: &'static [&'static str],
}

/// Helm 3 (`upstream/helm/go.mod`).
pub const HELM: GoTool = GoTool {
    name: "helm",
    package: "helm.sh/helm/v3/cmd/helm",
    // What helm's Makefile sets: without them `helm template` and `helm lint` assume Kubernetes
    // v1.20 (the fallback in the source) and refuse a chart needing a newer one. 1.37 is one
    // above the minor of the pinned k8s.io/client-go (v0.37.0 in upstream/helm/go.sum's graph,
    // Helm adds 1 to its 0 major), as the Makefile computes it.
    ldflags: &[
        "-X helm.sh/helm/v3/internal/version.version=v3.22.0",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37",
    ],
};

/// The CNCF Distribution registry (`upstream/registry/go.mod`).
pub const REGISTRY: GoTool = GoTool {
    name: "registry",
    package: "github.com/distribution/distribution/v3/cmd/registry",
    ldflags: &[],
};

/// Why a tool could not be built.
#[derive(Debug, thiserror::Error)]
#[error("building {tool} from upstream/{tool}/go.mod: {message}")]
pub struct GoToolError {
    pub tool: &'static str,
    pub message: String,
}

impl GoTool {
    /// The binary, built on first use.
    pub fn binary(&self) -> Result<PathBuf, GoToolError> {
        let fail = |message: String| GoToolError {
            tool: self.name,
            message,
        };
        let module = workspace_root().join("upstream").join(self.name);
        let mut hasher = Sha256::new();
        for file in ["go.mod", "go.sum"] {
            let path = module.join(file);
            let bytes = std::fs::read(&path)
                .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
            hasher.update(&bytes);
        }
        for flag in self.ldflags {
            hasher.update(flag.as_bytes());
        }
        let hash = crate::image::layer::hex(&hasher.finalize());
        let dir = workspace_root()
            .join("target")
            .join("upstream")
            .join(format!("{}-{}", self.name, &hash[..16]));
        let binary = dir.join(self.name);
        if binary.is_file() {
            return Ok(binary);
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
        let partial = dir.join(format!("{}.partial-{}", self.name, std::process::id()));
        eprintln!(
            "building {} from the Go module proxy (once; cached in {})",
            self.name,
            dir.display()
        );
        let output = Command::new("go")
            .current_dir(&module)
            .args(["build", "-trimpath"])
            .arg(format!("-ldflags=-s -w {}", self.ldflags.join(" ")))
            .arg("-o")
            .arg(&partial)
            .arg(self.package)
            .output()
            .map_err(|e| fail(format!("cannot run go (Go 1.26 is needed): {e}")))?;
        if !output.status.success() {
            let _ = std::fs::remove_file(&partial);
            return Err(fail(format!(
                "go build failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        std::fs::rename(&partial, &binary)
            .map_err(|e| fail(format!("cannot move the binary into place: {e}")))?;
        Ok(binary)
    }
}
