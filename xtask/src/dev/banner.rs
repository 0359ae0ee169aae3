//! The text `cargo xtask dev` prints once everything is up: the readiness line, the claims'
//! times, the kubeconfig, the commands to try next and where the logs are.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::dev::cluster::BoundClaim;
use crate::dev::{QUICKSTART_POOL, READY_LINE};

/// The controllers, in the order of [`Banner::controller_kubeconfigs`].
const CONTROLLERS: [&str; 2] = ["sandbox-controller", "extensions-controller"];

/// One part of the time to ready.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    pub what: &'static str,
    pub time: Duration,
}

/// What `cargo xtask dev` prints once everything is up.
#[derive(Debug)]
pub struct Banner<'a> {
    /// From the start of the `cargo xtask dev` command (else of xtask, see `phases`).
    pub elapsed: Duration,
    /// Where `elapsed` went; it starts with `cargo building xtask` when the command's start
    /// is known.
    pub phases: Vec<Phase>,
    pub kubeconfig: &'a Path,
    pub dir: &'a Path,
    pub root: &'a Path,
    pub cwd: &'a Path,
    pub controllers: bool,
    /// On the real control plane: where its components' logs are (removed at stop).
    pub real_logs: Option<&'a Path>,
    /// The kubeconfig of each controller (sandbox-controller, extensions-controller): its own
    /// ServiceAccount's on the real control plane, devcluster's admin one otherwise.
    pub controller_kubeconfigs: &'a [PathBuf],
    pub claims: &'a [BoundClaim],
    pub bin_dir: &'a Path,
    /// Where claim trace waterfalls go (`--traces`).
    pub traces: Option<&'a Path>,
}

impl Banner<'_> {
    /// `path` relative to the current directory when it is below it, else absolute.
    fn show(&self, path: &Path) -> String {
        path.strip_prefix(self.cwd)
            .ok()
            .filter(|relative| !relative.as_os_str().is_empty())
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// The banner text. Its first line starts with [`READY_LINE`]; the commands to try are
    /// the indented lines after `Try next`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let plane = if self.real_logs.is_some() {
            "real control plane"
        } else {
            "devcluster"
        };
        let what = if self.controllers {
            format!("{plane}, both controllers, warm pool {QUICKSTART_POOL} ready")
        } else {
            format!("{plane} only, controllers not started")
        };
        out.push_str(&format!(
            "\n{READY_LINE} ({what}) in {:.1}s\n",
            self.elapsed.as_secs_f64()
        ));
        let counted_from_command = self
            .phases
            .first()
            .is_some_and(|p| p.what == "cargo building xtask");
        let parts: Vec<String> = self
            .phases
            .iter()
            .map(|p| format!("{} {:.1}s", p.what, p.time.as_secs_f64()))
            .collect();
        out.push_str(&format!(
            "  {}: {}\n\n",
            if counted_from_command {
                "since `cargo xtask dev` started"
            } else {
                "since xtask started (Cargo's build of xtask before it is not counted)"
            },
            parts.join(", ")
        ));
        for claim in self.claims {
            out.push_str(&format!(
                "claim {} bound to sandbox {} in {} ms\n",
                claim.claim,
                claim.sandbox,
                claim.time_to_bound.as_millis()
            ));
        }
        if !self.claims.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("kubeconfig: {}", self.kubeconfig.display()));
        if self.real_logs.is_some() {
            out.push_str(" (admin)\n");
            for (name, kubeconfig) in CONTROLLERS.iter().zip(self.controller_kubeconfigs) {
                out.push_str(&format!(
                    "            {} ({name}: a token of its own ServiceAccount, {}h)\n",
                    kubeconfig.display(),
                    crate::dev::TOKEN_LIFETIME.as_secs() / 3600
                ));
            }
            out.push('\n');
        } else {
            out.push_str("\n\n");
        }
        let claim_file = self.show(&self.root.join("examples/quickstart/claim.yaml"));
        if self.controllers {
            out.push_str("Try next, in another terminal:\n");
            out.push_str(&format!(
                "  export KUBECONFIG={}\n",
                self.kubeconfig.display()
            ));
            out.push_str(&format!("  kubectl apply -f {claim_file}\n"));
            out.push_str("  kubectl get sandboxclaims -w\n");
            out.push_str(&format!("  kubectl delete -f {claim_file}\n\n"));
        } else {
            out.push_str("Start the controllers yourself (e.g. under a debugger):\n");
            for (name, kubeconfig) in CONTROLLERS.iter().zip(self.controller_kubeconfigs) {
                out.push_str(&format!(
                    "  {} --kubeconfig={} --leader-elect=false --metrics-bind-address=0 \
                     --health-probe-bind-address=0 --log-format=text --enable-webhook=false\n",
                    self.show(&self.bin_dir.join(name)),
                    kubeconfig.display()
                ));
            }
            out.push('\n');
        }
        let mut logs: Vec<String> = Vec::new();
        if self.real_logs.is_none() {
            logs.push("devcluster.log".to_owned());
        }
        if self.controllers {
            logs.extend(CONTROLLERS.iter().map(|name| format!("{name}.log")));
        }
        if !logs.is_empty() {
            out.push_str(&format!(
                "Logs: {} ({})\n",
                self.show(self.dir),
                logs.join(", ")
            ));
        }
        if let Some(real_logs) = self.real_logs {
            out.push_str(&format!(
                "Control plane logs: {} (removed when it stops)\n",
                real_logs.display()
            ));
        }
        if let Some(traces) = self.traces {
            out.push_str(&format!(
                "Traces: each claim's trace is printed here once it is bound, and written to {} (SVG)\n",
                self.show(traces)
            ));
        }
        out.push_str("Press Ctrl-C to stop everything.");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static KUBECONFIGS: std::sync::LazyLock<[PathBuf; 2]> = std::sync::LazyLock::new(|| {
        [
            PathBuf::from("/repo/target/dev/kubeconfig"),
            PathBuf::from("/repo/target/dev/kubeconfig"),
        ]
    });

    fn banner<'a>(claims: &'a [BoundClaim], controllers: bool) -> Banner<'a> {
        Banner {
            elapsed: Duration::from_millis(2345),
            phases: vec![
                Phase {
                    what: "cargo building xtask",
                    time: Duration::from_millis(300),
                },
                Phase {
                    what: "building the binaries",
                    time: Duration::from_millis(1000),
                },
            ],
            kubeconfig: Path::new("/repo/target/dev/kubeconfig"),
            dir: Path::new("/repo/target/dev"),
            root: Path::new("/repo"),
            cwd: Path::new("/repo"),
            controllers,
            real_logs: None,
            controller_kubeconfigs: &*KUBECONFIGS,
            claims,
            bin_dir: Path::new("/repo/target/debug"),
            traces: None,
        }
    }

    #[test]
    fn banner_prints_kubeconfig_three_commands_and_logs() {
        let text = banner(&[], true).render();
        assert!(text.contains("agent-sandbox is ready"), "{text}");
        assert!(text.contains("in 2.3s"), "{text}");
        assert!(
            text.contains(
                "since `cargo xtask dev` started: cargo building xtask 0.3s, building the binaries 1.0s"
            ),
            "{text}"
        );
        assert!(text.contains("kubeconfig: /repo/target/dev/kubeconfig"));
        assert!(text.contains("  export KUBECONFIG=/repo/target/dev/kubeconfig\n"));
        assert!(text.contains("  kubectl apply -f examples/quickstart/claim.yaml\n"));
        assert!(text.contains("  kubectl get sandboxclaims -w\n"));
        assert!(text.contains("  kubectl delete -f examples/quickstart/claim.yaml\n"));
        assert!(text.contains("Logs: target/dev (devcluster.log, sandbox-controller.log"));
    }

    #[test]
    fn paths_outside_the_current_directory_are_absolute() {
        let mut b = banner(&[], true);
        b.cwd = Path::new("/elsewhere");
        let text = b.render();
        assert!(text.contains("kubectl apply -f /repo/examples/quickstart/claim.yaml"));
        assert!(text.contains("Logs: /repo/target/dev "));
    }

    #[test]
    fn claims_are_listed_with_their_time_to_bound() {
        let claims = [BoundClaim {
            claim: "dev-claim-1".to_owned(),
            sandbox: "python-quickstart-abcde".to_owned(),
            time_to_bound: Duration::from_millis(42),
        }];
        let text = banner(&claims, true).render();
        assert!(
            text.contains("claim dev-claim-1 bound to sandbox python-quickstart-abcde in 42 ms")
        );
    }

    #[test]
    fn without_controllers_it_shows_how_to_start_them() {
        let text = banner(&[], false).render();
        assert!(text.contains("controllers not started"));
        assert!(
            text.contains(
                "target/debug/sandbox-controller --kubeconfig=/repo/target/dev/kubeconfig"
            )
        );
        assert!(text.contains("target/debug/extensions-controller --kubeconfig="));
        assert!(!text.contains("kubectl apply"));
    }

    #[test]
    fn on_the_real_control_plane_each_controller_has_its_own_kubeconfig() {
        let own = [
            PathBuf::from("/repo/target/dev/sandbox-controller.kubeconfig"),
            PathBuf::from("/repo/target/dev/extensions-controller.kubeconfig"),
        ];
        let mut b = banner(&[], true);
        b.real_logs = Some(Path::new("/tmp/realcluster-x/logs"));
        b.controller_kubeconfigs = &own;
        let text = b.render();
        assert!(
            text.contains("(real control plane, both controllers"),
            "{text}"
        );
        assert!(text.contains("kubeconfig: /repo/target/dev/kubeconfig (admin)\n"));
        assert!(text.contains(
            "/repo/target/dev/sandbox-controller.kubeconfig (sandbox-controller: a token of its own ServiceAccount"
        ));
        assert!(text.contains("  export KUBECONFIG=/repo/target/dev/kubeconfig\n"));
        assert!(
            text.contains("Logs: target/dev (sandbox-controller.log, extensions-controller.log)")
        );
        assert!(!text.contains("devcluster"), "{text}");
        assert!(text.contains("Control plane logs: /tmp/realcluster-x/logs"));

        b.controllers = false;
        let text = b.render();
        assert!(text.contains(
            "sandbox-controller --kubeconfig=/repo/target/dev/sandbox-controller.kubeconfig"
        ));
        assert!(text.contains(
            "extensions-controller --kubeconfig=/repo/target/dev/extensions-controller.kubeconfig"
        ));
    }
}
