//! When `cargo xtask dev` started, so its "ready in" figure counts from the command, not from
//! the moment xtask's `main` ran.
//!
//! `cargo xtask dev` is `cargo run --package xtask -- dev`: Cargo first compiles xtask (minutes
//! on a fresh clone), then replaces itself with the xtask binary (`exec`, same process id). The
//! process's start time in `/proc/self/stat` is therefore the moment the user's `cargo` command
//! started, compile included. Where it cannot be read (not Linux), the figure counts from
//! `main` and says so.

use std::time::{Duration, Instant};

/// The start of the command and of xtask's `main`.
#[derive(Debug, Clone, Copy)]
pub struct StartClock {
    /// When the process (the user's `cargo` command) started; `None` when unknown.
    pub command: Option<Instant>,
    /// When xtask's `main` (in fact [`StartClock::now`]) ran.
    pub main: Instant,
}

impl StartClock {
    /// Reads both clocks; call it as early as possible.
    pub fn now() -> Self {
        let main = Instant::now();
        let command = process_age().and_then(|age| main.checked_sub(age));
        StartClock { command, main }
    }

    /// The earliest known start: the command's, else `main`'s.
    pub fn start(&self) -> Instant {
        self.command.unwrap_or(self.main)
    }

    /// Time spent before `main`: Cargo compiling (or checking) xtask. Zero when unknown.
    pub fn before_main(&self) -> Duration {
        self.command
            .map(|command| self.main.saturating_duration_since(command))
            .unwrap_or_default()
    }
}

/// How long ago this process started, from `/proc/self/stat` (start time in clock ticks after
/// boot) and `/proc/uptime`.
fn process_age() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
    let ticks = rustix::param::clock_ticks_per_second();
    age_from_proc(&stat, &uptime, ticks)
}

/// The process age from the text of `/proc/<pid>/stat` and `/proc/uptime`.
pub fn age_from_proc(stat: &str, uptime: &str, ticks_per_second: u64) -> Option<Duration> {
    // Field 2 (the command name) is in parentheses and may hold spaces; field 22, the start
    // time, is the 20th field after it.
    let (_, after_name) = stat.rsplit_once(')')?;
    let start_ticks: u64 = after_name.split_whitespace().nth(19)?.parse().ok()?;
    if ticks_per_second == 0 {
        return None;
    }
    let started = Duration::from_secs_f64(start_ticks as f64 / ticks_per_second as f64);
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    Duration::try_from_secs_f64(up).ok()?.checked_sub(started)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_the_22nd_field_even_with_spaces_in_the_name() {
        // pid (comm) state ppid ... field 22 = 12345 ticks = 123.45 s after boot.
        let stat = "4242 (cargo xtask) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 12345 99 100";
        let age = age_from_proc(stat, "200.45 1000.0\n", 100).unwrap();
        assert_eq!(age, Duration::from_secs(77));
        assert_eq!(age_from_proc("garbage", "1.0 1.0", 100), None);
        assert_eq!(age_from_proc(stat, "", 100), None);
    }

    #[test]
    fn this_process_started_before_now_and_recently() {
        let clock = StartClock::now();
        if let Some(command) = clock.command {
            assert!(command <= clock.main);
            assert!(clock.before_main() < Duration::from_secs(24 * 3600));
        }
        assert!(clock.start() <= Instant::now());
    }
}
