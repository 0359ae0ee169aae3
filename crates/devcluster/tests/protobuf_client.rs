//! A Go client (client-go v0.36, protobuf for built-in kinds, as Go controllers use it) against
//! devcluster: the fixture module `tests/protobuf-client` creates, gets, lists, watches,
//! patches and deletes a Pod, a Service and a NetworkPolicy and checks every body and answer
//! was protobuf. Also checks that devcluster's protobuf field table is what the fixture's
//! generator makes of client-go's types.
//!
//! Needs `go` (and the Go module proxy, or a module cache with the pinned modules). Without it
//! the tests print one line and pass, except in CI (`CI` set) or with
//! `AGENT_SANDBOX_REQUIRE_GO=1`, where a missing `go` fails them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/protobuf-client")
}

/// `go`, or `None` (after printing why) when it is missing and may be.
fn go_or_skip(test: &str) -> Option<PathBuf> {
    realcluster::go_or_skip(test).then(|| PathBuf::from("go"))
}

fn go(go: &Path, args: &[&str]) -> Output {
    let out = Command::new(go)
        .args(args)
        .current_dir(fixture())
        // The committed go.sum pins every module. go.mod requires the versions upstream/go.mod
        // builds kube-apiserver with, and -trimpath is how that is built, so the Go build cache
        // already holds the client-go packages compiled: on a fresh machine (where `.ci/run`
        // builds the real control plane first) these tests took 132 s compiling them again.
        .env("GOFLAGS", "-mod=readonly -trimpath")
        .output()
        .unwrap_or_else(|e| panic!("running go {args:?}: {e}"));
    assert!(
        out.status.success(),
        "go {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn the_protobuf_field_table_matches_client_go() {
    let Some(go_bin) = go_or_skip("the_protobuf_field_table_matches_client_go") else {
        return;
    };
    let generated = go(&go_bin, &["run", "./schema"]).stdout;
    let committed =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protobuf/schema.json"))
            .expect("src/protobuf/schema.json");
    assert!(
        generated == committed,
        "src/protobuf/schema.json is stale: regenerate it with \
         `cd crates/devcluster/tests/protobuf-client && go run ./schema > ../../src/protobuf/schema.json`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_go_program_works_in_protobuf() {
    let Some(go_bin) = go_or_skip("a_client_go_program_works_in_protobuf") else {
        return;
    };
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("devcluster-protobuf-client");
    let target = binary.to_string_lossy().into_owned();
    let built = go_bin.clone();
    tokio::task::spawn_blocking(move || go(&built, &["build", "-o", &target, "./client"]))
        .await
        .unwrap();

    let dc = devcluster::DevCluster::start(devcluster::Config::ephemeral())
        .await
        .expect("devcluster starts");
    let kubeconfig = dc.kubeconfig_path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&binary)
            .arg(&kubeconfig)
            .output()
            .expect("the client runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Go client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "ok Pod: create get list watch patch delete",
        "ok Service: create get list watch patch delete",
        "ok NetworkPolicy: create get list watch patch delete",
        "ok protobuf:",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    // The server saw protobuf bodies (client-go's user agent names the program).
    let counts = dc.observer().counts();
    let created: u64 = counts
        .iter()
        .filter(|(key, _)| {
            key.verb == "create" && key.user_agent.contains("devcluster-protobuf-client")
        })
        .map(|(_, n)| *n)
        .sum();
    assert!(created >= 3, "creates by the Go client: {counts:?}");
    dc.shutdown().await;
}
