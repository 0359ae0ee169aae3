//! `cargo xtask dev --claims 2` end to end, as a newcomer would use it: wait for the readiness
//! line, check the claims it timed, run the printed "try next" commands literally with the
//! real kubectl, check the claim binds and its deletion cascades, then Ctrl-C (SIGINT) and
//! check the exit status is 0 and none of the processes it started survives.
//!
//! The first run builds devcluster and both controllers, so the readiness deadline is
//! generous; on a warm build readiness takes a few seconds. Needs `kubectl` on PATH; with
//! `XTASK_SKIP_KUBECTL=1` the kubectl commands are skipped (the rest still runs).

#[path = "dev_support/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::*;
use rustix::process::Signal;

#[test]
fn dev_starts_everything_prints_working_next_steps_and_stops_cleanly_on_ctrl_c() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let cwd: PathBuf = std::env::current_dir().unwrap();
    let mut dev = DevProcess::start(&dir);

    dev.wait_built(&dir);
    dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + READY_DEADLINE,
        &dir,
    );
    let banner = dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dir,
    );
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    let pids = started_pids(&stderr);
    dev.child_pids = pids.iter().map(|(_, pid)| *pid).collect();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["devcluster", "sandbox-controller", "extensions-controller"],
        "progress output:\n{stderr}"
    );
    for (name, pid) in &pids {
        assert!(is_alive(*pid), "{name} (pid {pid}) is not running");
    }

    // --claims 2: both claims bound, each with its time.
    let claims: Vec<&String> = banner
        .iter()
        .filter(|line| line.starts_with("claim dev-claim-"))
        .collect();
    assert_eq!(claims.len(), 2, "banner:\n{}", banner.join("\n"));
    for line in &claims {
        assert!(
            line.contains(" bound to sandbox python-quickstart-") && line.ends_with(" ms"),
            "{line}"
        );
    }

    // The kubeconfig and logs it points at exist.
    let kubeconfig = dir.join("kubeconfig");
    assert!(
        banner
            .iter()
            .any(|l| l == &format!("kubeconfig: {}", kubeconfig.display()))
    );
    for log in [
        "devcluster.log",
        "sandbox-controller.log",
        "extensions-controller.log",
    ] {
        assert!(dir.join(log).is_file(), "{log} missing");
    }

    // A second `xtask dev` on the same directory refuses instead of replacing the kubeconfig.
    let second = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dev", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    let second_err = String::from_utf8_lossy(&second.stderr);
    assert!(
        second_err.contains("another `cargo xtask dev`") && second_err.contains("--dir"),
        "{second_err}"
    );
    assert!(kubeconfig.is_file());

    // The printed next steps, literally.
    let try_next = banner
        .iter()
        .position(|line| line.starts_with("Try next"))
        .expect("a Try next section");
    let commands: Vec<String> = banner[try_next + 1..]
        .iter()
        .take_while(|line| line.starts_with("  "))
        .map(|line| line.trim().to_owned())
        .collect();
    assert_eq!(commands.len(), 4, "{commands:?}");
    let export = commands[0]
        .strip_prefix("export KUBECONFIG=")
        .expect("first: export KUBECONFIG=...");
    assert_eq!(Path::new(export), kubeconfig);
    assert!(commands[1].starts_with("kubectl apply -f "), "{commands:?}");
    assert_eq!(commands[2], "kubectl get sandboxclaims -w");
    assert!(
        commands[3].starts_with("kubectl delete -f "),
        "{commands:?}"
    );

    if kubectl_available() {
        let env = kubectl_env(export, &dir);
        let sandbox = claim_with_printed_commands(&commands, &env, &cwd);
        // Deleting the claim deletes its sandbox.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let output = shell(
                &format!("kubectl get sandbox {sandbox} -o name"),
                &env,
                &cwd,
            )
            .output()
            .unwrap();
            if String::from_utf8_lossy(&output.stderr).contains("NotFound") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "sandbox {sandbox} still exists after its claim was deleted"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    } else {
        eprintln!("XTASK_SKIP_KUBECTL set: not running the printed kubectl commands");
    }

    // Ctrl-C: exit 0, nothing left running.
    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(
        status.success(),
        "exit status {status}; progress output:\n{stderr}"
    );
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} (pid {pid}) survived Ctrl-C");
    }
}

#[test]
fn no_controllers_runs_devcluster_alone_and_says_how_to_start_them() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let mut dev = DevProcess::start_with(&dir, &["dev", "--no-controllers"]);
    dev.wait_built(&dir);
    let mut banner = dev.read_until(
        "agent-sandbox is ready",
        Instant::now() + READY_DEADLINE,
        &dir,
    );
    banner.extend(dev.read_until(
        "Press Ctrl-C",
        Instant::now() + Duration::from_secs(10),
        &dir,
    ));
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    let pids = started_pids(&stderr);
    dev.child_pids = pids.iter().map(|(_, pid)| *pid).collect();
    let names: Vec<&str> = pids.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["devcluster"], "progress output:\n{stderr}");
    let text = banner.join("\n");
    assert!(text.contains("controllers not started"), "{text}");
    assert!(!dir.join("sandbox-controller.log").exists());

    // The printed controller commands, run literally, bring the quickstart pool up.
    let start_commands: Vec<String> = banner
        .iter()
        .map(|line| line.trim())
        .filter(|line| line.contains("-controller --kubeconfig="))
        .map(str::to_owned)
        .collect();
    assert_eq!(start_commands.len(), 2, "{text}");
    let cwd = std::env::current_dir().unwrap();
    let controllers: Vec<KillOnDrop> = start_commands
        .iter()
        .map(|command| {
            KillOnDrop(
                shell(&format!("exec {command}"), &[], &cwd)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    if kubectl_available() {
        let env = vec![
            (
                "KUBECONFIG".to_owned(),
                dir.join("kubeconfig").display().to_string(),
            ),
            (
                "KUBECACHEDIR".to_owned(),
                dir.join("kube-cache").display().to_string(),
            ),
        ];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready = shell(
                "kubectl get sandboxwarmpool python-quickstart -o jsonpath={.status.readyReplicas}",
                &env,
                &cwd,
            )
            .output()
            .unwrap();
            if String::from_utf8_lossy(&ready.stdout).trim() == "3" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the pool never got 3 ready sandboxes"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    drop(controllers);

    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(status.success(), "exit status {status}");
    for (name, pid) in &pids {
        assert!(!is_alive(*pid), "{name} (pid {pid}) survived Ctrl-C");
    }
}

#[test]
fn claims_and_no_controllers_are_exclusive() {
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["dev", "--no-controllers", "--claims", "1"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--no-controllers") && stderr.contains("--claims"),
        "{stderr}"
    );
}

/// `--traces` with a claim: the claim's trace arrives from the controllers, is printed as a
/// waterfall and written as SVG under `<dir>/traces/`, with nothing else installed.
#[test]
fn traces_shows_each_bound_claims_trace_and_saves_it_as_svg() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_path_buf();
    let mut dev = DevProcess::start_with(&dir, &["dev", "--traces", "--claims", "1"]);
    dev.wait_built(&dir);
    let banner = dev.read_until("Press Ctrl-C", Instant::now() + READY_DEADLINE, &dir);
    let stderr = std::fs::read_to_string(dir.join("xtask-dev.stderr")).unwrap();
    dev.child_pids = started_pids(&stderr).iter().map(|(_, pid)| *pid).collect();
    assert!(
        stderr.contains("receiving the controllers' traces at http://127.0.0.1:"),
        "{stderr}"
    );
    let claim = banner
        .iter()
        .find_map(|line| line.strip_prefix("claim "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no claim line in the banner:\n{}", banner.join("\n")))
        .to_owned();

    // The trace is drawn once it has been quiet for a second: before or after the banner ends.
    let mut lines = banner.clone();
    if !lines.iter().any(|line| line.contains("==> trace of claim")) {
        lines.extend(dev.read_until(
            "==> trace of claim",
            Instant::now() + Duration::from_secs(60),
            &dir,
        ));
    }
    let at = lines
        .iter()
        .position(|line| line.contains("==> trace of claim"))
        .unwrap();
    // The waterfall text follows its header: the claim span is one of its rows.
    if !lines[at..]
        .iter()
        .any(|line| line.contains("claim-to-bound"))
    {
        lines.extend(dev.read_until(
            "claim-to-bound",
            Instant::now() + Duration::from_secs(5),
            &dir,
        ));
    }
    let header = &lines[at];
    assert!(
        header.contains(&format!("claim default/{claim} (")) && header.contains("ms to bound"),
        "{header}"
    );
    let svg_path = header
        .split("written to ")
        .nth(1)
        .unwrap_or_else(|| panic!("no SVG written: {header}"));
    assert!(
        Path::new(svg_path).starts_with(dir.join("traces")),
        "{svg_path}"
    );
    let svg = std::fs::read_to_string(svg_path).unwrap();
    assert!(svg.contains("<svg"), "{svg}");
    assert!(
        svg.contains("claim-to-bound"),
        "the SVG names the claim span:\n{svg}"
    );
    dev.signal(Signal::INT);
    let status = dev
        .wait_exit(Instant::now() + Duration::from_secs(60))
        .expect("xtask dev did not exit within 60 s of SIGINT");
    assert!(status.success(), "exit status {status}");
}
