//! `cargo xtask bench`: claim latency, throughput, API writes and footprint of the two
//! controllers against devcluster, or with `--cluster real` against the real control plane of
//! `cargo xtask cluster`, every component a separate process on this machine.
//!
//! The run builds the binaries, then for each scenario starts a fresh control plane (devcluster
//! with simulated nodes, or etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
//! kwok, with a configurable pod start-up delay) and both controllers (on the real control plane
//! each with a token of its own ServiceAccount from the release's RBAC), measures the server's
//! own create throughput (so figures can be read as ratios), drives the scenario's load with its
//! own client and watch, scrapes request counters (the server's, its audit log on the real
//! control plane, and each controller's) and `/proc`, and writes `report.json`, `report.md` and
//! SVG charts into `--out`.
//!
//! It is a benchmark, not a test: nothing here fails on a time. `--quick` shrinks every
//! scenario to a smoke run that checks the harness works.
//!
//! | module | what it holds |
//! |---|---|
//! | [`cluster`] | building, starting, killing and restarting the processes; the bench client |
//! | [`workload`] | CRDs, templates, pools, claims, Sandboxes; open/closed-loop creates; the Ready watch |
//! | [`scenario`] | the scenarios and their sizes |
//! | [`counters`] | API request counters and their deltas |
//! | [`proc_stats`] | RSS, CPU time, machine facts from `/proc` |
//! | [`stats`] | percentiles, windows, CDF |
//! | [`report`] | `report.json` and `report.md` |
//! | [`svg`] | the charts |
//! | [`prom`] | the Prometheus text reader |
//! | [`apiserver_profile`] | `--profile-apiserver`: kube-apiserver's CPU profile and its shares |

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use serde_json::json;

pub mod apiserver_profile;
pub mod cluster;
pub mod counters;
pub mod error;
pub mod interrupt;
pub mod optimized_client;
pub mod proc_stats;
pub mod prom;
pub mod queue_depth;
pub mod repeat;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod svg;
pub mod workload;

pub use error::BenchError;

use cluster::{BuildProfile, ClusterKind, ControllerOptions, DevclusterOptions, RealOptions};
use report::Report;
use scenario::{Ctx, ScenarioName, Sizes};

/// Arguments of `cargo xtask bench`.
#[derive(Debug, Clone, Args)]
// The field docs are `--help` text, where `<workspace>` names a placeholder, not HTML.
#[allow(rustdoc::invalid_html_tags)]
pub struct BenchArgs {
    /// Scenario to run (repeatable). Default: all, in the order devcluster, gate, saturate,
    /// sustained, refill, cold, scale, writes.
    #[arg(long = "scenario", value_enum, value_name = "NAME")]
    pub scenarios: Vec<ScenarioName>,

    /// A small, fast smoke run of every scenario (checks the harness, never a time). Builds
    /// the dev profile unless --build-profile says otherwise.
    #[arg(long)]
    pub quick: bool,

    /// Output directory for report.json, report.md, the charts and the processes' logs.
    /// [default: <workspace>/target/bench]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Cargo profile of the benchmarked binaries. [default: release, dev with --quick]
    #[arg(long, value_enum)]
    pub build_profile: Option<BuildProfile>,

    /// Use the binaries already built for the profile instead of running cargo build. A
    /// release run also uses `target/release/xtask` for the benchmark's own client when it
    /// exists (otherwise the client runs in the debug build, which is said on stderr).
    #[arg(long)]
    pub no_build: bool,

    /// The control plane the scenarios run on: `devcluster` (ours, in memory) or `real` (etcd,
    /// kube-apiserver, kube-controller-manager, kube-scheduler and kwok, as `cargo xtask
    /// cluster` runs them; needs Go, the first run builds them; each controller runs with a
    /// token of its own ServiceAccount).
    #[arg(long, value_enum, default_value_t = ClusterKind::Devcluster)]
    pub cluster: ClusterKind,

    /// Simulated nodes in devcluster, or kwok nodes on the real control plane (the reference's
    /// CI gate uses 100).
    #[arg(long, default_value_t = 100)]
    pub nodes: u32,

    /// Time from scheduling to Running (devcluster's nodes or kwok): `0`, `200ms` or a range
    /// `100ms..2s`.
    #[arg(long, default_value = "100ms..500ms")]
    pub pod_startup_delay: String,

    /// Log filter passed to both controllers (--log-level).
    #[arg(long, default_value = "info")]
    pub controller_log_level: String,

    /// Extra argument for the extensions-controller, e.g.
    /// `--extensions-controller-arg=--sandbox-claim-concurrent-workers=200` (repeatable;
    /// recorded in report.json under `settings.controllers`).
    #[arg(
        long = "extensions-controller-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub extensions_controller_args: Vec<String>,

    /// Extra argument for the sandbox-controller (repeatable), as --extensions-controller-arg.
    #[arg(
        long = "sandbox-controller-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    pub sandbox_controller_args: Vec<String>,

    /// Override one scenario size, e.g. `--set scale_sandboxes=2000` (repeatable; the keys
    /// are listed under `settings.sizes` in report.json).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sizes: Vec<String>,

    /// Run each scenario N times and report the median run (by its headline figure; every
    /// run is listed under `details.repeats`, runs after the first write under
    /// `DIR/repeat-K/`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,

    /// Multiplies every wait deadline (for slow machines or debug builds).
    #[arg(long, default_value_t = 1.0)]
    pub timeout_factor: f64,

    /// With `--cluster real`: record kube-apiserver's CPU profile (Go's pprof) over each
    /// scenario's measured phases into `DIR/<scenario>/kube-apiserver.cpu.pb.gz`, and report
    /// which share of it each part of kube-apiserver took
    /// (`details.kube_apiserver_cpu_profile`). The profiler costs kube-apiserver a little CPU.
    #[arg(long)]
    pub profile_apiserver: bool,
}

/// Runs the benchmark. Returns an error only when the harness itself cannot run (build,
/// output directory); a failing scenario is recorded in the report and makes the run fail at
/// the end, after the report is written.
pub fn run(args: &BenchArgs) -> Result<(), BenchError> {
    if let Some(result) = optimized_client::hand_over(profile_of(args), !args.no_build) {
        return result;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(interrupt::until_signalled(run_async(args)))
}

async fn run_async(args: &BenchArgs) -> Result<(), BenchError> {
    if args.profile_apiserver && args.cluster != ClusterKind::Real {
        return Err(BenchError::Unavailable(
            "--profile-apiserver profiles kube-apiserver, so it needs --cluster real".into(),
        ));
    }
    let profile = profile_of(args);
    let out = args.out.clone().unwrap_or_else(|| {
        crate::workspace::workspace_root()
            .join("target")
            .join("bench")
    });
    std::fs::create_dir_all(&out).map_err(|e| BenchError::io("creating", &out, e))?;
    let sizes = if args.quick {
        Sizes::quick()
    } else {
        Sizes::full_for(args.cluster)
    }
    .with_overrides(&args.sizes)?;
    let real = match args.cluster {
        ClusterKind::Devcluster => None,
        ClusterKind::Real => Some(RealOptions {
            nodes: args.nodes,
            pod_startup_delay: realcluster::Delay::parse(&args.pod_startup_delay)
                .map_err(|e| BenchError::Unavailable(format!("--pod-startup-delay: {e}")))?,
            profile_apiserver: args.profile_apiserver,
        }),
    };
    let upstream_versions = match args.cluster {
        ClusterKind::Devcluster => None,
        ClusterKind::Real => Some(pinned_versions()?),
    };
    let binaries = cluster::build_for(profile, !args.no_build, args.cluster)?;
    let devcluster = DevclusterOptions {
        nodes: args.nodes,
        pod_startup_delay: args.pod_startup_delay.clone(),
        extra_args: Vec::new(),
    };
    let controllers = ControllerOptions {
        log_level: args.controller_log_level.clone(),
        sandbox_args: args.sandbox_controller_args.clone(),
        extensions_args: args.extensions_controller_args.clone(),
        leader_elect: false,
    };
    let ctx = Ctx {
        binaries: &binaries,
        out: &out,
        sizes: &sizes,
        devcluster: &devcluster,
        real: real.as_ref(),
        controllers: &controllers,
        ticks_per_second: proc_stats::clock_ticks_per_second(),
        timeout_factor: if args.timeout_factor > 0.0 {
            args.timeout_factor
        } else {
            1.0
        },
    };
    let mut selected = if args.scenarios.is_empty() {
        ScenarioName::ALL.to_vec()
    } else {
        args.scenarios.clone()
    };
    selected.sort();
    selected.dedup();

    let machine = proc_stats::Machine::detect();
    let mut settings = BTreeMap::new();
    settings.insert("cluster".to_string(), json!(args.cluster.key()));
    settings.insert("nodes".to_string(), json!(args.nodes));
    settings.insert(
        "pod_startup_delay".to_string(),
        json!(args.pod_startup_delay),
    );
    settings.insert(
        "controller_log_level".to_string(),
        json!(args.controller_log_level),
    );
    settings.insert("sizes".to_string(), serde_json::to_value(&sizes)?);
    settings.insert("repeat".to_string(), json!(args.repeat));
    if args.profile_apiserver {
        settings.insert("profile_apiserver".to_string(), json!(true));
    }
    settings.insert(
        "client_build_profile".to_string(),
        serde_json::to_value(optimized_client::running_profile())?,
    );
    settings.insert(
        "controllers".to_string(),
        if controllers.sandbox_args.is_empty() && controllers.extensions_args.is_empty() {
            json!("separate processes, --leader-elect=false, default workers and client limits")
        } else {
            json!({
                "processes": "separate, --leader-elect=false, other flags at their defaults",
                "sandbox_controller_args": controllers.sandbox_args,
                "extensions_controller_args": controllers.extensions_args,
            })
        },
    );
    let mut report = Report {
        schema_version: 1,
        cluster: report::ClusterInfo {
            kind: args.cluster,
            upstream: upstream_versions.map(|v| {
                json!({"kubernetes": v.kubernetes, "etcd": v.etcd, "kwok": v.kwok,
                       "pinned_in": "upstream/go.mod"})
            }),
        },
        command: command_line(),
        started_at: jiff::Timestamp::now().to_string(),
        git_commit: git_commit(),
        quick: args.quick,
        build_profile: profile,
        settings,
        machine,
        scenarios: BTreeMap::new(),
    };
    for name in selected {
        let mut runs = Vec::new();
        for run in 1..=args.repeat {
            let dir = if run == 1 {
                String::new()
            } else {
                format!("repeat-{run}")
            };
            let run_out = out.join(&dir);
            std::fs::create_dir_all(&run_out)
                .map_err(|e| BenchError::io("creating", &run_out, e))?;
            let run_ctx = Ctx {
                out: &run_out,
                ..ctx
            };
            if args.repeat == 1 {
                eprintln!("bench: scenario {}", name.key());
            } else {
                eprintln!(
                    "bench: scenario {} (run {run} of {})",
                    name.key(),
                    args.repeat
                );
            }
            let report = scenario::run(name, &run_ctx).await;
            runs.push(repeat::Run { dir, report });
        }
        let scenario_report = repeat::median(name, runs);
        eprintln!(
            "bench: {} {} in {:.1} s",
            name.key(),
            scenario_report.status,
            scenario_report.duration_s
        );
        report
            .scenarios
            .insert(name.key().to_string(), scenario_report);
        // Write after every scenario, so a long run that is interrupted keeps what it measured.
        write_report(&out, &report)?;
    }
    report.machine.finish();
    write_report(&out, &report)?;
    eprintln!("bench: wrote {}", out.join("report.md").display());
    let failed: Vec<&str> = report
        .scenarios
        .iter()
        .filter(|(_, s)| s.status != "ok")
        .map(|(name, _)| name.as_str())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(BenchError::Unavailable(format!(
            "scenario(s) failed: {}; see {}",
            failed.join(", "),
            out.join("report.md").display()
        )))
    }
}

/// The profile of the benchmarked binaries: release unless `--quick` or `--build-profile` say
/// otherwise.
fn profile_of(args: &BenchArgs) -> BuildProfile {
    args.build_profile.unwrap_or(if args.quick {
        BuildProfile::Dev
    } else {
        BuildProfile::Release
    })
}

/// The upstream releases pinned in `upstream/go.mod` (what the real control plane runs).
fn pinned_versions() -> Result<realcluster::Versions, BenchError> {
    let path = realcluster::upstream::module_dir().join("go.mod");
    let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io("reading", &path, e))?;
    realcluster::Versions::from_go_mod(&text)
        .map_err(|e| BenchError::Unavailable(format!("{}: {e}", path.display())))
}

fn write_report(out: &std::path::Path, report: &Report) -> Result<(), BenchError> {
    let json_path = out.join("report.json");
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(&json_path, json + "\n")
        .map_err(|e| BenchError::io("writing", &json_path, e))?;
    let md_path = out.join("report.md");
    std::fs::write(&md_path, report::markdown(report))
        .map_err(|e| BenchError::io("writing", &md_path, e))?;
    Ok(())
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(crate::workspace::workspace_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}
