//! What one simulated step reports.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One simulated training step of a placed graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphSimReport {
    /// Time from the first op's start to the last op's or transfer's end.
    pub step_seconds: f64,
    /// The same in picoseconds (exact).
    pub step_ps: u64,
    pub devices: Vec<DeviceReport>,
    /// Node names from the first to the last op of the longest chain of
    /// dependencies (data, control, or waiting for the same device).
    pub critical_path: Vec<String>,
    /// Bytes sent per (source, destination) pair that carried any.
    pub links: Vec<LinkReport>,
    /// Ops executed (Send/Recv are transfers, not ops).
    pub ops: usize,
    /// Cross-device transfers (one per tensor per destination device).
    pub transfers: usize,
    pub transfer_bytes: u64,
    /// Whether some device's peak memory exceeds its capacity.
    pub over_memory: bool,
    /// Which devices are over capacity and by how much.
    pub memory_error: Option<String>,
    pub warnings: Vec<String>,
}

/// One device's share of the step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    pub name: String,
    /// Catalog entry.
    pub spec: String,
    pub ops: usize,
    pub busy_seconds: f64,
    /// Priced time of the device's ops by op class (`conv`, `matmul`, ...),
    /// before any host contention: where a prediction's time goes, to hold
    /// it against a real profile of the same step.
    #[serde(default)]
    pub op_seconds_by_class: BTreeMap<String, f64>,
    /// busy / step time.
    pub utilization: f64,
    /// Largest sum of live tensors: variables always, others from their
    /// producer's start (or their arrival) to their last consumer's end.
    pub peak_memory_bytes: u64,
    pub capacity_bytes: f64,
    pub over_capacity: bool,
}

/// Traffic from one device to another.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkReport {
    pub src: String,
    pub dst: String,
    pub link: String,
    pub bytes: u64,
    pub transfers: usize,
}
