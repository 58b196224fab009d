//! Layer 7, training: reverse-mode autodiff, optimizers as graph ops,
//! in-graph data parallelism and checkpoints of a session's variables.
//!
//! Contract. Everything here builds graphs through the public builder API
//! and runs them through `runtime::Session`; nothing below imports it.

pub mod checkpoint;
mod gradients;
mod loop_grad;
pub(crate) mod optimizers;
pub mod replicate;

pub use optimizers::Optimizer;
