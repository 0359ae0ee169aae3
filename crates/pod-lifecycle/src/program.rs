//! What a container's command does, as far as the simulated kubelet can tell without running it.
//!
//! Nothing is executed: the command line is read against a small grammar (documented in
//! `docs/devcluster.md`, "Containers that finish") and either ends after a known time with a
//! known exit code, or runs until it is stopped. It is not a shell: anything outside the grammar
//! (pipes, redirections, variables, loops, unknown programs) is taken as a program that runs
//! until it is stopped, as every container did before.
//!
//! The grammar, on the container's argv (`command` followed by `args`; `args` alone when there
//! is no `command`, as for images without an entrypoint):
//!
//! - `true`, `false`, `sleep DURATION...` (also as `/bin/true`, `/usr/bin/sleep`, ...);
//! - a shell (`sh`, `bash`, `ash`, `dash`, any directory) with `-c SCRIPT` (flags `-e`, `-x`,
//!   `-u` and combinations such as `-ec` may come before `-c`). `SCRIPT` is a list of commands
//!   separated by `;`, `&&`, `||` or newlines; each command is one of `true`, `:`, `false`,
//!   `sleep DURATION...`, `exit [CODE]`, `echo ...`, `printf ...`, each optionally after `exec`.
//!   Words may be quoted with `'...'` or `"..."` (no `$`, backquote or backslash inside).
//!   `&&` and `||` run their right side on success and failure as a shell does; `set -e` (the
//!   `-e` flag) ends the script at the first failing list. The script ends with the status of
//!   its last command, or with `exit`'s code.
//!
//! `DURATION` is a decimal number with an optional unit `s`, `m`, `h` or `d` (GNU `sleep`);
//! several are added; `sleep infinity` never ends.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};

/// What a container's main process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// It exits on its own, this long after it starts, with this code.
    Exits { after: Duration, code: i32 },
    /// It runs until it is stopped (`sleep infinity`, or a command outside the grammar).
    Runs,
}

/// The program a container runs (see the module documentation for the grammar).
pub fn program_of(container: &Container) -> Program {
    let mut argv: Vec<&str> = container
        .command
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    argv.extend(container.args.iter().flatten().map(String::as_str));
    parse_argv(&argv).unwrap_or(Program::Runs)
}

/// How long a `preStop` handler runs: a `sleep` action's seconds, an `exec` command's time when
/// it ends on its own by the grammar; zero for anything else (an HTTP call, a command outside the
/// grammar, a command that would never end is still cut by the grace period).
pub fn hook_duration(handler: &LifecycleHandler) -> Option<Duration> {
    if let Some(sleep) = &handler.sleep {
        return Some(Duration::from_secs(sleep.seconds.max(0).unsigned_abs()));
    }
    let Some(exec) = handler.exec.as_ref() else {
        return Some(Duration::ZERO);
    };
    let argv: Vec<&str> = exec.command.iter().flatten().map(String::as_str).collect();
    match parse_argv(&argv) {
        Some(Program::Exits { after, .. }) => Some(after),
        // Never ends by itself: the grace period ends it.
        Some(Program::Runs) => None,
        None => Some(Duration::ZERO),
    }
}

/// `None` when the argv is outside the grammar.
fn parse_argv(argv: &[&str]) -> Option<Program> {
    let (&first, rest) = argv.split_first()?;
    let program = basename(first);
    if is_shell(program) {
        let mut errexit = false;
        let mut i = 0;
        while let Some(flag) = rest.get(i).and_then(|f| f.strip_prefix('-')) {
            if flag.is_empty() || !flag.chars().all(|c| matches!(c, 'c' | 'e' | 'x' | 'u')) {
                return None;
            }
            errexit |= flag.contains('e');
            i += 1;
            if flag.contains('c') {
                let script = rest.get(i)?;
                return run_script(script, errexit);
            }
        }
        return None;
    }
    let words: Vec<String> = argv.iter().map(|w| (*w).to_string()).collect();
    let mut clock = Clock::default();
    match simple_command(&words, &mut clock)? {
        Step::Status(code) | Step::Exit(code) => Some(clock.exits(code)),
        Step::Forever => Some(Program::Runs),
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn is_shell(program: &str) -> bool {
    matches!(program, "sh" | "bash" | "ash" | "dash")
}

#[derive(Default)]
struct Clock {
    elapsed: Duration,
}

impl Clock {
    fn exits(&self, code: i32) -> Program {
        Program::Exits {
            after: self.elapsed,
            code: code.rem_euclid(256),
        }
    }
}

/// What one command did.
enum Step {
    /// Finished with this status; the script goes on.
    Status(i32),
    /// The shell exits with this code.
    Exit(i32),
    /// It never ends.
    Forever,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    /// `;` or a newline.
    Then,
    And,
    Or,
}

/// Splits a script into words and separators; `None` for anything outside the grammar.
fn tokenize(script: &str) -> Option<Vec<Token>> {
    let mut tokens = Vec::new();
    let mut chars = script.chars().peekable();
    let mut word: Option<String> = None;
    let end_word = |word: &mut Option<String>, tokens: &mut Vec<Token>| {
        if let Some(w) = word.take() {
            tokens.push(Token::Word(w));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => end_word(&mut word, &mut tokens),
            '\n' | ';' => {
                end_word(&mut word, &mut tokens);
                tokens.push(Token::Then);
            }
            '&' => {
                if chars.next() != Some('&') {
                    return None; // a background job
                }
                end_word(&mut word, &mut tokens);
                tokens.push(Token::And);
            }
            '|' => {
                if chars.next() != Some('|') {
                    return None; // a pipe
                }
                end_word(&mut word, &mut tokens);
                tokens.push(Token::Or);
            }
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some('$' | '`' | '\\') if c == '"' => return None,
                        Some(other) => w.push(other),
                        None => return None,
                    }
                }
            }
            '$' | '`' | '\\' | '<' | '>' | '(' | ')' | '{' | '}' | '#' | '*' | '?' | '[' | '~'
            | '=' => return None,
            other => word.get_or_insert_with(String::new).push(other),
        }
    }
    end_word(&mut word, &mut tokens);
    Some(tokens)
}

/// Runs a script's lists in order (see the module documentation).
fn run_script(script: &str, errexit: bool) -> Option<Program> {
    let tokens = tokenize(script)?;
    let mut clock = Clock::default();
    let mut status = 0;
    // Split into and-or lists separated by `Then`.
    for list in tokens.split(|t| *t == Token::Then) {
        if list.is_empty() {
            continue;
        }
        let mut parts: Vec<(Option<&Token>, Vec<String>)> = vec![(None, Vec::new())];
        for token in list {
            match token {
                Token::Word(w) => parts.last_mut()?.1.push(w.clone()),
                op => parts.push((Some(op), Vec::new())),
            }
        }
        if parts.iter().any(|(_, words)| words.is_empty()) {
            return None; // `&& ;` and the like: a syntax error, not ours to judge
        }
        let mut ran_last = false;
        for (index, (op, words)) in parts.iter().enumerate() {
            let runs = match op {
                None => true,
                Some(Token::And) => status == 0,
                Some(_) => status != 0,
            };
            if !runs {
                // A skipped command still needs to be in the grammar.
                simple_command(words, &mut Clock::default())?;
                continue;
            }
            match simple_command(words, &mut clock)? {
                Step::Status(code) => status = code,
                Step::Exit(code) => return Some(clock.exits(code)),
                Step::Forever => return Some(Program::Runs),
            }
            ran_last = index + 1 == parts.len();
        }
        if errexit && status != 0 && ran_last {
            return Some(clock.exits(status));
        }
    }
    Some(clock.exits(status))
}

/// One command of the grammar; `None` outside it.
fn simple_command(words: &[String], clock: &mut Clock) -> Option<Step> {
    let (first, args) = words.split_first()?;
    if first == "exec" {
        return match simple_command(args, clock)? {
            Step::Status(code) | Step::Exit(code) => Some(Step::Exit(code)),
            Step::Forever => Some(Step::Forever),
        };
    }
    match basename(first) {
        "true" | ":" if args.is_empty() || first == ":" => Some(Step::Status(0)),
        "false" if args.is_empty() => Some(Step::Status(1)),
        "echo" | "printf" => Some(Step::Status(0)),
        "exit" => match args {
            [] => Some(Step::Exit(0)),
            [code] => Some(Step::Exit(code.parse::<i32>().ok()?)),
            _ => None,
        },
        "sleep" => {
            if args.is_empty() {
                return None;
            }
            let mut total = Duration::ZERO;
            for arg in args {
                match sleep_duration(arg)? {
                    Some(d) => total = total.checked_add(d)?,
                    None => return Some(Step::Forever),
                }
            }
            clock.elapsed = clock.elapsed.checked_add(total)?;
            Some(Step::Status(0))
        }
        _ => None,
    }
}

/// GNU `sleep`'s operand: `Some(None)` for `infinity`.
fn sleep_duration(arg: &str) -> Option<Option<Duration>> {
    if matches!(arg, "infinity" | "inf") {
        return Some(None);
    }
    let (number, unit) = match arg.char_indices().last()? {
        (i, 's') => (&arg[..i], 1.0),
        (i, 'm') => (&arg[..i], 60.0),
        (i, 'h') => (&arg[..i], 3600.0),
        (i, 'd') => (&arg[..i], 86_400.0),
        _ => (arg, 1.0),
    };
    if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    Duration::try_from_secs_f64(value * unit).ok().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn container(command: serde_json::Value, args: serde_json::Value) -> Container {
        let mut c = json!({ "name": "c", "image": "busybox" });
        if !command.is_null() {
            c["command"] = command;
        }
        if !args.is_null() {
            c["args"] = args;
        }
        serde_json::from_value(c).unwrap()
    }

    fn program(command: serde_json::Value) -> Program {
        program_of(&container(command, serde_json::Value::Null))
    }

    fn exits(secs: f64, code: i32) -> Program {
        Program::Exits {
            after: Duration::from_secs_f64(secs),
            code,
        }
    }

    #[test]
    fn direct_programs() {
        assert_eq!(program(json!(["true"])), exits(0.0, 0));
        assert_eq!(program(json!(["/bin/false"])), exits(0.0, 1));
        assert_eq!(program(json!(["sleep", "2"])), exits(2.0, 0));
        assert_eq!(program(json!(["sleep", "1m", "0.5"])), exits(60.5, 0));
        assert_eq!(program(json!(["sleep", "infinity"])), Program::Runs);
        assert_eq!(
            program(json!(["nginx", "-g", "daemon off;"])),
            Program::Runs
        );
        assert_eq!(
            program(serde_json::Value::Null),
            Program::Runs,
            "no command: the image's"
        );
        // args alone stand for the whole command (images without an entrypoint).
        assert_eq!(
            program_of(&container(serde_json::Value::Null, json!(["sleep", "3"]))),
            exits(3.0, 0)
        );
        assert_eq!(
            program_of(&container(json!(["sleep"]), json!(["4"]))),
            exits(4.0, 0)
        );
    }

    #[test]
    fn shell_scripts() {
        let sh = |script: &str| program(json!(["sh", "-c", script]));
        assert_eq!(sh("exit 0"), exits(0.0, 0));
        assert_eq!(sh("exit 1"), exits(0.0, 1));
        assert_eq!(sh("sleep 2; exit 0"), exits(2.0, 0));
        assert_eq!(sh("sleep 2\nexit 3"), exits(2.0, 3));
        assert_eq!(sh("echo 'hello; world' && sleep 1.5"), exits(1.5, 0));
        assert_eq!(sh("false"), exits(0.0, 1));
        assert_eq!(sh("false || exit 4"), exits(0.0, 4));
        assert_eq!(sh("true || exit 4"), exits(0.0, 0));
        assert_eq!(sh("false && sleep 9; true"), exits(0.0, 0));
        assert_eq!(sh("exit 257"), exits(0.0, 1), "codes are modulo 256");
        assert_eq!(sh("exec sleep 1"), exits(1.0, 0));
        assert_eq!(sh("sleep 1; sleep infinity"), Program::Runs);
        assert_eq!(
            program(json!(["/bin/bash", "-ec", "false; exit 0"])),
            exits(0.0, 1),
            "-e stops at the first failing list"
        );
        assert_eq!(
            program(json!(["/bin/sh", "-e", "-c", "false || true; sleep 1"])),
            exits(1.0, 0)
        );
        // Outside the grammar: runs until stopped.
        for script in [
            "sleep $T",
            "python app.py",
            "sleep 1 | cat",
            "sleep 1 &",
            "echo hi > /tmp/x",
            "while true; do sleep 1; done",
            "exit x",
            "sleep",
            "sleep 1 &&",
        ] {
            assert_eq!(sh(script), Program::Runs, "{script}");
        }
        assert_eq!(program(json!(["sh", "script.sh"])), Program::Runs);
    }

    #[test]
    fn pre_stop_hooks() {
        let hook =
            |v: serde_json::Value| -> LifecycleHandler { serde_json::from_value(v).unwrap() };
        assert_eq!(
            hook_duration(&hook(json!({"sleep": {"seconds": 5}}))),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            hook_duration(&hook(json!({"exec": {"command": ["sh", "-c", "sleep 3"]}}))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            hook_duration(&hook(json!({"exec": {"command": ["nginx", "-s", "quit"]}}))),
            Some(Duration::ZERO)
        );
        assert_eq!(
            hook_duration(&hook(json!({"exec": {"command": ["sleep", "infinity"]}}))),
            None
        );
        assert_eq!(
            hook_duration(&hook(json!({"httpGet": {"port": 80}}))),
            Some(Duration::ZERO)
        );
    }
}
