//! The gradient of a while loop: a second loop that runs the forward
//! iterations in reverse.
//!
//! Contract. For a loop `v <- body(v, u)` run n times (u: the tensors the
//! body captures from outside), the forward loop saves each iteration's
//! loop variables with `StackPush(v, i)` on a per-step tape keyed by the
//! iteration index i; the backward loop starts at j = n once every forward
//! Exit has run, and at each j pops iteration j - 1's variables, rebuilds
//! the body on them (a copy of the forward body's nodes in the backward
//! frame) and applies the chain rule to it: dv <- (d body / d v)^T dv, and
//! du += (d body / d u)^T dv. TensorFlow pushes every intermediate the
//! gradient reads instead; saving only the loop variables and recomputing
//! the body costs one more forward pass of the body per iteration and keeps
//! O(n x size of v) memory (no intermediates). The pushes exist only in the
//! steps that fetch the gradient, so a loop run without it saves nothing.
//!
//! Limits (each an error naming the node): a stateful op in the body (its
//! recomputation would repeat its effect or draw other random numbers) and
//! a loop nested in the body.

use crate::error::{EngineError, Result};
use crate::graph::{AttrValue, Attrs, Graph, LoopInfo, NodeId, Output};
use crate::ops;
use crate::tensor::DType;
use std::collections::HashMap;

fn cf_err(node: &str, detail: impl Into<String>) -> EngineError {
    EngineError::ControlFlow { node: node.into(), detail: detail.into() }
}

/// Per loop variable, the gradient of its initial value; per captured
/// outer tensor, its accumulated gradient.
type LoopGrads = (Vec<Option<Output>>, Vec<((NodeId, usize), Output)>);

/// Gradients of the loop `frame` given the gradients arriving at its Exits
/// (per user loop variable). Returns the gradient of each variable's initial
/// value and, per captured outer tensor, its accumulated gradient.
pub(crate) fn loop_gradient(
    g: &Graph,
    frame: &str,
    info: &LoopInfo,
    exit_grads: &[Option<Output>],
) -> Result<LoopGrads> {
    let nodes = g.nodes();
    let (invariants, parent) = {
        let d = g.lock();
        (d.ctxs[info.ctx].invariants.clone(), d.ctxs[info.ctx].parent)
    };
    let inv_enter: HashMap<NodeId, (NodeId, usize)> = invariants.iter().map(|&(u, e)| (e, u)).collect();
    let (start, end) = info.body_range;
    check_body(&nodes, start, end, frame, &inv_enter)?;
    let gp = g.in_ctx(parent);
    let k = info.body_inputs.len();
    // Every loop variable but the counter (index 0) is saved: the body is
    // rebuilt on its values (an integer variable may index a captured
    // tensor, as a dynamic RNN reads its inputs). Float ones carry a
    // gradient; integer ones do not.
    let saved: Vec<usize> = (1..k).collect();
    let float_vars: Vec<usize> = (1..k).filter(|&i| nodes[info.body_inputs[i]].outputs[0].dtype.is_float()).collect();
    let float_inv: Vec<((NodeId, usize), NodeId)> = invariants.iter().copied().filter(|(u, _)| nodes[u.0].outputs[u.1].dtype.is_float()).collect();

    // Forward side: save each iteration's variables, keyed by the iteration index.
    let tag = nodes.len();
    let counter = (info.body_inputs[0], 0);
    let mut stacks = Vec::with_capacity(saved.len());
    for &i in &saved {
        let stack = format!("{frame}/stack{tag}_{i}");
        let mut a = Attrs::new();
        a.insert("stack".into(), AttrValue::Str(stack.clone()));
        g.add_raw(Some(info.ctx), "StackPush", "while/grad_push", vec![(info.body_inputs[i], 0), counter], Vec::new(), a)?;
        stacks.push(stack);
    }

    // Backward loop variables: j, one gradient per float variable, one accumulator per float invariant.
    let exits: Vec<Output> = info.exits.iter().map(|&e| gp.out(e, 0)).collect();
    let exit_refs: Vec<&Output> = exits.iter().collect();
    let after = gp.control_dependencies(&exit_refs)?;
    let mut init = vec![after.identity(&exits[0])?];
    for &i in &float_vars {
        init.push(match &exit_grads[i - 1] {
            Some(d) => after.identity(d)?,
            None => after.zeros_like(&exits[i])?,
        });
    }
    for (u, _) in &float_inv {
        init.push(after.zeros_like(gp.out(u.0, u.1))?);
    }
    let init_refs: Vec<&Output> = init.iter().collect();
    let nv = float_vars.len();
    let out = gp.while_loop(
        |b, v| b.greater(&v[0], b.scalar(0.0, DType::I32)?),
        |b, v| {
            let jm = b.sub(&v[0], b.scalar(1.0, DType::I32)?)?;
            let lb = b.ctx().ok_or_else(|| cf_err(frame, "backward loop without a context"))?;
            let mut pops = Vec::with_capacity(saved.len());
            for (s, &i) in stacks.iter().zip(&saved) {
                let t = &nodes[info.body_inputs[i]].outputs[0];
                let mut a = Attrs::new();
                a.insert("stack".into(), AttrValue::Str(s.clone()));
                a.insert("dtype".into(), AttrValue::DType(t.dtype));
                a.insert("shape".into(), AttrValue::Shape(t.shape.clone()));
                let id = b.add_raw(Some(lb), "StackPop", "while/grad_pop", vec![(jm.node, jm.index)], Vec::new(), a)?;
                pops.push(b.out(id, 0));
            }
            let pop_refs: Vec<&Output> = pops.iter().collect();
            let j_next = b.control_dependencies(&pop_refs)?.identity(&jm)?;

            // Rebuild the body on the popped values.
            let mut map: HashMap<(NodeId, usize), (NodeId, usize)> = HashMap::new();
            let mut node_map: HashMap<NodeId, NodeId> = HashMap::new();
            map.insert(counter, (jm.node, jm.index));
            for (&e, &u) in &inv_enter {
                map.insert((e, 0), u);
            }
            node_map.insert(counter.0, jm.node);
            for (p, &i) in pops.iter().zip(&saved) {
                map.insert((info.body_inputs[i], 0), (p.node, p.index));
                node_map.insert(info.body_inputs[i], p.node);
            }
            // The popped values of the float variables: what the gradient is taken with respect to.
            let float_pops: Vec<Output> = saved.iter().zip(&pops).filter(|(i, _)| float_vars.contains(i)).map(|(_, p)| p.clone()).collect();
            rebuild_body(b, lb, &nodes, (start, end), &inv_enter, &mut map, &mut node_map)?;
            let ys: Vec<Output> = float_vars
                .iter()
                .map(|&i| {
                    let (s, x) = info.body_outputs[i];
                    map.get(&(s, x)).map(|&(a, c)| b.out(a, c)).ok_or_else(|| cf_err(&nodes[s].name, "a loop body output was not rebuilt"))
                })
                .collect::<Result<_>>()?;
            let inner_u: Vec<Output> = {
                let mut d = b.lock();
                float_inv.iter().map(|(u, _)| b.capture(&mut d, lb, *u).map(|(a, c)| b.out(a, c))).collect::<Result<_>>()?
            };
            let mut xs: Vec<&Output> = float_pops.iter().collect();
            xs.extend(inner_u.iter());
            let ys_refs: Vec<&Output> = ys.iter().collect();
            let dys: Vec<&Output> = v[1..=nv].iter().collect();
            let grads = b.gradients_with(&ys_refs, &xs, Some(&dys))?;
            let mut next = vec![j_next];
            for (q, p) in float_pops.iter().enumerate() {
                next.push(match &grads[q] {
                    Some(d) => d.clone(),
                    None => b.zeros_like(p)?,
                });
            }
            for (q, acc) in v[1 + nv..].iter().enumerate() {
                next.push(match &grads[nv + q] {
                    Some(d) => b.add(acc, d)?,
                    None => b.identity(acc)?,
                });
            }
            Ok(next)
        },
        &init_refs,
    )?;
    let mut var_grads = vec![None; k - 1];
    for (q, &i) in float_vars.iter().enumerate() {
        var_grads[i - 1] = Some(out[1 + q].clone());
    }
    let inv_grads = float_inv.iter().enumerate().map(|(q, (u, _))| (*u, out[1 + nv + q].clone())).collect();
    Ok((var_grads, inv_grads))
}

/// Refuses a body the gradient cannot recompute: a stateful op, or a loop
/// nested in it.
fn check_body(nodes: &[crate::graph::Node], start: usize, end: usize, frame: &str, inv_enter: &HashMap<NodeId, (NodeId, usize)>) -> Result<()> {
    for (id, n) in nodes.iter().enumerate().take(end).skip(start) {
        let def = ops::registry().op(&n.op).ok_or_else(|| EngineError::UnknownOp { node: n.name.clone(), op: n.op.clone() })?;
        if def.stateful {
            return Err(cf_err(&n.name, format!("the gradient of while loop '{frame}' recomputes its body, which holds the stateful op {}", n.op)));
        }
        if n.class() == crate::graph::NodeClass::Enter && !inv_enter.contains_key(&id) {
            return Err(cf_err(&n.name, format!("the gradient of a loop nested in the body of while loop '{frame}' is not supported")));
        }
    }
    Ok(())
}

/// Rebuilds the loop body's nodes `range` inside the backward loop `lb` of
/// `b`, each input taken through `map` (outer tensors as they are), each
/// control input through `node_map`, a `cond_pred` renamed to its copy;
/// both maps gain the copies.
fn rebuild_body(
    b: &Graph,
    lb: usize,
    nodes: &[crate::graph::Node],
    (start, end): (usize, usize),
    inv_enter: &HashMap<NodeId, (NodeId, usize)>,
    map: &mut HashMap<(NodeId, usize), (NodeId, usize)>,
    node_map: &mut HashMap<NodeId, NodeId>,
) -> Result<()> {
    for (id, n) in nodes.iter().enumerate().take(end).skip(start) {
        if inv_enter.contains_key(&id) {
            continue;
        }
        let mut edges = Vec::with_capacity(n.inputs.len());
        for &(s, i) in &n.inputs {
            let v = map.get(&(s, i)).copied().or_else(|| (s < start || s >= end).then_some((s, i)));
            edges.push(v.ok_or_else(|| cf_err(&n.name, format!("input '{}' of the loop body has no value in the gradient loop", nodes[s].name)))?);
        }
        let control: Vec<NodeId> = n.control_inputs.iter().filter_map(|c| node_map.get(c).copied()).collect();
        let mut attrs = n.attrs.clone();
        if let Some(AttrValue::Str(p)) = n.attrs.get("cond_pred")
            && let Some((name, idx)) = p.rsplit_once(':').and_then(|(a, b)| b.parse::<usize>().ok().map(|i| (a, i)))
            && let Some(pid) = nodes.iter().position(|m| m.name == name)
            && let Some(&(np, ni)) = map.get(&(pid, idx))
        {
            attrs.insert("cond_pred".into(), AttrValue::Str(format!("{}:{ni}", b.out(np, 0).name())));
        }
        let new = {
            let mut d = b.lock();
            let base = format!("{}{}", b.prefix(), n.name);
            let name = d_unique(&d, &base);
            b.add_locked(&mut d, Some(lb), true, &n.op, name, edges, control, attrs)?
        };
        node_map.insert(id, new);
        for i in 0..n.outputs.len() {
            map.insert((id, i), (new, i));
        }
    }
    Ok(())
}

/// A node name not yet used in the graph.
fn d_unique(d: &crate::graph::GraphData, base: &str) -> String {
    if !d.by_name.contains_key(base) {
        return base.to_string();
    }
    (1..).map(|i| format!("{base}_{i}")).find(|n| !d.by_name.contains_key(n)).unwrap_or_default()
}
