//! `--repeat N`: run each scenario N times and report the median run.
//!
//! On a small, shared machine one run of a scenario can land on a noisy moment. With
//! `--repeat N` each run K > 1 writes its logs and charts under `DIR/repeat-K/` (run 1 keeps
//! `DIR/`), and the scenario's entry in `report.json` is the run whose headline figure is the
//! median (of an even count, the less flattering middle one), whole: every figure from the same
//! run, never a mix. `details.repeats` lists every
//! run's headline figure and directory, so the spread is in the report too.

use serde_json::json;

use super::report::ScenarioReport;
use super::scenario::ScenarioName;

/// One finished run of a scenario: where its files are (relative to the report directory,
/// `""` for the report directory itself) and what it measured.
pub struct Run {
    pub dir: String,
    pub report: ScenarioReport,
}

/// The figure the runs of `name` are ranked by, and its name.
pub fn headline(name: ScenarioName, report: &ScenarioReport) -> (&'static str, Option<f64>) {
    match name {
        ScenarioName::Devcluster => (
            "devcluster_writes_per_second",
            report.devcluster_writes_per_second,
        ),
        ScenarioName::Gate
        | ScenarioName::Cold
        | ScenarioName::Refill
        | ScenarioName::Sustained => ("p99_ms", report.p99_ms),
        ScenarioName::Saturate => ("claims_per_second", report.claims_per_second),
        ScenarioName::Writes => (
            "writes_per_claim.total",
            report
                .writes_per_claim
                .as_ref()
                .and_then(|w| w.get("total").copied()),
        ),
        ScenarioName::Scale => (
            "rss_mib (largest controller)",
            report.rss_mib.values().copied().reduce(f64::max),
        ),
    }
}

/// Whether a larger headline figure of `name` is a better result.
fn higher_is_better(name: ScenarioName) -> bool {
    matches!(name, ScenarioName::Devcluster | ScenarioName::Saturate)
}

/// The median run of `runs` (by headline figure, among the runs that completed with one), with
/// its chart paths made relative to the report directory and `details.repeats` filled in. With
/// one run, that run unchanged. When no run has a headline figure, the first run.
pub fn median(name: ScenarioName, runs: Vec<Run>) -> ScenarioReport {
    if runs.len() == 1 {
        return runs
            .into_iter()
            .next()
            .map(|r| r.report)
            .unwrap_or_else(|| {
                ScenarioReport::new("no run", super::proc_stats::Machine::detect())
            });
    }
    let (figure, _) = runs
        .first()
        .map(|r| headline(name, &r.report))
        .unwrap_or(("", None));
    let listed: Vec<serde_json::Value> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            json!({
                "run": i + 1,
                "dir": if run.dir.is_empty() { "." } else { run.dir.as_str() },
                "status": run.report.status,
                figure: headline(name, &run.report).1,
            })
        })
        .collect();
    let mut ranked: Vec<(usize, f64)> = runs
        .iter()
        .enumerate()
        .filter(|(_, run)| run.report.status == "ok")
        .filter_map(|(i, run)| headline(name, &run.report).1.map(|v| (i, v)))
        .collect();
    ranked.sort_by(|a, b| a.1.total_cmp(&b.1));
    // With an even count, the less flattering of the two middle runs.
    let middle = if higher_is_better(name) {
        ranked.len().saturating_sub(1) / 2
    } else {
        ranked.len() / 2
    };
    let chosen = ranked.get(middle).map(|(i, _)| *i).unwrap_or(0);
    let count = runs.len();
    let Some(run) = runs.into_iter().nth(chosen) else {
        return ScenarioReport::new("no run", super::proc_stats::Machine::detect());
    };
    let mut report = run.report;
    if !run.dir.is_empty() {
        for chart in &mut report.charts {
            *chart = format!("{}/{chart}", run.dir);
        }
    }
    report.detail(
        "repeats",
        json!({
            "runs": count,
            "reported_run": chosen + 1,
            "ranked_by": figure,
            "each": listed,
        }),
    );
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::proc_stats::Machine;

    fn run(dir: &str, status: &str, per_second: Option<f64>) -> Run {
        let mut report = ScenarioReport::new("saturate", Machine::detect());
        report.status = status.into();
        report.claims_per_second = per_second;
        report.charts = vec!["saturate-latency-cdf.svg".into()];
        Run {
            dir: dir.into(),
            report,
        }
    }

    #[test]
    fn one_run_is_reported_unchanged() {
        let report = median(ScenarioName::Saturate, vec![run("", "ok", Some(200.0))]);
        assert_eq!(report.claims_per_second, Some(200.0));
        assert!(!report.details.contains_key("repeats"));
        assert_eq!(report.charts, ["saturate-latency-cdf.svg"]);
    }

    #[test]
    fn the_median_run_is_reported_whole_with_every_run_listed() {
        let runs = vec![
            run("", "ok", Some(250.0)),
            run("repeat-2", "ok", Some(180.0)),
            run("repeat-3", "ok", Some(210.0)),
        ];
        let report = median(ScenarioName::Saturate, runs);
        assert_eq!(report.claims_per_second, Some(210.0));
        assert_eq!(report.charts, ["repeat-3/saturate-latency-cdf.svg"]);
        let repeats = &report.details["repeats"];
        assert_eq!(repeats["reported_run"], 3);
        assert_eq!(repeats["ranked_by"], "claims_per_second");
        let each: Vec<f64> = repeats["each"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["claims_per_second"].as_f64().unwrap())
            .collect();
        assert_eq!(each, [250.0, 180.0, 210.0]);
    }

    #[test]
    fn an_even_count_reports_the_less_flattering_middle_run() {
        let runs = vec![
            run("", "ok", Some(100.0)),
            run("repeat-2", "ok", Some(300.0)),
        ];
        assert_eq!(
            median(ScenarioName::Saturate, runs).claims_per_second,
            Some(100.0)
        );
        let gate = |dir: &str, p99: f64| {
            let mut r = run(dir, "ok", None);
            r.report.p99_ms = Some(p99);
            r
        };
        let report = median(
            ScenarioName::Gate,
            vec![gate("", 10.0), gate("repeat-2", 30.0)],
        );
        assert_eq!(report.p99_ms, Some(30.0));
    }

    #[test]
    fn failed_runs_are_listed_but_never_reported_when_another_completed() {
        let runs = vec![run("", "failed", None), run("repeat-2", "ok", Some(100.0))];
        let report = median(ScenarioName::Saturate, runs);
        assert_eq!(report.status, "ok");
        assert_eq!(report.claims_per_second, Some(100.0));
        assert_eq!(report.details["repeats"]["each"][0]["status"], "failed");
    }

    #[test]
    fn scale_is_ranked_by_the_largest_controller() {
        let mut report = ScenarioReport::new("scale", Machine::detect());
        report.rss_mib.insert("sandbox-controller".into(), 95.0);
        report.rss_mib.insert("extensions-controller".into(), 52.0);
        assert_eq!(headline(ScenarioName::Scale, &report).1, Some(95.0));
    }
}
