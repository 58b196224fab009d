//! Graph-level simulation: one training step of a placed engine graph
//! replayed op by op on virtual devices.
//!
//! - [`cluster`]: the virtual devices and links ("4xK40", "2xV100,1xcpu").
//! - [`SimGraph`]: adjacency, tensor sizes and registry costs, computed once.
//! - [`GraphSimulator`]: op times per device and the event-driven replay.
//! - [`GraphSimReport`]: step time, busy time and utilization per device,
//!   critical path, bytes per link, peak memory against capacity.

pub mod bench;
mod cluster;
mod cost;
mod report;
mod sim_graph;
mod simulate;

pub use cluster::{DEFAULT_LINK, MAX_DEVICES, VirtualCluster, VirtualDevice};
pub use report::{DeviceReport, GraphSimReport, LinkReport};
pub use sim_graph::{SimGraph, StepSpec, profile_key, profiled_nodes};
pub use simulate::{GraphSimulator, SimOptions};

#[cfg(test)]
pub(crate) mod tests;
