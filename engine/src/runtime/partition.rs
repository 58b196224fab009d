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
use crate::graph::{Graph, NodeClass, NodeId, Output};
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
        PartitionOptions::in_format(CommFormat::F32)
    }
}

impl PartitionOptions {
    /// Every transfer in `format`, no per-edge override.
    pub fn in_format(format: CommFormat) -> Self {
        PartitionOptions { format, edge_formats: HashMap::new() }
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
    /// The loop frame (by its `frame_name`) each node's outputs belong to.
    value_frame: Vec<Option<String>>,
    /// Nodes of a frame outside its body (live in every iteration, the last included).
    pred_side: Vec<bool>,
    /// The LoopCond node of each frame.
    loop_cond: HashMap<String, NodeId>,
    /// Per (node, output), the cond branches it lies in, outermost first:
    /// (the predicate tensor, the branch taken: 0 false, 1 true).
    cond_ctx: HashMap<(NodeId, usize), CondCtx>,
    /// (predicate, branch, partition) -> that branch's pivot on the partition.
    cond_pivots: HashMap<((NodeId, usize), usize, usize), Output>,
    /// (frame, partition) -> (merge, pivot once built) of the partition's control loop.
    control_loops: HashMap<(String, usize), (Output, Option<Output>)>,
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
        // A Recv inside a loop frame runs once per iteration: its control
        // loop (below) puts it in the frame and tells it when to run.
        let frame_ctrl = match self.value_frame[src].clone() {
            Some(f) => {
                Some(self.control_loop(&f, dst, !self.pred_side[src])?)
            }
            None => None,
        };
        // A Recv of a value inside a cond branch waits on that branch's
        // pivot on its own device (made from the predicate, sent there), so
        // it is dead, and waits for nothing, when the branch does not run.
        let branch = self.cond_ctx.get(&(src, out.unwrap_or(0))).and_then(|c| c.last().copied());
        let cond_ctrl = match branch {
            Some((pred, b)) => Some(self.cond_pivot(pred, b, dst)?),
            None => None,
        };
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
                let zero = TensorValue::from_tensor(&Tensor::scalar(0f32))?;
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
        let mut rb = common(dg.op("Recv").name(&recv_name));
        for c in frame_ctrl.iter().chain(&cond_ctrl) {
            rb = rb.control_input(c);
        }
        let r = rb
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

    /// The control loop of loop frame `frame` on partition `p` (TensorFlow's
    /// graph_partition.cc AddControlFlow): Enter(0) -> Merge -> Switch on the
    /// loop's predicate (received from the LoopCond's device every
    /// iteration) -> Identity (the pivot) -> NextIteration -> Merge. Its
    /// Merge runs in every iteration, its pivot in every iteration that runs
    /// the body; the frame's Recvs on `p` wait on one of them, so they run
    /// in the right iteration and the body's are dead once the loop ends.
    /// The pivot of branch `b` of the cond on predicate `pred` on partition
    /// `p`: Identity(Switch(pred, pred)[b]), the predicate received from its
    /// device when it lives elsewhere.
    fn cond_pivot(&mut self, pred: (NodeId, usize), b: usize, p: usize) -> Result<Output> {
        if let Some(o) = self.cond_pivots.get(&(pred, b, p)) {
            return Ok(o.clone());
        }
        let local = if self.dev_of[pred.0] == p { self.parts[p].graph.out(self.new_id[pred.0], pred.1) } else { self.transfer(pred.0, Some(pred.1), p)? };
        let g = self.handle(p);
        let base = format!("_cond/{}_{}/{}/{b}", self.nodes[pred.0].name, pred.1, tag(&self.parts[p].device));
        let sw = g.op("Switch").name(&format!("{base}/switch")).input(&local).input(&local).build_all()?;
        let pivot = g.op("Identity").name(&format!("{base}/pivot")).input(&sw[b]).build()?;
        self.cond_pivots.insert((pred, b, p), pivot.clone());
        Ok(pivot)
    }

    /// Returns its Merge, or with `pivot` its pivot (built on first use:
    /// only body values, which come after the LoopCond, need it).
    fn control_loop(&mut self, frame: &str, p: usize, pivot: bool) -> Result<Output> {
        let key = (frame.to_string(), p);
        let g = self.handle(p);
        let base = format!("_cloop/{}/{}", frame.replace('#', "_"), tag(&self.parts[p].device));
        let merge = match self.control_loops.get(&key) {
            Some((m, _)) => m.clone(),
            None => {
                let parallel = self
                    .nodes
                    .iter()
                    .find(|n| n.class() == NodeClass::Enter && matches!(n.attrs.get("frame_name"), Some(AttrValue::Str(f)) if f == frame))
                    .and_then(|n| n.attrs.get("parallel_iterations").cloned())
                    .unwrap_or(AttrValue::Int(10));
                let zero = g.op("Const").name(&format!("{base}/zero")).attr("value", AttrValue::Tensor(TensorValue::from_tensor(&Tensor::scalar(0f32))?)).build()?;
                let enter = g
                    .op("Enter")
                    .name(&format!("{base}/enter"))
                    .input(&zero)
                    .attr("frame_name", AttrValue::Str(frame.to_string()))
                    .attr("is_constant", AttrValue::Bool(false))
                    .attr("parallel_iterations", parallel)
                    .build()?;
                let merge = g.op("Merge").name(&format!("{base}/merge")).input(&enter).build()?;
                self.control_loops.insert(key.clone(), (merge.clone(), None));
                merge
            }
        };
        if !pivot {
            return Ok(merge);
        }
        if let Some((_, Some(pv))) = self.control_loops.get(&key) {
            return Ok(pv.clone());
        }
        let lc = *self.loop_cond.get(frame).ok_or_else(|| EngineError::ControlFlow { node: frame.into(), detail: "a loop frame without a LoopCond".into() })?;
        if lc >= self.new_id.len() {
            return Err(EngineError::ControlFlow { node: self.nodes[lc].name.clone(), detail: "a loop body value is used before the loop's condition is built".into() });
        }
        let pred = if self.dev_of[lc] == p { self.parts[p].graph.out(self.new_id[lc], 0) } else { self.transfer(lc, Some(0), p)? };
        let sw = g.op("Switch").name(&format!("{base}/switch")).input(&merge).input(&pred).build_all()?;
        let pv = g.op("Identity").name(&format!("{base}/pivot")).input(&sw[1]).build()?;
        let next = g.op("NextIteration").name(&format!("{base}/next_iteration")).input(&pv).build()?;
        self.parts[p].graph.add_back_edge(merge.node_id(), (next.node_id(), 0));
        self.control_loops.insert(key, (merge, Some(pv.clone())));
        Ok(pv)
    }
}

/// The cond branches a value lies in, outermost first: (predicate, branch).
type CondCtx = Vec<((NodeId, usize), usize)>;

/// Per (node, output), the cond branches it lies in (see `Builder::cond_ctx`).
fn cond_contexts(nodes: &[crate::graph::Node]) -> HashMap<(NodeId, usize), CondCtx> {
    let mut ctx: HashMap<(NodeId, usize), CondCtx> = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let first = n.inputs.iter().copied().find(|&(s, _)| s < i).or_else(|| n.control_inputs.iter().find(|&&s| s < i).map(|&s| (s, 0)));
        let inherited = first.and_then(|x| ctx.get(&x).cloned()).unwrap_or_default();
        let cond_switch = n.class() == NodeClass::Switch && n.inputs.get(1).is_some_and(|&(s, _)| nodes[s].class() != NodeClass::LoopCond);
        for k in 0..n.outputs.len().max(1) {
            let mut c = inherited.clone();
            if cond_switch {
                c.push((n.inputs[1], k));
            } else if n.class() == NodeClass::Merge && n.attrs.contains_key("cond_pred") {
                c.pop();
            }
            if !c.is_empty() {
                ctx.insert((i, k), c);
            }
        }
    }
    ctx
}

/// Per node, the loop frame its outputs belong to (None: the root), the
/// LoopCond of each frame, and which nodes their frame's LoopCond needs.
#[allow(clippy::type_complexity)]
fn frames_of(nodes: &[crate::graph::Node], dev_of: &[usize], devices: &[DeviceName]) -> Result<(Vec<Option<String>>, HashMap<String, NodeId>, Vec<bool>)> {
    let mut frame: Vec<Option<String>> = vec![None; nodes.len()];
    let mut value: Vec<Option<String>> = vec![None; nodes.len()];
    let mut parent: HashMap<String, Option<String>> = HashMap::new();
    let mut loop_cond = HashMap::new();
    for (i, n) in nodes.iter().enumerate() {
        let first = n.inputs.iter().map(|&(s, _)| s).chain(n.control_inputs.iter().copied()).find(|&s| s < i);
        let f = first.and_then(|s| value[s].clone());
        frame[i] = f.clone();
        value[i] = match n.class() {
            NodeClass::Enter => {
                let name = match n.attrs.get("frame_name") {
                    Some(AttrValue::Str(s)) => s.clone(),
                    _ => return Err(EngineError::Attr { node: n.name.clone(), op: n.op.clone(), attr: "frame_name".into(), detail: "missing".into() }),
                };
                parent.insert(name.clone(), f);
                Some(name)
            }
            NodeClass::Exit => f.as_ref().and_then(|x| parent.get(x).cloned().flatten()),
            _ => f,
        };
        if n.class() == NodeClass::LoopCond
            && let Some(x) = &frame[i]
        {
            loop_cond.insert(x.clone(), i);
        }
    }
    // A loop's body: what descends from its Switches (dead once the loop ends).
    let mut body = vec![false; nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if value[i].is_none() || n.class() == NodeClass::Exit {
            continue;
        }
        let loop_switch = n.class() == NodeClass::Switch && n.inputs.get(1).is_some_and(|&(s, _)| nodes[s].class() == NodeClass::LoopCond);
        body[i] = loop_switch || n.inputs.iter().map(|&(s, _)| s).chain(n.control_inputs.iter().copied()).any(|s| s < i && body[s]);
    }
    let pred_side = body.iter().map(|b| !b).collect();
    // A loop nested in a loop would need a control loop per level on each
    // device: refuse to split one rather than recurse or wait for nothing.
    for (f, p) in &parent {
        if p.is_none() {
            continue;
        }
        let mut inside = (0..nodes.len()).filter(|&i| frame[i].as_deref() == Some(f.as_str()) || value[i].as_deref() == Some(f.as_str()));
        if let Some(first) = inside.next()
            && let Some(other) = inside.find(|&i| dev_of[i] != dev_of[first])
        {
            return Err(EngineError::Placement {
                node: nodes[other].name.clone(),
                detail: format!(
                    "loop '{f}' is nested in another loop and split over devices ('{}' on {}, '{}' on {}); only outermost loops may be split",
                    nodes[first].name, devices[dev_of[first]], nodes[other].name, devices[dev_of[other]]
                ),
            });
        }
    }
    Ok((value, loop_cond, pred_side))
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
    let devices: Vec<DeviceName> = parts.iter().map(|p| p.device.clone()).collect();
    let (value_frame, loop_cond, pred_side) = frames_of(&nodes, &dev_of, &devices)?;
    let mut b = Builder {
        nodes: &nodes,
        dev_of,
        parts,
        new_id: Vec::with_capacity(nodes.len()),
        recvs: HashMap::new(),
        opts,
        value_frame,
        pred_side,
        loop_cond,
        control_loops: HashMap::new(),
        cond_ctx: cond_contexts(&nodes),
        cond_pivots: HashMap::new(),
    };
    let mut back_edges = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        let p = b.dev_of[i];
        let mut op = b.handle(p).op(&n.op).name(&n.name);
        for &(src, k) in &n.inputs {
            if src >= i {
                // A loop's NextIteration -> Merge edge: added once both exist.
                if b.dev_of[src] != p {
                    return Err(EngineError::Placement {
                        node: nodes[src].name.clone(),
                        detail: format!("a NextIteration must be on the device of its Merge '{}' ({})", n.name, b.parts[p].device),
                    });
                }
                back_edges.push((i, src, k));
                continue;
            }
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
    for (m, src, k) in back_edges {
        let p = b.dev_of[m];
        b.parts[p].graph.add_back_edge(b.new_id[m], (b.new_id[src], k));
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
