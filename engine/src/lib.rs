//! The dataflow engine: tensors, graphs, the op registry, CPU kernels, the
//! runtime (placement, partitioning, executor, sessions) and training.
//!
//! Layers, bottom to top; a module imports only from layers below it (two
//! modules on one layer do not import each other)
//! (`tests/layers_point_down.rs` checks every `use crate::...`):
//!
//! | layer | module | holds |
//! |---|---|---|
//! | 0 | `error` | the crate's error type |
//! | 1 | `files` | atomic file writes, byte offsets for parse errors |
//! | 2 | `tensor` | dtypes, shapes, device kinds, dense tensors in host or device memory |
//! | 2 | `kernels` | per-device arithmetic on slices (`kernels::cpu`) |
//! | 3 | `framework` | device names and backends, rendezvous, variable resources, step stats, output buffers |
//! | 4 | `graph` | nodes, attributes, builder API, graph files |
//! | 5 | `ops` | the op registry: one file per op family |
//! | 6 | `runtime` | placement, partition, executor, sessions |
//! | 7 | `train` | autodiff, optimizers, data parallelism, checkpoints |
//!
//! Programs built on the engine (training recipes, data sets, benchmark
//! cases) live in the `flowlab-programs` crate, not here.

pub mod kernels;
pub mod train;

mod error;
mod files;
mod framework;
mod graph;
mod ops;
mod runtime;
mod tensor;

pub use error::{EngineError, Result};
pub use framework::rendezvous::{LocalRendezvous, RecvCallback, Rendezvous, RendezvousKey};
pub use framework::stats::{CommStats, NodeStats, PartitionTimeline, StepStats, TransferEnd, TransferStats, unix_us_at};
pub use framework::{CudaDevice, DeviceName, DeviceSet, EmulatedLink, LinkEmulator, LinkMap};
pub use graph::{AttrValue, Attrs, Graph, IntoOutput, Node, NodeId, OpBuilder, Output, TensorValue};
pub use ops::sendrecv::{recv_tensor, send_tensor, wire_format};
pub use ops::control_flow::{DEFAULT_PARALLEL_ITERATIONS, WhileOptions};
pub use ops::queue::QueueHandle;
pub use ops::rnn::LstmCellOutputs;
pub use ops::{Gemm, OpCost, op_cost, op_names};
pub use runtime::{DefaultPlacer, MAX_THREADS, Partition, PartitionOptions, Placement, Placer, Session, SessionOptions, Transfer};
pub use runtime::{partition, partition_with, placed_step_graph, step_graph, step_nodes};
pub use tensor::{CpuStorage, CudaAllocator, CudaStorage, DType, DeviceType, Element, PartialShape, Shape, Storage, Tensor, TensorType};
pub use train::Optimizer;
pub use train::{checkpoint, replicate};
