//! Partitioning: one subgraph per device, cross-device edges cut into
//! Send/Recv pairs.
//!
//! Contract. Given a graph and a [`Placement`], [`partition`] returns one
//! [`Partition`] per device that holds nodes (in order of first node). Every
//! node keeps its name, op, attrs and (same-device) inputs; a data edge whose
//! ends are on two devices becomes a Send on the source device and a Recv on
//! the destination device, with ONE Recv per (tensor, destination device)
//! however many consumers it has there. A cross-device control edge becomes,
//! as in TensorFlow, a tiny scalar Const on the source device that runs after
//! the source node, sent to a Recv the destination node waits for. Each
//! transfer has a [`RendezvousKey`] (source device, destination device, edge
//! "node:output" or "node:control"; step id 0 until run time) that is unique
//! in the partitioned graph, and a [`CommFormat`] chosen for the whole graph
//! or per edge (applied to f32 tensors; other dtypes travel as is).

use crate::graph::{AttrValue, TensorValue};
use crate::framework::DeviceName;
use crate::tensor::DType;
use crate::error::{EngineError, Result};
use crate::graph::{Graph, NodeId, Output};
use crate::ops::sendrecv::wire_format;
use crate::runtime::placement::Placement;
use crate::framework::rendezvous::RendezvousKey;
use crate::tensor::PartialShape;
use crate::tensor::Tensor;
use flowlab_hw::CommFormat;
use std::collections::HashMap;

/// How transfers are encoded: one format for the graph, overridden per edge
/// (keyed by the edge name "node:output").
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionOptions {
    pub format: CommFormat,
    pub edge_formats: HashMap<String, CommFormat>,
}

impl Default for PartitionOptions {
    fn default() -> Self {
        PartitionOptions { format: CommFormat::F32, edge_formats: HashMap::new() }
    }
}

/// One cross-device transfer.
#[derive(Clone, Debug, PartialEq)]
pub struct Transfer {
    pub key: RendezvousKey,
    /// The format it travels in (F32 = unchanged; non-f32 tensors always F32).
    pub format: CommFormat,
    pub dtype: DType,
    pub shape: PartialShape,
    /// Name of the Send node (in the source partition).
    pub send_node: String,
    /// Name of the Recv node (in the destination partition).
    pub recv_node: String,
    /// Whether it carries a control edge (a scalar) rather than data.
    pub control: bool,
}

/// The subgraph of one device.
#[derive(Clone, Debug)]
pub struct Partition {
    pub device: DeviceName,
    pub graph: Graph,
    /// Ids (in the original graph) of the nodes placed here, in order.
    pub nodes: Vec<NodeId>,
    /// Transfers this partition sends.
    pub sends: Vec<Transfer>,
    /// Transfers this partition receives.
    pub recvs: Vec<Transfer>,
}

/// A node-name-safe tag for a device.
fn tag(d: &DeviceName) -> String {
    d.to_string().trim_start_matches('/').replace(['/', ':'], "_")
}

/// Splits `graph` by `placement` with f32 transfers.
pub fn partition(graph: &Graph, placement: &Placement) -> Result<Vec<Partition>> {
    partition_with(graph, placement, &PartitionOptions::default())
}

struct Builder<'a> {
    nodes: &'a [crate::graph::Node],
    dev_of: Vec<usize>,
    parts: Vec<Partition>,
    /// New node id in its partition, per original node.
    new_id: Vec<NodeId>,
    /// (source node, output or None for control, destination partition) -> Recv output.
    recvs: HashMap<(NodeId, Option<usize>, usize), Output>,
    opts: &'a PartitionOptions,
}

impl Builder<'_> {
    fn handle(&self, p: usize) -> Graph {
        self.parts[p].graph.device(&self.parts[p].device.to_string())
    }

    /// The Recv output on partition `dst` for output `out` (None: control) of `src`.
    fn transfer(&mut self, src: NodeId, out: Option<usize>, dst: usize) -> Result<Output> {
        if let Some(o) = self.recvs.get(&(src, out, dst)) {
            return Ok(o.clone());
        }
        let sp = self.dev_of[src];
        let n = &self.nodes[src];
        let (sdev, ddev) = (self.parts[sp].device.clone(), self.parts[dst].device.clone());
        let sg = self.handle(sp);
        let dg = self.handle(dst);
        let src_out = self.parts[sp].graph.out(self.new_id[src], out.unwrap_or(0));
        let (edge, value, tt) = match out {
            Some(k) => {
                let tt = n.outputs.get(k).cloned().ok_or_else(|| EngineError::BadOutputIndex {
                    node: n.name.clone(),
                    op: n.op.clone(),
                    index: k,
                    outputs: n.outputs.len(),
                })?;
                (format!("{}:{k}", n.name), src_out, tt)
            }
            None => {
                let zero = TensorValue::from_tensor(&Tensor::scalar(0f32));
                let c = sg
                    .op("Const")
                    .name(&format!("_ctrl/{}/to_{}", n.name, tag(&ddev)))
                    .attr("value", AttrValue::Tensor(zero))
                    .control_input(&src_out)
                    .build()?;
                (format!("{}:control", n.name), c, crate::tensor::TensorType::new(DType::F32, PartialShape::scalar()))
            }
        };
        let requested = self.opts.edge_formats.get(&edge).copied().unwrap_or(self.opts.format);
        let format = wire_format(tt.dtype, requested);
        let base = edge.replace(':', "_");
        let send_name = format!("_send/{base}/to_{}", tag(&ddev));
        let recv_name = format!("_recv/{base}/from_{}", tag(&sdev));
        let common = |b: crate::graph::OpBuilder| {
            b.attr("edge", AttrValue::Str(edge.clone()))
                .attr("send_device", AttrValue::Str(sdev.to_string()))
                .attr("recv_device", AttrValue::Str(ddev.to_string()))
                .attr("comm_format", AttrValue::Str(format.to_string()))
        };
        common(sg.op("Send").name(&send_name).input(&value)).build()?;
        let r = common(dg.op("Recv").name(&recv_name))
            .attr("dtype", AttrValue::DType(tt.dtype))
            .attr("shape", AttrValue::Shape(tt.shape.clone()))
            .build()?;
        let t = Transfer {
            key: RendezvousKey { src_device: sdev, dst_device: ddev, edge, step_id: 0 },
            format,
            dtype: tt.dtype,
            shape: tt.shape,
            send_node: send_name,
            recv_node: recv_name,
            control: out.is_none(),
        };
        self.parts[sp].sends.push(t.clone());
        self.parts[dst].recvs.push(t);
        self.recvs.insert((src, out, dst), r.clone());
        Ok(r)
    }
}

/// Splits `graph` by `placement`, encoding transfers as `opts` says.
pub fn partition_with(graph: &Graph, placement: &Placement, opts: &PartitionOptions) -> Result<Vec<Partition>> {
    let nodes = graph.nodes();
    let mut parts: Vec<Partition> = Vec::new();
    let mut dev_of = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let d = placement.device(i).ok_or_else(|| EngineError::Placement {
            node: n.name.clone(),
            detail: format!("the placement covers {} of the graph's {} nodes", placement.len(), nodes.len()),
        })?;
        if !d.is_full() {
            return Err(EngineError::Placement { node: n.name.clone(), detail: format!("placed on '{d}', which is not a full device name") });
        }
        let p = match parts.iter().position(|p| &p.device == d) {
            Some(p) => p,
            None => {
                parts.push(Partition { device: d.clone(), graph: Graph::new(), nodes: Vec::new(), sends: Vec::new(), recvs: Vec::new() });
                parts.len() - 1
            }
        };
        dev_of.push(p);
    }
    let mut b = Builder { nodes: &nodes, dev_of, parts, new_id: Vec::with_capacity(nodes.len()), recvs: HashMap::new(), opts };
    for (i, n) in nodes.iter().enumerate() {
        let p = b.dev_of[i];
        let mut op = b.handle(p).op(&n.op).name(&n.name);
        for &(src, k) in &n.inputs {
            let input = if b.dev_of[src] == p { b.parts[p].graph.out(b.new_id[src], k) } else { b.transfer(src, Some(k), p)? };
            op = op.input(input);
        }
        for &c in &n.control_inputs {
            let dep = if b.dev_of[c] == p { b.parts[p].graph.out(b.new_id[c], 0) } else { b.transfer(c, None, p)? };
            op = op.control_input(&dep);
        }
        for (k, v) in &n.attrs {
            op = op.attr(k, v.clone());
        }
        let id = op.build()?.node_id();
        b.new_id.push(id);
        b.parts[p].nodes.push(i);
    }
    let (vars, inits) = {
        let d = graph.lock();
        (d.variables.clone(), d.initializers.clone())
    };
    for (v, init) in vars.into_iter().zip(inits) {
        let p = b.dev_of[v];
        if b.dev_of[init] == p {
            b.parts[p].graph.register_variable(b.new_id[v], b.new_id[init]);
        }
    }
    Ok(b.parts)
}
