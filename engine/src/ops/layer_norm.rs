//! Layer normalization as one op each way, as PyTorch's `native_layer_norm`
//! (and the fused kernels of Apex, cuDNN and XLA) run it: statistics per row
//! over the last axis, biased variance, `y = (x - mean) / sqrt(var +
//! epsilon) * gamma + beta` with `gamma` and `beta` of the last axis's size.
//! TensorFlow 1 built it from primitive ops (about nine passes over each
//! activation forward, more backward); the real GPUs this project is checked
//! against run one kernel each way (docs/logs/validation.md, "Against a real GPU").
//!
//! Outputs: `y`, `mean` and `variance`, each of `x`'s shape without its last
//! axis. The gradient takes what reaches the statistics into account too:
//! when only `y` is differentiated it is the one `LayerNormGrad` node.

use super::batch_norm::{epsilon, fused_grad};
use super::{FLOATS, InferCtx, KernelCtx, Registry, same_dtype, with_float};
use crate::error::Result;
use crate::graph::{AttrValue, Graph, IntoOutput, Output};
use crate::kernels::cpu::Float;
use crate::kernels::cpu::reduce::fold8;
use crate::tensor::{PartialShape, Tensor, TensorType};

/// Features of `x` (its last dimension), with `params` naming inputs that
/// must be `[features]` and `stats` naming inputs that must be `x`'s shape
/// without its last axis.
fn infer_features(c: &InferCtx, x: usize, params: &[usize], stats: &[usize]) -> Result<Option<usize>> {
    let xs = &c.inputs[x].shape;
    if xs.rank() < 1 {
        return Err(c.n.shape_err(format!("input must be [..., features] with rank >= 1, got {xs}")));
    }
    let features = xs.dims().last().copied().flatten();
    for &i in params {
        let s = &c.inputs[i].shape;
        let ok = s.rank() == 1 && (features.is_none() || s.dims()[0].is_none() || s.dims()[0] == features);
        if !ok {
            return Err(c.n.shape_err(format!("input {i} must be [features] = [{}], got {s}", features.map_or("?".into(), |f| f.to_string()))));
        }
    }
    let rows = stat_shape(xs);
    for &i in stats {
        if !c.inputs[i].shape.compatible(&rows) {
            return Err(c.n.shape_err(format!("input {i} must be the input's shape without its last axis, {rows}, got {}", c.inputs[i].shape)));
        }
    }
    Ok(features)
}

fn stat_shape(x: &PartialShape) -> PartialShape {
    PartialShape::new(x.dims()[..x.rank().saturating_sub(1)].to_vec())
}

/// Rows and features of a kernel's `x`, checking `params` are `[features]`
/// and `stats` hold one value per row.
fn rows_and_features(c: &KernelCtx, x: &Tensor, params: &[usize], stats: &[usize]) -> Result<(usize, usize)> {
    let Some(&d) = x.dims().last() else {
        return Err(c.n.shape_err("input must have rank >= 1, got a scalar".to_string()));
    };
    if d == 0 || x.num_elements() == 0 {
        return Err(c.n.shape_err(format!("no elements to normalize over in {:?}", x.dims())));
    }
    for &i in params {
        if c.inputs[i].dims() != [d] {
            return Err(c.n.shape_err(format!("input {i} must be [{d}], got {:?}", c.inputs[i].dims())));
        }
    }
    let leading = &x.dims()[..x.rank() - 1];
    for &i in stats {
        if c.inputs[i].dims() != leading {
            return Err(c.n.shape_err(format!("input {i} must be {leading:?}, got {:?}", c.inputs[i].dims())));
        }
    }
    Ok((x.num_elements() / d, d))
}

/// A per-row or per-feature figure accumulated in f64, as a tensor of `T`.
fn tensor_of<T: Float + crate::tensor::Element>(v: Vec<f64>, dims: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v.into_iter().map(<T as Float>::from_f64).collect::<Vec<T>>(), dims.to_vec())
}

fn k_layer_norm(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let eps = c.n.float("epsilon")?;
    let x = &c.inputs[0];
    let (rows, d) = rows_and_features(c, x, &[1, 2], &[])?;
    with_float!(c, x.dtype(), T => {
        let xs = x.as_slice::<T>()?;
        let (gamma, beta) = (c.inputs[1].as_slice::<T>()?, c.inputs[2].as_slice::<T>()?);
        let (gamma, beta): (Vec<f64>, Vec<f64>) = (gamma.iter().map(|v| v.to_f64()).collect(), beta.iter().map(|v| v.to_f64()).collect());
        let (mut mean, mut var) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
        let mut y = vec![T::ZERO; xs.len()];
        for (yr, xr) in y.chunks_exact_mut(d).zip(xs.chunks_exact(d)) {
            // The row sums in f64, in eight lanes (`fold8`), so they vectorize.
            let m = fold8(xr, 0.0, |v| v.to_f64(), |a, b| a + b) / d as f64;
            let v = fold8(xr, 0.0, |v| (v.to_f64() - m) * (v.to_f64() - m), |a, b| a + b) / d as f64;
            let inv = 1.0 / (v + eps).sqrt();
            for (((y, x), g), b) in yr.iter_mut().zip(xr).zip(&gamma).zip(&beta) {
                *y = T::from_f64((x.to_f64() - m) * inv * g + b);
            }
            mean.push(m);
            var.push(v);
        }
        let leading = &x.dims()[..x.rank() - 1];
        Ok(vec![Tensor::from_vec(y, x.shape().clone())?, tensor_of::<T>(mean, leading)?, tensor_of::<T>(var, leading)?])
    })
}

fn k_layer_norm_grad(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let eps = c.n.float("epsilon")?;
    let (dy, x) = (&c.inputs[0], &c.inputs[1]);
    if dy.dims() != x.dims() {
        return Err(c.n.shape_err(format!("gradient {:?} must match the input {:?}", dy.dims(), x.dims())));
    }
    let (_, d) = rows_and_features(c, x, &[2], &[3, 4])?;
    with_float!(c, x.dtype(), T => {
        let (dys, xs) = (dy.as_slice::<T>()?, x.as_slice::<T>()?);
        let (gamma, mean, var) = (c.inputs[2].as_slice::<T>()?, c.inputs[3].as_slice::<T>()?, c.inputs[4].as_slice::<T>()?);
        let gamma: Vec<f64> = gamma.iter().map(|v| v.to_f64()).collect();
        let (mut dgamma, mut dbeta) = (vec![0f64; d], vec![0f64; d]);
        let mut dx = vec![T::ZERO; xs.len()];
        let (mut xhat, mut g, mut gx) = (vec![0f64; d], vec![0f64; d], vec![0f64; d]);
        for (r, ((o, dr), xr)) in dx.chunks_exact_mut(d).zip(dys.chunks_exact(d)).zip(xs.chunks_exact(d)).enumerate() {
            let (m, inv) = (mean[r].to_f64(), 1.0 / (var[r].to_f64() + eps).sqrt());
            // With g = dy * gamma: dx = inv * (g - mean(g) - xhat * mean(g * xhat)).
            // Element-wise passes first, then the two row sums in eight
            // lanes (`fold8`): no loop carries a serial chain of adds.
            let (gamma, dgamma, dbeta, xhat, g, gx) = (&gamma[..d], &mut dgamma[..d], &mut dbeta[..d], &mut xhat[..d], &mut g[..d], &mut gx[..d]);
            for k in 0..d {
                let dyk = dr[k].to_f64();
                xhat[k] = (xr[k].to_f64() - m) * inv;
                g[k] = dyk * gamma[k];
                gx[k] = g[k] * xhat[k];
                dgamma[k] += dyk * xhat[k];
                dbeta[k] += dyk;
            }
            let id = |v: f64| v;
            let (mg, mgx) = (fold8(g, 0.0, id, |a, b| a + b) / d as f64, fold8(gx, 0.0, id, |a, b| a + b) / d as f64);
            for ((o, g), x) in o.iter_mut().zip(g.iter()).zip(xhat.iter()) {
                *o = T::from_f64(inv * (g - mg - x * mgx));
            }
        }
        Ok(vec![Tensor::from_vec(dx, x.shape().clone())?, tensor_of::<T>(dgamma, &[d])?, tensor_of::<T>(dbeta, &[d])?])
    })
}

fn elements(c: &super::CostCtx) -> f64 {
    c.inputs.first().map_or(0, |(_, s)| s.num_elements()) as f64
}

pub(crate) fn register(r: &mut Registry) {
    r.def("LayerNorm", 3, Some(3), |c| {
        same_dtype(c, FLOATS)?;
        epsilon(c)?;
        infer_features(c, 0, &[1, 2], &[])?;
        let stat = TensorType { dtype: c.inputs[0].dtype, shape: stat_shape(&c.inputs[0].shape) };
        Ok(vec![c.inputs[0].clone(), stat.clone(), stat])
    })
    // Per element: the mean (1), the centred square (3), then
    // (x - mean) * inv * gamma + beta (4).
    .flops(|c| 8.0 * elements(c))
    .grad(|c| {
        fused_grad(c, "LayerNormGrad", |x, mean, gm, gv| {
            // Per row: d mean / dx = 1 / D, d var / dx = 2 (x - mean) / D.
            let dims = x.shape();
            let d = dims.dims().last().copied().flatten();
            let d = d.ok_or_else(|| c.n.shape_err(format!("the gradient through the row statistics needs a known last axis, got {dims}")))?;
            let (gm, gv, mean) = (c.g.expand_dims(gm, -1)?, c.g.expand_dims(gv, -1)?, c.g.expand_dims(mean, -1)?);
            let centered = c.g.sub(x, &mean)?;
            let through = c.g.add(&gm, c.g.mul(&gv, (centered * 2.0)?)?)?;
            through * (1.0 / d as f64)
        })
    });
    r.cpu("LayerNorm", FLOATS, k_layer_norm);
    r.def("LayerNormGrad", 5, Some(5), |c| {
        same_dtype(c, FLOATS)?;
        if !c.inputs[0].shape.compatible(&c.inputs[1].shape) {
            return Err(c.n.shape_err(format!("gradient {} must match the input {}", c.inputs[0].shape, c.inputs[1].shape)));
        }
        epsilon(c)?;
        let features = infer_features(c, 1, &[2], &[3, 4])?;
        let param = TensorType { dtype: c.inputs[1].dtype, shape: PartialShape::new(vec![features]) };
        Ok(vec![c.inputs[1].clone(), param.clone(), param])
    })
    // Per element: xhat (2), the row sums and the parameter sums (6), then dx (4).
    .flops(|c| 12.0 * elements(c));
    r.cpu("LayerNormGrad", FLOATS, k_layer_norm_grad);
}

impl Graph {
    /// Layer normalization of `x` [..., D] over its last axis, in one op:
    /// returns `y`, the mean and the (biased) variance of each row.
    pub fn layer_norm(&self, x: impl IntoOutput, gamma: impl IntoOutput, beta: impl IntoOutput, epsilon: f64) -> Result<(Output, Output, Output)> {
        let o = self
            .op("LayerNorm")
            .input(x.into_output()?)
            .input(gamma.into_output()?)
            .input(beta.into_output()?)
            .attr("epsilon", AttrValue::Float(epsilon))
            .build_all()?;
        Ok((o[0].clone(), o[1].clone(), o[2].clone()))
    }
}
