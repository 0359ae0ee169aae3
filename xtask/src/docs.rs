//! `cargo xtask docs`: the flags table of both controller binaries, generated from their clap
//! definitions (`sandbox_controller::args::Args`, `extensions_controller::args::Args`, the same
//! `Command` that renders `--help`), written between markers into `docs/configuration.md` and
//! `README.md`. `--check` fails when the committed files differ, so the tables never drift.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, CommandFactory};

use crate::workspace::workspace_root;

/// Files holding the generated table, relative to the workspace root.
pub const FILES: [&str; 2] = ["docs/configuration.md", "README.md"];
/// Line that starts the generated table.
pub const BEGIN: &str = "<!-- BEGIN GENERATED FLAGS (cargo xtask docs) -->";
/// Line that ends it.
pub const END: &str = "<!-- END GENERATED FLAGS -->";

/// Arguments of `cargo xtask docs`.
#[derive(Debug, Args)]
pub struct DocsArgs {
    /// Do not write anything; fail (exit 1) when the committed tables differ from the
    /// binaries' flags. CI runs this.
    #[arg(long)]
    pub check: bool,
}

/// What can go wrong while generating or checking the docs.
#[derive(Debug, thiserror::Error)]
pub enum DocsError {
    /// A file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file has no (or a broken) pair of markers.
    #[error("{path}: expected one line {BEGIN:?} followed by one line {END:?}")]
    Markers { path: PathBuf },
    /// `--check` found a stale table.
    #[error(
        "{files} out of date with the binaries' flags; run `cargo xtask docs` and commit the result"
    )]
    OutOfDate { files: String },
}

/// Entry point for `main.rs`.
pub fn main(args: &DocsArgs) -> ExitCode {
    match run_in(&workspace_root(), args.check) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Writes (or with `check`, verifies) the table in every file of [`FILES`] under `root`.
pub fn run_in(root: &Path, check: bool) -> Result<(), DocsError> {
    let table = flags_table();
    let mut stale = Vec::new();
    for file in FILES {
        let path = root.join(file);
        let text = std::fs::read_to_string(&path).map_err(|source| DocsError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        let updated = replace_between_markers(&text, &table)
            .ok_or_else(|| DocsError::Markers { path: path.clone() })?;
        if updated == text {
            continue;
        }
        if check {
            stale.push(file);
        } else {
            std::fs::write(&path, updated).map_err(|source| DocsError::Io {
                action: "write",
                path: path.clone(),
                source,
            })?;
            println!("wrote {}", path.display());
        }
    }
    if stale.is_empty() {
        if check {
            println!(
                "{} are up to date with the binaries' flags",
                FILES.join(" and ")
            );
        }
        Ok(())
    } else {
        Err(DocsError::OutOfDate {
            files: stale.join(" and "),
        })
    }
}

/// `text` with the lines between [`BEGIN`] and [`END`] replaced by `table`; `None` without
/// exactly one well-ordered pair of markers.
pub fn replace_between_markers(text: &str, table: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let begins: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == BEGIN).collect();
    let ends: Vec<usize> = (0..lines.len()).filter(|&i| lines[i] == END).collect();
    let (&[begin], &[end]) = (begins.as_slice(), ends.as_slice()) else {
        return None;
    };
    if end < begin {
        return None;
    }
    let mut out: Vec<&str> = lines[..=begin].to_vec();
    out.extend(table.lines());
    out.extend(&lines[end..]);
    let mut joined = out.join("\n");
    if text.ends_with('\n') {
        joined.push('\n');
    }
    Some(joined)
}

/// One flag as documented.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    pub long: String,
    pub env: String,
    pub default: String,
    pub help: String,
}

/// The documented flags of a clap command (without `--help` and `--version`).
pub fn flags_of(command: &clap::Command) -> Vec<Flag> {
    command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set())
        .filter(|arg| !matches!(arg.get_id().as_str(), "help" | "version"))
        .filter_map(|arg| {
            let long = arg.get_long()?;
            let env = arg
                .get_env()
                .map(|env| env.to_string_lossy().into_owned())
                .unwrap_or_default();
            let default = arg
                .get_default_values()
                .iter()
                .map(|value| value.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(",");
            let help = arg
                .get_long_help()
                .or_else(|| arg.get_help())
                .map(|help| help.to_string())
                .unwrap_or_default();
            let choices: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|value| !value.is_hide_set())
                .map(|value| format!("`{}`", value.get_name()))
                .collect();
            let mut help = one_line(&help);
            if !choices.is_empty() {
                help.push_str(&format!(" (one of {})", choices.join(", ")));
            }
            Some(Flag {
                long: format!("--{long}"),
                env,
                default,
                help,
            })
        })
        .collect()
}

/// Help text as one Markdown table cell.
fn one_line(help: &str) -> String {
    help.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn code(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!("`{text}`")
    }
}

/// The generated Markdown: flags both binaries share, then each binary's own.
pub fn flags_table() -> String {
    let core = flags_of(&sandbox_controller::args::Args::command());
    let extensions = flags_of(&extensions_controller::args::Args::command());
    let shared: Vec<Flag> = core
        .iter()
        .filter(|f| extensions.contains(f))
        .cloned()
        .collect();
    let only = |flags: &[Flag]| -> Vec<Flag> {
        flags
            .iter()
            .filter(|f| !shared.contains(f))
            .cloned()
            .collect()
    };
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from the binaries' flag definitions; edit the `///` doc comments of \
         their `Args`, then run `cargo xtask docs`. -->\n",
    );
    let sections = [
        ("Both controllers", shared.clone()),
        ("`sandbox-controller` only", only(&core)),
        ("`extensions-controller` only", only(&extensions)),
    ];
    for (title, flags) in sections {
        out.push_str(&format!("\n**{title}**\n\n"));
        out.push_str("| flag | environment variable | default | what it does |\n");
        out.push_str("| --- | --- | --- | --- |\n");
        for flag in &flags {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                flag.long,
                code(&flag.env),
                code(&flag.default),
                flag.help
            ));
        }
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_replace_only_the_generated_part() {
        let text = format!("intro\n{BEGIN}\nold\n{END}\noutro\n");
        let out = replace_between_markers(&text, "new 1\nnew 2\n").unwrap();
        assert_eq!(out, format!("intro\n{BEGIN}\nnew 1\nnew 2\n{END}\noutro\n"));
    }

    #[test]
    fn missing_or_duplicate_markers_are_refused() {
        assert!(replace_between_markers("no markers\n", "x").is_none());
        let twice = format!("{BEGIN}\n{END}\n{BEGIN}\n{END}\n");
        assert!(replace_between_markers(&twice, "x").is_none());
        let reversed = format!("{END}\n{BEGIN}\n");
        assert!(replace_between_markers(&reversed, "x").is_none());
    }

    #[test]
    fn table_lists_every_flag_of_both_binaries_once() {
        let table = flags_table();
        for flag in [
            "--leader-elect",
            "--kubeconfig",
            "--kube-api-qps",
            "--sandbox-concurrent-workers",
            "--sandbox-claim-concurrent-workers",
            "--sandbox-warm-pool-max-batch-size",
        ] {
            assert_eq!(
                table.matches(&format!("| `{flag}` |")).count(),
                1,
                "{flag} in\n{table}"
            );
        }
        assert!(
            table.contains(
                "| `--sandbox-concurrent-workers` | `SANDBOX_CONCURRENT_WORKERS` | `100` |"
            )
        );
        assert!(!table.contains("`--help`"));
    }
}
