//! Layer 2, kernels per device type: the arithmetic on plain slices. The op
//! registry (in `ops/`) defines what an op means and adapts tensors to
//! these functions; nothing here knows of tensors, graphs or sessions.

pub mod cpu;

#[cfg(feature = "cuda")]
pub mod cuda;
