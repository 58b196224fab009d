//! Dataflow graph, op registry, CPU/CUDA kernels, executor, sessions, autodiff,
//! optimizers and checkpoints.

pub mod bench;
pub mod checkpoint;
pub mod datasets;
pub mod kernels;
pub mod replicate;
pub mod train;

mod attr;
mod device;
mod dtype;
mod error;
mod executor;
mod gradients;
mod graph;
mod graph_json;
mod multi_device;
mod ops;
mod optimizers;
mod partition;
mod placement;
mod rendezvous;
mod session;
mod shape;
mod tensor;
mod trace;

pub use attr::{AttrValue, Attrs, TensorValue};
pub use device::{DeviceName, DeviceSet};
pub use dtype::{DType, Element};
pub use error::{EngineError, Result};
pub use graph::{Graph, IntoOutput, Node, NodeId, OpBuilder, Output, TensorType};
pub use ops::{DeviceType, OpCost, op_cost, op_names};
pub use optimizers::Optimizer;
pub use partition::{Partition, PartitionOptions, Transfer, partition, partition_with};
pub use placement::{DefaultPlacer, Placement, Placer};
pub use rendezvous::{LocalRendezvous, RecvCallback, Rendezvous, RendezvousKey};
pub use ops::sendrecv::{recv_tensor, send_tensor, wire_format};
pub use session::{Session, SessionOptions};
pub use shape::{PartialShape, Shape};
pub use tensor::{CpuStorage, Storage, Tensor};
pub use trace::{CommStats, NodeStats, StepStats, TransferStats};
