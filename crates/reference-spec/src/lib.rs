//! Where tests find the files kept outside the repository: the reference implementation's CRDs
//! (`reference-crds/`) and the upstream example manifests (`examples/`) of the API spec.
//!
//! They live in `shared/spec` beside a checkout (`<checkout>/../shared/spec`; CI has them) or in
//! `$AGENT_SANDBOX_SPEC_DIR`; a fresh clone has neither. A test that compares with them calls
//! [`reference_crds`] or [`examples`] first and returns early on `None`: the call has then
//! printed one line naming the test, the missing folder and how to provide it.
//!
//! `AGENT_SANDBOX_REQUIRE_SPEC=1` (set by `.ci/run`) turns every such skip into a test failure,
//! so CI, which has the files, cannot pass while skipping a comparison. A set
//! `AGENT_SANDBOX_SPEC_DIR` without the wanted folder is always a failure (a typo, not a skip).
//!
//! The line is written to the process's stderr directly, not through `eprintln!`: libtest
//! captures `eprintln!` of a passing test and would hide it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The variable naming the spec folder (the one holding `reference-crds/` and `examples/`).
pub const SPEC_DIR_VAR: &str = "AGENT_SANDBOX_SPEC_DIR";
/// Set (to anything but empty or `0`) to make a missing spec folder fail the test.
pub const REQUIRE_VAR: &str = "AGENT_SANDBOX_REQUIRE_SPEC";

/// `<spec>/reference-crds`, the reference implementation's four CRDs, or `None` (skipped).
#[track_caller]
pub fn reference_crds() -> Option<PathBuf> {
    find("reference-crds", "the reference CRDs")
}

/// `<spec>/examples`, the upstream example manifests, or `None` (skipped).
#[track_caller]
pub fn examples() -> Option<PathBuf> {
    find("examples", "the upstream example manifests")
}

#[track_caller]
fn find(part: &str, what: &str) -> Option<PathBuf> {
    let explicit = std::env::var_os(SPEC_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from);
    let required = std::env::var(REQUIRE_VAR).is_ok_and(|v| !v.is_empty() && v != "0");
    let found = locate(
        explicit.as_deref(),
        Path::new(env!("CARGO_MANIFEST_DIR")),
        part,
    );
    match decide(found, required, &test_name(), what) {
        Outcome::Run(dir) => Some(dir),
        Outcome::Skip(line) => {
            // Direct write: visible even for a passing test (see the module docs).
            let _ = std::io::stderr()
                .lock()
                .write_all(format!("{line}\n").as_bytes());
            None
        }
        Outcome::Fail(message) => panic!("{message}"),
    }
}

/// The running test's name (libtest names each test's thread after it), else the caller's
/// source location.
#[track_caller]
fn test_name() -> String {
    match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => {
            let at = std::panic::Location::caller();
            format!("{}:{}", at.file(), at.line())
        }
    }
}

/// Where `<part>` was found, or why not.
#[derive(Debug, PartialEq)]
enum Located {
    Found(PathBuf),
    /// `$AGENT_SANDBOX_SPEC_DIR` is set but has no `<part>/`.
    NotInExplicit(PathBuf),
    /// Not set, and no `shared/spec/<part>/` above the checkout.
    NotBeside,
}

/// `$AGENT_SANDBOX_SPEC_DIR/<part>` when the variable is set, else `shared/spec/<part>` in the
/// nearest ancestor of `search_from` that has one.
fn locate(explicit: Option<&Path>, search_from: &Path, part: &str) -> Located {
    if let Some(dir) = explicit {
        let wanted = dir.join(part);
        return if wanted.is_dir() {
            Located::Found(wanted)
        } else {
            Located::NotInExplicit(dir.to_path_buf())
        };
    }
    search_from
        .ancestors()
        .map(|a| a.join("shared/spec").join(part))
        .find(|p| p.is_dir())
        .map_or(Located::NotBeside, Located::Found)
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Run(PathBuf),
    Skip(String),
    Fail(String),
}

fn decide(found: Located, required: bool, test: &str, what: &str) -> Outcome {
    match found {
        Located::Found(dir) => Outcome::Run(dir),
        Located::NotInExplicit(dir) => Outcome::Fail(format!(
            "{test} needs {what}: {SPEC_DIR_VAR}={} has no such folder (it must hold reference-crds/ and examples/)",
            dir.display()
        )),
        Located::NotBeside if required => Outcome::Fail(format!(
            "{test} needs {what}: no ../shared/spec beside the checkout and {SPEC_DIR_VAR} is not set; {REQUIRE_VAR} is set, so a skip is a failure"
        )),
        Located::NotBeside => Outcome::Skip(format!(
            "SKIPPED {test}: compares with {what}, kept outside the repository; none found (../shared/spec or {SPEC_DIR_VAR})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system temp dir, removed on drop.
    struct Temp(PathBuf);
    impl Temp {
        fn new(name: &str) -> Self {
            let dir =
                std::env::temp_dir().join(format!("reference-spec-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Temp(dir)
        }
    }
    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn finds_shared_spec_beside_a_checkout_at_any_depth() {
        let root = Temp::new("beside");
        std::fs::create_dir_all(root.0.join("shared/spec/examples")).unwrap();
        let crate_dir = root.0.join("worktrees/repo/crates/x");
        std::fs::create_dir_all(&crate_dir).unwrap();
        assert_eq!(
            locate(None, &crate_dir, "examples"),
            Located::Found(root.0.join("shared/spec/examples"))
        );
        assert_eq!(
            locate(None, &crate_dir, "reference-crds"),
            Located::NotBeside
        );
    }

    #[test]
    fn the_variable_wins_and_must_hold_the_folder() {
        let root = Temp::new("explicit");
        std::fs::create_dir_all(root.0.join("reference-crds")).unwrap();
        assert_eq!(
            locate(Some(&root.0), Path::new("/"), "reference-crds"),
            Located::Found(root.0.join("reference-crds"))
        );
        assert_eq!(
            locate(Some(&root.0), Path::new("/"), "examples"),
            Located::NotInExplicit(root.0.clone())
        );
    }

    #[test]
    fn absent_files_skip_with_one_line_unless_required() {
        let skip = decide(Located::NotBeside, false, "parity::t", "the reference CRDs");
        let Outcome::Skip(line) = skip else {
            panic!("expected a skip, got {skip:?}")
        };
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(
            line.starts_with("SKIPPED parity::t: compares with the reference CRDs"),
            "{line}"
        );
        assert!(
            line.contains(SPEC_DIR_VAR),
            "says how to provide them: {line}"
        );

        let fail = decide(Located::NotBeside, true, "parity::t", "the reference CRDs");
        assert!(
            matches!(&fail, Outcome::Fail(m) if m.contains(REQUIRE_VAR)),
            "{fail:?}"
        );
        let typo = decide(Located::NotInExplicit("/x".into()), false, "t", "w");
        assert!(
            matches!(&typo, Outcome::Fail(m) if m.contains("/x")),
            "{typo:?}"
        );
        assert_eq!(
            decide(Located::Found("/s/examples".into()), true, "t", "w"),
            Outcome::Run("/s/examples".into())
        );
    }
}
