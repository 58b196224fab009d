//! Dynamic control flow (paper section 3.4; Yu et al., EuroSys 2018): the
//! primitives Switch, Merge, Enter, Exit, NextIteration and LoopCond, the
//! per-step tape ops StackPush / StackPop that a loop's gradient uses, and
//! the builders `cond` and `while_loop` on top of them.
//!
//! Contract. The primitives only route tensors: the executor runs them
//! itself (dead-tensor propagation, frames and iterations live in
//! `runtime::frames`), so their CPU kernels here are never called. A value
//! that flows into an untaken branch is *dead*: every op with a dead input
//! is skipped and its outputs are dead, except Merge, which forwards its
//! first live input. `Enter` moves a value into a loop's frame (a constant
//! Enter into every iteration), `NextIteration` into the next iteration,
//! `Exit` back to the parent frame.
//!
//! The builders record, per context, how outer tensors entered it (a
//! `Switch(x, pred)` per branch, a constant `Enter` per loop), so the
//! closures can use any tensor of the enclosing graph.

use super::{Registry, attrs};
use crate::error::{EngineError, Result};
use crate::graph::{AttrValue, CtxKind, Graph, LoopInfo, NodeId, Output};
use crate::tensor::{DType, PartialShape, Tensor, TensorType};
use std::collections::HashMap;
use parking_lot::Mutex;

/// Loop iterations that may run at once when none is given (TensorFlow's default).
pub const DEFAULT_PARALLEL_ITERATIONS: usize = 10;

/// The ops the executor runs itself (they only route tensors).
pub(crate) const ROUTING_OPS: &[&str] = &["Switch", "Merge", "Enter", "Exit", "NextIteration"];

/// Per-step tapes of StackPush / StackPop: stack name -> iteration -> value.
#[derive(Default)]
pub(crate) struct Stacks(Mutex<HashMap<String, HashMap<i64, Tensor>>>);

fn scalar_bool(c: &crate::graph::InferCtx, i: usize, what: &str) -> Result<()> {
    let t = &c.inputs[i];
    if t.dtype != DType::Bool || t.shape.rank() != 0 {
        return Err(EngineError::ControlFlow { node: c.n.name.into(), detail: format!("{what} must be a scalar bool, got {t}") });
    }
    Ok(())
}

/// The shape two values merged into one output can have.
fn merged_shape(a: &PartialShape, b: &PartialShape) -> Option<PartialShape> {
    (a.rank() == b.rank()).then(|| PartialShape::new(a.dims().iter().zip(b.dims()).map(|(x, y)| if x == y { *x } else { None }).collect()))
}

fn index_of(c: &super::KernelCtx) -> Result<i64> {
    let v = c.inputs.get(1).or(c.inputs.first()).ok_or_else(|| c.n.kernel_err("no iteration index"))?.scalar_f64()?;
    Ok(v as i64)
}

pub(crate) fn register(r: &mut Registry) {
    r.def("Switch", 2, Some(2), |c| {
        scalar_bool(c, 1, "the predicate (input 1)")?;
        Ok(vec![c.inputs[0].clone(), c.inputs[0].clone()])
    })
    .cheap()
    // A cond's Switch: the gradient takes whichever branch's gradient is live.
    .grad(|c| {
        let id = c.g.add_raw(c.g.ctx(), "Merge", "merge_grad", vec![(c.grads[0].node, c.grads[0].index), (c.grads[1].node, c.grads[1].index)], Vec::new(), attrs! {})?;
        Ok(vec![Some(c.g.out(id, 0)), None])
    });

    r.def("Merge", 1, None, |c| {
        let d = c.inputs[0].dtype;
        let mut shape = c.inputs[0].shape.clone();
        for (i, t) in c.inputs.iter().enumerate().skip(1) {
            if t.dtype != d {
                return Err(c.n.dtype_err(format!("input 0 is {d} but input {i} is {}", t.dtype)));
            }
            shape = merged_shape(&shape, &t.shape).ok_or_else(|| c.n.shape_err(format!("input 0 is {} but input {i} is {}", c.inputs[0].shape, t.shape)))?;
        }
        if let Some(AttrValue::Shape(inv)) = c.n.attrs.get("shape_invariant") {
            if !inv.compatible(&shape) {
                return Err(c.n.shape_err(format!("the shape invariant {inv} does not fit the initial value {shape}")));
            }
            shape = inv.clone();
        }
        Ok(vec![TensorType { dtype: d, shape }, TensorType::new(DType::I32, PartialShape::scalar())])
    })
    .cheap()
    // A cond's Merge: route the gradient back into the branch that ran.
    .grad(|c| {
        let pred = match c.n.attrs.get("cond_pred") {
            Some(AttrValue::Str(p)) => p.clone(),
            _ => return Err(EngineError::NoGradient { node: c.n.name.into(), op: c.n.op.into() }),
        };
        let (name, idx) = pred.rsplit_once(':').and_then(|(a, b)| b.parse::<usize>().ok().map(|i| (a, i))).ok_or_else(|| c.n.attr_err("cond_pred", "not NAME:INDEX"))?;
        let p = c.g.output_by_name(name, idx)?;
        let sw = c.g.op("Switch").input(&c.grads[0]).input(&p).build_all()?;
        Ok(vec![Some(sw[0].clone()), Some(sw[1].clone())])
    });

    for name in ["Enter", "Exit", "NextIteration"] {
        r.def(name, 1, Some(1), |c| Ok(vec![c.inputs[0].clone()])).cheap();
    }
    r.def("LoopCond", 1, Some(1), |c| {
        scalar_bool(c, 0, "a while loop's condition")?;
        Ok(vec![c.inputs[0].clone()])
    })
    .cheap();
    r.cpu("LoopCond", &[], |c| Ok(vec![c.inputs[0].clone()]));
    for name in ROUTING_OPS {
        r.cpu(name, &[], |c| Err(c.n.kernel_err("a routing op runs only inside the control-flow executor")));
    }

    // StackPush(x, i): saves x as iteration i's value on the step's tape.
    r.def("StackPush", 2, Some(2), |c| Ok(vec![c.inputs[0].clone()])).cheap().stateful();
    r.cpu("StackPush", &[], |c| {
        let stacks = c.stacks.ok_or_else(|| c.n.kernel_err("no step tape (stack ops run only in graphs with loops)"))?;
        let i = index_of(c)?;
        let name = c.n.str("stack")?.to_string();
        stacks.0.lock().entry(name).or_default().insert(i, c.inputs[0].clone());
        Ok(vec![c.inputs[0].clone()])
    });
    // StackPop(i): takes iteration i's value off the tape.
    r.def("StackPop", 1, Some(1), |c| Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: c.n.shape("shape")?.clone() }])).cheap().stateful();
    r.cpu("StackPop", &[], |c| {
        let stacks = c.stacks.ok_or_else(|| c.n.kernel_err("no step tape (stack ops run only in graphs with loops)"))?;
        let i = index_of(c)?;
        let name = c.n.str("stack")?;
        let v = stacks.0.lock().get_mut(name).and_then(|s| s.remove(&i));
        v.map(|t| vec![t]).ok_or_else(|| c.n.kernel_err(format!("stack '{name}' holds no value of iteration {i} (the forward loop did not save it)")))
    });
}

/// Options of [`Graph::while_loop_with`].
#[derive(Clone, Debug)]
pub struct WhileOptions {
    /// Per loop variable, the shape it keeps across iterations (None: its
    /// initial shape, which the body must then preserve).
    pub shape_invariants: Option<Vec<PartialShape>>,
    /// Iterations that may run at once (at least 1).
    pub parallel_iterations: usize,
}

impl Default for WhileOptions {
    fn default() -> Self {
        WhileOptions { shape_invariants: None, parallel_iterations: DEFAULT_PARALLEL_ITERATIONS }
    }
}

fn edge(o: &Output) -> (NodeId, usize) {
    (o.node, o.index)
}

impl Graph {
    /// `pred ? then_fn() : else_fn()` (tf.cond): only the taken branch runs.
    /// Each closure gets a graph handle to build its branch with (it may use
    /// any tensor of this graph) and returns the branch's outputs; the
    /// branches must return as many outputs of the same dtypes.
    pub fn cond(
        &self,
        pred: &Output,
        then_fn: impl FnOnce(&Graph) -> Result<Vec<Output>>,
        else_fn: impl FnOnce(&Graph) -> Result<Vec<Output>>,
    ) -> Result<Vec<Output>> {
        let t = pred.tensor_type();
        if t.dtype != DType::Bool || t.shape.rank() != 0 {
            return Err(EngineError::ControlFlow { node: pred.name(), detail: format!("a cond predicate must be a scalar bool, got {t}") });
        }
        let pred = self.identity(pred)?;
        // The identity is built in the innermost context of this handle and the predicate.
        let parent = self.lock().ctx_of.get(&pred.node).copied();
        let pe = edge(&pred);
        let mut outs: Vec<Vec<Output>> = Vec::new();
        // Branch 0 is the false one (Switch output 0), as in TensorFlow.
        type Branch<'f> = Box<dyn FnOnce(&Graph) -> Result<Vec<Output>> + 'f>;
        let fns: [Branch; 2] = [Box::new(else_fn), Box::new(then_fn)];
        for (branch, f) in fns.into_iter().enumerate() {
            let ctx = self.new_ctx(parent, CtxKind::Cond { pred: pe, branch });
            let sw = self.add_raw(parent, "Switch", "cond/pivot_switch", vec![pe, pe], Vec::new(), attrs! {})?;
            let pivot = self.add_raw(Some(ctx), "Identity", "cond/pivot", vec![(sw, branch)], Vec::new(), attrs! {})?;
            self.lock().ctxs[ctx].pivot = Some(pivot);
            let g = self.in_ctx(Some(ctx));
            let res = f(&g)?;
            // An Identity in the branch makes an outer tensor returned as it is dead when untaken.
            outs.push(res.iter().map(|o| g.identity(o)).collect::<Result<_>>()?);
        }
        let (f, t) = (&outs[0], &outs[1]);
        if f.len() != t.len() {
            return Err(EngineError::ControlFlow { node: pred.name(), detail: format!("then_fn returned {} outputs but else_fn {}", t.len(), f.len()) });
        }
        let pname = format!("{}:{}", pred.name(), pred.index);
        let mut merged = Vec::with_capacity(t.len());
        for (a, b) in f.iter().zip(t) {
            let id = self.add_raw(parent, "Merge", "cond/merge", vec![edge(a), edge(b)], Vec::new(), attrs! {"cond_pred" => AttrValue::Str(pname.clone())})?;
            merged.push(self.in_ctx(parent).out(id, 0));
        }
        Ok(merged)
    }

    /// `while cond_fn(vars) { vars = body_fn(vars) }` (tf.while_loop) with
    /// default options; returns the loop variables' final values.
    pub fn while_loop(
        &self,
        cond_fn: impl FnOnce(&Graph, &[Output]) -> Result<Output>,
        body_fn: impl FnOnce(&Graph, &[Output]) -> Result<Vec<Output>>,
        loop_vars: &[&Output],
    ) -> Result<Vec<Output>> {
        self.while_loop_with(cond_fn, body_fn, loop_vars, WhileOptions::default())
    }

    /// [`while_loop`](Self::while_loop) with shape invariants and the number
    /// of iterations that may overlap. Errors name the node: a condition
    /// that is not a scalar bool, a body returning the wrong number or
    /// dtypes of values, a variable whose shape changes without an invariant.
    pub fn while_loop_with(
        &self,
        cond_fn: impl FnOnce(&Graph, &[Output]) -> Result<Output>,
        body_fn: impl FnOnce(&Graph, &[Output]) -> Result<Vec<Output>>,
        loop_vars: &[&Output],
        opts: WhileOptions,
    ) -> Result<Vec<Output>> {
        let parent = self.ctx();
        let pg = self.in_ctx(parent);
        // Loop variables from an enclosing context enter it first.
        let mut vars = vec![pg.scalar(0.0, DType::I32)?];
        for v in loop_vars {
            vars.push(pg.identity(*v)?);
        }
        let first = vars[0].node;
        let k = vars.len();
        if let Some(inv) = &opts.shape_invariants
            && inv.len() != loop_vars.len()
        {
            return Err(EngineError::ControlFlow { node: vars[1.min(k - 1)].name(), detail: format!("{} shape invariants for {} loop variables", inv.len(), loop_vars.len()) });
        }
        let base = format!("{}while", self.prefix());
        let frame = format!("{base}#{}", self.lock().ctxs.len());
        let parallel = opts.parallel_iterations.max(1) as i64;
        let ctx = self.new_ctx(parent, CtxKind::Loop { frame: frame.clone(), parallel });
        let gl = self.in_ctx(Some(ctx));
        let mut enters = Vec::with_capacity(k);
        let mut merges = Vec::with_capacity(k);
        for (i, v) in vars.iter().enumerate() {
            let e = self.add_raw(
                parent,
                "Enter",
                "while/enter",
                vec![edge(v)],
                Vec::new(),
                attrs! {"frame_name" => AttrValue::Str(frame.clone()), "is_constant" => AttrValue::Bool(false), "parallel_iterations" => AttrValue::Int(parallel)},
            )?;
            self.lock().ctx_of.insert(e, ctx);
            let mut a = attrs! {};
            if let Some(inv) = opts.shape_invariants.as_ref().and_then(|s| (i > 0).then(|| s[i - 1].clone())) {
                a.insert("shape_invariant".into(), AttrValue::Shape(inv));
            }
            let m = self.add_raw(Some(ctx), "Merge", "while/merge", vec![(e, 0)], Vec::new(), a)?;
            enters.push(e);
            merges.push(gl.out(m, 0));
        }
        self.lock().ctxs[ctx].pivot = Some(merges[0].node);
        let pred = cond_fn(&gl, &merges[1..])?;
        let pt = pred.tensor_type();
        if pt.dtype != DType::Bool || pt.shape.rank() != 0 {
            return Err(EngineError::ControlFlow {
                node: pred.name(),
                detail: format!("the condition of while loop '{frame}' must be a scalar bool, got {pt}"),
            });
        }
        let pred = gl.identity(&pred)?;
        let lc = self.add_raw(Some(ctx), "LoopCond", "while/loop_cond", vec![edge(&pred)], Vec::new(), attrs! {})?;
        let mut switches = Vec::with_capacity(k);
        let mut body_in = Vec::with_capacity(k);
        for m in &merges {
            let s = self.add_raw(Some(ctx), "Switch", "while/switch", vec![edge(m), (lc, 0)], Vec::new(), attrs! {})?;
            let b = self.add_raw(Some(ctx), "Identity", "while/body_in", vec![(s, 1)], Vec::new(), attrs! {})?;
            switches.push(s);
            body_in.push(gl.out(b, 0));
        }
        self.lock().ctxs[ctx].pivot = Some(body_in[0].node);
        let body_start = self.num_nodes();
        let res = body_fn(&gl, &body_in[1..])?;
        if res.len() != loop_vars.len() {
            return Err(EngineError::ControlFlow {
                node: res.first().map_or_else(|| frame.clone(), |o| o.name()),
                detail: format!("the body of while loop '{frame}' returned {} values for {} loop variables", res.len(), loop_vars.len()),
            });
        }
        let mut outs = vec![gl.add(&body_in[0], gl.scalar(1.0, DType::I32)?)?];
        for r in &res {
            outs.push(gl.identity(r)?);
        }
        let body_end = self.num_nodes();
        for (i, o) in outs.iter().enumerate() {
            let want = merges[i].tensor_type();
            let got = o.tensor_type();
            let ok = got.dtype == want.dtype
                && got.shape.rank() == want.shape.rank()
                && want.shape.dims().iter().zip(got.shape.dims()).all(|(w, g)| w.is_none() || w == g);
            if !ok {
                let node = res.get(i.wrapping_sub(1)).map_or_else(|| o.name(), |r| r.name());
                return Err(EngineError::ControlFlow {
                    node,
                    detail: format!(
                        "loop variable {} of while loop '{frame}' enters as {want} but the body makes it {got}; declare a shape invariant (WhileOptions::shape_invariants) if its shape may change",
                        i - 1
                    ),
                });
            }
            let n = self.add_raw(Some(ctx), "NextIteration", "while/next_iteration", vec![edge(o)], Vec::new(), attrs! {})?;
            self.add_back_edge(merges[i].node, (n, 0));
        }
        let mut exits = Vec::with_capacity(k);
        for &s in &switches {
            exits.push(self.add_raw(parent, "Exit", "while/exit", vec![(s, 0)], Vec::new(), attrs! {})?);
        }
        let last = *exits.last().unwrap_or(&first);
        // The loop's own nodes start at its first Enter (the variables' identities before it are outside).
        let first = enters[0];
        self.lock().loops.insert(
            frame,
            LoopInfo {
                ctx,
                enters,
                body_inputs: body_in.iter().map(|b| b.node).collect(),
                body_outputs: outs.iter().map(edge).collect(),
                exits: exits.clone(),
                body_range: (body_start, body_end),
                first,
                last,
            },
        );
        Ok(exits[1..].iter().map(|&e| pg.out(e, 0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_predicate_that_is_not_a_scalar_bool_is_refused_naming_it() {
        let g = Graph::new();
        let p = g.constant(Tensor::from_vec(vec![true, false], [2]).unwrap()).unwrap();
        let x = g.scalar(1.0, DType::F32).unwrap();
        let e = g.cond(&p, |_| Ok(vec![x.clone()]), |_| Ok(vec![x.clone()])).unwrap_err().to_string();
        assert!(e.contains(&p.name()) && e.contains("scalar bool"), "{e}");
    }
}
