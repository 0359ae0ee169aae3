//! `cargo xtask`: a thin dispatcher over the `xtask` library. Errors are printed as one line
//! and exit with status 1; command-line syntax errors are clap's (status 2).

use std::process::ExitCode;

use clap::Parser;
use xtask::cli::{Cli, Command};

fn main() -> ExitCode {
    // First, so `cargo xtask dev` can count its ready time from the command's start.
    let clock = xtask::dev::clock::StartClock::now();
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Crds(args) => xtask::crds::run(args.check),
        Command::Release(args) => xtask::release::run(args),
        Command::Chart(args) => xtask::chart::run(args).map_err(Into::into),
        Command::Bench(args) => match xtask::bench::run(args) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        },
        Command::Chaos(args) => match xtask::chaos::run(args) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("error: {error}");
                return ExitCode::FAILURE;
            }
        },
        Command::Dev(args) => return xtask::dev::main(args, clock),
        Command::Cluster(args) => return xtask::cluster::main(args),
        Command::Docs(args) => return xtask::docs::main(args),
        Command::Migrate(args) => xtask::migrate::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
