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
pub(crate) mod fusion;
pub(crate) mod multi_device;
pub(crate) mod partition;
pub(crate) mod placement;
pub(crate) mod session;

pub use partition::{Partition, PartitionOptions, Transfer, partition, partition_with};
pub use placement::{DefaultPlacer, Placement, Placer};
pub use session::{MAX_THREADS, Session, SessionOptions};

use crate::error::Result;
use crate::graph::{Graph, Node, NodeId};
use crate::tensor::DeviceType;
use std::collections::HashMap;

/// The nodes one `Session::run(feeds, fetches, targets)` executes, as a mask
/// over node ids: the walk back from fetches and targets along data and
/// control edges that stops at fed edges. The simulator prices exactly this
/// set, so a simulated step and a real one run the same nodes.
pub fn step_nodes(graph: &Graph, feeds: &[(NodeId, usize)], fetches: &[(NodeId, usize)], targets: &[NodeId]) -> Result<Vec<bool>> {
    let feed_index: HashMap<(NodeId, usize), usize> = feeds.iter().enumerate().map(|(i, &f)| (f, i)).collect();
    executor::needed_nodes(&graph.nodes(), &feed_index, fetches, targets)
}

/// The step one `Session::run(feeds, fetches, targets)` executes on one
/// device of type `fuse_for`: the graph's nodes with the fusions that
/// device has kernels for (see `fusion`: a fused node keeps the id and name
/// of its chain's last node; `None`: no fusion) and the mask of the nodes
/// that run. The simulator replays this step, so that its nodes, costs and
/// profile keys are those of the real one.
pub fn step_graph(
    graph: &Graph,
    feeds: &[(NodeId, usize)],
    fetches: &[(NodeId, usize)],
    targets: &[NodeId],
    fuse_for: Option<DeviceType>,
) -> Result<(Vec<Node>, Vec<bool>)> {
    fused_step(graph.nodes(), feeds, fetches, targets, fuse_for)
}

/// [`step_graph`] for a step run on `placement`: a multi-device session
/// fuses each device's partition on its own, so a chain is fused, and a
/// pool paired with its gradient through a workspace, only where all of it
/// runs on one device.
pub fn placed_step_graph(
    graph: &Graph,
    feeds: &[(NodeId, usize)],
    fetches: &[(NodeId, usize)],
    targets: &[NodeId],
    fuse_for: Option<DeviceType>,
    placement: &Placement,
) -> Result<(Vec<Node>, Vec<bool>)> {
    let mut nodes = graph.nodes();
    for (n, d) in nodes.iter_mut().zip(placement.devices()) {
        n.device = d.to_string();
    }
    fused_step(nodes, feeds, fetches, targets, fuse_for)
}

fn fused_step(
    nodes: Vec<Node>,
    feeds: &[(NodeId, usize)],
    fetches: &[(NodeId, usize)],
    targets: &[NodeId],
    fuse_for: Option<DeviceType>,
) -> Result<(Vec<Node>, Vec<bool>)> {
    let feed_index: HashMap<(NodeId, usize), usize> = feeds.iter().enumerate().map(|(i, &f)| (f, i)).collect();
    let mut needed = executor::needed_nodes(&nodes, &feed_index, fetches, targets)?;
    let fused = fuse_for.and_then(|d| fusion::fuse_step(&nodes, &mut needed, fetches, |n, i| feed_index.contains_key(&(n, i)), d));
    Ok((fused.unwrap_or(nodes), needed))
}
