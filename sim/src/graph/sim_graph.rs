//! The immutable part of a graph-level simulation: adjacency, tensor sizes and
//! per-node costs, computed once from an engine [`Graph`] and reused by every
//! simulated step (placers simulate thousands of placements of one graph).
//!
//! Costs come from the engine's op registry ([`flowlab_engine::op_cost`]): the
//! simulator keeps no op list of its own. Unknown dimensions are costed as 1
//! (with a warning), since the registry prices concrete shapes.

use crate::error::SimError;
use flowlab_engine::{AttrValue, DType, DeviceType, Gemm, Graph, Node, NodeId, Placement, Shape, TensorType, op_cost, placed_step_graph, step_graph};
use flowlab_hw::{Dtype, OpClass};

/// One node's device-independent cost.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeCost {
    pub flops: f64,
    pub bytes: f64,
    pub dtype: Dtype,
    pub class: OpClass,
    /// The op as one matrix product, as its family declares it (for a
    /// systolic array, and the measured host's rates by shape and layout).
    pub gemm: Option<Gemm>,
}

/// Compressed adjacency lists: `items[offsets[i]..offsets[i + 1]]` belong to `i`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Csr {
    pub offsets: Vec<u32>,
    pub items: Vec<u32>,
}

impl Csr {
    fn from_lists(lists: Vec<Vec<u32>>) -> Csr {
        let mut offsets = Vec::with_capacity(lists.len() + 1);
        let mut items = Vec::new();
        offsets.push(0);
        for l in lists {
            items.extend(l);
            offsets.push(items.len() as u32);
        }
        Csr { offsets, items }
    }
    #[inline]
    pub fn get(&self, i: usize) -> &[u32] {
        &self.items[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A graph prepared for simulation. Tensors ("slots") are numbered
/// `slot_base[node] + output`.
#[derive(Debug, Clone)]
pub struct SimGraph {
    pub(crate) names: Vec<String>,
    pub(crate) ops: Vec<String>,
    /// Requested device per node ("" when unconstrained).
    pub(crate) requested: Vec<String>,
    /// Names of the nodes each node must be colocated with (attrs `var`,
    /// `slots`, `_class = ["loc:@x"]`, as the engine's placer reads them).
    pub(crate) colocate_with: Vec<Vec<String>>,
    pub(crate) costs: Vec<NodeCost>,
    /// First slot of each node (len n + 1).
    pub(crate) slot_base: Vec<u32>,
    pub(crate) slot_node: Vec<u32>,
    pub(crate) slot_elems: Vec<u64>,
    pub(crate) slot_dtype: Vec<DType>,
    /// Bytes a slot occupies in device memory (0 for outputs that alias a
    /// variable, i.e. outputs of update ops).
    pub(crate) slot_mem: Vec<u64>,
    /// Consumers of each slot, one entry per input edge.
    pub(crate) slot_consumers: Csr,
    /// Data inputs of each node as slots, one entry per edge.
    pub(crate) inputs: Csr,
    pub(crate) control_inputs: Csr,
    pub(crate) control_consumers: Csr,
    /// Whether the node is a variable (its value lives for the whole step).
    pub(crate) is_variable: Vec<bool>,
    /// A topological order (data and control edges).
    pub(crate) topo: Vec<u32>,
    pub(crate) warnings: Vec<String>,
    /// When the graph was pruned to one step: how its nodes map back.
    pub(crate) step: Option<StepMap>,
    /// Profile shape key of each node, without the device kind (see
    /// [`profile_key`]).
    pub(crate) keys: Vec<String>,
    /// Whether the engine executes the node in the step: false for fed
    /// placeholders and variables only named by update ops, which the
    /// simulator keeps for their memory and as sources of transfers but
    /// prices at zero time.
    pub(crate) runs: Vec<bool>,
}

/// The key a measured profile stores a node's time under: device kind, op,
/// input and output types, e.g. `cpu MatMul f32[128,784] f32[784,512] ->
/// f32[128,512]`. `flowlab profile` and the simulator both compute it here,
/// so a key written is a key found.
pub fn profile_key(nodes: &[Node], i: usize, device_kind: &str) -> String {
    let n = &nodes[i];
    let ins: Vec<(DType, Shape)> = n.inputs.iter().filter_map(|&(p, k)| nodes.get(p)?.outputs.get(k)).map(|t| (t.dtype, concrete(t).0)).collect();
    let outs: Vec<(DType, Shape)> = n.outputs.iter().map(|t| (t.dtype, concrete(t).0)).collect();
    format!("{} {}", device_kind.to_ascii_lowercase(), types_key(&n.op, &ins, &outs))
}

/// Every node of `nodes` (one step, in id order) by name: its profile key
/// on `device_kind` and its op family's cost, as a profile records them so
/// the same graph at other shapes can be priced from its measurements.
pub fn profiled_nodes(nodes: Vec<Node>, device_kind: &str) -> Result<std::collections::BTreeMap<String, flowlab_hw::ProfiledNode>, SimError> {
    let g = SimGraph::from_nodes(nodes)?;
    let kind = device_kind.to_ascii_lowercase();
    Ok((0..g.len())
        .map(|i| {
            let c = &g.costs[i];
            let gemm = c.gemm.map(|x| flowlab_hw::ProfiledGemm { m: x.m, n: x.n, k: x.k, transpose_a: x.transposed.0, transpose_b: x.transposed.1 });
            (g.names[i].clone(), flowlab_hw::ProfiledNode { key: format!("{kind} {}", g.keys[i]), flops: c.flops, bytes: c.bytes, gemm })
        })
        .collect())
}

fn types_key(op: &str, ins: &[(DType, Shape)], outs: &[(DType, Shape)]) -> String {
    use std::fmt::Write;
    let mut k = String::with_capacity(64);
    k.push_str(op);
    let one = |k: &mut String, (d, s): &(DType, Shape)| {
        let dims: Vec<String> = s.dims().iter().map(|x| x.to_string()).collect();
        let _ = write!(k, " {d}[{}]", dims.join(","));
    };
    for t in ins {
        one(&mut k, t);
    }
    k.push_str(" ->");
    for t in outs {
        one(&mut k, t);
    }
    k
}

pub use flowlab_models::StepSpec;

/// How a graph pruned to one step maps back to the full graph.
#[derive(Debug, Clone)]
pub(crate) struct StepMap {
    /// Full-graph id of each simulated node.
    pub full_id: Vec<u32>,
    /// For each full-graph node, the simulated node whose device it takes
    /// when a placement is expanded back (its colocation partner, else its
    /// nearest consumer in the step), or `None` for the first device.
    pub follow: Vec<Option<u32>>,
}

fn colocation_names(n: &Node) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(AttrValue::Str(var)) = n.attrs.get("var") {
        v.push(var.clone());
    }
    for key in ["slots", "_class"] {
        if let Some(AttrValue::Strs(list)) = n.attrs.get(key) {
            for s in list {
                v.push(if key == "_class" { s.strip_prefix("loc:@").unwrap_or(s).to_string() } else { s.clone() });
            }
        }
    }
    v
}

/// Concrete shape of a type, unknown dims as 1; `None` when some were unknown.
fn concrete(t: &TensorType) -> (Shape, bool) {
    let mut exact = true;
    let dims = t
        .shape
        .dims()
        .iter()
        .map(|d| {
            d.unwrap_or_else(|| {
                exact = false;
                1
            })
        })
        .collect();
    (Shape::new(dims), exact)
}

impl SimGraph {
    /// Prepares `graph`; errors name the node (unknown op, cycle).
    pub fn new(graph: &Graph) -> Result<SimGraph, SimError> {
        SimGraph::from_nodes(graph.nodes())
    }

    /// Prepares a list of nodes in id order (e.g. read from a file, where
    /// inputs may point forward and form cycles).
    pub fn from_nodes(nodes: Vec<Node>) -> Result<SimGraph, SimError> {
        let n = nodes.len();
        let mut slot_base = Vec::with_capacity(n + 1);
        let mut total = 0u32;
        for node in &nodes {
            slot_base.push(total);
            total += node.outputs.len() as u32;
        }
        slot_base.push(total);
        let mut slot_node = Vec::with_capacity(total as usize);
        let mut slot_elems = Vec::with_capacity(total as usize);
        let mut slot_dtype = Vec::with_capacity(total as usize);
        let mut slot_mem = Vec::with_capacity(total as usize);
        let mut costs = Vec::with_capacity(n);
        let mut warnings = Vec::new();
        let mut inexact: Vec<&str> = Vec::new();
        let mut inputs = Vec::with_capacity(n);
        let mut control_inputs = Vec::with_capacity(n);
        let mut consumers: Vec<Vec<u32>> = vec![Vec::new(); total as usize];
        let mut control_consumers: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut colocate_with = Vec::with_capacity(n);
        let mut keys = Vec::with_capacity(n);
        for (i, node) in nodes.iter().enumerate() {
            let aliases_variable = node.attrs.contains_key("var");
            let mut outs = Vec::with_capacity(node.outputs.len());
            let mut exact = true;
            for t in &node.outputs {
                let (s, e) = concrete(t);
                exact &= e;
                let elems = s.num_elements() as u64;
                slot_node.push(i as u32);
                slot_elems.push(elems);
                slot_dtype.push(t.dtype);
                slot_mem.push(if aliases_variable { 0 } else { elems * t.dtype.size_in_bytes() as u64 });
                outs.push((t.dtype, s));
            }
            let mut ins = Vec::with_capacity(node.inputs.len());
            let mut in_slots = Vec::with_capacity(node.inputs.len());
            for &(p, k) in &node.inputs {
                let t = nodes.get(p).and_then(|pn| pn.outputs.get(k)).ok_or_else(|| SimError::Graph {
                    node: node.name.clone(),
                    detail: format!("input {p}:{k} does not exist"),
                })?;
                let slot = slot_base[p] + k as u32;
                let (s, e) = concrete(t);
                exact &= e;
                ins.push((t.dtype, s));
                in_slots.push(slot);
                consumers[slot as usize].push(i as u32);
            }
            for &c in &node.control_inputs {
                if c >= n {
                    return Err(SimError::Graph { node: node.name.clone(), detail: format!("control input {c} does not exist") });
                }
                control_consumers[c].push(i as u32);
            }
            if !exact && inexact.len() < 3 {
                inexact.push(&node.name);
            }
            let c = op_cost(&node.op, &node.attrs, &ins, &outs)
                .map_err(|e| SimError::Graph { node: node.name.clone(), detail: format!("op '{}': {e}", node.op) })?;
            keys.push(types_key(&node.op, &ins, &outs));
            costs.push(NodeCost {
                flops: c.flops,
                bytes: c.bytes,
                dtype: c.dtype,
                class: c.class,
                gemm: c.gemm,
            });
            inputs.push(in_slots);
            control_inputs.push(node.control_inputs.iter().map(|&c| c as u32).collect());
            colocate_with.push(colocation_names(node));
        }
        if !inexact.is_empty() {
            warnings.push(format!(
                "some tensors have unknown dimensions (e.g. in node '{}'): they are costed with those dimensions set to 1",
                inexact.join("', '")
            ));
        }
        let inputs = Csr::from_lists(inputs);
        let control_inputs = Csr::from_lists(control_inputs);
        let slot_consumers = Csr::from_lists(consumers);
        let control_consumers = Csr::from_lists(control_consumers);
        let topo = topological_order(&nodes, &inputs, &control_inputs, &slot_node)?;
        Ok(SimGraph {
            names: nodes.iter().map(|x| x.name.clone()).collect(),
            ops: nodes.iter().map(|x| x.op.clone()).collect(),
            requested: nodes.iter().map(|x| x.device.clone()).collect(),
            colocate_with,
            costs,
            slot_base,
            slot_node,
            slot_elems,
            slot_dtype,
            slot_mem,
            slot_consumers,
            inputs,
            control_inputs,
            control_consumers,
            is_variable: nodes.iter().map(|x| x.op == "Variable").collect(),
            topo,
            warnings,
            step: None,
            keys,
            runs: vec![true; n],
        })
    }

    /// Prepares the part of `graph` that one step runs: the nodes
    /// [`step_graph`] (the engine's own pruning and fusions) selects, plus the fed
    /// placeholders, whose values the engine holds on their devices and
    /// sends from there. Initializers and anything else the step does not
    /// need are left out, so a simulated step is the step the engine runs.
    /// `fuse_for` is the engine device type whose fusions the step gets
    /// (`None`: none, as on a device the engine has no kernels for).
    pub fn for_step(graph: &Graph, step: &StepSpec, fuse_for: Option<DeviceType>) -> Result<SimGraph, SimError> {
        SimGraph::for_placed_step(graph, step, fuse_for, None)
    }

    /// [`SimGraph::for_step`] with the fusions the engine makes when the
    /// step runs on `placement` (each device's part fused on its own), or,
    /// without one, as if every node ran on one device.
    pub(crate) fn for_placed_step(graph: &Graph, step: &StepSpec, fuse_for: Option<DeviceType>, placement: Option<&Placement>) -> Result<SimGraph, SimError> {
        // `nodes` as built (for following edges to the nodes left out),
        // `run` with the engine's fusions (what is kept and priced).
        let nodes = graph.nodes();
        let (run, mut keep) = match placement {
            None => step_graph(graph, &step.feeds, &step.fetches, &step.targets, fuse_for),
            Some(p) => placed_step_graph(graph, &step.feeds, &step.fetches, &step.targets, fuse_for, p),
        }
        .map_err(|e| SimError::Graph { node: String::new(), detail: format!("the step's fetches and targets: {e}") })?;
        let engine_runs = keep.clone();
        for &(p, _) in &step.feeds {
            if p < nodes.len() {
                keep[p] = true;
            }
        }
        // Variables (and optimizer slots) the step's update ops name hold
        // memory through the step even though no edge reads them.
        let by_name: std::collections::HashMap<&str, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
        for i in 0..nodes.len() {
            if keep[i] {
                for c in colocation_names(&nodes[i]) {
                    if let Some(&j) = by_name.get(c.as_str())
                        && nodes[j].op == "Variable"
                    {
                        keep[j] = true;
                    }
                }
            }
        }
        // A fed node's own inputs are not run: cut them off.
        let fed: std::collections::HashSet<NodeId> = step.feeds.iter().map(|&(p, _)| p).collect();
        let mut new_id = vec![u32::MAX; nodes.len()];
        let mut full_id = Vec::new();
        for (i, k) in keep.iter().enumerate() {
            if *k {
                new_id[i] = full_id.len() as u32;
                full_id.push(i as u32);
            }
        }
        let mut pruned = Vec::with_capacity(full_id.len());
        for &i in &full_id {
            let mut n = run[i as usize].clone();
            if fed.contains(&(i as usize)) {
                n.inputs.clear();
                n.control_inputs.clear();
            }
            // Every input of a kept node is kept (the walk follows all
            // edges), except edges into fed values, which were cut above.
            n.inputs = n.inputs.iter().map(|&(p, k)| (new_id[p] as usize, k)).collect();
            n.control_inputs = n.control_inputs.iter().filter(|&&c| new_id[c] != u32::MAX).map(|&c| new_id[c] as usize).collect();
            pruned.push(n);
        }
        let mut sg = SimGraph::from_nodes(pruned)?;
        // Devices of the nodes left out, for expanding a placement: a
        // colocation partner first, else the first kept consumer reached
        // walking forward (reverse topological order), else device 0.
        let mut follow: Vec<Option<u32>> = (0..nodes.len()).map(|i| (new_id[i] != u32::MAX).then_some(new_id[i])).collect();
        for (i, n) in nodes.iter().enumerate() {
            if follow[i].is_none() {
                follow[i] = colocation_names(n).iter().filter_map(|c| by_name.get(c.as_str())).find_map(|&j| (new_id[j] != u32::MAX).then_some(new_id[j]));
            }
        }
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for &(p, _) in &n.inputs {
                consumers[p].push(i);
            }
            for &c in &n.control_inputs {
                consumers[c].push(i);
            }
        }
        // Graphs are built in topological order of ids; iterate until stable
        // so that forward-pointing ids (graph files) are handled too.
        loop {
            let mut changed = false;
            for i in (0..nodes.len()).rev() {
                if follow[i].is_none()
                    && let Some(f) = consumers[i].iter().find_map(|&c| follow[c])
                {
                    follow[i] = Some(f);
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        sg.runs = full_id.iter().map(|&i| engine_runs[i as usize]).collect();
        sg.step = Some(StepMap { full_id, follow });
        Ok(sg)
    }

    /// Nodes of the full graph (more than [`len`](Self::len) when pruned
    /// to a step).
    pub fn full_len(&self) -> usize {
        self.step.as_ref().map_or(self.names.len(), |s| s.follow.len())
    }

    /// Full-graph id of simulated node `i`.
    #[inline]
    pub(crate) fn full_id(&self, i: usize) -> usize {
        self.step.as_ref().map_or(i, |s| s.full_id[i] as usize)
    }

    /// Number of nodes.
    /// (pool, gradient) pairs sharing a workspace: each
    /// `_MaxPoolGradWithWorkspace` and the node whose second output it reads.
    pub(crate) fn workspace_pairs(&self) -> Vec<(u32, u32)> {
        (0..self.len())
            .filter(|&i| self.runs[i] && self.ops[i] == "_MaxPoolGradWithWorkspace")
            .filter_map(|i| {
                let slot = *self.inputs.get(i).first()?;
                Some((self.slot_node[slot as usize], i as u32))
            })
            .collect()
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Warnings raised while preparing the graph.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Name of node `i`.
    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    #[inline]
    pub(crate) fn slots(&self, node: usize) -> std::ops::Range<usize> {
        self.slot_base[node] as usize..self.slot_base[node + 1] as usize
    }

    /// Bytes node `i`'s outputs occupy (what memory-aware placers reserve).
    pub(crate) fn footprint(&self, i: usize) -> u64 {
        self.slots(i).map(|s| self.slot_mem[s]).sum()
    }
}

/// Kahn's algorithm over data and control edges (ties by node id). A node
/// left over lies on a cycle (or after one): the error names it.
fn topological_order(nodes: &[Node], inputs: &Csr, control: &Csr, slot_node: &[u32]) -> Result<Vec<u32>, SimError> {
    let n = nodes.len();
    let mut indeg = vec![0u32; n];
    let mut succ: Vec<Vec<u32>> = vec![Vec::new(); n];
    for i in 0..n {
        for &s in inputs.get(i) {
            succ[slot_node[s as usize] as usize].push(i as u32);
            indeg[i] += 1;
        }
        for &c in control.get(i) {
            succ[c as usize].push(i as u32);
            indeg[i] += 1;
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<u32>> = (0..n as u32).filter(|&i| indeg[i as usize] == 0).map(std::cmp::Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &j in &succ[i as usize] {
            indeg[j as usize] -= 1;
            if indeg[j as usize] == 0 {
                ready.push(std::cmp::Reverse(j));
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n).find(|&i| indeg[i] > 0).unwrap_or(0);
        return Err(SimError::Graph {
            node: nodes[stuck].name.clone(),
            detail: format!(
                "the graph has a cycle through this node ({} of {} nodes are on or after a cycle)",
                n - order.len(),
                n
            ),
        });
    }
    Ok(order)
}
