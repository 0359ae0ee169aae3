//! The text `cargo xtask dev` prints once everything is up: the readiness line, the claims'
//! times, the kubeconfig, the commands to try next and where the logs are.

use std::path::Path;
use std::time::Duration;

use crate::dev::cluster::BoundClaim;
use crate::dev::{QUICKSTART_POOL, READY_LINE};

/// What `cargo xtask dev` prints once everything is up.
#[derive(Debug)]
pub struct Banner<'a> {
    pub elapsed: Duration,
    pub kubeconfig: &'a Path,
    pub dir: &'a Path,
    pub root: &'a Path,
    pub cwd: &'a Path,
    pub controllers: bool,
    pub claims: &'a [BoundClaim],
    pub bin_dir: &'a Path,
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
        let what = if self.controllers {
            format!("devcluster, both controllers, warm pool {QUICKSTART_POOL} ready")
        } else {
            "devcluster only, controllers not started".to_owned()
        };
        out.push_str(&format!(
            "\n{READY_LINE} ({what}) in {:.1}s\n\n",
            self.elapsed.as_secs_f64()
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
        out.push_str(&format!("kubeconfig: {}\n\n", self.kubeconfig.display()));
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
            for name in ["sandbox-controller", "extensions-controller"] {
                out.push_str(&format!(
                    "  {} --kubeconfig={} --leader-elect=false --metrics-bind-address=0 \
                     --health-probe-bind-address=0 --log-format=text --enable-webhook=false\n",
                    self.show(&self.bin_dir.join(name)),
                    self.kubeconfig.display()
                ));
            }
            out.push('\n');
        }
        out.push_str(&format!(
            "Logs: {} (devcluster.log{})\n",
            self.show(self.dir),
            if self.controllers {
                ", sandbox-controller.log, extensions-controller.log"
            } else {
                ""
            }
        ));
        out.push_str("Press Ctrl-C to stop everything.");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn banner<'a>(claims: &'a [BoundClaim], controllers: bool) -> Banner<'a> {
        Banner {
            elapsed: Duration::from_millis(2345),
            kubeconfig: Path::new("/repo/target/dev/kubeconfig"),
            dir: Path::new("/repo/target/dev"),
            root: Path::new("/repo"),
            cwd: Path::new("/repo"),
            controllers,
            claims,
            bin_dir: Path::new("/repo/target/debug"),
        }
    }

    #[test]
    fn banner_prints_kubeconfig_three_commands_and_logs() {
        let text = banner(&[], true).render();
        assert!(text.contains("agent-sandbox is ready"), "{text}");
        assert!(text.contains("in 2.3s"), "{text}");
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
}
