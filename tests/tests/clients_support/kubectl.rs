//! Running the real `kubectl` (1.32 on CI machines) against a devcluster kubeconfig.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// kubectl bound to one kubeconfig, with a private discovery cache.
pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
}

/// What one kubectl run printed.
#[derive(Debug)]
pub struct Output {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Kubectl {
    pub fn new(kubeconfig: &Path) -> Kubectl {
        let found = Command::new("kubectl")
            .args(["version", "--client"])
            .output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "kubectl is not on PATH: these tests drive the real kubectl (1.32 is installed on CI \
             machines); install it to run them"
        );
        Kubectl {
            kubeconfig: kubeconfig.to_path_buf(),
            cache: tempfile::tempdir().expect("temp dir"),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .args(args);
        cmd
    }

    /// Runs kubectl with `stdin` (if any) and a 30 s deadline (kubectl's own request timeout).
    pub fn run_with_input(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut cmd = self.command(args);
        cmd.arg("--request-timeout=30s")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl starts");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("piped stdin");
            pipe.write_all(input.as_bytes()).expect("write stdin");
        }
        let out = child.wait_with_output().expect("kubectl runs");
        Output {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.run_with_input(args, None)
    }

    /// Runs kubectl and panics (with its output) unless it succeeds; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        self.ok_with_input(args, None)
    }

    pub fn ok_with_input(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.run_with_input(args, stdin);
        assert!(
            out.success,
            "kubectl {args:?} failed\nstdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        );
        out.stdout
    }

    /// Starts a long-running kubectl (`get -w`) whose stdout lines arrive on a channel.
    pub fn spawn_lines(&self, args: &[&str]) -> LineStream {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        LineStream {
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }
}

/// Output lines of a running kubectl.
pub struct LineStream {
    child: Child,
    lines: Receiver<String>,
    pub seen: Vec<String>,
}

impl LineStream {
    /// Waits (up to `deadline`) for a line satisfying `pred`, keeping every line read.
    pub fn wait_line(
        &mut self,
        what: &str,
        deadline: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let left = deadline.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if pred(&line) {
                        return line;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.child.kill();
                    let stderr = self
                        .child
                        .stderr
                        .take()
                        .map(|mut e| {
                            let mut s = String::new();
                            let _ = std::io::Read::read_to_string(&mut e, &mut s);
                            s
                        })
                        .unwrap_or_default();
                    panic!(
                        "no line for {what} within {deadline:?}; lines so far:\n{}\nstderr:\n{stderr}",
                        self.seen.join("\n")
                    );
                }
            }
        }
    }
}

impl Drop for LineStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The column headers of the first line of `kubectl get` output.
pub fn headers(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The cells of the row whose NAME is `name`, by header (empty cells stay empty strings):
/// kubectl aligns each column under its header.
pub fn row(table: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let mut lines = table.lines();
    let header = lines.next()?;
    // Column start offsets, found left to right (a header may occur inside an earlier one).
    let mut positions: Vec<(usize, String)> = Vec::new();
    let mut from = 0;
    for h in header.split_whitespace() {
        let at = from + header[from..].find(h)?;
        positions.push((at, h.to_string()));
        from = at + h.len();
    }
    lines.find_map(|line| {
        let cell = |i: usize| -> String {
            let start = positions[i].0.min(line.len());
            let end = positions
                .get(i + 1)
                .map_or(line.len(), |p| p.0.min(line.len()));
            line.get(start..end).unwrap_or_default().trim().to_owned()
        };
        (cell(0) == name).then(|| {
            positions
                .iter()
                .enumerate()
                .map(|(i, (_, h))| (h.clone(), cell(i)))
                .collect()
        })
    })
}
