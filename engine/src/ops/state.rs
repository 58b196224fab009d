//! Variables and their updates. A Variable node reads the session's value of
//! the variable named like the node; update ops name their variable in the
//! attr `var` (and optimizer slots in `slots`) instead of taking a reference
//! edge, so that initializing a variable never requires reading it.
//! Updates happen in place when no one else holds the old value.
//!
//! Ops: Variable, Assign, AssignAdd, AssignSub, ScatterAdd,
//! ApplyGradientDescent, ApplyMomentum, ApplyAdam.

use super::math::Arith;
use super::{FLOATS, InferCtx, KernelCtx, NUMERIC, Registry, with_float, with_numeric};
use crate::graph::AttrValue;
use crate::tensor::{DType, Element};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::kernels::cpu::Float;
use crate::framework::VarSlot;
use crate::tensor::Tensor;
use std::sync::MutexGuard;

/// The declared type of the variable an update op names in `key`.
fn var_type(c: &InferCtx, key: &str) -> Result<TensorType> {
    let name = c.n.str(key)?;
    let id = c.graph.by_name.get(name).ok_or_else(|| c.n.attr_err(key, format!("no node named '{name}'")))?;
    let n = &c.graph.nodes[*id];
    if n.class() != crate::graph::NodeClass::Variable {
        return Err(c.n.attr_err(key, format!("node '{name}' is a {}, not a Variable", n.op)));
    }
    Ok(n.outputs[0].clone())
}

/// Checks that `t` has the variable's type; `what` names the operand.
fn check_like_var(c: &InferCtx, var: &TensorType, t: &TensorType, what: &str) -> Result<()> {
    if t.dtype != var.dtype {
        return Err(c.n.dtype_err(format!("{what} is {} but variable '{}' is {}", t.dtype, c.n.str("var")?, var.dtype)));
    }
    if !t.shape.compatible(&var.shape) {
        return Err(c.n.shape_err(format!("{what} has shape {} but variable '{}' has shape {}", t.shape, c.n.str("var")?, var.shape)));
    }
    Ok(())
}

fn infer_update(c: &InferCtx) -> Result<Vec<TensorType>> {
    let v = var_type(c, "var")?;
    let value = c.inputs.last().ok_or_else(|| c.n.shape_err("no value input"))?;
    check_like_var(c, &v, value, "value")?;
    for s in c.n.strs_or_empty("slots")? {
        let id = c.graph.by_name.get(s).ok_or_else(|| c.n.attr_err("slots", format!("no node named '{s}'")))?;
        check_like_var(c, &v, &c.graph.nodes[*id].outputs[0], &format!("slot '{s}'"))?;
    }
    Ok(vec![v])
}

/// `t`'s elements to write, copied first if anyone else holds them.
fn owned_slice<T: Element>(t: &mut Tensor) -> Result<&mut [T]> {
    if t.storage_mut().and_then(|s| T::slice_mut(s)).is_none() {
        *t = Tensor::from_vec(t.to_vec::<T>()?, t.shape().clone())?;
    }
    t.storage_mut()
        .and_then(|s| T::slice_mut(s))
        .ok_or_else(|| EngineError::Tensor(format!("a fresh {} tensor is not writable", T::DTYPE)))
}

/// Replaces the variable's value by `f(old)`, in place when unshared.
fn update<T: Element>(c: &KernelCtx, slot: &VarSlot, f: impl Fn(&mut [T]) -> Result<()>) -> Result<Tensor> {
    let mut guard = slot.lock()?;
    let t = guard.as_mut().ok_or_else(|| EngineError::Uninitialized(slot.name.clone()))?;
    f(owned_slice(t)?).map_err(|e| match e {
        EngineError::Kernel { detail, .. } => c.n.kernel_err(detail),
        e => e,
    })?;
    Ok(t.clone())
}

/// Locks a variable and its optimizer slots together, always in address
/// order (so two updates never wait on each other), and gives their values
/// in the order asked. An update holds them all for its one pass: another
/// update of the same variable, running at the same time (asynchronous
/// workers sharing one optimizer state), then never sees one slot updated
/// and the other not. Adam's first moment from two gradients beside a
/// second moment from one made steps of `m / epsilon` wherever the second
/// gradient was zero (two CI runs of the digits MLP's async training ended
/// 5 points lower).
fn lock_together<'a>(c: &KernelCtx, slots: &[&'a VarSlot]) -> Result<Vec<MutexGuard<'a, Option<Tensor>>>> {
    for (i, a) in slots.iter().enumerate() {
        if slots[..i].iter().any(|b| std::ptr::eq(*a, *b)) {
            return Err(c.n.kernel_err(format!("variable '{}' is its own optimizer slot", a.name)));
        }
    }
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&i| slots[i] as *const VarSlot as usize);
    let mut guards: Vec<Option<MutexGuard<'a, Option<Tensor>>>> = slots.iter().map(|_| None).collect();
    for i in order {
        guards[i] = Some(slots[i].lock()?);
    }
    Ok(guards.into_iter().flatten().collect())
}

/// The value under a guard of [`lock_together`], checked to be shaped like
/// the gradient `like` (see [`same_len`]) and made writable.
fn locked_slice<'g, T: Element>(c: &KernelCtx, slot: &VarSlot, guard: &'g mut MutexGuard<'_, Option<Tensor>>, like: &Tensor) -> Result<&'g mut [T]> {
    shaped_like(c, slot, guard.as_ref(), like, "gradient")?;
    let t = guard.as_mut().ok_or_else(|| EngineError::Uninitialized(slot.name.clone()))?;
    owned_slice(t)
}

/// Updates a variable and one optimizer slot in one pass, `f(var, slot)`,
/// in place when unshared: a large update is bound by memory traffic, and
/// two passes read the slot twice. Both are locked at once (see
/// [`lock_together`]).
fn update_with_slot<T: Element>(c: &KernelCtx, var: &VarSlot, slot: &VarSlot, grad: &Tensor, f: impl Fn(&mut [T], &mut [T])) -> Result<Tensor> {
    let mut g = lock_together(c, &[var, slot])?;
    let [gv, gs] = &mut g[..] else { return Err(c.n.kernel_err("two slots locked, not two guards")) };
    f(locked_slice(c, var, gv, grad)?, locked_slice(c, slot, gs, grad)?);
    gv.clone().ok_or_else(|| EngineError::Uninitialized(var.name.clone()))
}

fn same_len(c: &KernelCtx, var: &VarSlot, t: &Tensor, what: &str) -> Result<()> {
    shaped_like(c, var, var.lock()?.as_ref(), t, what)
}

/// Whether `value`, the variable's, is initialized and shaped like `t`.
fn shaped_like(c: &KernelCtx, var: &VarSlot, value: Option<&Tensor>, t: &Tensor, what: &str) -> Result<()> {
    match value.map(|v| v.shape()) {
        None => Err(EngineError::Uninitialized(var.name.clone())),
        Some(s) if s != t.shape() => Err(c.n.shape_err(format!("{what} {} does not match variable '{}' of shape {s}", t.shape(), var.name))),
        Some(_) => Ok(()),
    }
}

fn k_variable(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let v = c.var(0)?;
    let t = v.lock()?.clone().ok_or_else(|| EngineError::Uninitialized(v.name.clone()))?;
    Ok(vec![t])
}

fn k_assign(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let v = c.var(0)?;
    let t = c.inputs[0].clone();
    if t.dtype() != v.ty.dtype || !v.ty.shape.accepts(t.shape()) {
        return Err(c.n.shape_err(format!("value {}{} does not fit variable '{}' of type {}", t.dtype(), t.shape(), v.name, v.ty)));
    }
    v.set(Some(t.clone()));
    Ok(vec![t])
}

fn k_assign_add(c: &mut KernelCtx, sub: bool) -> Result<Vec<Tensor>> {
    let v = c.var(0)?;
    let d = &c.inputs[0];
    same_len(c, v, d, "delta")?;
    with_numeric!(c, d.dtype(), T => {
        let ds = d.as_slice::<T>()?;
        Ok(vec![update::<T>(c, v, |w| {
            if sub {
                w.iter_mut().zip(ds).for_each(|(w, &d)| *w = w.sub(d));
            } else {
                w.iter_mut().zip(ds).for_each(|(w, &d)| *w = w.add(d));
            }
            Ok(())
        })?])
    })
}

fn k_scatter_add(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let v = c.var(0)?;
    let (ind, up) = (&c.inputs[0], &c.inputs[1]);
    let idx: Vec<i64> = match ind.dtype() {
        DType::I32 => ind.as_slice::<i32>()?.iter().map(|&i| i as i64).collect(),
        DType::I64 => ind.to_vec::<i64>()?,
        d => return Err(c.n.dtype_err(format!("indices must be i32 or i64, got {d}"))),
    };
    let vshape = v.lock()?.as_ref().map(|t| t.shape().clone()).ok_or_else(|| EngineError::Uninitialized(v.name.clone()))?;
    let rows = vshape.dims().first().copied().unwrap_or(0);
    let row: usize = vshape.dims().iter().skip(1).product();
    if up.num_elements() != idx.len() * row {
        return Err(c.n.shape_err(format!("updates {} do not match {} indices into variable of shape {vshape}", up.shape(), idx.len())));
    }
    with_numeric!(c, up.dtype(), T => {
        let us = up.as_slice::<T>()?;
        Ok(vec![update::<T>(c, v, |w| {
            for (k, &i) in idx.iter().enumerate() {
                if i < 0 || i as usize >= rows {
                    return Err(c.n.kernel_err(format!("index {i} out of range for {rows} rows of variable '{}'", v.name)));
                }
                let i = i as usize;
                for (d, &s) in w[i * row..(i + 1) * row].iter_mut().zip(&us[k * row..(k + 1) * row]) {
                    *d = d.add(s);
                }
            }
            Ok(())
        })?])
    })
}

fn scalar<T: Float + Element>(c: &KernelCtx, i: usize) -> Result<T> {
    let t = &c.inputs[i];
    if t.num_elements() != 1 {
        return Err(c.n.shape_err(format!("input {i} must be a scalar, got {}", t.shape())));
    }
    Ok(t.as_slice::<T>()?[0])
}

/// The magnitude below which `x * factor` is subnormal: an optimizer takes
/// such a product, or a slot value that could only give such products, as
/// zero. A slot that a zero gradient keeps decaying (Adam's first moment by
/// 0.9 a step, a momentum accumulator) otherwise turns subnormal after some
/// hundreds of steps, and x86 arithmetic producing or reading subnormals
/// takes microcode assists: the 784-512-512-10 MLP's step grew from 3.7 to
/// 21-31 ms after about 650 Adam steps, the ApplyAdam kernels 71% of the
/// time. TensorFlow never sees them, its compute threads running with
/// flush-to-zero and denormals-are-zero set; Rust counts changing that mode
/// as undefined behaviour, so the kernels do it where subnormals persist
/// from step to step. What they zero is what flush-to-zero would, or (a
/// stored slot) values whose every later product would be flushed.
fn product_floor<T: Float>(factor: T) -> T {
    let f = if factor < T::ZERO { -factor } else { factor };
    // a factor of 1 or more (or infinite) never makes a normal value
    // subnormal; zero or NaN make every product zero or NaN anyway
    if f > T::ZERO && f < T::ONE { T::MIN_POSITIVE / f } else { T::MIN_POSITIVE }
}

/// `x`, or zero where its magnitude is below `floor`: a compare and a
/// select, vectorized.
#[inline(always)]
fn zero_below<T: Float>(x: T, floor: T) -> T {
    if x > -floor && x < floor { T::ZERO } else { x }
}

fn k_apply_sgd(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let v = c.var(0)?;
    let g = &c.inputs[1];
    same_len(c, v, g, "gradient")?;
    with_float!(c, g.dtype(), T => {
        let lr: T = scalar(c, 0)?;
        let gs = g.as_slice::<T>()?;
        Ok(vec![update::<T>(c, v, |w| {
            w.iter_mut().zip(gs).for_each(|(w, &g)| *w -= lr * g);
            Ok(())
        })?])
    })
}

fn k_apply_momentum(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (v, acc) = (c.var(0)?, c.var(1)?);
    let g = &c.inputs[1];
    with_float!(c, g.dtype(), T => {
        let lr: T = scalar(c, 0)?;
        let mom: T = scalar(c, 2)?;
        let gs = g.as_slice::<T>()?;
        // see `product_floor`
        let (a_floor, step_floor) = (product_floor(mom), product_floor(lr));
        Ok(vec![update_with_slot::<T>(c, v, acc, g, |w, a| {
            for ((w, a), &g) in w.iter_mut().zip(a.iter_mut()).zip(gs) {
                *a = zero_below(*a * mom + g, a_floor);
                *w -= lr * zero_below(*a, step_floor);
            }
        })?])
    })
}

fn k_apply_adam(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (v, m, s) = (c.var(0)?, c.var(1)?, c.var(2)?);
    let g = &c.inputs[6];
    with_float!(c, g.dtype(), T => {
        let (lr, b1, b2, eps, b1p, b2p): (T, T, T, T, T, T) =
            (scalar(c, 0)?, scalar(c, 1)?, scalar(c, 2)?, scalar(c, 3)?, scalar(c, 4)?, scalar(c, 5)?);
        let lr_t = lr * (T::ONE - b2p).sqrt() / (T::ONE - b1p);
        let gs = g.as_slice::<T>()?;
        // see `product_floor`; `g * g` is subnormal below the square root
        let (m_floor, v_floor, step_floor) = (product_floor(T::ONE - b1), product_floor(T::ONE - b2), product_floor(lr_t));
        let g_floor = T::MIN_POSITIVE.sqrt();
        // var, m and v in one pass under one lock (see `lock_together`)
        let mut guards = lock_together(c, &[v, m, s])?;
        let [gv, gm, gs2] = &mut guards[..] else { return Err(c.n.kernel_err("three slots locked, not three guards")) };
        let (w, ms, vs) = (locked_slice::<T>(c, v, gv, g)?, locked_slice::<T>(c, m, gm, g)?, locked_slice::<T>(c, s, gs2, g)?);
        for (((w, m), s), &g) in w.iter_mut().zip(ms.iter_mut()).zip(vs.iter_mut()).zip(gs) {
            *m = zero_below(*m + (g - *m) * (T::ONE - b1), m_floor);
            let g = zero_below(g, g_floor);
            *s = zero_below(*s + (g * g - *s) * (T::ONE - b2), v_floor);
            // a zero step moves nothing, even where a zeroed second
            // moment and epsilon 0 would make it 0 / 0
            // (the quotient computed either way, so the loop stays a
            // vector select: as a branch it cost 1.5 ms of a 4.4 ms step)
            let step = lr_t * zero_below(*m, step_floor);
            let q = step / (s.sqrt() + eps);
            *w -= if step == T::ZERO { T::ZERO } else { q };
        }
        Ok(vec![gv.clone().ok_or_else(|| EngineError::Uninitialized(v.name.clone()))?])
    })
}

pub(crate) fn register(r: &mut Registry) {
    r.def("Variable", 0, Some(0), |c| {
        let s = c.n.shape("shape")?;
        if s.to_shape().is_none() {
            return Err(c.n.attr_err("shape", format!("variable shape {s} must be fully known")));
        }
        Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: s.clone() }])
    })
    .stateful()
    .views();
    r.cpu("Variable", &[], k_variable);
    r.def("Assign", 1, Some(1), infer_update).stateful().views();
    r.cpu("Assign", &[], k_assign);
    r.def("AssignAdd", 1, Some(1), infer_update).stateful().flops(super::flops_per_output);
    r.cpu("AssignAdd", NUMERIC, |c| k_assign_add(c, false));
    r.def("AssignSub", 1, Some(1), infer_update).stateful().flops(super::flops_per_output);
    r.cpu("AssignSub", NUMERIC, |c| k_assign_add(c, true));
    r.def("ScatterAdd", 2, Some(2), |c| {
        let v = var_type(c, "var")?;
        let (i, u) = (&c.inputs[0], &c.inputs[1]);
        if !matches!(i.dtype, DType::I32 | DType::I64) {
            return Err(c.n.dtype_err(format!("indices must be i32 or i64, got {}", i.dtype)));
        }
        if u.dtype != v.dtype {
            return Err(c.n.dtype_err(format!("updates are {} but variable is {}", u.dtype, v.dtype)));
        }
        Ok(vec![v])
    })
    .stateful()
    .flops(super::flops_per_input);
    r.cpu("ScatterAdd", NUMERIC, k_scatter_add);
    r.def("ApplyGradientDescent", 2, Some(2), infer_update).stateful().flops(|c| 2.0 * super::flops_per_output(c));
    r.cpu("ApplyGradientDescent", FLOATS, k_apply_sgd);
    r.def("ApplyMomentum", 3, Some(3), |c| {
        let v = var_type(c, "var")?;
        check_like_var(c, &v, &c.inputs[1], "gradient")?;
        infer_slots(c, &v)
    })
    .stateful()
    .flops(|c| 4.0 * super::flops_per_output(c));
    r.cpu("ApplyMomentum", FLOATS, k_apply_momentum);
    r.def("ApplyAdam", 7, Some(7), |c| {
        let v = var_type(c, "var")?;
        check_like_var(c, &v, &c.inputs[6], "gradient")?;
        infer_slots(c, &v)
    })
    .stateful()
    .flops(|c| 12.0 * super::flops_per_output(c));
    r.cpu("ApplyAdam", FLOATS, k_apply_adam);
}

fn infer_slots(c: &InferCtx, v: &TensorType) -> Result<Vec<TensorType>> {
    for s in c.n.strs_or_empty("slots")? {
        let id = c.graph.by_name.get(s).ok_or_else(|| c.n.attr_err("slots", format!("no node named '{s}'")))?;
        check_like_var(c, v, &c.graph.nodes[*id].outputs[0], &format!("slot '{s}'"))?;
    }
    for (i, t) in c.inputs.iter().enumerate() {
        if t.dtype != v.dtype {
            return Err(c.n.dtype_err(format!("input {i} is {} but the variable is {}", t.dtype, v.dtype)));
        }
    }
    Ok(vec![v.clone()])
}

/// The variable name behind a Variable output.
pub(crate) fn var_name(v: &Output) -> Result<String> {
    let (name, op) = (v.name(), v.op());
    if op != "Variable" {
        return Err(EngineError::Attr { node: name, op, attr: "var".into(), detail: "expected the output of a Variable node".into() });
    }
    Ok(name)
}

impl Graph {
    /// A variable named `name` whose initializer assigns `init` (any output of
    /// fully known shape); [`Graph::initializers`] collects those assignments.
    pub fn variable(&self, name: &str, init: impl IntoOutput) -> Result<Output> {
        let init = init.into_output()?;
        let t = init.tensor_type();
        let v = self
            .op("Variable")
            .name(name)
            .attr("dtype", AttrValue::DType(t.dtype))
            .attr("shape", AttrValue::Shape(t.shape))
            .build()?;
        let full = v.name();
        let a = self.op("Assign").name(&format!("{name}/Assign")).input(init).attr("var", AttrValue::Str(full)).build()?;
        self.register_variable(v.node, a.node);
        Ok(v)
    }

    /// A NoOp that runs every variable initializer built so far.
    pub fn global_variables_initializer(&self) -> Result<Output> {
        let inits = self.initializers();
        let refs: Vec<&Output> = inits.iter().collect();
        self.group("init", &refs)
    }

    fn update_op(&self, op: &str, var: &Output, inputs: Vec<Output>, slots: &[&Output]) -> Result<Output> {
        let mut b = self.op(op).attr("var", AttrValue::Str(var_name(var)?));
        if !slots.is_empty() {
            let names = slots.iter().map(|s| var_name(s)).collect::<Result<Vec<_>>>()?;
            b = b.attr("slots", AttrValue::Strs(names));
        }
        for i in inputs {
            b = b.input(i);
        }
        b.build()
    }

    /// `var = value`; outputs the new value.
    pub fn assign(&self, var: &Output, value: impl IntoOutput) -> Result<Output> {
        self.update_op("Assign", var, vec![value.into_output()?], &[])
    }
    /// `var += delta`; outputs the new value.
    pub fn assign_add(&self, var: &Output, delta: impl IntoOutput) -> Result<Output> {
        self.update_op("AssignAdd", var, vec![delta.into_output()?], &[])
    }
    /// `var -= delta`; outputs the new value.
    pub fn assign_sub(&self, var: &Output, delta: impl IntoOutput) -> Result<Output> {
        self.update_op("AssignSub", var, vec![delta.into_output()?], &[])
    }
    /// `var[indices[i]] += updates[i]` row by row; outputs the new value.
    pub fn scatter_add(&self, var: &Output, indices: impl IntoOutput, updates: impl IntoOutput) -> Result<Output> {
        self.update_op("ScatterAdd", var, vec![indices.into_output()?, updates.into_output()?], &[])
    }
    pub(crate) fn apply_gradient_descent(&self, var: &Output, lr: &Output, grad: &Output) -> Result<Output> {
        self.update_op("ApplyGradientDescent", var, vec![lr.clone(), grad.clone()], &[])
    }
    pub(crate) fn apply_momentum(&self, var: &Output, accum: &Output, lr: &Output, grad: &Output, momentum: &Output) -> Result<Output> {
        self.update_op("ApplyMomentum", var, vec![lr.clone(), grad.clone(), momentum.clone()], &[accum])
    }
    pub(crate) fn apply_adam(&self, var: &Output, m: &Output, v: &Output, scalars: [&Output; 6], grad: &Output) -> Result<Output> {
        let mut ins: Vec<Output> = scalars.iter().map(|&s| s.clone()).collect();
        ins.push(grad.clone());
        self.update_op("ApplyAdam", var, ins, &[m, v])
    }
}
