//! Batch normalization in training mode as one op each way, as
//! TensorFlow's `FusedBatchNorm` / `FusedBatchNormGrad` (and cuDNN's
//! kernels) run it: statistics over every axis but the last (channels last,
//! NHWC), biased variance, `y = (x - mean) / sqrt(var + epsilon) * scale +
//! offset`. Built from primitive ops the same layer takes about seven passes
//! over each activation forward and as many backward; a real H100 runs the
//! fused kernels in a third of that time (docs/logs/validation.md, "Against a real GPU").
//!
//! Outputs: `y`, `batch_mean` [C], `batch_variance` [C]. The gradient takes
//! what reaches the statistics into account too (TensorFlow drops it): when
//! only `y` is differentiated it is the one `FusedBatchNormGrad` node.

use super::{FLOATS, GradCtx, InferCtx, KernelCtx, Registry, same_dtype, with_float};
use crate::error::Result;
use crate::graph::{AttrValue, Graph, IntoOutput, Output};
use crate::kernels::cpu::Float;
use crate::tensor::{PartialShape, Tensor, TensorType};

/// Channels of `x` (its last dimension), with `params` naming inputs that
/// must be `[C]`.
fn infer_channels(c: &InferCtx, x: usize, params: &[usize]) -> Result<Option<usize>> {
    let xs = &c.inputs[x].shape;
    if xs.rank() < 2 {
        return Err(c.n.shape_err(format!("input must be [..., channels] with rank >= 2, got {xs}")));
    }
    let channels = xs.dims().last().copied().flatten();
    for &i in params {
        let s = &c.inputs[i].shape;
        let ok = s.rank() == 1 && (channels.is_none() || s.dims()[0].is_none() || s.dims()[0] == channels);
        if !ok {
            return Err(c.n.shape_err(format!("input {i} must be [channels] = [{}], got {s}", channels.map_or("?".into(), |c| c.to_string()))));
        }
    }
    Ok(channels)
}

/// `epsilon`, which must be finite and not negative (also layer norm's).
pub(super) fn epsilon(c: &InferCtx) -> Result<f64> {
    let e = c.n.float("epsilon")?;
    if !(e >= 0.0 && e.is_finite()) {
        return Err(c.n.attr_err("epsilon", format!("must be finite and not negative, got {e}")));
    }
    Ok(e)
}

fn outputs(c: &InferCtx, x: usize, channels: Option<usize>) -> Vec<TensorType> {
    let stat = TensorType { dtype: c.inputs[x].dtype, shape: PartialShape::new(vec![channels]) };
    vec![c.inputs[x].clone(), stat.clone(), stat]
}

/// Elements per channel and channels of a kernel's `x`.
fn rows_and_channels(c: &KernelCtx, x: &Tensor, params: &[usize]) -> Result<(usize, usize)> {
    let ch = match x.dims() {
        [.., c] if x.rank() >= 2 => *c,
        _ => return Err(c.n.shape_err(format!("input must have rank >= 2, got {:?}", x.dims()))),
    };
    for &i in params {
        if c.inputs[i].dims() != [ch] {
            return Err(c.n.shape_err(format!("input {i} must be [{ch}], got {:?}", c.inputs[i].dims())));
        }
    }
    let rows = if ch == 0 { 0 } else { x.num_elements() / ch };
    if rows == 0 {
        return Err(c.n.shape_err(format!("no elements to normalize over in {:?}", x.dims())));
    }
    Ok((rows, ch))
}

/// A per-channel figure accumulated in f64, as a `[C]` tensor of `T`.
fn per_channel<T: Float + crate::tensor::Element>(v: Vec<f64>) -> Result<Tensor> {
    let n = v.len();
    Tensor::from_vec(v.into_iter().map(<T as Float>::from_f64).collect::<Vec<T>>(), [n])
}

/// Per-channel mean and biased variance, accumulated in f64.
fn moments<T: Float>(x: &[T], ch: usize, rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut mean = vec![0f64; ch];
    for row in x.chunks_exact(ch) {
        for (m, &v) in mean.iter_mut().zip(row) {
            *m += v.to_f64();
        }
    }
    mean.iter_mut().for_each(|m| *m /= rows as f64);
    let mut var = vec![0f64; ch];
    for row in x.chunks_exact(ch) {
        for ((s, &v), &m) in var.iter_mut().zip(row).zip(&mean) {
            let d = v.to_f64() - m;
            *s += d * d;
        }
    }
    var.iter_mut().for_each(|s| *s /= rows as f64);
    (mean, var)
}

fn k_fused_batch_norm(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let eps = c.n.float("epsilon")?;
    let x = &c.inputs[0];
    let (rows, ch) = rows_and_channels(c, x, &[1, 2])?;
    with_float!(c, x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        let (scale, offset) = (c.inputs[1].as_slice::<T>()?, c.inputs[2].as_slice::<T>()?);
        let (mean, var) = moments(xs, ch, rows);
        // y = x * a + b per channel.
        let a: Vec<T> = (0..ch).map(|k| T::from_f64(scale[k].to_f64() / (var[k] + eps).sqrt())).collect();
        let b: Vec<T> = (0..ch).map(|k| T::from_f64(offset[k].to_f64() - mean[k] * a[k].to_f64())).collect();
        let mut y = vec![T::ZERO; xs.len()];
        for (yr, xr) in y.chunks_exact_mut(ch).zip(xs.chunks_exact(ch)) {
            for k in 0..ch {
                yr[k] = xr[k] * a[k] + b[k];
            }
        }
        Ok(vec![Tensor::from_vec(y, x.shape().clone())?, per_channel::<T>(mean)?, per_channel::<T>(var)?])
    })
}

fn k_fused_batch_norm_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let eps = c.n.float("epsilon")?;
    let (dy, x) = (&c.inputs[0], &c.inputs[1]);
    if dy.dims() != x.dims() {
        return Err(c.n.shape_err(format!("gradient {:?} must match the input {:?}", dy.dims(), x.dims())));
    }
    let (rows, ch) = rows_and_channels(c, x, &[2, 3, 4])?;
    with_float!(c, x.dtype(), T => {
        let (dys, xs) = (dy.as_slice::<T>()?, x.as_slice::<T>()?);
        let (scale, mean, var) = (c.inputs[2].as_slice::<T>()?, c.inputs[3].as_slice::<T>()?, c.inputs[4].as_slice::<T>()?);
        let inv: Vec<f64> = (0..ch).map(|k| 1.0 / (var[k].to_f64() + eps).sqrt()).collect();
        // Sums of dy and of dy * xhat per channel.
        let (mut sum_dy, mut sum_dy_xhat) = (vec![0f64; ch], vec![0f64; ch]);
        for (dr, xr) in dys.chunks_exact(ch).zip(xs.chunks_exact(ch)) {
            for k in 0..ch {
                let d = dr[k].to_f64();
                sum_dy[k] += d;
                sum_dy_xhat[k] += d * (xr[k].to_f64() - mean[k].to_f64()) * inv[k];
            }
        }
        // dx = scale * inv * (dy - mean(dy) - xhat * mean(dy * xhat)).
        let m = rows as f64;
        let mut dx = vec![T::ZERO; xs.len()];
        for ((o, dr), xr) in dx.chunks_exact_mut(ch).zip(dys.chunks_exact(ch)).zip(xs.chunks_exact(ch)) {
            for k in 0..ch {
                let xhat = (xr[k].to_f64() - mean[k].to_f64()) * inv[k];
                let v = scale[k].to_f64() * inv[k] * (dr[k].to_f64() - sum_dy[k] / m - xhat * sum_dy_xhat[k] / m);
                o[k] = T::from_f64(v);
            }
        }
        Ok(vec![Tensor::from_vec(dx, x.shape().clone())?, per_channel::<T>(sum_dy_xhat)?, per_channel::<T>(sum_dy)?])
    })
}

/// The gradient of a fused normalization `(x, scale, offset) -> (y, mean,
/// var)`: one `grad_op` node `(dy, x, scale, mean, var) -> (dx, dscale,
/// doffset)`, plus, where the statistics are differentiated too, what
/// reaches them: `through(x, mean, d mean, d var)`, added to dx.
pub(super) fn fused_grad(
    c: &GradCtx,
    grad_op: &str,
    through: impl Fn(&Output, &Output, &Output, &Output) -> Result<Output>,
) -> Result<Vec<Option<Output>>> {
    let eps = c.n.float("epsilon")?;
    let (x, scale) = (&c.inputs[0], &c.inputs[1]);
    let (mean, var) = (&c.outputs[1], &c.outputs[2]);
    let g = c
        .g
        .op(grad_op)
        .input(&c.grads[0])
        .input(x)
        .input(scale)
        .input(mean)
        .input(var)
        .attr("epsilon", AttrValue::Float(eps))
        .build_all()?;
    let mut dx = g[0].clone();
    let (gm, gv) = (&c.grads[1], &c.grads[2]);
    if gm.op() != "ZerosLike" || gv.op() != "ZerosLike" {
        dx = c.g.add(&dx, through(x, mean, gm, gv)?)?;
    }
    Ok(vec![Some(dx), Some(g[1].clone()), Some(g[2].clone())])
}

pub(crate) fn register(r: &mut Registry) {
    r.def("FusedBatchNorm", 3, Some(3), |c| {
        same_dtype(c, FLOATS)?;
        epsilon(c)?;
        let channels = infer_channels(c, 0, &[1, 2])?;
        Ok(outputs(c, 0, channels))
    })
    // Per element: the mean (1), the centred square (3), then x * a + b (2).
    .flops(|c| 6.0 * c.inputs.first().map_or(0, |(_, s)| s.num_elements()) as f64)
    .grad(|c| {
        fused_grad(c, "FusedBatchNormGrad", |x, mean, gm, gv| {
            // Per channel: d mean / dx = 1 / M, d var / dx = 2 (x - mean) / M.
            let dims = x.shape();
            let m: Option<usize> = dims.dims()[..dims.rank().saturating_sub(1)].iter().try_fold(1usize, |a, d| d.map(|d| a * d));
            let m = m.ok_or_else(|| c.n.shape_err(format!("the gradient through the batch statistics needs a known shape, got {dims}")))?;
            let centered = c.g.sub(x, mean)?;
            let through = c.g.add(gm, c.g.mul(gv, (centered * 2.0)?)?)?;
            through * (1.0 / m as f64)
        })
    });
    r.cpu("FusedBatchNorm", FLOATS, k_fused_batch_norm);
    r.def("FusedBatchNormGrad", 5, Some(5), |c| {
        same_dtype(c, FLOATS)?;
        if !c.inputs[0].shape.compatible(&c.inputs[1].shape) {
            return Err(c.n.shape_err(format!("gradient {} must match the input {}", c.inputs[0].shape, c.inputs[1].shape)));
        }
        epsilon(c)?;
        let channels = infer_channels(c, 1, &[2, 3, 4])?;
        Ok(outputs(c, 1, channels))
    })
    // Per element: two sums (3), then dx (6).
    .flops(|c| 9.0 * c.inputs.first().map_or(0, |(_, s)| s.num_elements()) as f64);
    r.cpu("FusedBatchNormGrad", FLOATS, k_fused_batch_norm_grad);
}

impl Graph {
    /// Batch normalization of `x` [..., C] over every axis but the last, in
    /// one op: returns `y`, the batch mean and the batch (biased) variance.
    pub fn fused_batch_norm(&self, x: impl IntoOutput, scale: impl IntoOutput, offset: impl IntoOutput, epsilon: f64) -> Result<(Output, Output, Output)> {
        let o = self
            .op("FusedBatchNorm")
            .input(x.into_output()?)
            .input(scale.into_output()?)
            .input(offset.into_output()?)
            .attr("epsilon", AttrValue::Float(epsilon))
            .build_all()?;
        Ok((o[0].clone(), o[1].clone(), o[2].clone()))
    }
}
