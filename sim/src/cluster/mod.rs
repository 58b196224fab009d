//! Cluster-scale training simulation: the API experiment sweeps call.
//!
//! ```text
//! let cfg: ClusterConfig = serde_saphyr::from_str(yaml)?;
//! cfg.validate()?;
//! let report = flowlab_sim::cluster::simulate(&cfg, seed)?;
//! let row = report.metrics(); // keys: ClusterConfig::metric_names()
//! ```

pub mod config;
pub mod report;
mod straggler;
pub use straggler::{INJECTED_ROWS, factor_table, injected_factors};
mod training;
pub mod workload;

pub use config::{Checkpoint, ClusterConfig, Failures, NetworkConfig, Straggler, Strategy, TaskLayout, TopologyKind, available_memory_bytes};
pub use report::ClusterReport;
pub use workload::{Embedding, ModelRef, Optimizer, PsSoftmax, Workload};

use crate::error::SimError;

/// Validates `cfg` and simulates it with all randomness from `seed` (derive
/// it from the experiment seed and the sweep point's index). With backup
/// workers, also simulates the same run without them (same seed) to report
/// the normalized speedup.
pub fn simulate(cfg: &ClusterConfig, seed: u64) -> Result<ClusterReport, SimError> {
    cfg.validate()?;
    let mut report = training::run(cfg, seed)?;
    if cfg.strategy.backup() > 0 {
        let mut base = cfg.clone();
        base.strategy = match &cfg.strategy {
            Strategy::Sync { .. } => Strategy::Sync { backup: 0 },
            Strategy::SyncGroups { groups, .. } => Strategy::SyncGroups { groups: *groups, backup: 0 },
            Strategy::Async {} => Strategy::Async {},
        };
        let baseline = training::run(&base, seed)?;
        report.baseline_step_p50_s = Some(baseline.step_percentile(0.5));
    }
    Ok(report)
}

/// Validates `cfg` and simulates it once with `seed`, recording every flow
/// it starts: the run's traffic, for a peer simulator to replay on the same
/// links and routes (`sim/examples/simgrid_replay.rs`).
pub fn simulate_traffic(cfg: &ClusterConfig, seed: u64) -> Result<(ClusterReport, Vec<crate::network::FlowStart>), SimError> {
    cfg.validate()?;
    training::run_logged(cfg, seed, true)
}

#[cfg(test)]
mod tests;
