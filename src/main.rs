//! The `flowlab` command line: parses arguments and hands each command to the
//! crate that owns it. No logic lives here beyond turning errors into messages.

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "flowlab", version, about = "TensorFlow-style dataflow engine, systolic-array and cluster simulators, experiment sweeps")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result: anyhow::Result<()> = match cli.command {
        None => Ok(()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
