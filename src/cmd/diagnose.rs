//! `flowlab diagnose`: where a validation point's time goes, measured on
//! this host and laid beside the simulator's prediction, as text to read.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use flowlab_experiments::diagnose::{self, SplitStep};
use flowlab_hw::CommFormat;

#[derive(Args)]
pub struct DiagnoseArgs {
    #[command(subcommand)]
    what: Diagnosis,
}

#[derive(Subcommand)]
enum Diagnosis {
    /// Kernel times of one engine `Session` alone and while a second `Session` of the same model steps on another thread.
    Sessions {
        /// A zoo model.
        #[arg(long, default_value = "cnn")]
        model: String,
        #[arg(long, default_value_t = 32)]
        batch: usize,
    },
    /// The roofline's and the measured kernels' one-device step (MLP, CNN, a small Transformer), by op class and op.
    Roofline,
    /// One two-device placement's step, measured over an emulated link and simulated, node by node.
    Split {
        /// A zoo model.
        #[arg(long, default_value = "cnn")]
        model: String,
        #[arg(long, default_value_t = 32)]
        batch: usize,
        /// Any placer of `flowlab place`.
        #[arg(long, default_value = "m_etf")]
        placer: String,
        /// Transfer format: f32 | f16 | bf16 | int8 | int8:<block>.
        #[arg(long, default_value = "f32")]
        comm: CommFormat,
        /// The emulated link's bandwidth.
        #[arg(long, default_value_t = 10.0)]
        gbps: f64,
        /// The emulated link's latency.
        #[arg(long, default_value_t = 20.0)]
        latency_us: f64,
        /// Place with the measured profile (as a `predictor: profile` point does), not the roofline.
        #[arg(long)]
        place_with_profile: bool,
        /// Also print one measured step's long nodes and transfers beside the simulated schedule.
        #[arg(long)]
        timeline: bool,
    },
}

pub fn run(args: DiagnoseArgs) -> anyhow::Result<ExitCode> {
    let report = match args.what {
        Diagnosis::Sessions { model, batch } => diagnose::two_sessions(&model, batch)?,
        Diagnosis::Roofline => diagnose::roofline_by_class()?,
        Diagnosis::Split { model, batch, placer, comm, gbps, latency_us, place_with_profile, timeline } => {
            diagnose::split_step(&SplitStep { model, batch, placer, comm, gbps, latency_us, place_with_profile, timeline })?
        }
    };
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}
