//! `flowlab run FILE`, `flowlab list`, and the default job (`flowlab` with no
//! arguments): run an experiment's sweep, then render its report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use flowlab_experiments::{
    CATALOG_PREFIX, DEFAULT_EXPERIMENT, Experiment, ExperimentError, Progress, RunOptions, RunSummary, Shard, catalog,
};

#[derive(Args)]
pub struct RunArgs {
    /// An experiment file, or `catalog:NAME` (see `flowlab list`).
    experiment: String,
    /// Output directory [default: out/<name>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Points run at once [default: all cores].
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Run only every N-th point, starting at K (0 <= K < N), e.g. 0/4.
    #[arg(long, value_name = "K/N")]
    shard: Option<Shard>,
    /// Delete the results and report already in the output directory and
    /// start over (without it, a run resumes: an edited file reruns only the
    /// points that changed, and rows of points it no longer has are moved to
    /// results.superseded.jsonl).
    #[arg(long)]
    fresh: bool,
}

pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let experiment = flowlab_experiments::load(&args.experiment)?;
    let resume = resume_command(&args);
    let options = RunOptions {
        out_dir: args.out,
        jobs: args.jobs,
        shard: args.shard,
        fresh: args.fresh,
        progress: Progress::Auto,
        // `distributed` points start their tasks as `flowlab server` children
        launcher: std::env::current_exe().map(flowlab_runtime::Launcher::Processes).unwrap_or_default(),
        stop: Some(stop_on_ctrl_c(resume.clone())),
    };
    run_and_report(&experiment, &options, &resume)
}

/// The command that resumes this run: the same one, less `--fresh` (which
/// would discard what is stored).
fn resume_command(args: &RunArgs) -> String {
    let mut c = format!("flowlab run {}", args.experiment);
    if let Some(out) = &args.out {
        c += &format!(" --out {}", out.display());
    }
    if let Some(j) = args.jobs {
        c += &format!(" --jobs {j}");
    }
    if let Some(s) = &args.shard {
        c += &format!(" --shard {s}");
    }
    c
}

/// A flag the first Ctrl-C sets (the runner then starts no new run and
/// stores those in flight); a second Ctrl-C stops at once, saying how to
/// resume: the results file is appended a line per run, so at worst the
/// run in flight is lost.
fn stop_on_ctrl_c(resume: String) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let installed = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            eprintln!("\nstopped; what finished is stored: resume with `{resume}`");
            std::process::exit(130);
        }
        eprintln!("\nstopping: finishing the runs in flight (Ctrl-C again to stop now)");
    });
    if let Err(e) = installed {
        eprintln!("warning: Ctrl-C will stop the run without storing the runs in flight: {e}");
    }
    stop
}

/// `flowlab` alone: the catalog's default experiment, from scratch.
pub fn default_job() -> anyhow::Result<ExitCode> {
    let spec = format!("{CATALOG_PREFIX}{DEFAULT_EXPERIMENT}");
    println!("flowlab: running {spec} (`flowlab list` shows the catalog, `flowlab --help` the commands)");
    let experiment = flowlab_experiments::load(&spec)?;
    let resume = format!("flowlab run {spec}");
    let options = RunOptions {
        fresh: true,
        launcher: std::env::current_exe().map(flowlab_runtime::Launcher::Processes).unwrap_or_default(),
        stop: Some(stop_on_ctrl_c(resume.clone())),
        ..RunOptions::default()
    };
    run_and_report(&experiment, &options, &resume)
}

/// `flowlab list`: the catalog, one entry a line.
pub fn list() -> anyhow::Result<ExitCode> {
    let width = catalog().iter().map(|e| e.name.len()).max().unwrap_or(0);
    for entry in catalog() {
        let runs = match Experiment::from_text(entry.name, entry.text) {
            Ok(e) => format!("{:>4} runs", e.run_count()),
            Err(_) => "   unavailable".to_string(),
        };
        let default = if entry.name == DEFAULT_EXPERIMENT { "  (default)" } else { "" };
        println!("{CATALOG_PREFIX}{:<width$}  {runs}  {}{default}", entry.name, entry.summary);
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs, renders, and says where the report is. The exit status is the
/// number of failed runs (at most 125), or 1 if only the report failed.
fn run_and_report(experiment: &Experiment, options: &RunOptions, resume: &str) -> anyhow::Result<ExitCode> {
    if experiment.kind == "distributed" {
        // its points talk gRPC to task processes that they kill and restart
        super::ignore_sigpipe();
    }
    let summary = match flowlab_experiments::run(experiment, options) {
        Err(e @ ExperimentError::Interrupted { .. }) => {
            eprintln!("{e}: resume with `{resume}` (finished runs are not run again)");
            return Ok(ExitCode::from(130));
        }
        other => other?,
    };
    print_summary(experiment, &summary);
    let report = flowlab_experiments::render(&summary.out_dir);
    match &report {
        Ok(index) => println!("report: {}", index.display()),
        Err(e) => eprintln!("error: report not rendered: {e}"),
    }
    if summary.failed > 0 {
        eprintln!(
            "error: {} of {} runs failed (their errors are in {})",
            summary.failed,
            summary.runs,
            summary.out_dir.join("results.csv").display()
        );
        return Ok(ExitCode::from(summary.failed.min(125) as u8));
    }
    Ok(if report.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_summary(experiment: &Experiment, s: &RunSummary) {
    let resumed = if s.resumed > 0 {
        format!(", {} resumed from an earlier run", s.resumed)
    } else {
        String::new()
    };
    println!(
        "{}: {} runs ({} ran now{resumed}, {} failed) in {:.1} s; results in {}",
        experiment.name,
        s.runs,
        s.ran,
        s.failed,
        s.elapsed.as_secs_f64(),
        s.out_dir.display()
    );
}
