//! Reductions over axes: Sum, Mean, Max (attrs `axes`, empty = all, and
//! `keep_dims`), ArgMax, and the gradient helpers ReductionGrad (Sum and
//! Mean) and MaxReduceGrad.

use super::math::Arith;
use super::{FLOATS, InferCtx, KernelCtx, NUMERIC, Registry, attrs, flops_per_input, same_dtype, with_float, with_numeric};
use crate::graph::{AttrValue, NodeInfo};
use crate::tensor::{DType, Element};
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::kernels::cpu::Float;
use crate::kernels::cpu::elementwise::{binary, broadcast_to, zip_map};
use crate::kernels::cpu::reduce::reduce_axes;
use crate::tensor::PartialShape;
use crate::tensor::Tensor;

/// The normalised axes of a reduction (empty attribute = every axis).
fn reduction_axes(n: &NodeInfo, rank: usize) -> Result<Vec<usize>> {
    let a = n.axes("axes", rank)?;
    Ok(if n.ints("axes")?.is_empty() { (0..rank).collect() } else { a })
}

fn reduced<T: Clone>(dims: &[T], axes: &[usize], keep: bool, one: T) -> Vec<T> {
    let mut out = Vec::new();
    for (i, d) in dims.iter().enumerate() {
        if axes.contains(&i) {
            if keep {
                out.push(one.clone());
            }
        } else {
            out.push(d.clone());
        }
    }
    out
}

fn infer_reduce(c: &InferCtx, allowed: &[super::DType]) -> Result<Vec<TensorType>> {
    let d = same_dtype(c, allowed)?;
    let s = &c.inputs[0].shape;
    let axes = reduction_axes(&c.n, s.rank())?;
    let keep = c.n.bool_or("keep_dims", false)?;
    Ok(vec![TensorType { dtype: d, shape: PartialShape::new(reduced(s.dims(), &axes, keep, Some(1))) }])
}

enum Kind {
    Sum,
    Mean,
    Max,
}

fn reduce_kernel(c: &KernelCtx, kind: Kind) -> Result<Vec<Tensor>> {
    let x = &c.inputs[0];
    let axes = reduction_axes(&c.n, x.rank())?;
    let keep = c.n.bool_or("keep_dims", false)?;
    let out_dims = reduced(x.dims(), &axes, keep, 1);
    let count: usize = axes.iter().map(|&a| x.dims()[a]).product();
    let dt = x.dtype();
    with_numeric!(c, dt, T => {
        let s = x.as_slice::<T>()?;
        let v = match kind {
            Kind::Sum => reduce_axes(s, x.dims(), &axes, T::default(), c.threads, |a: T, b: T| a.add(b)).0,
            Kind::Mean => {
                let (v, _) = reduce_axes(s, x.dims(), &axes, T::default(), c.threads, |a: T, b: T| a.add(b));
                let inv = <T as Element>::from_f64(1.0 / count as f64);
                if dt.is_float() {
                    v.into_iter().map(|a| a.mul(inv)).collect()
                } else {
                    v.into_iter().map(|a| <T as Element>::from_f64(Element::to_f64(a) / count as f64)).collect()
                }
            }
            Kind::Max => reduce_axes(s, x.dims(), &axes, <T as Element>::from_f64(f64::NEG_INFINITY), c.threads, |a: T, b: T| a.maxv(b)).0,
        };
        Ok(vec![Tensor::from_vec(v, out_dims)?])
    })
}

/// ReductionGrad(g, x): `g` broadcast back over the reduced axes of `x`
/// (divided by the count for a mean).
fn k_reduction_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (g, x) = (&c.inputs[0], &c.inputs[1]);
    let axes = reduction_axes(&c.n, x.rank())?;
    let kept = reduced(x.dims(), &axes, true, 1);
    if kept.iter().product::<usize>() != g.num_elements() {
        return Err(c.n.shape_err(format!("gradient {} does not match the reduction of {}", g.shape(), x.shape())));
    }
    let mean = c.n.bool_or("mean", false)?;
    let count: usize = axes.iter().map(|&a| x.dims()[a]).product();
    let dt = g.dtype();
    with_float!(c, dt, T => {
        let mut v = broadcast_to(g.as_slice::<T>()?, &kept, x.dims(), c.threads);
        if mean {
            let inv = <T as Element>::from_f64(1.0 / count as f64);
            for e in &mut v {
                *e *= inv;
            }
        }
        Ok(vec![Tensor::from_vec(v, x.shape().clone())?])
    })
}

/// MaxReduceGrad(x, y, g): the gradient of a max reduction, shared equally
/// among tied maxima.
fn k_max_reduce_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, y, g) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let axes = reduction_axes(&c.n, x.rank())?;
    let kept = reduced(x.dims(), &axes, true, 1);
    let dt = x.dtype();
    with_float!(c, dt, T => {
        let xd = x.dims();
        let m = binary(x.as_slice::<T>()?, xd, y.as_slice::<T>()?, &kept, xd, c.threads, |a: T, b: T| if a == b { T::ONE } else { T::ZERO });
        let (cnt, _) = reduce_axes(&m, xd, &axes, T::ZERO, c.threads, |a: T, b: T| a + b);
        let scale = zip_map(g.as_slice::<T>()?, &cnt, c.threads, |g: T, n: T| g / n);
        let out = binary(&m, xd, &scale, &kept, xd, c.threads, |a: T, b: T| a * b);
        Ok(vec![Tensor::from_vec(out, x.shape().clone())?])
    })
}

fn k_argmax(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let x = &c.inputs[0];
    let axis = c.n.axis("axis", x.rank())?;
    let d = x.dims();
    let outer: usize = d[..axis].iter().product();
    let r = d[axis];
    let inner: usize = d[axis + 1..].iter().product();
    let mut out_dims = d.to_vec();
    out_dims.remove(axis);
    let dt = x.dtype();
    with_numeric!(c, dt, T => {
        let s = x.as_slice::<T>()?;
        let mut out = vec![0i64; outer * inner];
        for o in 0..outer {
            for i in 0..inner {
                let mut best = 0usize;
                for j in 1..r {
                    if s[(o * r + j) * inner + i] > s[(o * r + best) * inner + i] {
                        best = j;
                    }
                }
                out[o * inner + i] = best as i64;
            }
        }
        Ok(vec![Tensor::from_vec(out, out_dims)?])
    })
}

pub(crate) fn register(r: &mut Registry) {
    r.def("Sum", 1, Some(1), |c| infer_reduce(c, NUMERIC)).flops(flops_per_input).class(super::OpClass::Reduction).grad(|c| {
        Ok(vec![Some(reduction_grad(c.g, &c.grads[0], &c.inputs[0], c.n.ints("axes")?, false)?)])
    });
    r.cpu("Sum", NUMERIC, |c| reduce_kernel(c, Kind::Sum));
    r.def("Mean", 1, Some(1), |c| infer_reduce(c, NUMERIC)).flops(flops_per_input).class(super::OpClass::Reduction).grad(|c| {
        Ok(vec![Some(reduction_grad(c.g, &c.grads[0], &c.inputs[0], c.n.ints("axes")?, true)?)])
    });
    r.cpu("Mean", NUMERIC, |c| reduce_kernel(c, Kind::Mean));
    r.def("Max", 1, Some(1), |c| infer_reduce(c, NUMERIC)).flops(flops_per_input).class(super::OpClass::Reduction).grad(|c| {
        let a = attrs! {"axes" => AttrValue::Ints(c.n.ints("axes")?.to_vec())};
        let g = c.g.build1("MaxReduceGrad", vec![c.inputs[0].clone(), c.outputs[0].clone(), c.grads[0].clone()], a)?;
        Ok(vec![Some(g)])
    });
    r.cpu("Max", NUMERIC, |c| reduce_kernel(c, Kind::Max));

    r.def("ReductionGrad", 2, Some(2), |c| Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: c.inputs[1].shape.clone() }]))
        .flops(super::flops_per_output);
    r.cpu("ReductionGrad", FLOATS, k_reduction_grad);
    r.def("MaxReduceGrad", 3, Some(3), |c| Ok(vec![c.inputs[0].clone()])).flops(|c| 4.0 * super::flops_per_output(c));
    r.cpu("MaxReduceGrad", FLOATS, k_max_reduce_grad);

    r.def("ArgMax", 1, Some(1), |c| {
        same_dtype(c, NUMERIC)?;
        let s = &c.inputs[0].shape;
        let axis = c.n.axis("axis", s.rank())?;
        let mut d = s.dims().to_vec();
        d.remove(axis);
        Ok(vec![TensorType { dtype: DType::I64, shape: PartialShape::new(d) }])
    })
    .flops(flops_per_input)
    .class(super::OpClass::Reduction);
    r.cpu("ArgMax", NUMERIC, k_argmax);
}

fn reduction_grad(g: &Graph, grad: &Output, x: &Output, axes: &[i64], mean: bool) -> Result<Output> {
    g.build1(
        "ReductionGrad",
        vec![grad.clone(), x.clone()],
        attrs! {"axes" => AttrValue::Ints(axes.to_vec()), "mean" => AttrValue::Bool(mean)},
    )
}

fn reduce_node(g: &Graph, op: &str, x: impl IntoOutput, axes: &[i64], keep_dims: bool) -> Result<Output> {
    g.build1(op, vec![x.into_output()?], attrs! {"axes" => AttrValue::Ints(axes.to_vec()), "keep_dims" => AttrValue::Bool(keep_dims)})
}

impl Graph {
    /// Sum over `axes` (empty = all); negative axes count from the end.
    pub fn reduce_sum(&self, x: impl IntoOutput, axes: &[i64], keep_dims: bool) -> Result<Output> {
        reduce_node(self, "Sum", x, axes, keep_dims)
    }
    /// Mean over `axes` (empty = all).
    pub fn reduce_mean(&self, x: impl IntoOutput, axes: &[i64], keep_dims: bool) -> Result<Output> {
        reduce_node(self, "Mean", x, axes, keep_dims)
    }
    /// Maximum over `axes` (empty = all).
    pub fn reduce_max(&self, x: impl IntoOutput, axes: &[i64], keep_dims: bool) -> Result<Output> {
        reduce_node(self, "Max", x, axes, keep_dims)
    }
    /// Index of the largest element along `axis` (first on ties), as i64.
    pub fn argmax(&self, x: impl IntoOutput, axis: i64) -> Result<Output> {
        self.build1("ArgMax", vec![x.into_output()?], attrs! {"axis" => AttrValue::Int(axis)})
    }
}

