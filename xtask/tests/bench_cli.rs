//! `cargo xtask bench` command line: the flags CI and docs/performance.md use parse, and an
//! unknown scenario is refused with the list of valid names.

use clap::Parser;
use xtask::bench::scenario::ScenarioName;
use xtask::cli::{Cli, Command};

#[test]
fn quick_run_with_selected_scenarios_parses() {
    let cli = Cli::try_parse_from([
        "cargo xtask",
        "bench",
        "--quick",
        "--scenario",
        "gate",
        "--scenario",
        "writes",
        "--out",
        "/tmp/x",
    ])
    .expect("valid command line");
    let Command::Bench(args) = cli.command else {
        panic!("expected the bench verb");
    };
    assert!(args.quick);
    assert_eq!(
        args.scenarios,
        vec![ScenarioName::Gate, ScenarioName::Writes]
    );
    assert_eq!(args.out.as_deref(), Some(std::path::Path::new("/tmp/x")));
    assert_eq!(args.nodes, 100);
}

#[test]
fn unknown_scenario_lists_the_valid_ones() {
    let error = Cli::try_parse_from(["cargo xtask", "bench", "--scenario", "fastest"])
        .expect_err("unknown scenario must be refused");
    let message = error.to_string();
    for name in [
        "gate",
        "saturate",
        "sustained",
        "refill",
        "cold",
        "scale",
        "writes",
        "devcluster",
    ] {
        assert!(message.contains(name), "{name} missing from: {message}");
    }
}

#[test]
fn size_overrides_apply_and_unknown_keys_are_named() {
    use xtask::bench::scenario::Sizes;
    let sizes = Sizes::full()
        .with_overrides(&["scale_sandboxes=2000".into(), "gate_rate=37.5".into()])
        .expect("known keys");
    assert_eq!(sizes.scale_sandboxes, 2000);
    assert_eq!(sizes.gate_rate, 37.5);
    let error = Sizes::full()
        .with_overrides(&["scale_sandbox=1".into()])
        .expect_err("misspelt key");
    assert!(error.to_string().contains("unknown size"), "{error}");
    assert!(error.to_string().contains("scale_sandboxes"), "{error}");
    let error = Sizes::full()
        .with_overrides(&["gate_claims=many".into()])
        .expect_err("not a number");
    assert!(error.to_string().contains("must be a number"), "{error}");
}

#[test]
fn extra_controller_arguments_are_passed_through_verbatim() {
    let cli = Cli::try_parse_from([
        "cargo xtask",
        "bench",
        "--extensions-controller-arg=--sandbox-claim-concurrent-workers=200",
        "--extensions-controller-arg",
        "--kube-api-qps=-1",
        "--sandbox-controller-arg=--sandbox-concurrent-workers=100",
    ])
    .expect("valid command line");
    let Command::Bench(args) = cli.command else {
        panic!("expected the bench verb");
    };
    assert_eq!(
        args.extensions_controller_args,
        [
            "--sandbox-claim-concurrent-workers=200",
            "--kube-api-qps=-1"
        ]
    );
    assert_eq!(
        args.sandbox_controller_args,
        ["--sandbox-concurrent-workers=100"]
    );
    let defaults = Cli::try_parse_from(["cargo xtask", "bench"]).expect("valid command line");
    let Command::Bench(defaults) = defaults.command else {
        panic!("expected the bench verb");
    };
    assert!(defaults.extensions_controller_args.is_empty());
    assert!(defaults.sandbox_controller_args.is_empty());
}

#[test]
fn help_lists_every_default_scenario_in_run_order() {
    use clap::CommandFactory;
    let mut cli = Cli::command();
    let help = cli
        .find_subcommand_mut("bench")
        .expect("bench verb")
        .render_long_help()
        .to_string();
    let sentence = help
        .split("Default: all, in the order")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .map(|line| line.trim_end_matches('.'))
        .unwrap_or_else(|| panic!("no list of the default scenarios in:\n{help}"));
    let listed: Vec<&str> = sentence
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|word| !word.is_empty())
        .collect();
    let run: Vec<&str> = ScenarioName::ALL.iter().map(|s| s.key()).collect();
    assert_eq!(listed, run, "{help}");
}

#[test]
fn the_cluster_is_devcluster_unless_real_is_asked_and_a_typo_is_refused() {
    use xtask::bench::cluster::ClusterKind;
    let parse = |extra: &[&str]| {
        let mut argv = vec!["cargo xtask", "bench"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).map(|cli| match cli.command {
            Command::Bench(args) => args.cluster,
            _ => panic!("expected the bench verb"),
        })
    };
    assert_eq!(parse(&[]).unwrap(), ClusterKind::Devcluster);
    assert_eq!(
        parse(&["--quick", "--cluster", "real"]).unwrap(),
        ClusterKind::Real
    );
    let error = parse(&["--cluster", "rael"]).expect_err("unknown cluster");
    let message = error.to_string();
    assert!(
        message.contains("devcluster") && message.contains("real"),
        "{message}"
    );
}

#[test]
fn scale_is_smaller_on_the_real_control_plane_and_still_overridable() {
    use xtask::bench::cluster::ClusterKind;
    use xtask::bench::scenario::Sizes;
    assert_eq!(
        Sizes::full_for(ClusterKind::Devcluster).scale_sandboxes,
        10_000
    );
    let real = Sizes::full_for(ClusterKind::Real);
    assert_eq!(real.scale_sandboxes, 2_000);
    // The gate stays the reference's presubmit on both.
    assert_eq!(
        (real.gate_pool, real.gate_claims, real.gate_rate),
        (1050, 750, 75.0)
    );
    let restored = real
        .with_overrides(&["scale_sandboxes=10000".into()])
        .unwrap();
    assert_eq!(restored.scale_sandboxes, 10_000);
}

#[test]
fn profiling_kube_apiserver_on_devcluster_is_refused_before_anything_runs() {
    let cli = Cli::try_parse_from([
        "cargo xtask",
        "bench",
        "--quick",
        "--no-build",
        "--profile-apiserver",
        "--out",
        "/nonexistent/bench-profile-refused",
    ])
    .expect("the flag parses");
    let Command::Bench(args) = cli.command else {
        panic!("expected the bench verb");
    };
    assert!(args.profile_apiserver);
    let error = xtask::bench::run(&args).expect_err("devcluster has no kube-apiserver");
    assert!(
        error.to_string().contains("--profile-apiserver")
            && error.to_string().contains("--cluster real"),
        "{error}"
    );
}
