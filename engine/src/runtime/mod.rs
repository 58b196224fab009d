//! Layer 6, the runtime: everything between a graph and its results.
//!
//! Contract. A [`Session`] places the graph once (`placement`), and for each
//! run signature prunes it, cuts it into one partition per device with
//! Send/Recv pairs (`partition`), and prepares one executor per partition
//! (`executor`; several devices through `multi_device`). Stages pass plain
//! values (`Placement`, `Partition`) down the pipeline, one module each, as
//! in TensorFlow's `common_runtime` (placer, graph_partition, executor,
//! direct_session). The runtime uses the layers below; `train` and the
//! programs above use it through `Session`.

pub(crate) mod executor;
pub(crate) mod multi_device;
pub(crate) mod partition;
pub(crate) mod placement;
pub(crate) mod session;

pub use partition::{Partition, PartitionOptions, Transfer, partition, partition_with};
pub use placement::{DefaultPlacer, Placement, Placer};
pub use session::{Session, SessionOptions};
