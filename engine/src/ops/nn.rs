//! Neural-network ops over the last axis: Softmax, LogSoftmax,
//! SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits, and
//! BiasAdd (with BiasAddGrad).

use super::{FLOATS, KernelCtx, Registry, attrs, same_dtype, with_float};
use crate::tensor::DType;
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::kernels::cpu::Float;
use crate::kernels::cpu::elementwise::PAR_MIN_ELEMENTS;
use crate::kernels::cpu::reduce::{fold8, reduce_axes};
use crate::tensor::PartialShape;
use crate::tensor::Tensor;
use rayon::prelude::*;

/// Runs `f(row_in, row_out)` over rows of length `c`, in parallel when large.
fn rows<T: Float>(x: &[T], c: usize, threads: usize, f: impl Fn(&[T], &mut [T]) + Sync + Send) -> Vec<T> {
    let mut out = vec![T::ZERO; x.len()];
    if c == 0 {
        return out;
    }
    if threads > 1 && x.len() >= PAR_MIN_ELEMENTS {
        out.par_chunks_mut(c).zip(x.par_chunks(c)).for_each(|(o, r)| f(r, o));
    } else {
        for (o, r) in out.chunks_mut(c).zip(x.chunks(c)) {
            f(r, o);
        }
    }
    out
}

/// `o = exp(r - max(r))`; returns the max and the sum of `o`. The max and
/// the sum fold in eight lanes (`fold8`): folded one element at a time they
/// were chains of dependent max and add instructions that took most of a
/// row's time (6 ns an element on [512, 1000] logits).
fn shifted_exps<T: Float>(r: &[T], o: &mut [T]) -> (T, T) {
    let m = fold8(r, T::NEG_INFINITY, |v| v, T::max);
    for (o, &v) in o.iter_mut().zip(r) {
        *o = v - m;
    }
    T::exp_in_place(o);
    (m, fold8(o, T::ZERO, |v| v, |a, b| a + b))
}

fn log_softmax_row<T: Float>(r: &[T], o: &mut [T]) {
    let (m, s) = shifted_exps(r, o);
    let l = m + s.ln();
    for (o, &v) in o.iter_mut().zip(r) {
        *o = v - l;
    }
}

fn softmax_row<T: Float>(r: &[T], o: &mut [T]) {
    let (_, s) = shifted_exps(r, o);
    let inv = T::ONE / s;
    for o in o.iter_mut() {
        *o *= inv;
    }
}

fn last_dim(c: &KernelCtx, x: &Tensor) -> Result<usize> {
    x.dims().last().copied().ok_or_else(|| c.n.shape_err("input must have rank >= 1"))
}

fn k_softmax(c: &mut KernelCtx, log: bool) -> Result<Vec<Tensor>> {
    let x = &c.inputs[0];
    let n = last_dim(c, x)?;
    with_float!(c, x.dtype(), T => {
        let v = if log { rows(x.as_slice::<T>()?, n, c.threads, log_softmax_row) } else { rows(x.as_slice::<T>()?, n, c.threads, softmax_row) };
        Ok(vec![Tensor::from_vec(v, x.shape().clone())?])
    })
}

/// Loss per row and its gradient w.r.t. the logits; `target(row, j)` is the
/// label probability of class j in that row.
fn xent<T: Float>(logits: &[T], n: usize, c: usize, target: impl Fn(usize, usize) -> T) -> (Vec<T>, Vec<T>) {
    let mut loss = vec![T::ZERO; n];
    let mut back = vec![T::ZERO; n * c];
    let mut lsm = vec![T::ZERO; c];
    for i in 0..n {
        let r = &logits[i * c..(i + 1) * c];
        log_softmax_row(r, &mut lsm);
        let mut l = T::ZERO;
        let b = &mut back[i * c..(i + 1) * c];
        b.copy_from_slice(&lsm);
        T::exp_in_place(b);
        for (j, (b, &lp)) in b.iter_mut().zip(&lsm).enumerate() {
            let t = target(i, j);
            if t != T::ZERO {
                l -= t * lp;
            }
            *b -= t;
        }
        loss[i] = l;
    }
    (loss, back)
}

fn check_logits(c: &KernelCtx, x: &Tensor) -> Result<(usize, usize)> {
    if x.rank() != 2 {
        return Err(c.n.shape_err(format!("logits must be [batch, classes], got {}", x.shape())));
    }
    Ok((x.dims()[0], x.dims()[1]))
}

fn k_xent(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, y) = (&c.inputs[0], &c.inputs[1]);
    let (n, k) = check_logits(c, x)?;
    if y.dims() != x.dims() {
        return Err(c.n.shape_err(format!("labels {} must match logits {}", y.shape(), x.shape())));
    }
    with_float!(c, x.dtype(), T => {
        let ys = y.as_slice::<T>()?;
        let (l, b) = xent(x.as_slice::<T>()?, n, k, |i, j| ys[i * k + j]);
        Ok(vec![Tensor::from_vec(l, [n])?, Tensor::from_vec(b, [n, k])?])
    })
}

fn k_sparse_xent(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, y) = (&c.inputs[0], &c.inputs[1]);
    let (n, k) = check_logits(c, x)?;
    if y.dims() != [n] {
        return Err(c.n.shape_err(format!("labels {} must be [{}] for logits {}", y.shape(), n, x.shape())));
    }
    let labels: Vec<i64> = match y.dtype() {
        DType::I32 => y.as_slice::<i32>()?.iter().map(|&v| v as i64).collect(),
        DType::I64 => y.to_vec::<i64>()?,
        d => return Err(c.n.dtype_err(format!("labels must be i32 or i64, got {d}"))),
    };
    if let Some((i, &bad)) = labels.iter().enumerate().find(|(_, l)| **l < 0 || **l as usize >= k) {
        return Err(c.n.kernel_err(format!("label {bad} in row {i} is outside [0, {k})")));
    }
    with_float!(c, x.dtype(), T => {
        // One exp per logit: softmax into the gradient, then the label's
        // entry less one; loss = log(sum) - (x_label - max), from the row's
        // own max and sum (-ln of a tiny probability would lose precision).
        let xs = x.as_slice::<T>()?;
        let mut back = vec![T::ZERO; xs.len()];
        let mut loss = vec![T::ZERO; n];
        let row = |(i, (b, l)): (usize, (&mut [T], &mut T))| {
            let r = &xs[i * k..(i + 1) * k];
            let (m, s) = shifted_exps(r, b);
            let inv = T::ONE / s;
            for b in b.iter_mut() {
                *b *= inv;
            }
            let j = labels[i] as usize;
            *l = s.ln() - (r[j] - m);
            b[j] -= T::ONE;
        };
        if k > 0 {
            if c.threads > 1 && xs.len() >= PAR_MIN_ELEMENTS {
                back.par_chunks_mut(k).zip(loss.par_iter_mut()).enumerate().for_each(row);
            } else {
                back.chunks_mut(k).zip(loss.iter_mut()).enumerate().for_each(row);
            }
        }
        Ok(vec![Tensor::from_vec(loss, [n])?, Tensor::from_vec(back, [n, k])?])
    })
}

fn k_bias_add(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, b) = (&c.inputs[0], &c.inputs[1]);
    if b.rank() != 1 || x.dims().last() != Some(&b.dims()[0]) {
        return Err(c.n.shape_err(format!("bias {} must match the last dimension of {}", b.shape(), x.shape())));
    }
    let n = b.dims()[0];
    with_float!(c, x.dtype(), T => {
        let bs = b.as_slice::<T>()?;
        let v = rows(x.as_slice::<T>()?, n, c.threads, |r, o| {
            for ((o, &v), &bb) in o.iter_mut().zip(r).zip(bs) {
                *o = v + bb;
            }
        });
        Ok(vec![Tensor::from_vec(v, x.shape().clone())?])
    })
}

fn k_bias_add_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let g = &c.inputs[0];
    let n = last_dim(c, g)?;
    let axes: Vec<usize> = (0..g.rank() - 1).collect();
    with_float!(c, g.dtype(), T => {
        let (v, _) = reduce_axes(g.as_slice::<T>()?, g.dims(), &axes, T::ZERO, c.threads, |a: T, b: T| a + b);
        Ok(vec![Tensor::from_vec(v, [n])?])
    })
}

fn infer_logits(c: &super::InferCtx) -> Result<Vec<TensorType>> {
    let x = &c.inputs[0];
    if x.shape.rank() != 2 {
        return Err(c.n.shape_err(format!("logits must be [batch, classes], got {}", x.shape)));
    }
    if !FLOATS.contains(&x.dtype) {
        return Err(c.n.dtype_err(format!("logits must be f32 or f64, got {}", x.dtype)));
    }
    let d = x.shape.dims();
    Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(vec![d[0]]) }, x.clone()])
}

pub(crate) fn register(r: &mut Registry) {
    let rank1 = |c: &super::InferCtx| -> Result<Vec<TensorType>> {
        same_dtype(c, FLOATS)?;
        if c.inputs[0].shape.rank() == 0 {
            return Err(c.n.shape_err("input must have rank >= 1"));
        }
        Ok(vec![c.inputs[0].clone()])
    };
    r.def("Softmax", 1, Some(1), rank1).flops(|c| 5.0 * super::flops_per_output(c)).grad(|c| {
        // (g - sum(g*y, -1)) * y
        let (g, y) = (&c.grads[0], &c.outputs[0]);
        let s = c.g.reduce_sum(g * y, &[-1], true)?;
        Ok(vec![Some(((g - &s)? * y)?)])
    });
    r.cpu("Softmax", FLOATS, |c| k_softmax(c, false));
    r.def("LogSoftmax", 1, Some(1), rank1).flops(|c| 5.0 * super::flops_per_output(c)).grad(|c| {
        // g - sum(g, -1) * exp(y)
        let (g, y) = (&c.grads[0], &c.outputs[0]);
        let s = c.g.reduce_sum(g, &[-1], true)?;
        Ok(vec![Some((g - (s * c.g.exp(y)?)?)?)])
    });
    r.cpu("LogSoftmax", FLOATS, |c| k_softmax(c, true));

    r.def("SoftmaxCrossEntropyWithLogits", 2, Some(2), |c| {
        let (x, y) = (&c.inputs[0], &c.inputs[1]);
        same_dtype(c, FLOATS)?;
        if !x.shape.compatible(&y.shape) {
            return Err(c.n.shape_err(format!("labels {} must match logits {}", y.shape, x.shape)));
        }
        infer_logits(c)
    })
    .flops(|c| 8.0 * c.inputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64)
    .grad(|c| {
        let gl = c.g.expand_dims(&c.grads[0], -1)?;
        let gx = (&c.outputs[1] * &gl)?;
        let gy = c.g.neg((&gl * c.g.log_softmax(&c.inputs[0])?)?)?;
        Ok(vec![Some(gx), Some(gy)])
    });
    r.cpu("SoftmaxCrossEntropyWithLogits", FLOATS, k_xent);
    r.def("SparseSoftmaxCrossEntropyWithLogits", 2, Some(2), |c| {
        let (x, y) = (&c.inputs[0], &c.inputs[1]);
        if !matches!(y.dtype, DType::I32 | DType::I64) {
            return Err(c.n.dtype_err(format!("labels must be i32 or i64, got {}", y.dtype)));
        }
        if y.shape.rank() != 1 || x.shape.rank() != 2 || !PartialShape::new(vec![x.shape.dims()[0]]).compatible(&y.shape) {
            return Err(c.n.shape_err(format!("labels {} must be [batch] for logits {}", y.shape, x.shape)));
        }
        infer_logits(c)
    })
    .flops(|c| 8.0 * c.inputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64)
    .grad(|c| {
        let gl = c.g.expand_dims(&c.grads[0], -1)?;
        Ok(vec![Some((&c.outputs[1] * &gl)?), None])
    });
    r.cpu("SparseSoftmaxCrossEntropyWithLogits", FLOATS, k_sparse_xent);

    r.def("BiasAdd", 2, Some(2), |c| {
        same_dtype(c, FLOATS)?;
        let (x, b) = (&c.inputs[0].shape, &c.inputs[1].shape);
        let last = x.dims().last().copied();
        let ok = b.rank() == 1 && x.rank() >= 1 && (last.flatten().is_none() || b.dims()[0].is_none() || last.flatten() == b.dims()[0]);
        if !ok {
            return Err(c.n.shape_err(format!("bias {b} must match the last dimension of {x}")));
        }
        Ok(vec![c.inputs[0].clone()])
    })
    .flops(super::flops_per_output)
    .grad(|c| {
        let gb = c.g.build1("BiasAddGrad", vec![c.grads[0].clone()], attrs! {})?;
        Ok(vec![Some(c.grads[0].clone()), Some(gb)])
    });
    r.cpu("BiasAdd", FLOATS, k_bias_add);
    r.def("BiasAddGrad", 1, Some(1), |c| {
        let g = &c.inputs[0];
        if g.shape.rank() == 0 {
            return Err(c.n.shape_err("gradient must have rank >= 1"));
        }
        Ok(vec![TensorType { dtype: g.dtype, shape: PartialShape::new(vec![*g.shape.dims().last().unwrap_or(&None)]) }])
    })
    .flops(super::flops_per_input);
    r.cpu("BiasAddGrad", FLOATS, k_bias_add_grad);
}

impl Graph {
    /// Softmax over the last axis.
    pub fn softmax(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("Softmax", vec![x.into_output()?], attrs! {})
    }
    /// Log-softmax over the last axis.
    pub fn log_softmax(&self, x: impl IntoOutput) -> Result<Output> {
        self.build1("LogSoftmax", vec![x.into_output()?], attrs! {})
    }
    /// Per-row cross entropy of `logits` against label distributions.
    pub fn softmax_cross_entropy_with_logits(&self, logits: impl IntoOutput, labels: impl IntoOutput) -> Result<Output> {
        let (x, y) = (logits.into_output()?, labels.into_output()?);
        self.build1("SoftmaxCrossEntropyWithLogits", vec![x, y], attrs! {})
    }
    /// Per-row cross entropy of `logits` against integer class labels.
    pub fn sparse_softmax_cross_entropy_with_logits(&self, logits: impl IntoOutput, labels: impl IntoOutput) -> Result<Output> {
        let (x, y) = (logits.into_output()?, labels.into_output()?);
        self.build1("SparseSoftmaxCrossEntropyWithLogits", vec![x, y], attrs! {})
    }
    /// `x + bias` with `bias` over the last axis.
    pub fn bias_add(&self, x: impl IntoOutput, bias: impl IntoOutput) -> Result<Output> {
        let (x, b) = (x.into_output()?, bias.into_output()?);
        self.build1("BiasAdd", vec![x, b], attrs! {})
    }
}
