//! Layer 3, the framework a kernel runs in: device names, the rendezvous
//! that carries tensors between devices, the resources stateful kernels
//! touch (variables, random counters, queues), and step statistics.
//!
//! Contract. These are the run-time services an op kernel may use (as in
//! TensorFlow's `framework/`: `device_name_utils`, `rendezvous`,
//! `resource_mgr`, `step_stats`). They depend only on `tensor` and `error`;
//! the executor and sessions that provide them live in `runtime`.

mod backend;
mod buffers;
mod device;
pub(crate) mod link;
mod queue;
pub(crate) mod rendezvous;
mod resource;
pub(crate) mod stats;

pub(crate) use backend::Backend;
pub use backend::CudaDevice;
pub(crate) use buffers::BufferPool;
pub use device::{DeviceName, DeviceSet};
pub use link::{EmulatedLink, LinkEmulator, LinkMap};
pub(crate) use queue::{Queue, QueueSpec};
pub(crate) use resource::{Resource, VarSlot};
