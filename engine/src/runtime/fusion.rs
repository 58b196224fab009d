//! Fusing a step's `Conv2D -> BiasAdd [-> Add] [-> Relu]` chains into one
//! `_FusedConv2D` node, as TensorFlow's grappler remapper does on CPU (the
//! Add of a residual of the output's shape, a ResNet block's shortcut, as
//! its oneDNN fusion does), and
//! a max pool's gradient with the ReluGrad that follows it
//! (`ReluGrad(MaxPoolGrad(y, g), y)`, y a Relu's output) into one
//! `_FusedMaxPoolGrad`; then giving a max pool whose gradient runs in the
//! same step a *workspace* (`_MaxPoolWithWorkspace` writes where each
//! window's gradient goes, `_MaxPoolGradWithWorkspace` routes from it);
//! then such a pool over a `_FusedConv2D` that nothing else reads into one
//! `_FusedConv2DMaxPool`.
//!
//! Why: the bias and the activation are each one more pass over the whole
//! convolution output, which on this host's memory costs more than the
//! arithmetic. The Deep MNIST CNN at batch 64 spent 2.7 ms in BiasAdd and
//! 1.3 ms in Relu after a 3.1 ms first convolution ([64, 28, 28, 32], one
//! thread), where TensorFlow's fused node took 3.2 ms for all three; fused,
//! the bias and activation run on each image's output while it is in cache.
//! Likewise its first pool's gradient (4.2 ms) and the ReluGrad after it
//! (2.2 ms) each pass over [64, 28, 28, 32] tensors; the pool's gradient
//! already reads the Relu's output that ReluGrad masks with. The pool's
//! gradient read that whole input again to find each window's maximum:
//! 6.4 MB at batch 64, which by the backward pass has left the cache
//! (1.04-1.08 ms in the step against 0.39 ms for TensorFlow's, whose
//! oneDNN pool keeps such a workspace); the workspace is one byte per
//! pooled element.
//!
//! The rewrite is per step, after pruning, so graphs, gradients and
//! checkpoints never see the fused op: the chain's last node becomes the
//! fused node (same id, name, device and outputs) and the Conv2D and
//! BiasAdd leave the step. A chain is fused only when nothing else of the
//! step reads the intermediate values: not another node (data or control
//! edge), not a fetch, not a feed; and all of it runs on one device. The
//! simulator replays the same rewritten step (`crate::step_graph`).

use crate::graph::{AttrValue, Node, NodeId};
use crate::kernels::cpu::MAX_WORKSPACE_WINDOW;
use crate::ops;
use crate::tensor::{DType, DeviceType, TensorType};
use std::collections::HashMap;

/// The ops the rewrite produces.
pub(crate) const FUSED_CONV: &str = "_FusedConv2D";
pub(crate) const FUSED_POOL_GRAD: &str = "_FusedMaxPoolGrad";
pub(crate) const WORKSPACE_POOL: &str = "_MaxPoolWithWorkspace";
pub(crate) const WORKSPACE_POOL_GRAD: &str = "_MaxPoolGradWithWorkspace";
pub(crate) const FUSED_CONV_POOL: &str = "_FusedConv2DMaxPool";

/// Rewrites the fusable chains among the `needed` nodes of a step: returns
/// the rewritten node list (ids unchanged) and clears `needed` for the nodes
/// folded into a fused one, or `None` (nothing changed) when the step has
/// no such chain. `fed` tells whether a node's output is fed by the step.
/// Only fused ops that `device` has a kernel for are produced: the step
/// an engine device runs (today the CPU) or a simulated one would.
pub(crate) fn fuse_step(
    nodes: &[Node],
    needed: &mut [bool],
    fetches: &[(NodeId, usize)],
    fed: impl Fn(NodeId, usize) -> bool,
    device: DeviceType,
) -> Option<Vec<Node>> {
    let reg = ops::registry();
    let (convs_on, pools_on) = (reg.has_kernels(FUSED_CONV, device), reg.has_kernels(FUSED_POOL_GRAD, device));
    let workspaces_on = reg.has_kernels(WORKSPACE_POOL, device) && reg.has_kernels(WORKSPACE_POOL_GRAD, device);
    let wanted = |op: &str| (convs_on && op == "Conv2D") || ((pools_on || workspaces_on) && op == "MaxPoolGrad");
    if !nodes.iter().enumerate().any(|(i, n)| needed[i] && wanted(&n.op)) {
        return None;
    }
    let readers = step_readers(nodes, needed, &fed);
    let fetched = |n: NodeId| fetches.iter().any(|&(f, _)| f == n);
    // The one reader of `n`'s only output, reading it as its input 0, when
    // that reader runs `op` on `n`'s device.
    let sole_reader = |n: NodeId, op: &str| -> Option<NodeId> {
        if fetched(n) || fed(n, 0) {
            return None;
        }
        match readers.get(&n).map(Vec::as_slice) {
            Some(&[(r, 0)]) if nodes[r].op == op && nodes[r].inputs[0] == (n, 0) && nodes[r].device == nodes[n].device => Some(r),
            _ => None,
        }
    };
    // The Add that is the one reader of `b`'s output (as either operand)
    // and adds a residual of exactly that output's type (no broadcasting):
    // the Add and the residual's edge.
    let residual_add = |b: NodeId| -> Option<(NodeId, (NodeId, usize))> {
        if fetched(b) || fed(b, 0) {
            return None;
        }
        let &[(a, k)] = readers.get(&b).map(Vec::as_slice)? else { return None };
        let add = &nodes[a];
        if add.op != "Add" || k > 1 || add.inputs.len() != 2 || add.inputs[k] != (b, 0) || add.device != nodes[b].device {
            return None;
        }
        let r = add.inputs[1 - k];
        let (rt, bt) = (nodes.get(r.0)?.outputs.get(r.1)?, &nodes[b].outputs[0]);
        let full = |t: &TensorType| t.shape.dims().iter().all(Option::is_some);
        (r != (b, 0) && rt.dtype == bt.dtype && rt.shape == bt.shape && full(bt)).then_some((a, r))
    };
    let mut out: Option<Vec<Node>> = None;
    let convs: Vec<NodeId> = (0..nodes.len()).filter(|&i| convs_on && needed[i] && nodes[i].op == "Conv2D").collect();
    // Adds already fused: a downsampling block's Add reads two biased
    // convolutions, and only one of them may take it (the other's output
    // is its residual, which must stay a node of the step).
    let mut claimed = std::collections::HashSet::new();
    for c in convs {
        let Some(b) = sole_reader(c, "BiasAdd") else { continue };
        let add = residual_add(b).filter(|&(a, r)| needed[r.0] && claimed.insert(a));
        let summed = add.map_or(b, |(a, _)| a);
        let relu = sole_reader(summed, "Relu");
        let tail = relu.unwrap_or(summed);
        let mut ops = vec!["BiasAdd"];
        let mut parts = vec![c, b];
        let mut inputs = vec![nodes[c].inputs[0], nodes[c].inputs[1], nodes[b].inputs[1]];
        if let Some((a, r)) = add {
            ops.push("Add");
            parts.push(a);
            inputs.push(r);
        }
        if let Some(r) = relu {
            ops.push("Relu");
            parts.push(r);
        }
        let fused = fused_node(nodes, FUSED_CONV, &ops, &parts, inputs);
        out.get_or_insert_with(|| nodes.to_vec())[tail] = fused;
        for &p in &parts[..parts.len() - 1] {
            needed[p] = false;
        }
    }
    // ReluGrad(MaxPoolGrad(y, g), y): the pool's gradient masked where its
    // own input (a Relu's output) is not positive.
    let pool_grads: Vec<NodeId> = (0..nodes.len()).filter(|&i| pools_on && needed[i] && nodes[i].op == "MaxPoolGrad").collect();
    for m in pool_grads {
        let Some(r) = sole_reader(m, "ReluGrad") else { continue };
        if nodes[r].inputs.get(1) != nodes[m].inputs.first() {
            continue;
        }
        let fused = fused_node(nodes, FUSED_POOL_GRAD, &["ReluGrad"], &[m, r], nodes[m].inputs.clone());
        out.get_or_insert_with(|| nodes.to_vec())[r] = fused;
        needed[m] = false;
    }
    if workspaces_on {
        use_workspaces(nodes, &mut out, needed, &fed);
        if reg.has_kernels(FUSED_CONV_POOL, device) {
            pool_fused_convs(&mut out, needed, fetches, &fed);
        }
    }
    out
}

/// `_MaxPoolWithWorkspace(_FusedConv2D(x, w, b))` where nothing else of the
/// step reads the convolution's output (not a node, a fetch or a feed; its
/// gradient reads the pool's workspace instead) and both run on one
/// device: one `_FusedConv2DMaxPool` under the pool's name, with its
/// outputs, the convolution's attrs and the pool's window as `pool_ksize`,
/// `pool_strides`, `pool_padding`. The convolution's output, the largest
/// tensor of a CNN's forward pass, is then never written whole.
fn pool_fused_convs(out: &mut Option<Vec<Node>>, needed: &mut [bool], fetches: &[(NodeId, usize)], fed: &impl Fn(NodeId, usize) -> bool) {
    let Some(cur) = out.as_deref() else { return };
    // Readers in the rewritten step, where the gradient reads the workspace.
    let readers = step_readers(cur, needed, fed);
    let mut fusions = Vec::new();
    for (p, n) in cur.iter().enumerate().filter(|&(i, n)| needed[i] && n.op == WORKSPACE_POOL) {
        let Some(&(c, 0)) = n.inputs.first() else { continue };
        let conv = &cur[c];
        let alone = readers.get(&c).map(Vec::as_slice) == Some(&[(p, 0)]) && !fetches.iter().any(|&(f, _)| f == c) && !fed(c, 0);
        // (a convolution with a residual keeps its own node)
        if c < p && needed[c] && conv.op == FUSED_CONV && conv.inputs.len() == 3 && conv.device == n.device && alone {
            let conv_ops: Vec<&str> = match conv.attrs.get("fused_ops") {
                Some(AttrValue::Strs(v)) => v.iter().map(String::as_str).collect(),
                _ => continue,
            };
            let mut fused = fused_node(cur, FUSED_CONV_POOL, &conv_ops, &[c, p], conv.inputs.clone());
            for key in ["ksize", "strides", "padding", "explicit_paddings"] {
                if let Some(v) = n.attrs.get(key) {
                    fused.attrs.insert(format!("pool_{key}"), v.clone());
                }
            }
            fusions.push((c, p, fused));
        }
    }
    if let Some(v) = out.as_mut() {
        for (c, p, fused) in fusions {
            v[p] = fused;
            needed[c] = false;
        }
    }
}

/// A max pool's gradient (alone or fused with its ReluGrad) whose input is
/// that of a MaxPool of the step with the same window, on the same device:
/// the pool becomes `_MaxPoolWithWorkspace`, also writing where each
/// window's gradient goes (its second output), and the gradient becomes
/// `_MaxPoolGradWithWorkspace(workspace, g)`, which routes from it without
/// reading the input again (`input_hw` gives the input's size). Needs the
/// input's height and width known, a window of at most
/// `MAX_WORKSPACE_WINDOW` positions, and a pool that runs (not fed) before
/// the gradient.
fn use_workspaces(nodes: &[Node], out: &mut Option<Vec<Node>>, needed: &[bool], fed: &impl Fn(NodeId, usize) -> bool) {
    let cur: &[Node] = out.as_deref().unwrap_or(nodes);
    let is_grad = |n: &Node| n.op == "MaxPoolGrad" || n.op == FUSED_POOL_GRAD;
    if !cur.iter().enumerate().any(|(i, n)| needed[i] && is_grad(n)) {
        return;
    }
    let mut pools: HashMap<(NodeId, usize), Vec<NodeId>> = HashMap::new();
    for (i, n) in cur.iter().enumerate() {
        if let Some(&x) = n.inputs.first().filter(|_| needed[i] && n.op == "MaxPool" && !fed(i, 0)) {
            pools.entry(x).or_default().push(i);
        }
    }
    let mut rewrites = Vec::new();
    for (m, n) in cur.iter().enumerate().filter(|&(i, n)| needed[i] && is_grad(n)) {
        let Some(&x) = n.inputs.first() else { continue };
        let window = match n.attrs.get("ksize") {
            Some(AttrValue::Ints(k)) => k.iter().try_fold(1i64, |a, &d| a.checked_mul(d)),
            _ => None,
        };
        if !window.is_some_and(|w| (1..=MAX_WORKSPACE_WINDOW as i64).contains(&w)) {
            continue;
        }
        let hw = cur.get(x.0).and_then(|p| p.outputs.get(x.1)).map(|t| t.shape.dims());
        let Some(&[_, Some(h), Some(w), _]) = hw else { continue };
        if h == 0 || w == 0 {
            continue;
        }
        let mut grad_attrs = n.attrs.clone();
        grad_attrs.remove("fused_ops");
        let same = |p: &NodeId| *p < m && cur[*p].attrs == grad_attrs && cur[*p].device == n.device && cur[*p].outputs.len() == 1;
        if let Some(&p) = pools.get(&x).and_then(|ps| ps.iter().find(|p| same(p))) {
            rewrites.push((p, m, [h as i64, w as i64]));
        }
    }
    if rewrites.is_empty() {
        return;
    }
    let v = out.get_or_insert_with(|| nodes.to_vec());
    for (p, m, hw) in rewrites {
        if v[p].op == "MaxPool" {
            v[p].op = WORKSPACE_POOL.into();
            let shape = v[p].outputs[0].shape.clone();
            v[p].outputs.push(TensorType { dtype: DType::I8, shape });
        }
        let g = &mut v[m];
        g.op = WORKSPACE_POOL_GRAD.into();
        g.inputs[0] = (p, 1);
        g.attrs.insert("input_hw".into(), AttrValue::Ints(hw.to_vec()));
    }
}

/// Readers of every needed node's outputs within the step: (consumer,
/// input index), with usize::MAX for a control edge; fed edges read
/// nothing.
fn step_readers(nodes: &[Node], needed: &[bool], fed: &impl Fn(NodeId, usize) -> bool) -> HashMap<NodeId, Vec<(NodeId, usize)>> {
    let mut readers: HashMap<NodeId, Vec<(NodeId, usize)>> = HashMap::new();
    for (i, n) in nodes.iter().enumerate().filter(|&(i, _)| needed[i]) {
        for (k, &(src, idx)) in n.inputs.iter().enumerate() {
            if !fed(src, idx) {
                readers.entry(src).or_default().push((i, k));
            }
        }
        for &c in &n.control_inputs {
            readers.entry(c).or_default().push((i, usize::MAX));
        }
    }
    readers
}

/// The node standing for the chain `parts` (its first node's attrs, its
/// last node's name, device and outputs, every part's control inputs), with
/// `fused_ops` naming what follows the first op.
fn fused_node(nodes: &[Node], op: &str, fused_ops: &[&str], parts: &[NodeId], inputs: Vec<(NodeId, usize)>) -> Node {
    let (first, last) = (&nodes[parts[0]], &nodes[parts[parts.len() - 1]]);
    let mut attrs = first.attrs.clone();
    attrs.insert("fused_ops".into(), AttrValue::Strs(fused_ops.iter().map(|s| s.to_string()).collect()));
    let mut control_inputs: Vec<NodeId> = parts.iter().flat_map(|&i| nodes[i].control_inputs.iter().copied()).collect();
    control_inputs.sort_unstable();
    control_inputs.dedup();
    Node { name: last.name.clone(), op: op.into(), attrs, inputs, control_inputs, device: last.device.clone(), outputs: last.outputs.clone() }
}

#[cfg(test)]
mod tests {
    use crate::graph::{Graph, Output};
    use crate::runtime::Session;
    use crate::tensor::{DType, Tensor};

    fn values(n: usize, salt: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 37 + salt * 11) % 97) as f32 / 48.5 - 1.0).collect()
    }

    /// x -> Conv2D -> BiasAdd -> Relu on a 16-in, 32-out channel 3x3
    /// convolution (the direct kernel's shape on AVX-512 CPUs).
    struct Chain {
        g: Graph,
        x: Output,
        w: Output,
        conv: Output,
        biased: Output,
        relu: Output,
    }

    fn chain() -> Chain {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [2, 6, 5, 16]).unwrap();
        let w = g.variable("w", g.constant(Tensor::from_vec(values(3 * 3 * 16 * 32, 1), [3, 3, 16, 32]).unwrap())).unwrap();
        let b = g.constant(Tensor::from_vec(values(32, 2), [32]).unwrap()).unwrap();
        let conv = g.conv2d(&x, &w, [1, 1], true).unwrap();
        let biased = g.bias_add(&conv, &b).unwrap();
        let relu = g.relu(&biased).unwrap();
        Chain { g, x, w, conv, biased, relu }
    }

    /// Runs the fetches traced; returns their values and the ops run, by node name.
    fn run(c: &Chain, fetches: &[&Output]) -> (Vec<Tensor>, Vec<(String, String)>) {
        let s = Session::new(&c.g).unwrap();
        s.run(&[], &[], &c.g.initializers().iter().collect::<Vec<_>>()).unwrap();
        let xt = Tensor::from_vec(values(2 * 6 * 5 * 16, 3), [2, 6, 5, 16]).unwrap();
        let (v, stats) = s.run_traced(&[(&c.x, &xt)], fetches, &[]).unwrap();
        let mut ops: Vec<(String, String)> = stats.nodes.iter().map(|n| (n.node.clone(), n.op.clone())).collect();
        ops.sort();
        (v, ops)
    }

    fn ops_of(ops: &[(String, String)]) -> Vec<&str> {
        let mut v: Vec<&str> = ops.iter().map(|(_, o)| o.as_str()).filter(|o| !matches!(*o, "Variable" | "Const")).collect();
        v.sort_unstable();
        v
    }

    fn bits(t: &Tensor) -> Vec<u32> {
        t.as_slice::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    /// The whole chain runs as one `_FusedConv2D` under the Relu's name,
    /// with the values of the unfused chain (which runs when the
    /// convolution's own output is fetched too).
    #[test]
    fn a_conv_bias_relu_chain_runs_as_one_node_with_the_same_values() {
        let c = chain();
        let (fused, ops) = run(&c, &[&c.relu]);
        assert_eq!(ops_of(&ops), ["_FusedConv2D"]);
        assert!(ops.contains(&(c.relu.name(), "_FusedConv2D".to_string())), "{ops:?}");
        let (plain, ops) = run(&c, &[&c.relu, &c.conv]);
        assert_eq!(ops_of(&ops), ["BiasAdd", "Conv2D", "Relu"]);
        assert_eq!(bits(&fused[0]), bits(&plain[0]));
        assert!(fused[0].as_slice::<f32>().unwrap().iter().any(|&v| v == 0.0) && fused[0].as_slice::<f32>().unwrap().iter().any(|&v| v > 0.0));
    }

    /// A residual block's end, `Relu(Add(BiasAdd(Conv2D(x)), shortcut))`
    /// with the shortcut of the output's shape on either side of the Add:
    /// one `_FusedConv2D` with fused_ops [BiasAdd, Add, Relu] and the
    /// shortcut as its fourth input, the unfused values bit for bit, and
    /// the gradients of the filter and of what feeds the shortcut equal
    /// to the unfused chain's. A shortcut that broadcasts stays apart.
    #[test]
    fn a_residual_add_and_relu_fuse_into_the_convolution() {
        for shortcut_first in [false, true] {
            let c = chain();
            let s = c.g.placeholder("s", DType::F32, [2, 6, 5, 32]).unwrap();
            let sw = c.g.variable("sw", c.g.constant(Tensor::from_vec(values(32, 5), [32]).unwrap())).unwrap();
            let shortcut = c.g.mul(&s, &sw).unwrap();
            let sum = if shortcut_first { c.g.add(&shortcut, &c.biased).unwrap() } else { c.g.add(&c.biased, &shortcut).unwrap() };
            let out = c.g.relu(&sum).unwrap();
            let loss = c.g.reduce_sum(&c.g.square(&out).unwrap(), &[0, 1, 2, 3], false).unwrap();
            let grads: Vec<Output> = c.g.gradients(&[&loss], &[&c.w, &sw]).unwrap().into_iter().map(Option::unwrap).collect();
            let sess = Session::new(&c.g).unwrap();
            sess.run(&[], &[], &c.g.initializers().iter().collect::<Vec<_>>()).unwrap();
            let xt = Tensor::from_vec(values(2 * 6 * 5 * 16, 3), [2, 6, 5, 16]).unwrap();
            let st = Tensor::from_vec(values(2 * 6 * 5 * 32, 4), [2, 6, 5, 32]).unwrap();
            let feeds = [(&c.x, &xt), (&s, &st)];
            let (fused, stats) = sess.run_traced(&feeds, &[&out, &grads[0], &grads[1]], &[]).unwrap();
            let fused_node = stats.nodes.iter().find(|n| n.node == out.name()).unwrap();
            assert_eq!(fused_node.op, "_FusedConv2D");
            assert!(!stats.nodes.iter().any(|n| n.op == "Add" || n.op == "Relu" || n.op == "Conv2D"), "{:?}", stats.nodes.iter().map(|n| &n.op).collect::<Vec<_>>());
            // fetching the convolution keeps the chain apart: the reference
            let plain = sess.run(&feeds, &[&out, &grads[0], &grads[1], &c.conv], &[]).unwrap();
            for k in 0..3 {
                assert_eq!(bits(&fused[k]), bits(&plain[k]), "shortcut first {shortcut_first}, value {k}");
            }
        }
        // a per-channel shortcut broadcasts: not fused with the Add
        let c = chain();
        let v = c.g.constant(Tensor::from_vec(values(32, 6), [32]).unwrap()).unwrap();
        let out = c.g.relu(&c.g.add(&c.biased, &v).unwrap()).unwrap();
        let (_, ops) = run(&c, &[&out]);
        assert_eq!(ops_of(&ops), ["Add", "Relu", "_FusedConv2D"]);
    }

    /// A downsampling block's end, `Relu(Add(BiasAdd(Conv2D(x)),
    /// BiasAdd(Conv2D(y))))`: one chain takes the Add and the other's
    /// biased output is its residual; the values are the unfused ones.
    #[test]
    fn two_biased_convolutions_into_one_add_fuse_one_of_them_with_it() {
        let c = chain();
        let w2 = c.g.variable("w2", c.g.constant(Tensor::from_vec(values(16 * 32, 7), [1, 1, 16, 32]).unwrap())).unwrap();
        let b2 = c.g.constant(Tensor::from_vec(values(32, 8), [32]).unwrap()).unwrap();
        let conv2 = c.g.conv2d(&c.x, &w2, [1, 1], true).unwrap();
        let other = c.g.bias_add(&conv2, &b2).unwrap();
        let out = c.g.relu(&c.g.add(&c.biased, &other).unwrap()).unwrap();
        let (fused, ops) = run(&c, &[&out]);
        assert_eq!(ops_of(&ops), ["_FusedConv2D", "_FusedConv2D"]);
        // both convolutions fetched: nothing fuses
        let (plain, ops) = run(&c, &[&out, &c.conv, &conv2]);
        assert_eq!(ops_of(&ops), ["Add", "BiasAdd", "BiasAdd", "Conv2D", "Conv2D", "Relu"]);
        assert_eq!(bits(&fused[0]), bits(&plain[0]));
    }

    /// A fetched BiasAdd output stops the fusion before the Relu: the
    /// convolution and bias fuse under the BiasAdd's name.
    #[test]
    fn a_fetched_bias_output_fuses_only_the_convolution_and_bias() {
        let c = chain();
        let (v, ops) = run(&c, &[&c.biased, &c.relu]);
        assert_eq!(ops_of(&ops), ["Relu", "_FusedConv2D"]);
        assert!(ops.contains(&(c.biased.name(), "_FusedConv2D".to_string())), "{ops:?}");
        let (plain, _) = run(&c, &[&c.biased, &c.relu, &c.conv]);
        assert_eq!((bits(&v[0]), bits(&v[1])), (bits(&plain[0]), bits(&plain[1])));
    }

    /// A second reader of the convolution (here a Square of it) keeps the
    /// chain apart; so does a control edge from it.
    #[test]
    fn a_convolution_read_elsewhere_is_not_fused() {
        let c = chain();
        let sq = c.g.square(&c.conv).unwrap();
        let (_, ops) = run(&c, &[&c.relu, &sq]);
        assert_eq!(ops_of(&ops), ["BiasAdd", "Conv2D", "Relu", "Square"]);
        let c = chain();
        let after = c.g.control_dependencies(&[&c.conv]).unwrap().constant(Tensor::scalar(1f32)).unwrap();
        let (_, ops) = run(&c, &[&c.relu, &after]);
        assert_eq!(ops_of(&ops), ["BiasAdd", "Conv2D", "Relu"]);
    }

    /// A 2x2 max pool over the chain's Relu, a loss and the filter's
    /// gradient: (the pool's output, the gradient).
    fn pooled_step(c: &Chain) -> (Output, Output) {
        let pooled = c.g.max_pool(&c.relu, [2, 2], [2, 2], true).unwrap();
        let loss = c.g.reduce_sum(c.g.square(&pooled).unwrap(), &[], false).unwrap();
        let dw = c.g.gradients(&[&loss], &[&c.w]).unwrap().remove(0).unwrap();
        (pooled, dw)
    }

    /// A max pool over a Relu: the gradient's MaxPoolGrad and ReluGrad run
    /// as one node under the ReluGrad's name, routing from the pool's
    /// workspace, with the unfused values (fetching the MaxPoolGrad's output
    /// keeps the two apart; the MaxPoolGrad still routes from the
    /// workspace).
    #[test]
    fn a_pool_gradient_and_the_relu_gradient_after_it_run_as_one_node() {
        let c = chain();
        let (_, dw) = pooled_step(&c);
        let (fused, ops) = run(&c, &[&dw]);
        let ops = ops_of(&ops);
        assert!(ops.contains(&"_MaxPoolGradWithWorkspace") && ops.contains(&"_FusedConv2DMaxPool"), "{ops:?}");
        for apart in ["MaxPool", "MaxPoolGrad", "ReluGrad", "_FusedMaxPoolGrad", "_MaxPoolWithWorkspace", "_FusedConv2D"] {
            assert!(!ops.contains(&apart), "{apart}: {ops:?}");
        }
        let pool_grad = c.g.nodes().into_iter().find(|n| n.op == "MaxPoolGrad").unwrap();
        let pool_grad = c.g.output_by_name(&pool_grad.name, 0).unwrap();
        let (plain, ops) = run(&c, &[&dw, &pool_grad]);
        let ops = ops_of(&ops);
        assert!(ops.contains(&"_MaxPoolGradWithWorkspace") && ops.contains(&"ReluGrad") && !ops.contains(&"_FusedMaxPoolGrad"), "{ops:?}");
        assert_eq!(bits(&fused[0]), bits(&plain[0]));
    }

    /// A training step's pool over the fused convolution, whose output only
    /// the pool reads once the gradient reads the workspace: one
    /// `_FusedConv2DMaxPool` under the pool's name, with the pool's output
    /// and the gradient of the step that keeps them apart (the Relu's
    /// output fetched), bit for bit.
    #[test]
    fn a_pool_over_a_fused_convolution_runs_with_it_as_one_node() {
        let c = chain();
        let (pooled, dw) = pooled_step(&c);
        let (fused, ops) = run(&c, &[&pooled, &dw]);
        assert!(ops.contains(&(pooled.name(), "_FusedConv2DMaxPool".to_string())), "{ops:?}");
        assert!(!ops.iter().any(|(_, o)| o == "_FusedConv2D" || o == "_MaxPoolWithWorkspace"), "{ops:?}");
        let (apart, ops) = run(&c, &[&pooled, &dw, &c.relu]);
        assert!(ops.iter().any(|(_, o)| o == "_FusedConv2D") && ops.iter().any(|(_, o)| o == "_MaxPoolWithWorkspace"), "{ops:?}");
        assert_eq!((bits(&fused[0]), bits(&fused[1])), (bits(&apart[0]), bits(&apart[1])));
    }

    /// The workspace rewrite against the gradients that read the pool's
    /// input, bit for bit: the same graph with the gradient reading the
    /// input through an Identity (so no pool of the step shares its input)
    /// is the reference. Tiling (2x2/2) and overlapping (3x3/2 SAME)
    /// windows, the MaxPoolGrad alone and with its ReluGrad, over inputs
    /// with zeros, ties, infinities and NaNs. A pool whose output is fed
    /// does not run, so its gradient reads the input.
    #[test]
    fn gradients_from_a_pools_workspace_equal_those_reading_its_input() {
        let specials = [0.0f32, -0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.5];
        let xv: Vec<f32> = values(2 * 7 * 6 * 20, 5)
            .iter()
            .enumerate()
            .map(|(i, &v)| if i % 9 == 4 { specials[(i / 9) % specials.len()] } else { (v * 4.0).round() / 4.0 })
            .collect();
        let xt = Tensor::from_vec(xv, [2, 7, 6, 20]).unwrap();
        for (k, s) in [([2, 2], [2, 2]), ([3, 3], [2, 2])] {
            for relu in [false, true] {
                let g = Graph::new();
                let x = g.placeholder("x", DType::F32, [2, 7, 6, 20]).unwrap();
                let y = if relu { g.relu(&x).unwrap() } else { g.identity(&x).unwrap() };
                let pooled = g.max_pool(&y, k, s, true).unwrap();
                let pd = pooled.tensor_type().shape.to_shape().unwrap();
                let dy = g.placeholder("dy", DType::F32, pd.clone()).unwrap();
                let attrs = || g.node(pooled.node_id()).unwrap().attrs;
                let grad_of = |input: &Output| {
                    let m = g.build1("MaxPoolGrad", vec![input.clone(), dy.clone()], attrs()).unwrap();
                    if relu { g.build1("ReluGrad", vec![m, input.clone()], crate::graph::Attrs::new()).unwrap() } else { m }
                };
                let with_ws = grad_of(&y);
                let reading = grad_of(&g.identity(&y).unwrap());
                let dyt = Tensor::from_vec(values(pd.num_elements(), 6), pd.clone()).unwrap();
                let s = Session::new(&g).unwrap();
                let feeds = [(&x, &xt), (&dy, &dyt)];
                let (v, stats) = s.run_traced(&feeds, &[&pooled, &with_ws, &reading], &[]).unwrap();
                let ops: Vec<&str> = stats.nodes.iter().map(|n| n.op.as_str()).collect();
                let (ws_op, read_op) = if relu { ("_MaxPoolGradWithWorkspace", "_FusedMaxPoolGrad") } else { ("_MaxPoolGradWithWorkspace", "MaxPoolGrad") };
                assert!(ops.contains(&"_MaxPoolWithWorkspace") && ops.contains(&ws_op) && ops.contains(&read_op), "{k:?} relu {relu}: {ops:?}");
                assert_eq!(bits(&v[1]), bits(&v[2]), "{k:?} relu {relu}");
                let routed = v[1].as_slice::<f32>().unwrap().iter().filter(|v| **v != 0.0).count();
                assert!(routed > pd.num_elements() / 2, "{k:?} relu {relu}: only {routed} routed gradients");
                // The pool's output fed: no pool runs, the gradient reads the input.
                let feeds = [(&x, &xt), (&dy, &dyt), (&pooled, &v[0])];
                let (fed, stats) = s.run_traced(&feeds, &[&with_ws], &[]).unwrap();
                let ops: Vec<&str> = stats.nodes.iter().map(|n| n.op.as_str()).collect();
                assert!(!ops.iter().any(|o| o.contains("Workspace")) && ops.contains(&read_op), "{k:?} relu {relu}: {ops:?}");
                assert_eq!(bits(&fed[0]), bits(&v[1]), "{k:?} relu {relu}");
            }
        }
    }

    /// A training step through the chain fuses its forward part (the
    /// gradients read the Relu's output and the convolution's input, never
    /// the intermediate values) and computes the unfused step's gradient.
    #[test]
    fn the_forward_part_of_a_training_step_is_fused() {
        let c = chain();
        let loss = c.g.reduce_sum(c.g.square(&c.relu).unwrap(), &[], false).unwrap();
        let dw = c.g.gradients(&[&loss], &[&c.w]).unwrap().remove(0).unwrap();
        let (fused, ops) = run(&c, &[&dw]);
        assert!(ops_of(&ops).contains(&"_FusedConv2D") && !ops_of(&ops).contains(&"Conv2D"), "{ops:?}");
        let (plain, ops) = run(&c, &[&dw, &c.conv]);
        assert!(ops_of(&ops).contains(&"Conv2D") && !ops_of(&ops).contains(&"_FusedConv2D"), "{ops:?}");
        assert_eq!(bits(&fused[0]), bits(&plain[0]));
    }
}
