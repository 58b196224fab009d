//! Matrix products: MatMul (rank 2, transpose flags) and BatchMatMul (rank
//! >= 3, equal leading batch dimensions, adjoint flags). Kernels go through
//! the GEMM crate in `kernels::cpu::matmul`.

use super::{FLOATS, InferCtx, KernelCtx, Registry, attrs, same_dtype, with_float};
use crate::graph::AttrValue;
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::TensorType;
use crate::kernels::cpu::{Product, batch_matmul, matmul};
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;

/// (m, k) of op(a) and (k, n) of op(b) from the last two dimensions.
fn mat_dims(d: &[Option<usize>], t: bool) -> (Option<usize>, Option<usize>) {
    let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
    if t { (c, r) } else { (r, c) }
}

fn infer_matmul(c: &InferCtx, batched: bool) -> Result<Vec<TensorType>> {
    let dt = same_dtype(c, FLOATS)?;
    let (ta_key, tb_key) = if batched { ("adj_x", "adj_y") } else { ("transpose_a", "transpose_b") };
    let (ta, tb) = (c.n.bool_or(ta_key, false)?, c.n.bool_or(tb_key, false)?);
    let (a, b) = (&c.inputs[0].shape, &c.inputs[1].shape);
    let ok_rank = if batched { a.rank() >= 3 && a.rank() == b.rank() } else { a.rank() == 2 && b.rank() == 2 };
    if !ok_rank {
        let want = if batched { "equal ranks >= 3" } else { "rank 2" };
        return Err(c.n.shape_err(format!("operands must have {want}, got {a} and {b}")));
    }
    let (m, ka) = mat_dims(a.dims(), ta);
    let (kb, n) = mat_dims(b.dims(), tb);
    if let (Some(x), Some(y)) = (ka, kb)
        && x != y
    {
        return Err(c.n.shape_err(format!(
            "inner dimensions differ: {a}{} x {b}{} ({x} vs {y})",
            if ta { "ᵀ" } else { "" },
            if tb { "ᵀ" } else { "" }
        )));
    }
    let mut out: Vec<Option<usize>> = Vec::new();
    if batched {
        for i in 0..a.rank() - 2 {
            out.push(match (a.dims()[i], b.dims()[i]) {
                (Some(x), Some(y)) if x != y => {
                    return Err(c.n.shape_err(format!("batch dimensions differ: {a} and {b}")));
                }
                (Some(x), _) | (None, Some(x)) => Some(x),
                _ => None,
            });
        }
    }
    out.push(m);
    out.push(n);
    Ok(vec![TensorType { dtype: dt, shape: PartialShape::new(out) }])
}

fn k_matmul(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    let (ta, tb) = (c.n.bool_or("transpose_a", false)?, c.n.bool_or("transpose_b", false)?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(c.n.shape_err(format!("operands must have rank 2, got {} and {}", a.shape(), b.shape())));
    }
    let (m, k) = if ta { (a.dims()[1], a.dims()[0]) } else { (a.dims()[0], a.dims()[1]) };
    let (k2, n) = if tb { (b.dims()[1], b.dims()[0]) } else { (b.dims()[0], b.dims()[1]) };
    if k != k2 {
        return Err(c.n.shape_err(format!("inner dimensions differ: {} x {} ({k} vs {k2})", a.shape(), b.shape())));
    }
    if Shape::new(vec![m, n]).checked_bytes(a.dtype()).is_none() {
        return Err(c.n.shape_err(format!("the product of {} and {} is larger than this machine can address", a.shape(), b.shape())));
    }
    with_float!(c, a.dtype(), T => {
        let mut out = c.overwritten_output::<T>(m * n);
        matmul(a.as_slice::<T>()?, b.as_slice::<T>()?, &mut out, Product::new(m, n, k).transposed(ta, tb), c.threads);
        Ok(vec![Tensor::from_vec(out, [m, n])?])
    })
}

fn k_batch_matmul(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (a, b) = (&c.inputs[0], &c.inputs[1]);
    let (ta, tb) = (c.n.bool_or("adj_x", false)?, c.n.bool_or("adj_y", false)?);
    let r = a.rank();
    if r < 3 || b.rank() != r || a.dims()[..r - 2] != b.dims()[..r - 2] {
        return Err(c.n.shape_err(format!("batch shapes differ: {} and {}", a.shape(), b.shape())));
    }
    let batch: usize = a.dims()[..r - 2].iter().product();
    let (ad, bd) = (&a.dims()[r - 2..], &b.dims()[r - 2..]);
    let (m, k) = if ta { (ad[1], ad[0]) } else { (ad[0], ad[1]) };
    let (k2, n) = if tb { (bd[1], bd[0]) } else { (bd[0], bd[1]) };
    if k != k2 {
        return Err(c.n.shape_err(format!("inner dimensions differ: {} x {} ({k} vs {k2})", a.shape(), b.shape())));
    }
    let mut od = a.dims()[..r - 2].to_vec();
    od.extend([m, n]);
    if Shape::new(od.clone()).checked_bytes(a.dtype()).is_none() {
        return Err(c.n.shape_err(format!("the product of {} and {} is larger than this machine can address", a.shape(), b.shape())));
    }
    with_float!(c, a.dtype(), T => {
        let mut out = c.overwritten_output::<T>(batch * m * n);
        batch_matmul(a.as_slice::<T>()?, b.as_slice::<T>()?, &mut out, batch, Product::new(m, n, k).transposed(ta, tb), c.threads);
        Ok(vec![Tensor::from_vec(out, od)?])
    })
}

fn matmul_flops(c: &super::CostCtx) -> f64 {
    // 2·m·n·k: output elements times twice the shared dimension.
    let out = c.outputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64;
    let a = c.inputs.first().map(|(_, s)| s.dims().to_vec()).unwrap_or_default();
    let t = c.n.bool_or("transpose_a", false).unwrap_or(false) || c.n.bool_or("adj_x", false).unwrap_or(false);
    let k = if a.len() >= 2 { if t { a[a.len() - 2] } else { a[a.len() - 1] } } else { 0 };
    2.0 * out * k as f64
}

/// A 2-D product as the GEMM it is, with the operands it reads transposed.
fn matmul_gemm(c: &super::CostCtx) -> Option<super::Gemm> {
    let out = c.outputs.first()?.1.dims();
    let a = c.inputs.first()?.1.dims();
    if a.len() != 2 || out.len() != 2 {
        return None;
    }
    let flag = |k: &str| c.n.bool_or(k, false).unwrap_or(false);
    let (ta, tb) = (flag("transpose_a"), flag("transpose_b"));
    let k = if ta { a[0] } else { a[1] };
    Some(super::Gemm { transposed: (ta, tb), ..super::Gemm::plain(out[0], out[1], k) })
}

pub(crate) fn register(r: &mut Registry) {
    r.def("MatMul", 2, Some(2), |c| infer_matmul(c, false)).flops(matmul_flops).class(super::OpClass::Matmul).gemm(matmul_gemm).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        let (ta, tb) = (c.n.bool_or("transpose_a", false)?, c.n.bool_or("transpose_b", false)?);
        let mm = |x: &Output, y: &Output, p: bool, q: bool| c.g.matmul_ex(x, y, p, q);
        // TF's four cases (python/ops/math_grad.py _MatMulGrad).
        let (ga, gb) = match (ta, tb) {
            (false, false) => (mm(g, b, false, true)?, mm(a, g, true, false)?),
            (false, true) => (mm(g, b, false, false)?, mm(g, a, true, false)?),
            (true, false) => (mm(b, g, false, true)?, mm(a, g, false, false)?),
            (true, true) => (mm(b, g, true, true)?, mm(g, a, true, true)?),
        };
        Ok(vec![Some(ga), Some(gb)])
    });
    r.cpu("MatMul", FLOATS, k_matmul);
    r.def("BatchMatMul", 2, Some(2), |c| infer_matmul(c, true)).flops(matmul_flops).class(super::OpClass::Matmul).grad(|c| {
        let (a, b, g) = (&c.inputs[0], &c.inputs[1], &c.grads[0]);
        let (ta, tb) = (c.n.bool_or("adj_x", false)?, c.n.bool_or("adj_y", false)?);
        let mm = |x: &Output, y: &Output, p: bool, q: bool| c.g.batch_matmul_ex(x, y, p, q);
        let (ga, gb) = match (ta, tb) {
            (false, false) => (mm(g, b, false, true)?, mm(a, g, true, false)?),
            (false, true) => (mm(g, b, false, false)?, mm(g, a, true, false)?),
            (true, false) => (mm(b, g, false, true)?, mm(a, g, false, false)?),
            (true, true) => (mm(b, g, true, true)?, mm(g, a, true, true)?),
        };
        Ok(vec![Some(ga), Some(gb)])
    });
    r.cpu("BatchMatMul", FLOATS, k_batch_matmul);
}

impl Graph {
    /// `a · b` for rank-2 operands.
    pub fn matmul(&self, a: impl IntoOutput, b: impl IntoOutput) -> Result<Output> {
        self.matmul_ex(a, b, false, false)
    }
    /// `op(a) · op(b)` where op transposes when the flag is set.
    pub fn matmul_ex(&self, a: impl IntoOutput, b: impl IntoOutput, transpose_a: bool, transpose_b: bool) -> Result<Output> {
        let (a, b) = (a.into_output()?, b.into_output()?);
        self.build1(
            "MatMul",
            vec![a, b],
            attrs! {"transpose_a" => AttrValue::Bool(transpose_a), "transpose_b" => AttrValue::Bool(transpose_b)},
        )
    }
    /// Batched `a · b` over equal leading dimensions.
    pub fn batch_matmul(&self, a: impl IntoOutput, b: impl IntoOutput) -> Result<Output> {
        self.batch_matmul_ex(a, b, false, false)
    }
    /// Batched product with the last two axes of either operand transposed.
    pub fn batch_matmul_ex(&self, a: impl IntoOutput, b: impl IntoOutput, adj_x: bool, adj_y: bool) -> Result<Output> {
        let (a, b) = (a.into_output()?, b.into_output()?);
        self.build1("BatchMatMul", vec![a, b], attrs! {"adj_x" => AttrValue::Bool(adj_x), "adj_y" => AttrValue::Bool(adj_y)})
    }
}
