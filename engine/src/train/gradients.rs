//! Reverse-mode autodiff on the graph: `g.gradients(ys, xs)` appends the
//! backward graph symbolically (under the name scope `gradients/`), using
//! each op's gradient function from the registry and summing gradients
//! where an output fans out to several consumers.

use crate::graph::NodeInfo;
use crate::error::{EngineError, Result};
use crate::graph::{AttrValue, Graph, LoopInfo, NodeId, Output};
use crate::tensor::TensorType;
use crate::ops::{self, GradCtx};
use std::collections::HashMap;

impl Graph {
    /// d(sum of ys)/d(x) for each x (`None` where a y does not depend on x).
    pub fn gradients(&self, ys: &[&Output], xs: &[&Output]) -> Result<Vec<Option<Output>>> {
        self.gradients_with(ys, xs, None)
    }

    /// Like [`gradients`](Self::gradients) with explicit initial gradients for
    /// each y (default: ones).
    pub fn gradients_with(&self, ys: &[&Output], xs: &[&Output], grad_ys: Option<&[&Output]>) -> Result<Vec<Option<Output>>> {
        for o in ys.iter().chain(xs) {
            if !o.graph.same_graph(self) {
                return Err(EngineError::ForeignGraph { node: "<gradients>".into(), input: o.to_string() });
            }
        }
        let gs = self.scope("gradients");
        let nodes = self.nodes();
        let n = nodes.len();
        // While loops are differentiated as units (see `loop_grad`): by
        // the Exit that closes each, their enters, and their node range.
        let loops = self.closed_loops(n);
        let exit_loop: HashMap<NodeId, usize> = loops.iter().enumerate().flat_map(|(k, (_, l, _))| l.exits.iter().map(move |&e| (e, k))).collect();

        let relevant = between(&nodes, xs, ys, &loops, &exit_loop);

        let mut pending: HashMap<(NodeId, usize), Vec<Output>> = HashMap::new();
        for (i, y) in ys.iter().enumerate() {
            let g = match grad_ys {
                Some(g) => g.get(i).map(|&g| g.clone()).ok_or_else(|| EngineError::Tensor("one initial gradient per y is required".into()))?,
                None => gs.ones_like(*y)?,
            };
            pending.entry((y.node, y.index)).or_default().push(g);
        }
        let x_set: Vec<(NodeId, usize)> = xs.iter().map(|x| (x.node, x.index)).collect();
        let mut results: HashMap<(NodeId, usize), Output> = HashMap::new();

        // Node ids are topological (but for loops' back edges): walk them backwards.
        let mut skip_below = n;
        let mut skip_to = n;
        for id in (0..n).rev() {
            if id < skip_to && id >= skip_below {
                continue;
            }
            if !relevant[id] {
                continue;
            }
            if let Some(&k) = exit_loop.get(&id) {
                let (frame, info, _) = &loops[k];
                let exit_grads: Vec<Option<Output>> = info.exits[1..]
                    .iter()
                    .map(|&e| pending.remove(&(e, 0)).map(|l| sum_all(&gs, l)).transpose())
                    .collect::<Result<_>>()?;
                skip_below = info.first;
                skip_to = id;
                if exit_grads.iter().all(|g| g.is_none()) {
                    continue;
                }
                let (var_grads, inv_grads) = crate::train::loop_grad::loop_gradient(&gs, frame, info, &exit_grads)?;
                for (i, gv) in var_grads.into_iter().enumerate() {
                    let src = nodes[info.enters[i + 1]].inputs[0];
                    if let Some(gv) = gv
                        && relevant[src.0]
                    {
                        pending.entry(src).or_default().push(gv);
                    }
                }
                for (u, gu) in inv_grads {
                    if relevant[u.0] {
                        pending.entry(u).or_default().push(gu);
                    }
                }
                continue;
            }
            let node = &nodes[id];
            let mut out_grads = Vec::with_capacity(node.outputs.len());
            let mut any = false;
            for i in 0..node.outputs.len() {
                let g = match pending.remove(&(id, i)) {
                    Some(list) => {
                        any = true;
                        Some(sum_all(&gs, list)?)
                    }
                    None => None,
                };
                if let Some(g) = &g
                    && x_set.contains(&(id, i))
                {
                    results.insert((id, i), g.clone());
                }
                out_grads.push(g);
            }
            if !any {
                continue;
            }
            // Stop at inputs that do not lead back to an x.
            if !node.inputs.iter().any(|&(s, _)| relevant[s]) {
                continue;
            }
            let def = ops::registry().op(&node.op).ok_or_else(|| EngineError::UnknownOp { node: node.name.clone(), op: node.op.clone() })?;
            let Some(grad_fn) = def.grad else {
                if node.outputs.iter().all(|t| !t.dtype.is_float()) {
                    continue;
                }
                return Err(EngineError::NoGradient { node: node.name.clone(), op: node.op.clone() });
            };
            let outputs: Vec<Output> = (0..node.outputs.len()).map(|i| self.out(id, i)).collect();
            let grads: Vec<Output> = out_grads
                .into_iter()
                .enumerate()
                .map(|(i, g)| match g {
                    Some(g) => Ok(g),
                    None => gs.zeros_like(&outputs[i]),
                })
                .collect::<Result<_>>()?;
            let inputs: Vec<Output> = node.inputs.iter().map(|&(s, i)| self.out(s, i)).collect();
            let op_scope = gs.scope(&node.name);
            let ctx = GradCtx {
                g: &op_scope,
                n: NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs },
                inputs: &inputs,
                outputs: &outputs,
                grads: &grads,
            };
            let in_grads = grad_fn(&ctx)?;
            for (k, &(s, i)) in node.inputs.iter().enumerate() {
                if !relevant[s] {
                    continue;
                }
                if let Some(Some(g)) = in_grads.get(k) {
                    pending.entry((s, i)).or_default().push(g.clone());
                }
            }
        }
        Ok(xs.iter().map(|x| results.get(&(x.node, x.index)).cloned()).collect())
    }

    /// The graph's while loops that close below node `n`, in order of their
    /// first node: (frame, info, the nodes that enter it: its enters and
    /// its invariants'). Loops are differentiated as units (`loop_grad`).
    fn closed_loops(&self, n: usize) -> Vec<ClosedLoop> {
        let d = self.lock();
        let mut v: Vec<_> = d
            .loops
            .iter()
            .filter(|(_, l)| l.last < n)
            .map(|(f, l)| (f.clone(), l.clone(), l.enters.iter().copied().chain(d.ctxs[l.ctx].invariants.iter().map(|&(_, e)| e)).collect()))
            .collect();
        v.sort_by_key(|(_, l, _)| l.first);
        v
    }
}

/// A while loop: its frame, its info and the nodes that enter it.
type ClosedLoop = (String, LoopInfo, Vec<NodeId>);

/// The nodes between `xs` and `ys`: reachable forward from an x (a loop's
/// Exit when anything entering the loop is) and backward from a y.
fn between(nodes: &[crate::graph::Node], xs: &[&Output], ys: &[&Output], loops: &[ClosedLoop], exit_loop: &HashMap<NodeId, usize>) -> Vec<bool> {
    let n = nodes.len();
    let mut from_x = vec![false; n];
    for x in xs {
        from_x[x.node] = true;
    }
    for (id, node) in nodes.iter().enumerate() {
        if node.inputs.iter().any(|&(s, _)| s < id && from_x[s]) {
            from_x[id] = true;
        }
        if let Some(&k) = exit_loop.get(&id)
            && loops[k].2.iter().any(|&e| from_x[e])
        {
            from_x[id] = true;
        }
    }
    let mut to_y = vec![false; n];
    let mut stack: Vec<NodeId> = ys.iter().map(|y| y.node).collect();
    while let Some(id) = stack.pop() {
        if to_y[id] {
            continue;
        }
        to_y[id] = true;
        stack.extend(nodes[id].inputs.iter().map(|&(s, _)| s));
    }
    (0..n).map(|i| from_x[i] && to_y[i]).collect()
}

/// Sums a list of gradients pairwise (a balanced tree keeps it shallow),
/// after [`gather_weight_products`].
fn sum_all(g: &Graph, list: Vec<Output>) -> Result<Output> {
    let mut list = gather_weight_products(g, list)?;
    while list.len() > 1 {
        let mut next = Vec::with_capacity(list.len().div_ceil(2));
        let mut it = list.into_iter();
        while let Some(a) = it.next() {
            match it.next() {
                Some(b) => next.push(g.add(&a, &b)?),
                None => next.push(a),
            }
        }
        list = next;
    }
    list.pop().ok_or_else(|| EngineError::Tensor("empty gradient list".into()))
}

/// Fewest products `aᵢᵀ·bᵢ` of one gradient gathered into one product.
const GATHERED_PRODUCTS_MIN: usize = 4;

/// The contributions `aᵢᵀ·bᵢ` to the gradient of a weight that several
/// steps of an unrolled network share (an LSTM layer's kernel gets one per
/// time step, `[x, h]ᵀ·dz`), as one product over row-concatenated operands:
/// Σ aᵢᵀbᵢ = [a₁; …; aₙ]ᵀ[b₁; …; bₙ]. That is how PyTorch's LSTM forms its
/// weight gradient: one GEMM with a deep inner dimension, instead of n
/// shallow ones and n - 1 additions of the whole weight. Only products on
/// one device, outside control flow, are gathered; the n single products
/// stay in the graph unused, and a step never runs them (the executor, and
/// the simulators through `step_nodes`, prune what no fetch needs).
fn gather_weight_products(g: &Graph, list: Vec<Output>) -> Result<Vec<Output>> {
    if list.len() < GATHERED_PRODUCTS_MIN || g.ctx().is_some() {
        return Ok(list);
    }
    // (device, output type) -> the positions in `list` of its products
    let mut groups: Vec<((String, Option<TensorType>), Vec<usize>)> = Vec::new();
    let mut operands = Vec::with_capacity(list.len());
    for (i, o) in list.iter().enumerate() {
        let node = g.node(o.node_id()).filter(|n| {
            o.index() == 0
                && n.op == "MatMul"
                && n.inputs.len() == 2
                && n.attrs.get("transpose_a") == Some(&AttrValue::Bool(true))
                && n.attrs.get("transpose_b") == Some(&AttrValue::Bool(false))
                && g.ctx_of(o.node_id()).is_none()
                && n.inputs.iter().all(|&(p, _)| g.ctx_of(p).is_none())
        });
        let Some(n) = node else {
            operands.push(None);
            continue;
        };
        operands.push(Some((g.out(n.inputs[0].0, n.inputs[0].1), g.out(n.inputs[1].0, n.inputs[1].1))));
        let key = (n.device.clone(), n.outputs.first().cloned());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.retain(|(_, members)| members.len() >= GATHERED_PRODUCTS_MIN);
    if groups.is_empty() {
        return Ok(list);
    }
    let mut gathered = vec![false; list.len()];
    let mut out = Vec::with_capacity(list.len());
    for ((device, _), members) in &groups {
        let on = if device.is_empty() { g.clone() } else { g.device(device) };
        let (mut a, mut b) = (Vec::with_capacity(members.len()), Vec::with_capacity(members.len()));
        for &i in members {
            gathered[i] = true;
            if let Some((x, y)) = &operands[i] {
                a.push(x);
                b.push(y);
            }
        }
        out.push(on.matmul_ex(on.concat(&a, 0)?, on.concat(&b, 0)?, true, false)?);
    }
    out.extend(list.into_iter().zip(gathered).filter(|(_, g)| !g).map(|(o, _)| o));
    Ok(out)
}
