//! `flowlab report DIR...`: merge the result directories of a sharded sweep
//! (or just one directory) and render plots and page from the results alone.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

#[derive(Args)]
pub struct ReportArgs {
    /// Result directories of one experiment (e.g. one per shard).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where the merged results and report go [default: the first DIR].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the numbers each plot draws as text tables (what a catalog
    /// file's header quotes) instead of merging and rendering.
    #[arg(long, conflicts_with = "out")]
    figures: bool,
}

pub fn run(args: ReportArgs) -> anyhow::Result<ExitCode> {
    if args.figures {
        for dir in &args.dirs {
            print!("{}", flowlab_reports::figures_text(dir)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let merged = flowlab_experiments::merge(&args.dirs, args.out.as_deref())?;
    let of = merged.expected.map(|n| format!(" of {n}")).unwrap_or_default();
    println!(
        "{}: {}{of} runs ({} failed) from {} director{}",
        merged.out_dir.display(),
        merged.rows,
        merged.failed,
        args.dirs.len(),
        if args.dirs.len() == 1 { "y" } else { "ies" }
    );
    let index = flowlab_experiments::render(&merged.out_dir)?;
    println!("report: {}", index.display());
    Ok(ExitCode::SUCCESS)
}
