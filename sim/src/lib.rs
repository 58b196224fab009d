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

pub mod bench;
pub mod cluster;
pub mod comm;
pub mod error;
pub mod event_queue;
pub mod network;
pub mod rng;
pub mod time;

pub use error::SimError;
pub use time::SimTime;
