//! `flowlab train MODEL --data digits`: trains a model with the real engine
//! and prints held-out accuracy (with --json the last line is one JSON object).

use anyhow::Context;
use clap::{Args, ValueEnum};
use flowlab_engine::datasets::{digits_default_path, load_digits};
use flowlab_engine::train::{ModelKind, TrainConfig, train};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, ValueEnum)]
enum Model {
    /// 64-128-10 multilayer perceptron.
    Mlp,
    /// Two 3x3 conv + max-pool layers, then a dense layer.
    Cnn,
}

#[derive(Args)]
pub struct TrainArgs {
    /// Which network.
    model: Model,
    /// Data set: `digits` (the copy in data/) or a path to a digits-format CSV(.gz).
    #[arg(long, default_value = "digits")]
    data: String,
    #[arg(long, default_value_t = 30)]
    epochs: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Adam learning rate.
    #[arg(long, default_value_t = 3e-3)]
    lr: f64,
    /// Executor threads (1 = the calling thread only).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Write a Chrome/Perfetto trace of the last training step to this file.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Print the result as one JSON object on the last line.
    #[arg(long)]
    json: bool,
}

fn data_path(arg: &str) -> PathBuf {
    if arg == "digits" {
        let local = PathBuf::from("data/digits.csv.gz");
        if local.is_file() { local } else { digits_default_path() }
    } else {
        PathBuf::from(arg)
    }
}

pub fn run(args: TrainArgs) -> anyhow::Result<ExitCode> {
    let path = data_path(&args.data);
    let data = load_digits(&path).with_context(|| format!("loading data set '{}'", args.data))?;
    let model = match args.model {
        Model::Mlp => ModelKind::Mlp,
        Model::Cnn => ModelKind::Cnn,
    };
    let cfg = TrainConfig {
        model,
        epochs: args.epochs,
        seed: args.seed,
        batch: args.batch,
        learning_rate: args.lr,
        threads: args.threads,
        trace: args.trace.clone(),
    };
    let r = train(&data, &cfg).context("training")?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "{:?} on {}: held-out accuracy {:.2}% ({} of {} examples), held-out loss {:.4}, {} steps in {:.2} s",
            model,
            path.display(),
            r.accuracy * 100.0,
            (r.accuracy * r.test_examples as f64).round() as usize,
            r.test_examples,
            r.loss,
            r.steps,
            r.seconds
        );
        if let Some(t) = &args.trace {
            println!("trace of the last step written to {}", t.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}
