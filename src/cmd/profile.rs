//! `flowlab profile --model mlp --batch 128 --out mlp.json`: runs a zoo
//! model's training step on the real engine (one CPU device), records each
//! node's kernel time by shape key and this host's figures, and writes the
//! profile the graph-level simulator and `kind: validate` read.

use anyhow::{Context, bail};
use clap::Args;
use flowlab_experiments::{ProfileRequest, ZooSizes, profile_model};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct ProfileArgs {
    /// A zoo model the engine can run (mlp, cnn, lstm_lm, transformer, resnet50, inception_v3)
    /// or an ONNX file (*.onnx: its training step, the loss on its first output).
    #[arg(long)]
    model: String,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// A smaller variant: `hidden=128,seq_len=20,vocab=2000` (also layers,
    /// heads, ff, image_size, classes); the published sizes by default.
    #[arg(long, default_value = "")]
    size: String,
    /// The engine session's devices, e.g. `2xcpu`: every node runs on the
    /// first, in the session shape that the profile will predict (a
    /// multi-device step snapshots the variables it updates). Use the device
    /// count of the runs to predict.
    #[arg(long, default_value = "1xcpu")]
    devices: String,
    /// Worker threads of the device.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 3)]
    warmup: usize,
    /// Timed (traced) steps.
    #[arg(long, default_value_t = 20)]
    steps: usize,
    /// Where to write the profile (JSON).
    #[arg(long)]
    out: PathBuf,
    /// Also write each timed step's wall time over the median step, one
    /// factor per line: this host's step-time distribution as a straggler
    /// trace (`straggler: { dist: trace, file: FILE }`).
    #[arg(long, value_name = "FILE")]
    step_factors: Option<PathBuf>,
}

pub fn run(a: ProfileArgs) -> anyhow::Result<ExitCode> {
    let d = a.devices.trim().to_ascii_lowercase();
    if d.contains("gpu") {
        bail!("--devices {}: the engine has no GPU devices yet (the CUDA backend does not run kernels); use e.g. `2xcpu`", a.devices);
    }
    let devices = match d.split_once('x') {
        None if d == "cpu" => 1,
        Some((n, "cpu")) => n.parse::<usize>().ok().filter(|n| (1..=16).contains(n)).with_context(|| format!("--devices {}: between 1 and 16 CPUs, e.g. `2xcpu`", a.devices))?,
        _ => bail!("--devices {}: write `Nxcpu`, e.g. `2xcpu`", a.devices),
    };
    if a.threads == 0 || a.threads > flowlab_engine::MAX_THREADS {
        bail!("--threads: must be between 1 and {} (got {})", flowlab_engine::MAX_THREADS, a.threads);
    }
    if a.steps == 0 {
        bail!("--steps: must be at least 1 (got 0)");
    }
    if a.batch == 0 || a.batch > 1 << 16 {
        bail!("--batch: must be between 1 and 65536 (got {})", a.batch);
    }
    let sizes = ZooSizes::parse(&a.size).map_err(anyhow::Error::msg).context("--size")?;
    let req = ProfileRequest { model: a.model.clone(), sizes, batch: a.batch, threads: a.threads, devices, warmup: a.warmup, steps: a.steps };
    let tty = std::io::stderr().is_terminal();
    let profile = profile_model(&req, |msg| {
        if tty {
            eprint!("\r\x1b[2K{msg}");
        }
    })
    .map_err(anyhow::Error::msg)
    .with_context(|| format!("profiling {} at batch {}", a.model, a.batch))?;
    if tty {
        eprintln!();
    }
    profile.write_json(&a.out)?;
    if let Some(path) = &a.step_factors {
        write_step_factors(path, &profile.step_seconds, &a)?;
    }
    let host = profile.host.as_ref();
    let samples: usize = profile.shapes.values().map(|m| m.samples).sum();
    let kernel_s: f64 = profile.shapes.values().map(|m| m.seconds * m.samples as f64).sum::<f64>() / a.steps as f64;
    println!("{} batch {}: {} shape keys, {samples} samples, {:.3} ms of kernels per step", a.model, a.batch, profile.shapes.len(), kernel_s * 1e3);
    if let Some(h) = host {
        let gemm: Vec<String> = h.gemm_gflops.iter().map(|(t, g)| format!("{t} thread{}: {g:.1}", if *t == 1 { "" } else { "s" })).collect();
        println!("host: GEMM GFLOP/s {}; copy {:.1} GB/s; in-process transfer {:.1} us + {:.1} GB/s (emulated links add {:.1} us); dispatch {:.2} us per op", gemm.join(", "), h.memory_bandwidth_gb_s, h.transfer_latency_us, h.transfer_bandwidth_gb_s, h.emulated_overhead_us, h.dispatch_us);
    }
    println!("profile written to {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}

/// Writes `seconds` as factors over their median, with comments that say
/// how they were measured (the trace reader skips `#` lines and the header).
fn write_step_factors(path: &std::path::Path, seconds: &[f64], a: &ProfileArgs) -> anyhow::Result<()> {
    let mut sorted = seconds.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => bail!("--step-factors: no timed step"),
        n if n % 2 == 1 => sorted[n / 2],
        n => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    };
    let p99 = flowlab_programs::cluster::percentile(seconds, 0.99);
    let mut text = format!(
        "# per-step slowdown factors: each timed step's wall time over the median step ({:.3} ms)\n\
         # flowlab profile --model {} --batch {} --size '{}' --devices {} --threads {} --warmup {} --steps {}\n\
         # {} steps; p99 / median {:.3}; max / median {:.3}\nfactor\n",
        median * 1e3, a.model, a.batch, a.size, a.devices, a.threads, a.warmup, a.steps, seconds.len(), p99 / median, sorted[sorted.len() - 1] / median,
    );
    for s in seconds {
        text.push_str(&format!("{:.5}\n", s / median));
    }
    flowlab_files::write_atomic(path, text.as_bytes()).with_context(|| format!("--step-factors {}", path.display()))?;
    println!("step factors written to {} (p99 / median {:.3})", path.display(), p99 / median);
    Ok(())
}
