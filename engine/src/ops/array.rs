//! Shape and data movement: Reshape (and ReshapeLike), Transpose, Concat
//! (and ConcatGrad), Split, Slice (and SliceGrad), ExpandDims, Squeeze,
//! Gather (and GatherGrad). These work on every dtype.

use super::{InferCtx, KernelCtx, Registry, attrs, with_any};
use crate::graph::{AttrValue, norm_axis};
use crate::tensor::{DType, Element};
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;
use crate::kernels::cpu::transpose::transpose_block;

/// Resolves a reshape target with at most one -1 against `count` elements.
fn resolve_shape(c: &super::KernelCtx, target: &[i64], count: usize, from: &Shape) -> Result<Shape> {
    let Some(known) = target.iter().filter(|&&d| d >= 0).try_fold(1usize, |a, &d| a.checked_mul(d as usize)) else {
        return Err(c.n.shape_err(format!("cannot reshape {from} into {target:?}: more elements than this machine can address")));
    };
    let unknown = target.iter().filter(|&&d| d < 0).count();
    let dims: Vec<usize> = match unknown {
        0 => target.iter().map(|&d| d as usize).collect(),
        1 if known > 0 && count % known == 0 => target.iter().map(|&d| if d < 0 { count / known } else { d as usize }).collect(),
        _ => return Err(c.n.shape_err(format!("cannot reshape {from} into {target:?}"))),
    };
    let s = Shape::new(dims);
    if s.checked_num_elements() != Some(count) {
        return Err(c.n.shape_err(format!("cannot reshape {from} ({count} elements) into {s}")));
    }
    Ok(s)
}

/// Most outputs one node may have when its input does not bound them (a
/// Split of a dimension unknown until run time): each output is a graph
/// edge, so the count is memory at build time, not a tensor size.
const MAX_OUTPUTS: usize = 1 << 16;

fn infer_reshape(c: &InferCtx) -> Result<Vec<TensorType>> {
    let t = c.n.ints("shape")?;
    let x = &c.inputs[0];
    if t.iter().filter(|&&d| d < 0).count() > 1 {
        return Err(c.n.attr_err("shape", format!("{t:?} has more than one -1")));
    }
    let Some(known) = t.iter().filter(|&&d| d >= 0).try_fold(1usize, |a, &d| a.checked_mul(d as usize)) else {
        return Err(c.n.attr_err("shape", format!("{t:?} has more elements than this machine can address")));
    };
    let dims: Vec<Option<usize>> = match x.shape.num_elements() {
        Some(n) => {
            if t.iter().any(|&d| d < 0) {
                if known == 0 || n % known != 0 {
                    return Err(c.n.shape_err(format!("cannot reshape {} into {t:?}", x.shape)));
                }
                t.iter().map(|&d| Some(if d < 0 { n / known } else { d as usize })).collect()
            } else {
                if known != n {
                    return Err(c.n.shape_err(format!("cannot reshape {} ({n} elements) into {t:?} ({known} elements)", x.shape)));
                }
                t.iter().map(|&d| Some(d as usize)).collect()
            }
        }
        None => t.iter().map(|&d| if d < 0 { None } else { Some(d as usize) }).collect(),
    };
    Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(dims) }])
}

/// `x` with its axes permuted: output axis i is input axis `perm[i]`.
fn permute<T: Element>(x: &[T], dims: &[usize], perm: &[usize]) -> Vec<T> {
    let r = dims.len();
    let n = x.len();
    if r == 0 || n == 0 {
        return x.to_vec();
    }
    let in_strides = Shape::new(dims.to_vec()).strides();
    let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
    let out_strides = Shape::new(out_dims.clone()).strides();
    // Input stride of each output axis.
    let st: Vec<usize> = perm.iter().map(|&p| in_strides[p]).collect();
    let last = r - 1;
    // The output axis that walks the input's contiguous axis.
    let q = perm.iter().position(|&p| p == last).unwrap_or(last);
    let mut out = vec![x[0]; n];
    // Every output axis but `q` and the last is an outer loop.
    let outer: Vec<usize> = (0..last).filter(|&d| d != q).collect();
    let mut idx = vec![0usize; outer.len()];
    loop {
        let ib: usize = outer.iter().zip(&idx).map(|(&d, &i)| i * st[d]).sum();
        let ob: usize = outer.iter().zip(&idx).map(|(&d, &i)| i * out_strides[d]).sum();
        if q == last {
            // The last axis stays last: rows are copied whole.
            let len = out_dims[last];
            out[ob..ob + len].copy_from_slice(&x[ib..ib + len]);
        } else {
            let (na, nb, osa, isb) = (out_dims[q], out_dims[last], out_strides[q], st[last]);
            transpose_block(&x[ib..], isb, &mut out[ob..], osa, na, nb);
        }
        // Next outer index, last axis fastest.
        let mut d = outer.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < out_dims[outer[d]] {
                break;
            }
            idx[d] = 0;
        }
    }
}

fn perm_attr(c: &InferCtx) -> Result<Vec<usize>> {
    let r = c.inputs[0].shape.rank();
    let p = c.n.ints("perm")?;
    let mut seen = vec![false; r];
    let mut out = Vec::with_capacity(r);
    for &a in p {
        let n = norm_axis(a, r).filter(|&n| !seen[n]);
        match n {
            Some(n) => {
                seen[n] = true;
                out.push(n)
            }
            None => return Err(c.n.attr_err("perm", format!("{p:?} is not a permutation of {r} axes"))),
        }
    }
    if out.len() != r {
        return Err(c.n.attr_err("perm", format!("{p:?} is not a permutation of {r} axes")));
    }
    Ok(out)
}

/// Splits `x` along `axis` into pieces of the given sizes.
fn split_sizes(c: &KernelCtx, x: &Tensor, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
    let d = x.dims();
    if sizes.iter().sum::<usize>() != d[axis] {
        return Err(c.n.shape_err(format!("pieces {sizes:?} do not add up to dimension {axis} of {}", x.shape())));
    }
    let outer: usize = d[..axis].iter().product();
    let inner: usize = d[axis + 1..].iter().product();
    with_any!(x.dtype(), T => {
        let s = x.as_slice::<T>()?;
        let mut outs = Vec::with_capacity(sizes.len());
        let mut off = 0;
        for &sz in sizes {
            let mut v = Vec::with_capacity(outer * sz * inner);
            for o in 0..outer {
                let b = (o * d[axis] + off) * inner;
                v.extend_from_slice(&s[b..b + sz * inner]);
            }
            let mut od = d.to_vec();
            od[axis] = sz;
            outs.push(Tensor::from_vec(v, od)?);
            off += sz;
        }
        Ok(outs)
    })
}

fn k_concat(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let first = &c.inputs[0];
    let axis = c.n.axis("axis", first.rank())?;
    let d0 = first.dims().to_vec();
    let mut total = 0;
    for x in &c.inputs {
        let ok = x.rank() == d0.len() && x.dims().iter().zip(&d0).enumerate().all(|(i, (a, b))| i == axis || a == b);
        if !ok {
            return Err(c.n.shape_err(format!("cannot concatenate {} with {} along axis {axis}", first.shape(), x.shape())));
        }
        total += x.dims()[axis];
    }
    let outer: usize = d0[..axis].iter().product();
    let inner: usize = d0[axis + 1..].iter().product();
    let mut od = d0.clone();
    od[axis] = total;
    with_any!(first.dtype(), T => {
        let mut v: Vec<T> = Vec::with_capacity(outer * total * inner);
        let slices = c.inputs.iter().map(|x| x.as_slice::<T>()).collect::<Result<Vec<_>>>()?;
        for o in 0..outer {
            for (x, s) in c.inputs.iter().zip(&slices) {
                let len = x.dims()[axis] * inner;
                v.extend_from_slice(&s[o * len..(o + 1) * len]);
            }
        }
        Ok(vec![Tensor::from_vec(v, od)?])
    })
}

fn infer_concat(c: &InferCtx) -> Result<Vec<TensorType>> {
    let d = super::same_dtype(c, &[])?;
    let first = &c.inputs[0].shape;
    let axis = c.n.axis("axis", first.rank())?;
    let mut out: Vec<Option<usize>> = first.dims().to_vec();
    out[axis] = Some(0);
    for t in c.inputs {
        let s = &t.shape;
        if s.rank() != first.rank() {
            return Err(c.n.shape_err(format!("cannot concatenate {first} with {s}: ranks differ")));
        }
        for i in 0..s.rank() {
            if i == axis {
                out[i] = match (out[i], s.dims()[i]) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
            } else {
                match (out[i], s.dims()[i]) {
                    (Some(a), Some(b)) if a != b => {
                        return Err(c.n.shape_err(format!("cannot concatenate {first} with {s} along axis {axis}")));
                    }
                    (None, b) => out[i] = b,
                    _ => {}
                }
            }
        }
    }
    Ok(vec![TensorType { dtype: d, shape: PartialShape::new(out) }])
}

fn slice_bounds(c: &KernelCtx, dims: &[usize]) -> Result<(Vec<usize>, Vec<usize>)> {
    let b = c.n.ints("begin")?;
    let s = c.n.ints("size")?;
    if b.len() != dims.len() || s.len() != dims.len() {
        return Err(c.n.shape_err(format!("begin {b:?} and size {s:?} must both have rank {}", dims.len())));
    }
    let mut begin = Vec::new();
    let mut size = Vec::new();
    for i in 0..dims.len() {
        let bi = b[i].max(0) as usize;
        let si = if s[i] < 0 { dims[i].saturating_sub(bi) } else { s[i] as usize };
        if b[i] < 0 || bi + si > dims[i] {
            return Err(c.n.shape_err(format!("slice begin {b:?} size {s:?} out of bounds for {dims:?}")));
        }
        begin.push(bi);
        size.push(si);
    }
    Ok((begin, size))
}

/// Copies the box `begin..begin+size` of `x` out (or, with `paste`, into a zero tensor of `dims`).
fn copy_box<T: Element>(x: &[T], dims: &[usize], begin: &[usize], size: &[usize], paste: bool) -> Vec<T> {
    let r = dims.len();
    let st = Shape::new(dims.to_vec()).strides();
    let n_box: usize = size.iter().product();
    let mut out = if paste { vec![T::default(); dims.iter().product()] } else { Vec::with_capacity(n_box) };
    if n_box == 0 {
        return out;
    }
    if r == 0 {
        return if paste { x.to_vec() } else { x.to_vec() };
    }
    let last = size[r - 1];
    let rows = n_box / last;
    let mut idx = vec![0usize; r];
    let mut k = 0;
    for _ in 0..rows {
        let base: usize = (0..r).map(|d| (begin[d] + idx[d]) * st[d]).sum();
        if paste {
            out[base..base + last].copy_from_slice(&x[k..k + last]);
            k += last;
        } else {
            out.extend_from_slice(&x[base..base + last]);
        }
        for d in (0..r - 1).rev() {
            idx[d] += 1;
            if idx[d] < size[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

fn index_vec(c: &KernelCtx, t: &Tensor) -> Result<Vec<i64>> {
    match t.dtype() {
        DType::I32 => Ok(t.as_slice::<i32>()?.iter().map(|&v| v as i64).collect()),
        DType::I64 => Ok(t.to_vec::<i64>()?),
        d => Err(c.n.dtype_err(format!("indices must be i32 or i64, got {d}"))),
    }
}

fn k_gather(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (p, ind) = (&c.inputs[0], &c.inputs[1]);
    let idx = index_vec(c, ind)?;
    let rows = p.dims()[0];
    let row: usize = p.dims()[1..].iter().product();
    let mut od = ind.dims().to_vec();
    od.extend_from_slice(&p.dims()[1..]);
    with_any!(p.dtype(), T => {
        let s = p.as_slice::<T>()?;
        let mut v = Vec::with_capacity(idx.len() * row);
        for &i in &idx {
            if i < 0 || i as usize >= rows {
                return Err(c.n.kernel_err(format!("index {i} out of range for {} rows of params {}", rows, p.shape())));
            }
            let i = i as usize;
            v.extend_from_slice(&s[i * row..(i + 1) * row]);
        }
        Ok(vec![Tensor::from_vec(v, od)?])
    })
}

/// GatherGrad(params, indices, g): dense gradient of Gather w.r.t. params.
fn k_gather_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (p, ind, g) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let idx = index_vec(c, ind)?;
    let rows = p.dims()[0];
    let row: usize = p.dims()[1..].iter().product();
    if g.num_elements() != idx.len() * row {
        return Err(c.n.shape_err(format!("gradient {} does not match {} indices of rows {}", g.shape(), idx.len(), row)));
    }
    super::with_float!(c, g.dtype(), T => {
        let gs = g.as_slice::<T>()?;
        let mut v = vec![T::default(); p.num_elements()];
        for (k, &i) in idx.iter().enumerate() {
            if i < 0 || i as usize >= rows {
                return Err(c.n.kernel_err(format!("index {i} out of range for {rows} rows")));
            }
            let i = i as usize;
            for (d, &s) in v[i * row..(i + 1) * row].iter_mut().zip(&gs[k * row..(k + 1) * row]) {
                *d += s;
            }
        }
        Ok(vec![Tensor::from_vec(v, p.shape().clone())?])
    })
}

fn reshape_like(g: &Graph, x: &Output, like: &Output) -> Result<Output> {
    g.build1("ReshapeLike", vec![x.clone(), like.clone()], attrs! {})
}

pub(crate) fn register(r: &mut Registry) {
    register_shapes(r);
    register_concat_split(r);
    register_dims(r);
    register_gather(r);
}

/// Reshape, ReshapeLike, Transpose: views and layouts.
fn register_shapes(r: &mut Registry) {
    r.def("Reshape", 1, Some(1), infer_reshape).views().grad(|c| Ok(vec![Some(reshape_like(c.g, &c.grads[0], &c.inputs[0])?)]));
    r.cpu("Reshape", &[], |c| {
        let x = &c.inputs[0];
        let s = resolve_shape(c, c.n.ints("shape")?, x.num_elements(), x.shape())?;
        Ok(vec![x.reshape(s)?])
    });
    r.def("ReshapeLike", 2, Some(2), |c| {
        let (a, b) = (&c.inputs[0].shape, &c.inputs[1].shape);
        if let (Some(x), Some(y)) = (a.num_elements(), b.num_elements())
            && x != y
        {
            return Err(c.n.shape_err(format!("cannot reshape {a} into {b}")));
        }
        Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: b.clone() }])
    })
    .views()
    .grad(|c| Ok(vec![Some(reshape_like(c.g, &c.grads[0], &c.inputs[0])?), None]));
    r.cpu("ReshapeLike", &[], |c| {
        let (x, like) = (&c.inputs[0], &c.inputs[1]);
        x.reshape(like.shape().clone()).map(|t| vec![t]).map_err(|_| c.n.shape_err(format!("cannot reshape {} into {}", x.shape(), like.shape())))
    });

    r.def("Transpose", 1, Some(1), |c| {
        let p = perm_attr(c)?;
        let d = c.inputs[0].shape.dims();
        Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: PartialShape::new(p.iter().map(|&i| d[i]).collect()) }])
    })
    .flops(super::flops_per_output)
    .grad(|c| {
        let p = c.n.ints("perm")?;
        let r = p.len();
        let mut inv = vec![0i64; r];
        for (i, &a) in p.iter().enumerate() {
            inv[norm_axis(a, r).unwrap_or(0)] = i as i64;
        }
        Ok(vec![Some(c.g.transpose(&c.grads[0], &inv)?)])
    });
    r.cpu("Transpose", &[], |c| {
        let x = &c.inputs[0];
        let r = x.rank();
        let p: Vec<usize> = c.n.ints("perm")?.iter().map(|&a| norm_axis(a, r).unwrap_or(0)).collect();
        let od: Vec<usize> = p.iter().map(|&i| x.dims()[i]).collect();
        with_any!(x.dtype(), T => Ok(vec![Tensor::from_vec(permute(x.as_slice::<T>()?, x.dims(), &p), od)?]))
    });

}

/// Concat, Split and Slice, with their gradients.
fn register_concat_split(r: &mut Registry) {
    r.def("Concat", 1, None, infer_concat).flops(super::flops_per_output).grad(|c| {
        let mut ins = vec![c.grads[0].clone()];
        ins.extend(c.inputs.iter().cloned());
        let outs = c.g.op("ConcatGrad").attr("axis", AttrValue::Int(c.n.int("axis")?));
        let outs = ins.into_iter().fold(outs, |b, x| b.input(x)).build_all()?;
        Ok(outs.into_iter().map(Some).collect())
    });
    r.cpu("Concat", &[], k_concat);
    r.def("ConcatGrad", 2, None, |c| {
        let g = &c.inputs[0];
        Ok(c.inputs[1..].iter().map(|t| TensorType { dtype: g.dtype, shape: t.shape.clone() }).collect())
    })
    .flops(super::flops_per_output);
    r.cpu("ConcatGrad", &[], |c| {
        let g = &c.inputs[0];
        let axis = c.n.axis("axis", g.rank())?;
        let sizes: Vec<usize> = c.inputs[1..].iter().map(|t| t.dims().get(axis).copied().unwrap_or(0)).collect();
        split_sizes(c, g, axis, &sizes)
    });

    r.def("Split", 1, Some(1), |c| {
        let x = &c.inputs[0];
        let axis = c.n.axis("axis", x.shape.rank())?;
        let n = c.n.int("num_split")?;
        if n <= 0 {
            return Err(c.n.attr_err("num_split", "must be positive"));
        }
        let n = n as usize;
        let mut d = x.shape.dims().to_vec();
        if d[axis].is_none() && n > MAX_OUTPUTS {
            return Err(c.n.attr_err("num_split", format!("{n} outputs is more than a node may have ({MAX_OUTPUTS})")));
        }
        if let Some(k) = d[axis] {
            if k % n != 0 {
                return Err(c.n.shape_err(format!("dimension {axis} of {} is not divisible into {n} pieces", x.shape)));
            }
            d[axis] = Some(k / n);
        }
        Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(d) }; n])
    })
    .flops(super::flops_per_output)
    .grad(|c| Ok(vec![Some(c.g.concat(&c.grads.iter().collect::<Vec<_>>(), c.n.int("axis")?)?)]));
    r.cpu("Split", &[], |c| {
        let x = &c.inputs[0];
        let axis = c.n.axis("axis", x.rank())?;
        let n = c.n.int("num_split")? as usize;
        if x.dims()[axis] % n != 0 {
            return Err(c.n.shape_err(format!("dimension {axis} of {} is not divisible into {n} pieces", x.shape())));
        }
        split_sizes(c, x, axis, &vec![x.dims()[axis] / n; n])
    });

    r.def("Slice", 1, Some(1), |c| {
        let x = &c.inputs[0];
        let b = c.n.ints("begin")?;
        let s = c.n.ints("size")?;
        if b.len() != x.shape.rank() || s.len() != x.shape.rank() {
            return Err(c.n.shape_err(format!("begin {b:?} and size {s:?} must both have rank {} (input {})", x.shape.rank(), x.shape)));
        }
        let mut d = Vec::new();
        for i in 0..b.len() {
            let dim = x.shape.dims()[i];
            if b[i] < 0 || dim.is_some_and(|k| b[i] as usize + s[i].max(0) as usize > k) {
                return Err(c.n.shape_err(format!("slice begin {b:?} size {s:?} out of bounds for {}", x.shape)));
            }
            d.push(if s[i] >= 0 { Some(s[i] as usize) } else { dim.map(|k| k - b[i] as usize) });
        }
        Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(d) }])
    })
    .flops(super::flops_per_output)
    .grad(|c| {
        let g = c.g.build1("SliceGrad", vec![c.grads[0].clone(), c.inputs[0].clone()], attrs! {"begin" => AttrValue::Ints(c.n.ints("begin")?.to_vec())})?;
        Ok(vec![Some(g)])
    });
    r.cpu("Slice", &[], |c| {
        let x = &c.inputs[0];
        let (b, s) = slice_bounds(c, x.dims())?;
        with_any!(x.dtype(), T => Ok(vec![Tensor::from_vec(copy_box(x.as_slice::<T>()?, x.dims(), &b, &s, false), s.clone())?]))
    });
    r.def("SliceGrad", 2, Some(2), |c| Ok(vec![TensorType { dtype: c.inputs[0].dtype, shape: c.inputs[1].shape.clone() }]))
        .flops(super::flops_per_output);
    r.cpu("SliceGrad", &[], |c| {
        let (g, x) = (&c.inputs[0], &c.inputs[1]);
        let b: Vec<usize> = c.n.ints("begin")?.iter().map(|&v| v.max(0) as usize).collect();
        let s = g.dims().to_vec();
        if b.len() != x.rank() || s.len() != x.rank() || (0..b.len()).any(|i| b[i] + s[i] > x.dims()[i]) {
            return Err(c.n.shape_err(format!("gradient {} at {b:?} does not fit in {}", g.shape(), x.shape())));
        }
        with_any!(g.dtype(), T => Ok(vec![Tensor::from_vec(copy_box(g.as_slice::<T>()?, x.dims(), &b, &s, true), x.shape().clone())?]))
    });

}

/// ExpandDims and Squeeze.
fn register_dims(r: &mut Registry) {
    r.def("ExpandDims", 1, Some(1), |c| {
        let x = &c.inputs[0];
        let axis = c.n.axis("axis", x.shape.rank() + 1)?;
        let mut d = x.shape.dims().to_vec();
        d.insert(axis, Some(1));
        Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(d) }])
    })
    .views()
    .grad(|c| Ok(vec![Some(reshape_like(c.g, &c.grads[0], &c.inputs[0])?)]));
    r.cpu("ExpandDims", &[], |c| {
        let x = &c.inputs[0];
        let axis = c.n.axis("axis", x.rank() + 1)?;
        let mut d = x.dims().to_vec();
        d.insert(axis, 1);
        Ok(vec![x.reshape(d)?])
    });

    r.def("Squeeze", 1, Some(1), |c| {
        let x = &c.inputs[0];
        let axes = c.n.axes("axes", x.shape.rank())?;
        let mut d = Vec::new();
        for (i, &k) in x.shape.dims().iter().enumerate() {
            if axes.contains(&i) {
                if k.is_some_and(|k| k != 1) {
                    return Err(c.n.shape_err(format!("cannot squeeze dimension {i} of {}: it is not 1", x.shape)));
                }
            } else {
                d.push(k);
            }
        }
        Ok(vec![TensorType { dtype: x.dtype, shape: PartialShape::new(d) }])
    })
    .views()
    .grad(|c| Ok(vec![Some(reshape_like(c.g, &c.grads[0], &c.inputs[0])?)]));
    r.cpu("Squeeze", &[], |c| {
        let x = &c.inputs[0];
        let axes = c.n.axes("axes", x.rank())?;
        let mut d = Vec::new();
        for (i, &k) in x.dims().iter().enumerate() {
            if axes.contains(&i) {
                if k != 1 {
                    return Err(c.n.shape_err(format!("cannot squeeze dimension {i} of {}: it is not 1", x.shape())));
                }
            } else {
                d.push(k);
            }
        }
        Ok(vec![x.reshape(d)?])
    });

}

/// Gather and its gradient.
fn register_gather(r: &mut Registry) {
    r.def("Gather", 2, Some(2), |c| {
        let (p, i) = (&c.inputs[0], &c.inputs[1]);
        if !matches!(i.dtype, DType::I32 | DType::I64) {
            return Err(c.n.dtype_err(format!("indices must be i32 or i64, got {}", i.dtype)));
        }
        if p.shape.rank() == 0 {
            return Err(c.n.shape_err("params must have rank >= 1"));
        }
        let mut d = i.shape.dims().to_vec();
        d.extend_from_slice(&p.shape.dims()[1..]);
        Ok(vec![TensorType { dtype: p.dtype, shape: PartialShape::new(d) }])
    })
    .flops(super::flops_per_output)
    .grad(|c| {
        let g = c.g.build1("GatherGrad", vec![c.inputs[0].clone(), c.inputs[1].clone(), c.grads[0].clone()], attrs! {})?;
        Ok(vec![Some(g), None])
    });
    r.cpu("Gather", &[], k_gather);
    r.def("GatherGrad", 3, Some(3), |c| Ok(vec![TensorType { dtype: c.inputs[2].dtype, shape: c.inputs[0].shape.clone() }]))
        .flops(super::flops_per_input);
    r.cpu("GatherGrad", super::FLOATS, k_gather_grad);
}

impl Graph {
    /// Reshape to `shape` (one entry may be -1: inferred). Never copies.
    pub fn reshape(&self, x: impl IntoOutput, shape: &[i64]) -> Result<Output> {
        self.build1("Reshape", vec![x.into_output()?], attrs! {"shape" => AttrValue::Ints(shape.to_vec())})
    }
    /// Permutes the axes: output axis i is input axis `perm[i]`.
    pub fn transpose(&self, x: impl IntoOutput, perm: &[i64]) -> Result<Output> {
        self.build1("Transpose", vec![x.into_output()?], attrs! {"perm" => AttrValue::Ints(perm.to_vec())})
    }
    /// Joins tensors along `axis`.
    pub fn concat(&self, xs: &[&Output], axis: i64) -> Result<Output> {
        self.build1("Concat", xs.iter().map(|&x| x.clone()).collect(), attrs! {"axis" => AttrValue::Int(axis)})
    }
    /// Splits `x` into `num` equal pieces along `axis`.
    pub fn split(&self, x: impl IntoOutput, num: usize, axis: i64) -> Result<Vec<Output>> {
        self.op("Split")
            .input(x)
            .attr("axis", AttrValue::Int(axis))
            .attr("num_split", AttrValue::Int(num as i64))
            .build_all()
    }
    /// The box starting at `begin` of extent `size` (-1 = to the end).
    pub fn slice(&self, x: impl IntoOutput, begin: &[i64], size: &[i64]) -> Result<Output> {
        self.build1(
            "Slice",
            vec![x.into_output()?],
            attrs! {"begin" => AttrValue::Ints(begin.to_vec()), "size" => AttrValue::Ints(size.to_vec())},
        )
    }
    /// Inserts a dimension of 1 at `axis`.
    pub fn expand_dims(&self, x: impl IntoOutput, axis: i64) -> Result<Output> {
        self.build1("ExpandDims", vec![x.into_output()?], attrs! {"axis" => AttrValue::Int(axis)})
    }
    /// Removes the given dimensions of size 1 (empty = every dimension known to be 1).
    pub fn squeeze(&self, x: impl IntoOutput, axes: &[i64]) -> Result<Output> {
        let x = x.into_output()?;
        let axes: Vec<i64> = if axes.is_empty() {
            x.shape().dims().iter().enumerate().filter(|(_, d)| **d == Some(1)).map(|(i, _)| i as i64).collect()
        } else {
            axes.to_vec()
        };
        self.build1("Squeeze", vec![x], attrs! {"axes" => AttrValue::Ints(axes)})
    }
    /// Rows of `params` picked by integer `indices`.
    pub fn gather(&self, params: impl IntoOutput, indices: impl IntoOutput) -> Result<Output> {
        let p = params.into_output()?;
        let i = indices.into_output()?;
        self.build1("Gather", vec![p, i], attrs! {})
    }
}

#[cfg(test)]
mod tests {
    use super::permute;

    /// Output element by element: unravel the output index, read the input
    /// at the permuted index.
    fn naive(x: &[i32], dims: &[usize], perm: &[usize]) -> Vec<i32> {
        let out_dims: Vec<usize> = perm.iter().map(|&p| dims[p]).collect();
        (0..x.len())
            .map(|mut flat| {
                let mut oi = vec![0; dims.len()];
                for d in (0..dims.len()).rev() {
                    oi[d] = flat % out_dims[d];
                    flat /= out_dims[d];
                }
                let mut ii = vec![0; dims.len()];
                for (d, &p) in perm.iter().enumerate() {
                    ii[p] = oi[d];
                }
                ii.iter().zip(dims).fold(0, |acc, (&i, &n)| acc * n + i)
            })
            .map(|i| x[i])
            .collect()
    }

    #[test]
    fn tiled_permute_equals_the_element_by_element_definition() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[256, 512], &[1, 0]),
            (&[33, 70], &[1, 0]),
            (&[1, 5], &[1, 0]),
            (&[3, 40, 37], &[0, 2, 1]),
            (&[3, 40, 37], &[2, 0, 1]),
            (&[3, 40, 37], &[1, 0, 2]),
            (&[2, 3, 35, 4], &[0, 2, 1, 3]),
            (&[2, 3, 35, 34], &[3, 1, 0, 2]),
            (&[7], &[0]),
        ];
        for &(dims, perm) in cases {
            let n: usize = dims.iter().product();
            let x: Vec<i32> = (0..n as i32).collect();
            assert_eq!(permute(&x, dims, perm), naive(&x, dims, perm), "dims {dims:?} perm {perm:?}");
        }
    }
}
