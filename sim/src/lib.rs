//! Discrete-event cluster and network simulator.
//!
//! - [`event_queue`] / [`time`]: the event core (integer picosecond clock,
//!   deterministic tie-breaking).
//! - [`network`]: topologies, ECMP routing, analytical and flow-level
//!   (max-min fair) network models behind one trait.
//! - [`comm`]: parameter-server sharding and collectives (ring, double
//!   binary tree, hierarchical all-reduce).
//! - [`cluster`]: training strategies (async, sync, backup workers, sync
//!   groups), stragglers, failures and checkpoints; the API that experiment
//!   sweeps call.
//! - [`graph`]: one training step of a placed engine graph replayed op by op
//!   on virtual devices (roofline, systolic array or measured profile).
//! - [`placement`]: cost-based placers (TF greedy, Baechi m-TOPO/m-ETF/m-SCT,
//!   local search, ...) implementing the engine's `Placer`.

pub mod bench;
pub mod cluster;
pub mod comm;
pub mod error;
pub mod event_queue;
pub mod graph;
pub mod network;
pub mod placement;
pub mod rng;
pub mod time;

pub use error::SimError;
pub use time::SimTime;
