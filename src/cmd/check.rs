//! `flowlab check FILE`: parse and validate an experiment, every point of its
//! sweep included, without running anything.

use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct CheckArgs {
    /// An experiment file, or `catalog:NAME`.
    experiment: String,
}

pub fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let e = flowlab_experiments::load(&args.experiment)?;
    let runs = if e.repeat > 1 {
        format!(" x {} repeats = {} runs", e.repeat, e.run_count())
    } else {
        String::new()
    };
    let calibration = e.check_calibration()?;
    println!("{}: ok: kind {}, {} points{runs}", e.origin, e.kind, e.points);
    if let Some(line) = calibration {
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
