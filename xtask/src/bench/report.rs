//! `report.json` (stable keys, machine-readable) and `report.md` (the table
//! `docs/performance.md` quotes).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::counters::RequestDelta;
use super::proc_stats::Machine;
use super::stats::Percentiles;

/// Whole-run report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Bumped when a key changes meaning or disappears.
    pub schema_version: u32,
    /// The control plane the scenarios ran on.
    pub cluster: ClusterInfo,
    /// The command line that produced this report.
    pub command: String,
    pub started_at: String,
    pub git_commit: String,
    pub quick: bool,
    pub build_profile: super::cluster::BuildProfile,
    /// devcluster and workload settings shared by every scenario.
    pub settings: BTreeMap<String, Value>,
    pub machine: Machine,
    /// Scenario name → its figures, in run order.
    pub scenarios: BTreeMap<String, ScenarioReport>,
}

/// The control plane of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ClusterInfo {
    /// `devcluster` or `real`.
    pub kind: super::cluster::ClusterKind,
    /// The real control plane's releases (Kubernetes, etcd, kwok); `null` on devcluster.
    pub upstream: Option<Value>,
}

/// One scenario's figures. Every key is always present; `null` means "does not apply to this
/// scenario" (or, with `status: failed`, "not measured").
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    /// `ok` or `failed`.
    pub status: String,
    pub error: Option<String>,
    pub description: String,
    /// What `p50_ms`..`max_ms` measure.
    pub latency_basis: Option<String>,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub latency_samples: Option<usize>,
    /// Claim creation (client clock, before the POST) to Ready seen through the client's watch.
    pub client_latency: Option<Percentiles>,
    pub claims: Option<usize>,
    pub claims_per_second: Option<f64>,
    /// API writes per claim by controller process (its own client counters), plus `total`
    /// (every write devcluster answered for anyone but the benchmark client).
    pub writes_per_claim: Option<BTreeMap<String, f64>>,
    /// Resident memory at the end of the scenario, MiB, by controller.
    pub rss_mib: BTreeMap<String, f64>,
    /// Average cores used during the measured phase, by controller.
    pub cpu_cores: BTreeMap<String, f64>,
    /// Seconds from restarting a SIGKILLed controller to its `/readyz` answering 200.
    pub restart_ready_s: Option<BTreeMap<String, f64>>,
    /// The server's own create throughput measured at the start of this scenario (devcluster's,
    /// or kube-apiserver's with `--cluster real`; ConfigMaps with the admin credentials), to read
    /// the other figures as ratios.
    pub devcluster_writes_per_second: Option<f64>,
    pub machine: Machine,
    pub duration_s: f64,
    /// Requests the measured phase caused (not the benchmark client's), per claim where
    /// claims apply, else in total.
    pub requests: Option<RequestDelta>,
    /// Scenario-specific figures.
    pub details: BTreeMap<String, Value>,
    /// Chart files (relative to the report directory).
    pub charts: Vec<String>,
}

impl ScenarioReport {
    pub fn new(description: &str, machine: Machine) -> Self {
        ScenarioReport {
            status: "ok".into(),
            error: None,
            description: description.into(),
            latency_basis: None,
            p50_ms: None,
            p90_ms: None,
            p99_ms: None,
            max_ms: None,
            latency_samples: None,
            client_latency: None,
            claims: None,
            claims_per_second: None,
            writes_per_claim: None,
            rss_mib: BTreeMap::new(),
            cpu_cores: BTreeMap::new(),
            restart_ready_s: None,
            devcluster_writes_per_second: None,
            machine,
            duration_s: 0.0,
            requests: None,
            details: BTreeMap::new(),
            charts: Vec::new(),
        }
    }

    /// Sets the primary latency figures.
    pub fn set_latency(&mut self, basis: &str, p: Option<Percentiles>) {
        self.latency_basis = Some(basis.into());
        if let Some(p) = p {
            self.p50_ms = Some(round_ms(p.p50_ms));
            self.p90_ms = Some(round_ms(p.p90_ms));
            self.p99_ms = Some(round_ms(p.p99_ms));
            self.max_ms = Some(round_ms(p.max_ms));
            self.latency_samples = Some(p.count);
        }
    }

    pub fn detail(&mut self, key: &str, value: impl Serialize) {
        self.details.insert(
            key.into(),
            serde_json::to_value(value).unwrap_or(Value::Null),
        );
    }
}

fn round_ms(v: f64) -> f64 {
    super::stats::round(v, 2)
}

fn cell(v: Option<f64>) -> String {
    v.map(|v| format!("{v}")).unwrap_or_else(|| "-".into())
}

fn map_cell(m: &BTreeMap<String, f64>, keys: &[&str]) -> String {
    if m.is_empty() {
        return "-".into();
    }
    keys.iter()
        .map(|k| {
            m.get(*k)
                .map(|v| format!("{v}"))
                .unwrap_or_else(|| "-".into())
        })
        .collect::<Vec<_>>()
        .join(" / ")
}

/// Scenarios in run order (the JSON object is keyed and sorted by name).
fn ordered(report: &Report) -> Vec<(&str, &ScenarioReport)> {
    let mut list: Vec<(&str, &ScenarioReport)> = report
        .scenarios
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let rank = |name: &str| {
        super::scenario::ScenarioName::ALL
            .iter()
            .position(|s| s.key() == name)
            .unwrap_or(usize::MAX)
    };
    list.sort_by_key(|(name, _)| rank(name));
    list
}

/// Renders `report.md`.
pub fn markdown(report: &Report) -> String {
    let mut md = String::new();
    let m = &report.machine;
    let _ = writeln!(md, "# agent-sandbox benchmark report\n");
    let _ = writeln!(md, "- command: `{}`", report.command);
    let server = match report.cluster.kind {
        super::cluster::ClusterKind::Devcluster => {
            let _ = writeln!(md, "- cluster: devcluster");
            "devcluster"
        }
        super::cluster::ClusterKind::Real => {
            let versions = report
                .cluster
                .upstream
                .as_ref()
                .map(|v| {
                    let s = |k: &str| v[k].as_str().unwrap_or("?").to_owned();
                    format!(
                        "Kubernetes {}, etcd {}, kwok {}",
                        s("kubernetes"),
                        s("etcd"),
                        s("kwok")
                    )
                })
                .unwrap_or_else(|| "versions unknown".into());
            let _ = writeln!(
                md,
                "- cluster: **real** control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok; {versions}); each controller on a token of its own ServiceAccount"
            );
            "kube-apiserver"
        }
    };
    let _ = writeln!(
        md,
        "- started: {} (git {}), build profile `{:?}`{}",
        report.started_at,
        report.git_commit,
        report.build_profile,
        if report.quick {
            ", **--quick: a smoke run, the figures are not measurements**"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "- machine: {} cores ({}), {} GiB, Linux {}; 1-min load average {} at start",
        m.cores, m.cpu_model, m.memory_gib, m.kernel, m.load_average_start
    );
    let settings: Vec<String> = report
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(md, "- settings: {}\n", settings.join(", "));
    let _ = writeln!(
        md,
        "| scenario | status | p50 ms | p90 ms | p99 ms | max ms | claims/s | writes/claim (ext / sandbox / total) | RSS MiB (sandbox / ext) | CPU cores (sandbox / ext) | restart to ready s (sandbox / ext) | {server} creates/s | load avg (start→end) |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    const EXT: &str = "extensions-controller";
    const SBX: &str = "sandbox-controller";
    for (name, s) in ordered(report) {
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} → {} |",
            s.status,
            cell(s.p50_ms),
            cell(s.p90_ms),
            cell(s.p99_ms),
            cell(s.max_ms),
            cell(s.claims_per_second),
            s.writes_per_claim
                .as_ref()
                .map(|w| map_cell(w, &[EXT, SBX, "total"]))
                .unwrap_or_else(|| "-".into()),
            map_cell(&s.rss_mib, &[SBX, EXT]),
            map_cell(&s.cpu_cores, &[SBX, EXT]),
            s.restart_ready_s
                .as_ref()
                .map(|r| map_cell(r, &[SBX, EXT]))
                .unwrap_or_else(|| "-".into()),
            cell(s.devcluster_writes_per_second),
            s.machine.load_average_start,
            s.machine.load_average_end,
        );
    }
    for (name, s) in ordered(report) {
        let _ = writeln!(md, "\n## {name}\n\n{}\n", s.description);
        if let Some(error) = &s.error {
            let _ = writeln!(md, "**failed:** {error}\n");
        }
        if let Some(basis) = &s.latency_basis {
            let _ = writeln!(md, "- latency (p50..max): {basis}");
        }
        if let Some(c) = &s.client_latency {
            let _ = writeln!(
                md,
                "- client create → Ready (watch): p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} claims)",
                c.p50_ms, c.p90_ms, c.p99_ms, c.max_ms, c.count
            );
        }
        for (key, value) in &s.details {
            let _ = writeln!(md, "- {key}: {value}");
        }
        if let Some(requests) = &s.requests {
            let writes: Vec<String> = requests
                .writes_by_verb_resource
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            if !writes.is_empty() {
                let _ = writeln!(md, "- writes by verb and resource: {}", writes.join(", "));
            }
            let senders: Vec<String> = requests
                .writes_by_agent
                .iter()
                .map(|(agent, m)| format!("{agent} {}", super::stats::round(m.values().sum(), 2)))
                .collect();
            if !senders.is_empty() {
                let _ = writeln!(md, "- writes by sender: {}", senders.join(", "));
            }
        }
        for chart in &s.charts {
            let _ = writeln!(md, "\n![{chart}]({chart})");
        }
    }
    md
}
