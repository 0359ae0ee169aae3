//! `cargo xtask chaos`: the controllers under kills, API faults, leader pauses, churn and bad
//! input, with the invariants checked after each experiment.
//!
//! Every experiment starts a fresh cluster (devcluster with its audit log on, both controllers
//! as separate processes, built as `cargo xtask bench` builds them), a template and a warm pool,
//! then drives claims while it disturbs the controllers, stops disturbing, waits for the system
//! to converge and checks what must hold ([`invariants`], [`audit`]), and finally deletes
//! everything and checks nothing is left. It prints the figures (claims, kills, faults
//! injected, convergence and takeover times) and every violation with the objects' names, writes
//! `report.json`, and fails when any experiment found a violation.
//!
//! | experiment | what it does |
//! |---|---|
//! | `kill-storm` | SIGKILLs a controller (either, at random) every 5-7 s and restarts it |
//! | `api-faults` | devcluster fails 10 % of all requests (500) and closes every watch 1-4 s after it opens |
//! | `leader-pause` | two extensions replicas; the leader is SIGSTOPped past its Lease, the standby takes over, the old one is resumed (it must write nothing, and exit) |
//! | `churn-ready` | each claim is deleted as soon as it is Ready |
//! | `churn-fast` | each claim is deleted 0-60 ms after its creation; claims created afterwards must still be bound |
//! | `bad-input` | claims for a missing pool, with a 1 MiB annotation, a malformed trace context, a 253-character name; a template with a 253-character name |
//!
//! `--cluster real` runs them on the real control plane of the `realcluster` crate
//! (kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok nodes, as `cargo xtask
//! cluster` runs them), the controllers on their ServiceAccounts' tokens under the release's
//! RBAC: the experiments only use the Kubernetes API, process signals and an `audit.k8s.io/v1`
//! log, which that server writes too. `api-faults` needs devcluster's fault injection and is
//! skipped there (refused when asked for by name).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::bench::BenchError;
use crate::bench::cluster::BuildProfile;
use crate::bench::proc_stats::load_average;

pub mod audit;
mod experiments;
pub mod invariants;
mod lab;

pub use experiments::Experiment;

/// Which API server the experiments run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ClusterKind {
    /// devcluster (simulated nodes, fault injection, audit log).
    Devcluster,
    /// A real kube-apiserver with etcd and kwok nodes (`cargo xtask cluster`).
    Real,
}

/// Arguments of `cargo xtask chaos`.
#[derive(Debug, Clone, Args)]
// The field docs are `--help` text, where `<workspace>` names a placeholder, not HTML.
#[allow(rustdoc::invalid_html_tags)]
pub struct ChaosArgs {
    /// Experiment to run (repeatable). Default: all, in the order kill-storm, api-faults,
    /// leader-pause, churn-ready, churn-fast, bad-input.
    #[arg(long = "experiment", value_enum, value_name = "NAME")]
    pub experiments: Vec<Experiment>,

    /// A short run of every experiment (CI): 20 s each at 5 claims/s, debug builds unless
    /// --build-profile says otherwise.
    #[arg(long)]
    pub quick: bool,

    /// The API server to run against.
    #[arg(long, value_enum, default_value = "devcluster")]
    pub cluster: ClusterKind,

    /// Seconds each experiment disturbs the controllers. [default: 60, 20 with --quick]
    #[arg(long)]
    pub seconds: Option<f64>,

    /// Claims created per second during an experiment. [default: 50, 5 with --quick]
    #[arg(long)]
    pub rate: Option<f64>,

    /// Warm pool replicas. [default: 50, 5 with --quick]
    #[arg(long)]
    pub pool: Option<u32>,

    /// Output directory for report.json and the processes' logs and audit logs.
    /// [default: <workspace>/target/chaos]
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,

    /// Cargo profile of the controllers and devcluster. [default: release, dev with --quick]
    #[arg(long, value_enum)]
    pub build_profile: Option<BuildProfile>,

    /// Use the binaries already built for the profile.
    #[arg(long)]
    pub no_build: bool,

    /// Seed of the harness's random choices (kill targets and intervals, delete delays).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Multiplies every wait deadline (slow machines, debug builds).
    #[arg(long, default_value_t = 1.0)]
    pub timeout_factor: f64,
}

/// The sizes one run uses.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Sizes {
    pub seconds: f64,
    pub rate: f64,
    pub pool: u32,
}

impl ChaosArgs {
    fn sizes(&self) -> Sizes {
        let (seconds, rate, pool) = if self.quick {
            (20.0, 5.0, 5)
        } else {
            (60.0, 50.0, 50)
        };
        Sizes {
            seconds: self.seconds.unwrap_or(seconds),
            rate: self.rate.unwrap_or(rate),
            pool: self.pool.unwrap_or(pool),
        }
    }

    fn profile(&self) -> BuildProfile {
        self.build_profile.unwrap_or(if self.quick {
            BuildProfile::Dev
        } else {
            BuildProfile::Release
        })
    }
}

/// The figures and violations of one experiment.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    pub claims_created: usize,
    pub claims_bound: usize,
    pub claims_deleted: usize,
    pub kills: usize,
    pub pauses: usize,
    /// Faults devcluster injected into the controllers' requests (from the audit log).
    pub faults_injected: usize,
    /// Watches the controllers opened (from the audit log): early closes make them reopen.
    pub watches_opened: usize,
    /// Of those, reopens of a replica's watch of a resource it had watched before (after a
    /// close).
    pub watches_reopened: usize,
    /// The controllers' watches (replica and resource) that were opened only once.
    pub watches_never_reopened: Vec<String>,
    /// Changes of a Lease's holder (from the audit log).
    pub lease_takeovers: usize,
    /// Seconds from the end of the disturbance until every at-rest invariant held.
    pub convergence_s: Option<f64>,
    /// Seconds from SIGSTOP of the leader to another replica holding its Lease.
    pub takeover_s: Vec<f64>,
    /// Seconds from the start of cleanup until no Sandbox and no Pod was left.
    pub cleanup_s: Option<f64>,
    /// Sandboxes taken for a claim after its deletion began, decided on the claim as it was
    /// before (in flight when the delete arrived: a race, not a violation; see
    /// `invariants::History::decided`).
    pub takes_raced_deletion: usize,
    /// Takes the extensions controller decided and then did not send: the claim was deleted or
    /// changed when it re-checked it in its cache right before the request (its `take
    /// abandoned` log lines).
    pub takes_abandoned: usize,
    /// Watch events the harness checked.
    pub events: u64,
    pub violations: Vec<invariants::Violation>,
    /// Set when the experiment could not run to the end (the harness's error).
    pub error: Option<String>,
    pub duration_s: f64,
}

/// Runs the experiments. `Err` when the harness could not run or any experiment found a
/// violation (after printing every figure).
pub fn run(args: &ChaosArgs) -> Result<(), BenchError> {
    if args.cluster == ClusterKind::Real && args.experiments.contains(&Experiment::ApiFaults) {
        return Err(BenchError::Unavailable(lab::REAL_CLUSTER_NO_FAULTS.into()));
    }
    if let Some(result) = crate::bench::optimized_client::hand_over(args.profile(), !args.no_build)
    {
        return result;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    runtime.block_on(crate::bench::interrupt::until_signalled(run_async(args)))
}

async fn run_async(args: &ChaosArgs) -> Result<(), BenchError> {
    let out = args.out.clone().unwrap_or_else(|| {
        crate::workspace::workspace_root()
            .join("target")
            .join("chaos")
    });
    std::fs::create_dir_all(&out).map_err(|e| BenchError::io("creating", &out, e))?;
    let binaries = crate::bench::cluster::build(args.profile(), !args.no_build)?;
    let sizes = args.sizes();
    let mut selected = if args.experiments.is_empty() {
        Experiment::ALL.to_vec()
    } else {
        args.experiments.clone()
    };
    if args.cluster == ClusterKind::Real {
        selected.retain(|e| *e != Experiment::ApiFaults);
        eprintln!(
            "chaos: skipping api-faults: {}",
            lab::REAL_CLUSTER_NO_FAULTS
        );
    }
    selected.sort();
    selected.dedup();
    let mut machine = crate::bench::proc_stats::Machine::detect();
    eprintln!(
        "chaos: {} experiment(s) on {:?}, {:?} build, {} s each at {} claims/s, pool of {}; load average {:.1} on {} cores",
        selected.len(),
        args.cluster,
        args.profile(),
        sizes.seconds,
        sizes.rate,
        sizes.pool,
        load_average(),
        machine.cores,
    );
    let mut outcomes = BTreeMap::new();
    for (index, experiment) in selected.iter().enumerate() {
        let ctx = experiments::Ctx {
            binaries: &binaries,
            cluster: args.cluster,
            dir: out.join(experiment.key()),
            sizes,
            seed: args.seed.wrapping_add(index as u64),
            timeout_factor: if args.timeout_factor > 0.0 {
                args.timeout_factor
            } else {
                1.0
            },
        };
        eprintln!("chaos: {} ...", experiment.key());
        let outcome = experiments::run(*experiment, &ctx).await;
        print_outcome(*experiment, &outcome);
        outcomes.insert(experiment.key().to_owned(), outcome);
        machine.finish();
        let report = serde_json::json!({
            "command": format!("cargo xtask {}", std::env::args().skip(1).collect::<Vec<_>>().join(" ")),
            "cluster": format!("{:?}", args.cluster),
            "build_profile": args.profile(),
            "sizes": sizes,
            "seed": args.seed,
            "machine": machine,
            "experiments": outcomes,
        });
        let path = out.join("report.json");
        std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")
            .map_err(|e| BenchError::io("writing", &path, e))?;
    }
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, o)| !o.violations.is_empty() || o.error.is_some())
        .map(|(name, o)| {
            format!(
                "{name} ({} violation(s){})",
                o.violations.len(),
                if o.error.is_some() { ", error" } else { "" }
            )
        })
        .collect();
    eprintln!("chaos: wrote {}", out.join("report.json").display());
    if failed.is_empty() {
        eprintln!("chaos: every invariant held");
        Ok(())
    } else {
        Err(BenchError::Unavailable(format!(
            "chaos found problems in: {}",
            failed.join(", ")
        )))
    }
}

fn print_outcome(experiment: Experiment, o: &Outcome) {
    let opt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} s"));
    let takeovers = if o.takeover_s.is_empty() {
        "-".to_owned()
    } else {
        o.takeover_s
            .iter()
            .map(|t| format!("{t:.1} s"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{}: {} claims created, {} bound, {} deleted; {} kills, {} pauses, {} faults injected, \
         {} watches opened ({} reopened), {} Lease takeovers; converged in {}, takeover \
         {takeovers}, cleanup in {}; {} takes raced a deletion, {} abandoned; {} events checked; \
         {:.0} s",
        experiment.key(),
        o.claims_created,
        o.claims_bound,
        o.claims_deleted,
        o.kills,
        o.pauses,
        o.faults_injected,
        o.watches_opened,
        o.watches_reopened,
        o.lease_takeovers,
        opt(o.convergence_s),
        opt(o.cleanup_s),
        o.takes_raced_deletion,
        o.takes_abandoned,
        o.events,
        o.duration_s,
    );
    if let Some(error) = &o.error {
        println!("  error: {error}");
    }
    if o.violations.is_empty() {
        println!("  violations: none");
    }
    for v in &o.violations {
        println!("  violation {v}");
    }
}

/// A deadline of `seconds` scaled by `--timeout-factor`.
fn scaled(seconds: f64, factor: f64) -> Duration {
    Duration::from_secs_f64(seconds * factor)
}
