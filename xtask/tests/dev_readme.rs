//! The README, followed literally against `cargo xtask dev`: every line of every `sh` block of
//! README.md is run (in README order, in one simulated shell session whose working directory
//! holds `examples/` and the dev environment's `target/dev/`), and what the user would then
//! see is checked: the claim binds, the printer columns and short names work, the pool scales,
//! `describe` shows the conditions, deletion cascades, the release files apply and the
//! verification commands list what they should. The Python SDK snippet is run too when the
//! published `k8s-agent-sandbox` package can be installed (else a note is printed).
//!
//! Two lines are not run here, on purpose: `cargo xtask dev` (this test runs it, through the
//! built binary) and `cargo test --workspace` (it is what `.ci/run` runs; checked below).
//! `cargo xtask` in a README line is run as the built xtask binary.
//!
//! Two lines are adapted, on purpose: `cargo xtask release … --push` runs without `--push` (no
//! registry or credentials here) and with `--no-images` (the images are a musl release build,
//! checked by `tests/images.rs`); the manifests it writes are then applied as the README says.
//! `helm install` lines are not run: helm needs a cluster that runs the images (devcluster runs
//! no containers); the chart is rendered and linted with the real helm by `tests/chart.rs`.

#[path = "dev_support/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use harness::*;
use rustix::process::Signal;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A fenced code block of the README: the `## ` section it is in, its language and its lines.
#[derive(Debug)]
struct Block {
    section: String,
    language: String,
    lines: Vec<String>,
}

fn code_blocks(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut section = String::new();
    let mut current: Option<Block> = None;
    for line in markdown.lines() {
        if let Some(block) = current.as_mut() {
            if line.starts_with("```") {
                blocks.extend(current.take());
            } else {
                block.lines.push(line.to_owned());
            }
        } else if let Some(fence) = line.strip_prefix("```") {
            current = Some(Block {
                section: section.clone(),
                language: fence.trim().to_owned(),
                lines: Vec::new(),
            });
        } else if let Some(heading) = line.strip_prefix("## ") {
            section = heading.trim().to_owned();
        }
    }
    blocks
}

/// The command part of a line (without a trailing `# comment`).
fn command_of(line: &str) -> &str {
    line.split(" #").next().unwrap_or(line).trim()
}

/// One shell session: the `export` lines seen so far are replayed before every command.
struct Session {
    cwd: PathBuf,
    exports: Vec<String>,
    env: Vec<(String, String)>,
}

impl Session {
    fn script(&self, line: &str) -> String {
        let mut script = self.exports.join("\n");
        script.push('\n');
        script.push_str(line);
        script
    }

    fn run(&self, line: &str) -> String {
        run_ok(&self.script(line), &self.env, &self.cwd)
    }

    /// Runs a check command (not from the README) and returns its stdout.
    fn query(&self, command: &str) -> String {
        let output = shell(&self.script(command), &self.env, &self.cwd)
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    fn wait_until(&self, what: &str, command: &str, done: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let got = self.query(command);
            if done(&got) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: `{command}` printed {got:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn wait_for(&self, what: &str, command: &str, expected: &str) {
        self.wait_until(&format!("{what} (expected {expected:?})"), command, |got| {
            got == expected
        });
    }
}

const CLAIM: &str = "my-first-sandbox";
const CLAIM_READY: &str = "kubectl get sandboxclaim my-first-sandbox -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}'";
const CLAIM_EVENT_REASONS: &str = "kubectl get events --field-selector involvedObject.uid=$(kubectl get sandboxclaim my-first-sandbox -o jsonpath='{.metadata.uid}') -o jsonpath='{.items[*].reason}'";
const CLAIM_SANDBOX: &str =
    "kubectl get sandboxclaim my-first-sandbox -o jsonpath='{.status.sandbox.name}'";

/// Runs one README line and checks what a user would see after it.
fn run_readme_line(session: &mut Session, line: &str, xtask: &str) {
    let command = command_of(line);
    if command.starts_with("export ") {
        session.exports.push(line.to_owned());
        return;
    }
    if command.ends_with(" -w") {
        let sandbox = watch_until_bound(
            &session.script(&format!("exec {line}")),
            &session.env,
            &session.cwd,
            CLAIM,
        );
        assert!(!sandbox.is_empty(), "the watch showed no SANDBOX");
        return;
    }
    if command.starts_with("helm ") {
        println!("not run here (see the module docs): {command}");
        return;
    }
    if let Some(rest) = command.strip_prefix("cargo xtask ") {
        let rest = if rest.starts_with("release") {
            format!("{} --no-images", rest.replace(" --push", ""))
        } else {
            rest.to_owned()
        };
        session.run(&format!("{xtask} {rest}"));
        if rest.starts_with("release") {
            for file in [
                "sandbox.yaml",
                "extensions.yaml",
                "sandbox-with-extensions.yaml",
            ] {
                assert!(session.cwd.join("dist").join(file).is_file(), "{file}");
            }
        }
        return;
    }
    // A claim's deletion must take its Sandbox along: remember which one it is.
    let bound_sandbox = (command == "kubectl delete -f examples/quickstart/claim.yaml")
        .then(|| session.query(CLAIM_SANDBOX));
    let output = session.run(line);

    match command {
        "kubectl apply -f examples/quickstart/claim.yaml" => {
            assert!(output.contains(CLAIM), "{output}");
            session.wait_for("the claim binds", CLAIM_READY, "True");
        }
        "kubectl delete -f examples/quickstart/claim.yaml" => {
            assert!(output.contains("deleted"), "{output}");
            let sandbox = bound_sandbox.unwrap_or_default();
            assert!(
                !sandbox.is_empty(),
                "the claim had no sandbox before deletion"
            );
            session.wait_for(
                "the claim's Sandbox is deleted with it",
                &format!("kubectl get sandboxes -o name | grep -c '/{sandbox}$' || true"),
                "0",
            );
            session.wait_for(
                "the claim's Pod is deleted with it",
                &format!("kubectl get pods -o name | grep -c '/{sandbox}$' || true"),
                "0",
            );
        }
        "kubectl get sandboxes,sandboxclaims,sandboxwarmpools,sandboxtemplates" => {
            for expected in [
                "READY   REASON",
                "READY   SANDBOX",
                "READY   DESIRED",
                "AGE",
                "sandboxclaim.extensions.agents.x-k8s.io/my-first-sandbox",
                "sandboxwarmpool.extensions.agents.x-k8s.io/python-quickstart",
                "sandboxtemplate.extensions.agents.x-k8s.io/python-quickstart",
                "DependenciesReady",
            ] {
                assert!(
                    output.contains(expected),
                    "{expected:?} missing from:\n{output}"
                );
            }
        }
        _ if command.starts_with("kubectl scale swp python-quickstart --replicas=") => {
            let replicas = command.rsplit('=').next().unwrap();
            session.wait_for(
                "the pool scales",
                "kubectl get swp python-quickstart -o jsonpath='{.status.readyReplicas}'",
                replicas,
            );
        }
        "kubectl describe sandboxclaim my-first-sandbox" => {
            let sandbox = session.query(CLAIM_SANDBOX);
            assert!(
                !sandbox.is_empty() && sandbox != CLAIM,
                "the claim took a warm pool Sandbox, not a cold one: {sandbox:?}"
            );
            for expected in [
                "Conditions:",
                "Type:",
                "Ready",
                "Reason:",
                "DependenciesReady",
                sandbox.as_str(),
                "Events:",
            ] {
                assert!(
                    output.contains(expected),
                    "{expected:?} missing from:\n{output}"
                );
            }
            // `dev` runs the controllers with default flags: a claim that took a warm Sandbox
            // without trouble has no events (`SandboxAdopted` needs `--claim-adoption-events`),
            // and `describe` agrees with the API about whatever events it has (devcluster
            // serves events.k8s.io/v1 and core/v1 as one resource, as a real API server does).
            let reasons = session.query(CLAIM_EVENT_REASONS);
            assert!(
                reasons.is_empty(),
                "a warm claim has no events by default, got {reasons:?}"
            );
            let events = output.split("Events:").nth(1).unwrap_or_default();
            assert!(
                events.trim_start().starts_with("<none>"),
                "describe shows no events for the warm claim:\n{output}"
            );
        }
        "kubectl apply -f examples/core/sandbox.yaml" => {
            session.wait_for(
                "the bare Sandbox becomes Ready with its Service",
                "kubectl get sandbox hello-sandbox -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status} {.status.service}'",
                "True hello-sandbox",
            );
        }
        "kubectl get sandbox hello-sandbox" => {
            assert!(
                output.contains("hello-sandbox   True    DependenciesReady"),
                "{output}"
            );
        }
        _ if command.starts_with("kubectl patch sandbox hello-sandbox") => {
            session.wait_for(
                "the Sandbox suspends: Pod gone, Ready=False SandboxSuspended",
                "kubectl get sandbox hello-sandbox -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].reason} {.status.conditions[?(@.type==\"Suspended\")].status}'; echo; kubectl get pods -o name | grep -c '/hello-sandbox$' || true",
                "SandboxSuspended True\n0",
            );
        }
        "kubectl delete -f examples/core/sandbox.yaml" => {
            session.wait_for(
                "the Sandbox and its Service are gone",
                "kubectl get sandboxes,services -o name | grep -c '/hello-sandbox$' || true",
                "0",
            );
        }
        "kubectl get crds | grep agents.x-k8s.io" => {
            assert_eq!(output.lines().count(), 4, "{output}");
        }
        "kubectl -n agent-sandbox-system get deployments,pods" => {
            for expected in [
                "deployment.apps/sandbox-controller",
                "deployment.apps/extensions-controller",
            ] {
                assert!(
                    output.contains(expected),
                    "{expected:?} missing from:\n{output}"
                );
            }
        }
        _ => {}
    }
}

/// A Python that can import the published SDK: `$AGENT_SANDBOX_PYTHON`, or a virtualenv this
/// test makes (pip, from the package index). `None` with the reason when neither works.
fn python_with_sdk() -> Result<PathBuf, String> {
    let imports = |python: &Path| {
        Command::new(python)
            .args(["-c", "import k8s_agent_sandbox"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if let Some(python) = std::env::var_os("AGENT_SANDBOX_PYTHON").map(PathBuf::from)
        && imports(&python)
    {
        return Ok(python);
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("readme-sdk-venv");
    let python = venv.join("bin/python");
    if imports(&python) {
        return Ok(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .map_err(|e| format!("python3 not available: {e}"))?;
    if !made.success() {
        return Err("python3 -m venv failed".into());
    }
    let installed = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "k8s-agent-sandbox==1.0.8",
        ])
        .status()
        .map_err(|e| format!("pip not available: {e}"))?;
    if installed.success() && imports(&python) {
        Ok(python)
    } else {
        Err("pip install k8s-agent-sandbox==1.0.8 failed".into())
    }
}

#[test]
fn readme_commands_work_literally_against_cargo_xtask_dev() {
    let root = workspace_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let blocks = code_blocks(&readme);
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();

    let temp = tempfile::tempdir().unwrap();
    let cwd = temp.path().to_path_buf();
    std::os::unix::fs::symlink(root.join("examples"), cwd.join("examples")).unwrap();
    let dev_dir = cwd.join("target").join("dev");
    std::fs::create_dir_all(&dev_dir).unwrap();
    let mut dev = DevProcess::start_with(&dev_dir, &["dev"]);
    dev.wait_built(&dev_dir);
    dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + READY_DEADLINE,
        &dev_dir,
    );
    dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dev_dir,
    );
    let stderr = std::fs::read_to_string(dev_dir.join("xtask-dev.stderr")).unwrap();
    dev.child_pids = started_pids(&stderr).iter().map(|(_, pid)| *pid).collect();

    if !kubectl_available() {
        eprintln!("XTASK_SKIP_KUBECTL set: not running the README's kubectl commands");
        return;
    }
    let mut session = Session {
        cwd: cwd.clone(),
        exports: Vec::new(),
        env: vec![(
            "KUBECACHEDIR".to_owned(),
            cwd.join("kube-cache").display().to_string(),
        )],
    };
    let xtask = env!("CARGO_BIN_EXE_xtask");
    let mut ran = 0;
    for block in blocks.iter().filter(|b| b.language == "sh") {
        for line in &block.lines {
            let command = command_of(line);
            if command.is_empty() || command.starts_with('#') {
                continue;
            }
            match command {
                "cargo xtask dev" => continue, // running: this test started it
                "cargo test --workspace" => {
                    assert!(ci.contains("cargo test --workspace"), ".ci/run must run it");
                    continue;
                }
                _ => {}
            }
            eprintln!("[{}] $ {line}", block.section);
            run_readme_line(&mut session, line, xtask);
            ran += 1;
        }
    }
    assert!(
        ran >= 15,
        "only {ran} README commands ran; did the README lose its examples?"
    );

    // The Python SDK snippet, as printed in the README.
    let python_blocks: Vec<&Block> = blocks.iter().filter(|b| b.language == "python").collect();
    assert_eq!(python_blocks.len(), 1, "one Python snippet expected");
    match python_with_sdk() {
        Ok(python) => {
            let kubeconfig = dev_dir.join("kubeconfig");
            let output = Command::new(python)
                .arg("-c")
                .arg(python_blocks[0].lines.join("\n"))
                .env("KUBECONFIG", &kubeconfig)
                .current_dir(&cwd)
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "the README's Python snippet failed:\n{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let printed = String::from_utf8_lossy(&output.stdout);
            let words: Vec<&str> = printed.split_whitespace().collect();
            assert_eq!(
                words.len(),
                2,
                "claim name and sandbox id expected: {printed}"
            );
            assert!(words[1].starts_with("python-quickstart-"), "{printed}");
        }
        Err(reason) => eprintln!("note: README Python snippet not run: {reason}"),
    }

    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(status.success(), "exit status {status}");
}
