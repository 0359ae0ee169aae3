//! `cargo xtask crds`: generated files, and how `--check` sees a directory that drifted.

use std::fs;

use xtask::crds::{
    CrdDrift, GENERATED_HEADER, all_crd_files, compare_crd_dir, run_in, write_crd_dir,
};
use xtask::manifest::{TypedObject, parse_typed_manifest};

#[test]
fn one_file_per_crd_named_group_underscore_plural() {
    let files = all_crd_files().unwrap();
    let names: Vec<_> = files.iter().map(|f| f.file_name.as_str()).collect();
    assert_eq!(
        names,
        [
            "agents.x-k8s.io_sandboxes.yaml",
            "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
            "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
            "extensions.agents.x-k8s.io_sandboxclaims.yaml",
        ]
    );
    for file in &files {
        assert!(file.contents.starts_with(GENERATED_HEADER));
        let objects = parse_typed_manifest(&file.contents, &file.file_name).unwrap();
        let [TypedObject::CustomResourceDefinition(crd)] = objects.as_slice() else {
            panic!("{}: exactly one CRD", file.file_name);
        };
        let plural = &crd.spec.names.plural;
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{plural}.{}", crd.spec.group).as_str())
        );
    }
}

#[test]
fn writing_then_checking_is_clean_and_drift_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let files = all_crd_files().unwrap();
    // A stale file from a removed type is deleted on write.
    fs::write(dir.path().join("old.example_things.yaml"), "stale").unwrap();
    fs::write(dir.path().join("README.txt"), "not a CRD").unwrap();
    write_crd_dir(&files, dir.path()).unwrap();
    assert!(!dir.path().join("old.example_things.yaml").exists());
    assert!(
        dir.path().join("README.txt").exists(),
        "non-YAML files are left alone"
    );
    assert!(compare_crd_dir(&files, dir.path()).unwrap().is_clean());

    fs::write(dir.path().join(&files[0].file_name), "edited by hand").unwrap();
    fs::remove_file(dir.path().join(&files[1].file_name)).unwrap();
    fs::write(dir.path().join("extra_crd.yaml"), "x").unwrap();
    assert_eq!(
        compare_crd_dir(&files, dir.path()).unwrap(),
        CrdDrift {
            missing: vec![files[1].file_name.clone()],
            changed: vec![files[0].file_name.clone()],
            extra: vec!["extra_crd.yaml".to_string()],
        }
    );
}

#[test]
fn rendering_is_deterministic() {
    assert_eq!(all_crd_files().unwrap(), all_crd_files().unwrap());
}

#[test]
fn check_fails_with_one_line_naming_the_stale_files() {
    let dir = tempfile::tempdir().unwrap();
    let error = run_in(dir.path(), "crds-under-test", true)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("crds-under-test is out of date (missing: "),
        "{error}"
    );
    assert!(error.contains("agents.x-k8s.io_sandboxes.yaml"), "{error}");
    assert!(error.contains("run `cargo xtask crds`"), "{error}");
    assert_eq!(error.lines().count(), 1);

    let written = run_in(dir.path(), "crds-under-test", false).unwrap();
    assert_eq!(written.len(), 4);
    let checked = run_in(dir.path(), "crds-under-test", true).unwrap();
    assert_eq!(
        checked,
        ["crds-under-test is up to date (4 CRDs match the Rust types)"]
    );
}
