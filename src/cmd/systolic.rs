//! `flowlab systolic`: the systolic-array simulator on one GEMM or on a whole
//! SCALE-Sim topology file.

use anyhow::{bail, Context};
use clap::Args;
use flowlab_hw::systolic::{
    read_topology_csv, simulate_layer, simulate_layer_cycles, ArrayConfig, Dataflow, Layer, LayerReport,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct SystolicArgs {
    /// Array size as ROWSxCOLS (default 128x128, or the config file's).
    #[arg(long)]
    array: Option<String>,
    /// Dataflow: os, ws or is (default ws, or the config file's).
    #[arg(long)]
    dataflow: Option<String>,
    /// One GEMM layer as M,N,K.
    #[arg(long, conflicts_with = "topology")]
    gemm: Option<String>,
    /// Array configuration: a SCALE-Sim .cfg file or YAML with the same keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// SCALE-Sim topology CSV (convolution or GEMM form).
    #[arg(long)]
    topology: Option<PathBuf>,
    /// DRAM bandwidth in words per cycle, the same on all three interfaces
    /// (default: the config's, else unlimited).
    #[arg(long)]
    bandwidth: Option<u64>,
    /// Count as SCALE-Sim 3.0.0 does (last-cycle index; strided outputs
    /// ceil((H-F)/S)+1 wide; with a DRAM bandwidth, SCALE-Sim's own memory
    /// model replayed line by line, so total and stall cycles and DRAM
    /// traffic equal SCALE-Sim's). On by default for a SCALE-Sim .cfg config.
    #[arg(long, conflicts_with = "physical")]
    scalesim_compat: bool,
    /// Count physically (every cycle; the convolution's floor((H-F)/S)+1
    /// outputs) even with a SCALE-Sim .cfg config. The default otherwise.
    #[arg(long)]
    physical: bool,
    /// Step every PE every cycle instead of the closed-form fast path (small arrays).
    #[arg(long)]
    cycle_accurate: bool,
    /// Print one JSON object per layer.
    #[arg(long)]
    json: bool,
}

fn parse_array(s: &str) -> anyhow::Result<(u32, u32)> {
    let (r, c) = s.split_once(['x', 'X']).with_context(|| format!("--array `{s}`: expected ROWSxCOLS, e.g. 128x128"))?;
    let num = |v: &str| v.trim().parse::<u32>().with_context(|| format!("--array `{s}`: `{v}` is not a positive integer"));
    Ok((num(r)?, num(c)?))
}

fn parse_gemm(s: &str) -> anyhow::Result<Layer> {
    let dims: Vec<&str> = s.split(',').map(str::trim).collect();
    if dims.len() != 3 {
        bail!("--gemm `{s}`: expected M,N,K");
    }
    let mut v = [0u64; 3];
    for (slot, (d, name)) in v.iter_mut().zip(dims.iter().zip(["M", "N", "K"])) {
        *slot = d.parse().with_context(|| format!("--gemm `{s}`: {name} = `{d}` is not a positive integer"))?;
    }
    Ok(Layer::gemm("gemm", v[0], v[1], v[2])?)
}

pub fn run(args: SystolicArgs) -> anyhow::Result<ExitCode> {
    let mut cfg = match &args.config {
        Some(p) if p.extension().is_some_and(|e| e.eq_ignore_ascii_case("cfg")) => ArrayConfig::from_scalesim_cfg(p)?,
        Some(p) => ArrayConfig::from_yaml_file(p)?,
        None => ArrayConfig::new(128, 128, Dataflow::Ws)?,
    };
    if let Some(a) = &args.array {
        (cfg.rows, cfg.cols) = parse_array(a)?;
    }
    if let Some(d) = &args.dataflow {
        cfg.dataflow = d.parse()?;
    }
    if let Some(b) = args.bandwidth {
        cfg.set_dram_bandwidth(Some(b));
    }
    if args.scalesim_compat {
        cfg.scalesim_compat = true;
    }
    if args.physical {
        cfg.scalesim_compat = false;
    }
    cfg.validate()?;
    let layers = match (&args.gemm, &args.topology) {
        (Some(g), _) => vec![parse_gemm(g)?],
        (None, Some(t)) => read_topology_csv(t)?,
        (None, None) => bail!("give a workload: --gemm M,N,K or --topology FILE.csv"),
    };
    let mut records = Vec::with_capacity(layers.len());
    // A whole network through compat mode's memory replay takes seconds.
    let bar = if layers.len() > 1 { ProgressBar::new(layers.len() as u64) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} layers {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    for l in &layers {
        bar.set_message(l.name.clone());
        let r: LayerReport = if args.cycle_accurate { simulate_layer_cycles(&cfg, l)? } else { simulate_layer(&cfg, l)? };
        let mut v = serde_json::to_value(&r)?;
        if !args.json {
            // The table shows the headline columns; --json has every field.
            let keep = [
                "name", "dataflow", "m", "n", "k", "compute_cycles", "stall_cycles", "total_cycles", "utilization",
                "mapping_efficiency", "time_seconds",
            ];
            if let Some(obj) = v.as_object_mut() {
                obj.retain(|k, _| keep.contains(&k.as_str()));
            }
        }
        records.push(v);
        bar.inc(1);
    }
    bar.finish_and_clear();
    super::print_records(&records, args.json);
    Ok(ExitCode::SUCCESS)
}
