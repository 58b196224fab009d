//! `kind: systolic`: one point is a systolic array (rows x cols, dataflow,
//! DRAM bandwidth) running a workload (one GEMM, or a built-in network such
//! as ResNet-50 layer by layer), simulated by `flowlab_hw::systolic`.
//!
//! ```yaml
//! base:
//!   rows: 32
//!   cols: 32
//!   dataflow: os                  # os | ws | is
//!   dram_words_per_cycle: 16      # optional; unlimited if absent
//!   workload: { network: resnet50 }   # or { gemm: { m: 512, n: 512, k: 512 } }
//! ```

use flowlab_hw::systolic::{ArrayConfig, Dataflow, Layer, MAX_ARRAY_DIM, resnet50, simulate_layer};

use super::{Outcome, TypedKind};

/// One sweep point of a systolic experiment.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SystolicPoint {
    /// Processing elements per column of the array.
    rows: u32,
    /// Processing elements per row of the array.
    cols: u32,
    /// Which operand stays in the processing elements.
    dataflow: Dataflow,
    /// Words DRAM delivers per cycle (absent: unlimited, no stalls).
    #[serde(default)]
    dram_words_per_cycle: Option<u64>,
    /// What the array computes.
    workload: Workload,
}

/// A GEMM or a network's layers.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Workload {
    /// One GEMM: an `m x k` matrix times a `k x n` one.
    Gemm {
        /// Rows of the output.
        m: u64,
        /// Columns of the output.
        n: u64,
        /// The shared dimension.
        k: u64,
    },
    /// Every layer of a network, lowered to GEMMs as SCALE-Sim does.
    Network(NetworkName),
}

/// A network whose layers are built in.
#[derive(Debug, Clone, Copy, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
enum NetworkName {
    Resnet50,
}

const METRICS: &[&str] = &[
    "utilization",
    "mapping_efficiency",
    "cycles",
    "compute_cycles",
    "stall_cycles",
    "macs",
    "time_s",
];

pub(crate) static SYSTOLIC: TypedKind<SystolicPoint> = TypedKind {
    name: "systolic",
    validate: |p| p.array().and(p.layers()).map(|_| ()),
    run: |config, env| run_point(config, env.seed),
    resolve: super::serialized,
    metric_names: || METRICS.iter().map(|m| m.to_string()).collect(),
    series_names: &[],
    tag_paths: &["workload"],
    headline: &["dataflow", "rows", "cols"],
    nested_keys: &[],
    exclusive: false,
    measured_point_s: None,
    summarize: None,
};

impl SystolicPoint {
    fn array(&self) -> Result<ArrayConfig, String> {
        for (name, v) in [("rows", self.rows), ("cols", self.cols)] {
            if v == 0 || v > MAX_ARRAY_DIM {
                return Err(format!("invalid parameter `{name}`: must be between 1 and {MAX_ARRAY_DIM}, got {v}"));
            }
        }
        if self.dram_words_per_cycle == Some(0) {
            return Err("invalid parameter `dram_words_per_cycle`: must be at least 1".to_string());
        }
        let mut array = ArrayConfig::new(self.rows, self.cols, self.dataflow).map_err(|e| e.to_string())?;
        array.dram_words_per_cycle = self.dram_words_per_cycle;
        array.validate().map_err(|e| e.to_string())?;
        Ok(array)
    }

    fn layers(&self) -> Result<Vec<Layer>, String> {
        match &self.workload {
            Workload::Gemm { m, n, k } => Layer::gemm("gemm", *m, *n, *k)
                .map(|l| vec![l])
                .map_err(|e| format!("invalid parameter `workload.gemm`: {e}")),
            Workload::Network(NetworkName::Resnet50) => Ok(resnet50()),
        }
    }
}

/// Sums cycles and MACs over the layers; utilization is MACs over the
/// array's capacity during the compute and stall cycles.
fn run_point(point: &SystolicPoint, _seed: u64) -> Result<Outcome, String> {
    let array = point.array()?;
    let (mut macs, mut compute, mut stall, mut cycles, mut time_s, mut mapped) = (0u64, 0u64, 0u64, 0u64, 0.0, 0.0);
    for layer in point.layers()? {
        let r = simulate_layer(&array, &layer).map_err(|e| format!("layer {}: {e}", layer.name))?;
        macs += r.macs;
        compute += r.compute_cycles;
        stall += r.stall_cycles;
        cycles += r.end_to_end_cycles;
        time_s += r.time_seconds;
        mapped += r.mapping_efficiency * r.compute_cycles as f64;
    }
    let pes = f64::from(array.rows) * f64::from(array.cols);
    let busy = (compute + stall) as f64;
    let mut outcome = Outcome::default();
    let m = &mut outcome.metrics;
    m.insert("utilization".into(), if busy > 0.0 { macs as f64 / (pes * busy) } else { 0.0 });
    m.insert("mapping_efficiency".into(), if compute > 0 { mapped / compute as f64 } else { 0.0 });
    m.insert("cycles".into(), cycles as f64);
    m.insert("compute_cycles".into(), compute as f64);
    m.insert("stall_cycles".into(), stall as f64);
    m.insert("macs".into(), macs as f64);
    m.insert("time_s".into(), time_s);
    Ok(outcome)
}
