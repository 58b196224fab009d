//! `kind: placement`: one point places a model zoo training graph on a
//! virtual device set with one of the simulator's placers, then replays one
//! step of it with the graph-level simulator (`flowlab_sim::graph`).
//!
//! ```yaml
//! base:
//!   model: inception_v3      # a zoo model: mlp, cnn, resnet50, inception_v3, lstm_lm, transformer, transformer_base, gnmt
//!   batch: 32
//!   devices: "4xK40"         # catalog devices, e.g. "2xV100,1xcpu"
//!   link: pcie3-x16          # optional: the catalog link of the devices (port links: one port per device and direction)
//!   placer: m_etf            # single_device | round_robin | default | tf_greedy | m_topo | m_etf | m_sct | local_search
//!   comm: f32                # optional: f32 | f16 | bf16 | int8 | int8:<block>
//!   iterations: 2000         # local_search only: number of moves tried
//!   start: m_etf             # local_search only: the placer it starts from
//! ```
//!
//! `local_search` is bounded by `iterations`, never by wall-clock time, so
//! that the same file and seed give the same placement. `placement_s` (how
//! long the placer took to decide) is the one wall-clock measurement among
//! the metrics; everything else is simulated and exactly repeatable.

use std::time::Duration;

use flowlab_hw::CommFormat;
use flowlab_sim::graph::{GraphSimulator, VirtualCluster};
use super::check_placer;
use flowlab_sim::placement::{PlacerOptions, place_timed};

use super::{Outcome, TypedKind};

/// One sweep point of a placement experiment.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct PlacementPoint {
    /// What is placed, trained with its default loss.
    model: super::ModelKey,
    /// Examples per training step (default 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    batch: Option<usize>,
    /// Hardware catalog devices, e.g. `4xK40`, `8xH100`, `2xV100,1xcpu`.
    devices: String,
    /// A catalog link for every device's port (`pcie3-x16`, `nvlink2`), or
    /// a fabric (`dgx1`); absent: each device's own default link.
    #[serde(default)]
    link: Option<String>,
    /// single_device, round_robin, default, tf_greedy, m_topo, m_etf,
    /// m_sct, local_search, or `{ map: FILE }`: a hand-written device map.
    #[serde(deserialize_with = "super::placer_key")]
    #[schemars(schema_with = "super::placer_schema")]
    placer: String,
    /// Number format of tensors between devices: f32, f16, bf16, int8,
    /// int8:<block>; absent: f32.
    #[serde(default)]
    comm: Option<String>,
    /// local_search only: moves tried (a count, not a time, so results
    /// repeat).
    #[serde(default)]
    iterations: Option<usize>,
    /// local_search only: the placer whose answer it starts from (a device
    /// map too).
    #[serde(default, deserialize_with = "super::optional_placer_key")]
    #[schemars(schema_with = "super::placer_schema")]
    start: Option<String>,
}

use flowlab_models::zoo::MAX_BATCH;

const METRICS: &[&str] = &[
    "step_time_s",
    "one_device_step_s",
    "speedup",
    "placement_s",
    "devices_used",
    "transfers",
    "transfer_mb",
    "peak_memory_gb",
    "over_memory",
    "mean_utilization",
    "nodes",
    "params",
];

pub(crate) static PLACEMENT: TypedKind<PlacementPoint> = TypedKind {
    name: "placement",
    validate: |p| p.validate(),
    run: |config, env| run_point(config, env.seed),
    resolve: |p| super::with_batch(super::serialized(p)?, p.batch()?),
    metric_names: || METRICS.iter().map(|m| m.to_string()).collect(),
    series_names: &[],
    tag_paths: &[],
    headline: &["model", "batch", "devices", "link", "comm"],
    nested_keys: &[],
    exclusive: false,
    measured_point_s: None,
    summarize: None,
};

impl PlacementPoint {
    fn batch(&self) -> Result<usize, String> {
        self.model.batch_with(self.batch)
    }

    fn validate(&self) -> Result<(), String> {
        self.model.check()?;
        let batch = self.batch()?;
        if batch == 0 || batch > MAX_BATCH {
            return Err(format!("invalid parameter `batch`: must be between 1 and {MAX_BATCH}, got {batch}"));
        }
        check_placer("placer", &self.placer)?;
        if let Some(start) = &self.start {
            check_placer("start", start)?;
            if start == "local_search" {
                return Err("invalid parameter `start`: local_search cannot start from itself".into());
            }
        }
        match (self.placer.as_str(), self.iterations) {
            ("local_search", None) => {
                return Err("invalid parameter `iterations`: local_search needs a number of moves (a wall-clock budget would make results depend on the machine)".into());
            }
            ("local_search", Some(0)) => return Err("invalid parameter `iterations`: must be at least 1".into()),
            _ => {}
        }
        self.cluster()?;
        self.comm_format()?;
        Ok(())
    }

    fn cluster(&self) -> Result<VirtualCluster, String> {
        let cluster = VirtualCluster::parse(&self.devices).map_err(|e| format!("invalid parameter `devices`: {e}"))?;
        match &self.link {
            None => Ok(cluster),
            Some(name) => cluster.wired(name).map_err(|e| format!("invalid parameter `link`: {e}")),
        }
    }

    fn comm_format(&self) -> Result<CommFormat, String> {
        match &self.comm {
            None => Ok(CommFormat::F32),
            Some(s) => s.parse().map_err(|e| format!("invalid parameter `comm`: {e}")),
        }
    }

    fn options(&self, seed: u64) -> Result<PlacerOptions, String> {
        let mut opts = PlacerOptions::new(self.cluster()?);
        opts.sim.partition.format = self.comm_format()?;
        opts.seed = seed;
        opts.budget = Duration::ZERO;
        opts.iterations = self.iterations;
        if let Some(start) = &self.start {
            opts.start = start.clone();
        }
        Ok(opts)
    }
}

/// Places, simulates one step, and compares with everything on one device
/// (the baseline a placement has to beat).
fn run_point(point: &PlacementPoint, seed: u64) -> Result<Outcome, String> {
    let model = flowlab_models::build_with(point.model.path(), &flowlab_models::ZooOptions::new(point.batch()?)).map_err(|e| e.to_string())?;
    let mut opts = point.options(seed)?;
    opts.sim.step = Some(model.step());
    let outcome = place_timed(&point.placer, &model.graph, &opts).map_err(|e| e.to_string())?;
    let sim = GraphSimulator::new(&model.graph, &opts.cluster, &opts.sim).map_err(|e| e.to_string())?;
    let report = sim.simulate(&outcome.placement).map_err(|e| e.to_string())?;
    // The baseline is the engine's default rule (every node on the first
    // device), which never refuses a model that overflows one device's
    // memory; `single_device` would.
    let single = if point.placer == "default" {
        report.step_seconds
    } else {
        let baseline = place_timed("default", &model.graph, &opts).map_err(|e| format!("one-device baseline: {e}"))?;
        sim.simulate(&baseline.placement).map_err(|e| format!("one-device baseline: {e}"))?.step_seconds
    };
    let used: Vec<_> = report.devices.iter().filter(|d| d.ops > 0).collect();
    let peak = report.devices.iter().map(|d| d.peak_memory_bytes).max().unwrap_or(0);
    let mean_util = if used.is_empty() { 0.0 } else { used.iter().map(|d| d.utilization).sum::<f64>() / used.len() as f64 };
    let mut out = Outcome::default();
    let m = &mut out.metrics;
    m.insert("step_time_s".into(), report.step_seconds);
    m.insert("one_device_step_s".into(), single);
    m.insert("speedup".into(), if report.step_seconds > 0.0 { single / report.step_seconds } else { 0.0 });
    m.insert("placement_s".into(), outcome.seconds);
    m.insert("devices_used".into(), used.len() as f64);
    m.insert("transfers".into(), report.transfers as f64);
    m.insert("transfer_mb".into(), report.transfer_bytes as f64 / 1e6);
    m.insert("peak_memory_gb".into(), peak as f64 / 1e9);
    m.insert("over_memory".into(), if report.over_memory { 1.0 } else { 0.0 });
    m.insert("mean_utilization".into(), mean_util);
    m.insert("nodes".into(), model.graph.num_nodes() as f64);
    m.insert("params".into(), model.params as f64);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(yaml: &str) -> PlacementPoint {
        serde_saphyr::from_str(yaml).expect("test point parses")
    }

    #[test]
    fn bad_parameters_name_the_key() {
        let p = point("{model: inceptoin_v3, devices: 2xK40, placer: m_etf}");
        let e = p.validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `model`: unknown model `inceptoin_v3`"), "{e}");
        assert!(e.contains("inception_v3"), "{e}");
        let e = point("{model: mlp, devices: 2xK40, placer: m_eft}").validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `placer`: unknown placer `m_eft`"), "{e}");
        let e = point("{model: mlp, devices: 2xK40, placer: local_search}").validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `iterations`"), "{e}");
        let e = point("{model: mlp, devices: 0xK40, placer: m_etf}").validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `devices`"), "{e}");
        let e = point("{model: mlp, devices: 2xK40, placer: m_etf, comm: int7}").validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `comm`"), "{e}");
        let e = point("{model: mlp, batch: 0, devices: 2xK40, placer: m_etf}").validate().unwrap_err();
        assert!(e.starts_with("invalid parameter `batch`"), "{e}");
    }

    #[test]
    fn default_is_its_own_baseline_and_runs_are_repeatable() {
        let p = point("{model: mlp, batch: 64, devices: 2xK40, placer: default}");
        p.validate().expect("valid");
        let a = run_point(&p, 7).expect("runs");
        assert_eq!(a.metrics["speedup"], 1.0);
        assert_eq!(a.metrics["devices_used"], 1.0);
        assert_eq!(a.metrics["transfers"], 0.0);
        let p = point("{model: mlp, batch: 64, devices: 2xK40, placer: local_search, iterations: 50, start: round_robin}");
        p.validate().expect("valid");
        let (a, b) = (run_point(&p, 3).expect("runs"), run_point(&p, 3).expect("runs"));
        for k in METRICS.iter().filter(|k| **k != "placement_s") {
            assert_eq!(a.metrics[*k], b.metrics[*k], "{k}");
        }
    }
}
