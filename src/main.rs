//! The `flowlab` command line: parses arguments and hands each command to the
//! crate that owns it. No logic lives here beyond printing and turning errors
//! into messages. One file per command family under `src/cmd/`.

mod alloc;
mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "flowlab",
    version,
    about = "TensorFlow-style dataflow engine, systolic-array and cluster simulators, experiment sweeps"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Measure this machine: prints a table, or JSON lines with --json.
    Bench(cmd::bench::BenchArgs),
    /// Simulate a systolic array (SCALE-Sim conventions) on a GEMM or a topology file.
    Systolic(cmd::systolic::SystolicArgs),
    /// Run an experiment's sweep (resuming an interrupted one), then render its report.
    Run(cmd::run::RunArgs),
    /// Check an experiment file, every sweep point included, and count its points.
    Check(cmd::check::CheckArgs),
    /// Merge result directories (shards of one sweep) and render the report.
    Report(cmd::report::ReportArgs),
    /// Two runs' shared metrics side by side, point by point, with the settings that differ named.
    Compare(cmd::compare::CompareArgs),
    /// Train a model on a data set with the real engine and report held-out accuracy.
    Train(cmd::train::TrainArgs),
    /// Import an ONNX model and run it forward (or train it) on .npy inputs.
    Onnx(cmd::onnx::OnnxArgs),
    /// Place a model's training graph with a simulator placer and simulate one step.
    Place(cmd::place::PlaceArgs),
    /// Measured and simulated steps side by side, to find where a validation point's time goes.
    Diagnose(cmd::diagnose::DiagnoseArgs),
    /// Profile a zoo model's training step on the real engine (op times by shape, host figures).
    Profile(cmd::profile::ProfileArgs),
    /// Run one task of a cluster (`--cluster FILE --job ps|worker|chief --task N`) until stopped.
    Server(cmd::server::ServerArgs),
    /// List the catalog of ready experiments (run one with `flowlab run catalog:NAME`).
    List,
    /// The JSON Schema of experiment files (for editors), or one kind's keys (`schema cluster --markdown`).
    Schema(cmd::schema::SchemaArgs),
    /// Print a starting experiment file: an annotated one for a kind, or a catalog entry to edit.
    New(cmd::new::NewArgs),
}

fn main() -> ExitCode {
    // A closed pipe (`flowlab place --json | head`) ends the process quietly,
    // as for any Unix filter, instead of panicking inside println!.
    #[cfg(unix)]
    // SAFETY: restores the default disposition of one signal before any
    // thread exists; no handler runs Rust code.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    alloc::keep_freed_pages();
    let cli = Cli::parse();
    let result: anyhow::Result<ExitCode> = match cli.command {
        None => cmd::run::default_job(),
        Some(Command::Bench(args)) => cmd::bench::run(args),
        Some(Command::Systolic(args)) => cmd::systolic::run(args),
        Some(Command::Run(args)) => cmd::run::run(args),
        Some(Command::Check(args)) => cmd::check::run(args),
        Some(Command::Report(args)) => cmd::report::run(args),
        Some(Command::Compare(args)) => cmd::compare::run(args),
        Some(Command::List) => cmd::run::list(),
        Some(Command::New(args)) => cmd::new::run(args),
        Some(Command::Schema(args)) => cmd::schema::run(args),
        Some(Command::Train(args)) => cmd::train::run(args),
        Some(Command::Place(args)) => cmd::place::run(args),
        Some(Command::Onnx(args)) => cmd::onnx::run(args),
        Some(Command::Profile(args)) => cmd::profile::run(args),
        Some(Command::Diagnose(args)) => cmd::diagnose::run(args),
        Some(Command::Server(args)) => cmd::server::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-joined as anyhow's `{:#}` does, leaving
/// out a cause whose text the message already ends with: error types that
/// print their source in their own message (`{path}: {source}`) and also
/// return it as the source would otherwise say it twice ("afile: File
/// exists (os error 17): File exists (os error 17)").
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.ends_with(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}
