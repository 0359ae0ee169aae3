//! `cargo xtask docs`: the committed flags tables match the binaries, and `--check` catches a
//! stale table.

use std::path::Path;
use std::process::Command;

use xtask::docs::{BEGIN, DocsError, END, FILES, run_in};

#[test]
fn committed_tables_match_the_binaries_flags() {
    let output = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["docs", "--check"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Like `crds --check`, a successful check says so.
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "docs/configuration.md and README.md are up to date with the binaries' flags\n"
    );
}

#[test]
fn check_fails_on_a_stale_table_and_a_run_repairs_it() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("docs")).unwrap();
    for file in FILES {
        std::fs::write(
            root.path().join(file),
            format!("# title\n\n{BEGIN}\n| `--gone-flag` | | | removed |\n{END}\n\nafter\n"),
        )
        .unwrap();
    }
    match run_in(root.path(), true) {
        Err(DocsError::OutOfDate { files }) => {
            assert!(files.contains("docs/configuration.md") && files.contains("README.md"))
        }
        other => panic!("expected OutOfDate, got {other:?}"),
    }
    run_in(root.path(), false).unwrap();
    run_in(root.path(), true).unwrap();
    let readme = std::fs::read_to_string(root.path().join("README.md")).unwrap();
    assert!(!readme.contains("--gone-flag"));
    assert!(readme.contains("| `--sandbox-concurrent-workers` |"));
    assert!(readme.starts_with("# title\n") && readme.ends_with("\nafter\n"));
}

#[test]
fn a_file_without_markers_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("docs")).unwrap();
    for file in FILES {
        std::fs::write(root.path().join(file), "no markers here\n").unwrap();
    }
    let error = run_in(root.path(), true).unwrap_err();
    assert!(matches!(error, DocsError::Markers { .. }), "{error}");
    assert!(error.to_string().contains("configuration.md"), "{error}");
}

/// docs/troubleshooting.md has a row for every condition reason the API defines (the
/// controllers set them through these constants), except the deprecated `PodNotTerminated`,
/// which nothing emits.
#[test]
fn troubleshooting_covers_every_condition_reason() {
    use api_types::conditions::*;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let doc = std::fs::read_to_string(root.join("docs/troubleshooting.md")).unwrap();
    let reasons = [
        REASON_DEPENDENCIES_READY,
        REASON_DEPENDENCIES_NOT_READY,
        REASON_SANDBOX_SUSPENDED,
        REASON_POD_SUCCEEDED,
        REASON_POD_FAILED,
        REASON_SANDBOX_EXPIRED,
        REASON_MULTIPLE_PODS,
        REASON_RECONCILER_ERROR,
        REASON_POD_TERMINATED,
        REASON_POD_TERMINATING,
        REASON_POD_NOT_OWNED,
        REASON_NOT_SUSPENDED,
        REASON_POD_STATE_UNKNOWN,
        REASON_POD_SCHEDULED,
        REASON_POD_SCHEDULING_UNKNOWN,
        REASON_CLAIM_EXPIRED,
        REASON_SANDBOX_MISSING,
        REASON_SANDBOX_NOT_READY,
        REASON_TEMPLATE_NOT_FOUND,
        REASON_WARM_POOL_NOT_FOUND,
        REASON_INVALID_METADATA,
        REASON_ENV_VARS_INJECTION_REJECTED,
        REASON_VOLUME_CLAIM_TEMPLATES_ERROR,
        REASON_ADOPTION_CONFLICT,
        REASON_SANDBOX_CREATE_PENDING,
    ];
    for reason in reasons {
        let cell = format!("`{reason}`");
        assert!(
            doc.lines()
                .any(|line| line.starts_with('|') && line.contains(&cell)),
            "docs/troubleshooting.md has no table row for reason {reason}"
        );
    }
}
