//! `flowlab check FILE`: parse and validate an experiment, every point of its
//! sweep included, without running anything.

use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct CheckArgs {
    /// An experiment file, or `catalog:NAME`.
    experiment: String,
    /// Print every point's whole configuration as the run will use it:
    /// defaults filled in (stragglers, links, steps), a zoo or catalog
    /// model resolved to its workload (its compute time included).
    #[arg(long)]
    resolved: bool,
    /// Where the run would write (as `flowlab run --out`): runs stored there
    /// are not run again, and their times give the estimate.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Threads the run would use (as `flowlab run --jobs`; all cores if absent).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Skip the run-time estimate (which times a few points of a simulation sweep).
    #[arg(long)]
    no_estimate: bool,
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
    if !args.no_estimate {
        println!("{}", e.estimate(args.out.as_deref(), args.jobs));
    }
    if args.resolved {
        for (index, label, config) in e.resolved_points() {
            let config = config.map_err(|m| anyhow::anyhow!("point {index} ({label}): {m}"))?;
            let yaml = serde_saphyr::to_string(&config).map_err(|m| anyhow::anyhow!("point {index}: {m}"))?;
            println!("# point {index}{}", if label.is_empty() { String::new() } else { format!(": {label}") });
            println!("{}", yaml.trim_end());
        }
    }
    Ok(ExitCode::SUCCESS)
}
