//! Dataflow graph, op registry, CPU/CUDA kernels, executor, sessions, autodiff,
//! optimizers and checkpoints.

pub mod bench;
pub mod kernels;
