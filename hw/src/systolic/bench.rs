//! `flowlab bench systolic`: how fast the two simulators run on this machine.
//! The fast path is timed over all ResNet-50 layers; the cycle-by-cycle
//! model on a 32x32 array, reported as simulated cycles and PE updates per
//! second of wall time.

use super::{resnet50, simulate_layer, simulate_layer_cycles, ArrayConfig, Dataflow, Layer};
use crate::HwError;
use serde::Serialize;
use std::time::Instant;

#[derive(Debug, Clone, Serialize)]
pub struct BenchRecord {
    pub bench: String,
    pub array: String,
    pub dataflow: String,
    pub workload: String,
    pub layers: u64,
    pub simulated_cycles: u64,
    /// Best wall time of one pass over the workload, in milliseconds.
    pub wall_ms: f64,
    pub cycles_per_second: f64,
    pub pe_updates_per_second: f64,
}

/// Runs the benchmarks; `quick` uses fewer repetitions and smaller layers.
pub fn bench_records(quick: bool) -> Result<Vec<BenchRecord>, HwError> {
    let mut out = Vec::new();
    let net = resnet50();
    let reps = if quick { 3 } else { 20 };
    for (side, df) in [(128, Dataflow::Os), (128, Dataflow::Ws), (128, Dataflow::Is), (256, Dataflow::Ws)] {
        let cfg = ArrayConfig::new(side, side, df)?;
        let mut best = f64::INFINITY;
        let mut cycles = 0;
        for _ in 0..reps {
            let t = Instant::now();
            cycles = 0;
            for l in &net {
                cycles += simulate_layer(&cfg, l)?.total_cycles;
            }
            best = best.min(t.elapsed().as_secs_f64());
        }
        out.push(record("fast_path", side, df, "resnet50", net.len(), cycles, best));
    }
    let layers: Vec<Layer> = if quick {
        vec![Layer::gemm("gemm128", 128, 128, 128)?]
    } else {
        vec![Layer::gemm("gemm256", 256, 256, 256)?, net[1].clone(), net[2].clone()]
    };
    for df in [Dataflow::Os, Dataflow::Ws, Dataflow::Is] {
        let cfg = ArrayConfig::new(32, 32, df)?;
        let t = Instant::now();
        let mut cycles = 0;
        for l in &layers {
            cycles += simulate_layer_cycles(&cfg, l)?.compute_cycles;
        }
        let name = layers.iter().map(|l| l.name.as_str()).collect::<Vec<_>>().join("+");
        out.push(record("cycle_model", 32, df, &name, layers.len(), cycles, t.elapsed().as_secs_f64()));
    }
    Ok(out)
}

fn record(bench: &str, side: u32, df: Dataflow, workload: &str, layers: usize, cycles: u64, secs: f64) -> BenchRecord {
    let secs = secs.max(1e-9);
    BenchRecord {
        bench: bench.into(),
        array: format!("{side}x{side}"),
        dataflow: df.to_string(),
        workload: workload.into(),
        layers: layers as u64,
        simulated_cycles: cycles,
        wall_ms: secs * 1e3,
        cycles_per_second: cycles as f64 / secs,
        pe_updates_per_second: cycles as f64 * f64::from(side) * f64::from(side) / secs,
    }
}
