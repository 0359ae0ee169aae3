//! A controller binary run as the release's Deployment runs it (leader election and the
//! managed conversion-webhook certificates on), on loopback, with the kubeconfig it is given.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::DEADLINE;
use crate::release_rbac::{ControllerAccount, SYSTEM_NAMESPACE};

/// `target/<profile>/`, where cargo puts the binaries of the build this test belongs to.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// A running controller; killed when dropped (also when the test panics).
pub struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// The binary `c.binary` of `dir` with `kubeconfig`, its webhook on 127.0.0.1:`webhook_port`
    /// and its Lease and Secret in the release's namespace. `E2E_LOG` sets its `RUST_LOG`.
    pub fn start(dir: &Path, c: &ControllerAccount, kubeconfig: &Path, webhook_port: u16) -> Self {
        let child = Command::new(dir.join(c.binary))
            .env("KUBECONFIG", kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("E2E_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .args([
                "--leader-elect=true".to_owned(),
                format!("--leader-election-namespace={SYSTEM_NAMESPACE}"),
                "--metrics-bind-address=0".to_owned(),
                "--health-probe-bind-address=0".to_owned(),
                "--log-format=text".to_owned(),
                "--enable-webhook=true".to_owned(),
                "--manage-webhook-certs=true".to_owned(),
                "--webhook-host=127.0.0.1".to_owned(),
                format!("--webhook-port={webhook_port}"),
                format!("--webhook-service-name={}-webhook", c.binary),
                format!("--webhook-namespace={SYSTEM_NAMESPACE}"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", c.binary));
        Running(child)
    }

    /// SIGTERM, then waits (up to [`DEADLINE`]) for the graceful exit, which releases the Lease.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + DEADLINE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
