//! Kernels per device type. The op registry (in `ops/`) defines what an op
//! means; these compute it.

pub mod cpu;
