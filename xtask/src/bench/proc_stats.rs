//! Process and machine figures from `/proc` (Linux): resident memory, CPU time, load average,
//! CPU model and memory size. Parsing is pure; reading is a thin layer on top.

use std::time::Instant;

use serde::Serialize;

/// The machine a scenario ran on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    /// Logical CPUs this process may use.
    pub cores: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    /// 1-minute load average when the scenario started and ended: figures taken with a load
    /// well above `cores` were measured on a contended machine.
    pub load_average_start: f64,
    pub load_average_end: f64,
    pub kernel: String,
}

impl Machine {
    /// The machine now (the end load average is filled in by [`Machine::finish`]).
    pub fn detect() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let load = load_average();
        Machine {
            cores: std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(1),
            cpu_model: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown".into()),
            memory_gib: mem_total_kib(&meminfo)
                .map(|kib| super::stats::round(kib as f64 / 1024.0 / 1024.0, 1))
                .unwrap_or(0.0),
            load_average_start: load,
            load_average_end: load,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_string())
                .unwrap_or_default(),
        }
    }

    /// Records the load average at the end of the scenario.
    pub fn finish(&mut self) {
        self.load_average_end = load_average();
    }
}

/// The 1-minute load average, or 0 when unreadable.
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| parse_load_average(&s))
        .unwrap_or(0.0)
}

fn parse_load_average(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name") || l.starts_with("Model"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

fn mem_total_kib(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Resident set size in KiB from `/proc/PID/status` text.
pub fn parse_rss_kib(status: &str) -> Option<u64> {
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// User + system CPU time in clock ticks from `/proc/PID/stat` text. The command name (field
/// 2) may contain spaces and parentheses, so fields are counted after its last `)`.
pub fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    // After the comm: state is field 3, utime field 14, stime field 15 (1-based in proc(5)).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every mainstream Linux).
pub fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Current RSS (MiB) of `pid`, or `None` when the process is gone.
pub fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_rss_kib(&status).map(|kib| kib as f64 / 1024.0)
}

/// CPU seconds `pid` has used so far.
pub fn cpu_seconds(pid: u32, ticks_per_second: f64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat).map(|ticks| ticks as f64 / ticks_per_second)
}

/// A CPU-time baseline for one process: [`CpuMeter::cores`] is the average number of cores it
/// used since the baseline.
#[derive(Debug, Clone, Copy)]
pub struct CpuMeter {
    pid: u32,
    ticks_per_second: f64,
    cpu_start: f64,
    wall_start: Instant,
}

impl CpuMeter {
    pub fn start(pid: u32, ticks_per_second: f64) -> Self {
        CpuMeter {
            pid,
            ticks_per_second,
            cpu_start: cpu_seconds(pid, ticks_per_second).unwrap_or(0.0),
            wall_start: Instant::now(),
        }
    }

    /// Average cores used since [`CpuMeter::start`], or `None` when the process is gone.
    pub fn cores(&self) -> Option<f64> {
        let cpu = cpu_seconds(self.pid, self.ticks_per_second)?;
        let wall = self.wall_start.elapsed().as_secs_f64();
        (wall > 0.0).then(|| (cpu - self.cpu_start) / wall)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let stat = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 \
                    8 0 100 0 0";
        assert_eq!(parse_cpu_ticks(stat), Some(325));
        assert_eq!(
            parse_rss_kib("Name:\tx\nVmRSS:\t   20480 kB\nVmSwap: 0 kB\n"),
            Some(20480)
        );
        assert_eq!(parse_load_average("3.25 2.00 1.00 2/300 999\n"), Some(3.25));
        assert_eq!(
            mem_total_kib("MemTotal:       25165824 kB\n"),
            Some(25165824)
        );
        assert_eq!(
            cpu_model("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n").as_deref(),
            Some("AMD EPYC 7B13")
        );
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(rss_mib(pid).is_some_and(|mib| mib > 0.0));
        assert!(cpu_seconds(pid, clock_ticks_per_second()).is_some());
    }
}
