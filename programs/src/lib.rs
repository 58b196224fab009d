//! Programs built on the engine, kept out of the engine library: the
//! training recipes behind `flowlab train` (MLP and CNN on the digits,
//! one or several devices), the data-set reader, and the benchmark cases
//! that `flowlab bench engine` and the criterion benches time, and
//! data-parallel training over a cluster of tasks (`cluster`, on
//! `flowlab-runtime`'s transport).
//!
//! They use only the engine's public API, as a user's program would.

pub mod bench;
pub mod cluster;
pub mod datasets;
pub mod train;
