//! Convolution and pooling over NHWC images: Conv2D (HWIO filters) with
//! Conv2DBackpropInput / Conv2DBackpropFilter, MaxPool / MaxPoolGrad and
//! AvgPool / AvgPoolGrad. Attrs: `strides` [h, w], `ksize` [h, w] (pools),
//! `padding` "SAME", "VALID" or "EXPLICIT" (with `explicit_paddings`).
//! Kernels in `kernels::cpu::{conv, pool}`.
//!
//! `_FusedConv2D(x, filter, bias [, residual])` is Conv2D, BiasAdd, (with
//! `fused_ops: [BiasAdd, Add, ...]`) the Add of a residual of the output's
//! shape and (`[..., Relu]`) Relu as one node, TensorFlow's name and
//! attributes for it (the residual is oneDNN's "side input"). Graphs are
//! built without it: the executor fuses a step's Conv2D -> BiasAdd [-> Add]
//! [-> Relu] chains (`runtime::fusion`), and the
//! simulator replays the same fused step. So does `_FusedMaxPoolGrad(y, g)`
//! (`fused_ops: [ReluGrad]`): `ReluGrad(MaxPoolGrad(y, g), y)` for a pool
//! over a Relu's output, in one pass. Likewise `_MaxPoolWithWorkspace(x) ->
//! (y, workspace)` and `_MaxPoolGradWithWorkspace(workspace, g)` (attrs
//! of the pool, `input_hw` [h, w], `fused_ops` [] or [ReluGrad]): a pool
//! whose gradient runs in the same step writes an i8 per pooled element
//! naming where the gradient goes, and the gradient reads that instead of
//! the pool's input.

use super::{FLOATS, InferCtx, KernelCtx, Registry, attrs, same_dtype, with_float};
use crate::graph::{AttrValue, NodeInfo};
use crate::error::Result;
use crate::graph::{Graph, IntoOutput, Output};
use crate::tensor::{DType, TensorType};
use crate::kernels::cpu::{
    Conv2dGeom, Epilogue, Padding, Pool2dGeom, PooledOut, avg_pool, avg_pool_grad, conv2d, conv2d_backprop_filter, conv2d_backprop_input, conv2d_bias,
    MAX_WORKSPACE_WINDOW, conv2d_bias_max_pool, max_pool, max_pool_grad, max_pool_grad_with_workspace, max_pool_relu_grad, max_pool_with_workspace,
};
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;

fn padding(n: &NodeInfo) -> Result<Padding> {
    padding_at(n, "padding")
}

/// `padding` "SAME", "VALID" or "EXPLICIT"; for EXPLICIT the sibling
/// `explicit_paddings` holds TensorFlow's 8 NHWC values
/// `[0, 0, top, bottom, left, right, 0, 0]`.
fn padding_at(n: &NodeInfo, key: &str) -> Result<Padding> {
    match n.str(key)? {
        "SAME" => Ok(Padding::Same),
        "VALID" => Ok(Padding::Valid),
        "EXPLICIT" => {
            let pads_key = key.replace("padding", "explicit_paddings");
            match n.ints(&pads_key)? {
                &[0, 0, t, b, l, r, 0, 0] if [t, b, l, r].iter().all(|&p| p >= 0) => {
                    Ok(Padding::Explicit { h: [t as usize, b as usize], w: [l as usize, r as usize] })
                }
                v => Err(n.attr_err(&pads_key, format!("expected [0, 0, top, bottom, left, right, 0, 0] with no negative pad, got {v:?}"))),
            }
        }
        p => Err(n.attr_err(key, format!("'{p}' is none of SAME, VALID, EXPLICIT"))),
    }
}

fn pair(n: &NodeInfo, key: &str) -> Result<[usize; 2]> {
    let v = n.ints(key)?;
    match v {
        [a, b] if *a > 0 && *b > 0 => Ok([*a as usize, *b as usize]),
        _ => Err(n.attr_err(key, format!("expected two positive values, got {v:?}"))),
    }
}

fn dims4(n: &NodeInfo, what: &str, s: &Shape) -> Result<[usize; 4]> {
    match s.dims() {
        [a, b, c, d] => Ok([*a, *b, *c, *d]),
        _ => Err(n.shape_err(format!("{what} must have rank 4, got {s}"))),
    }
}

fn conv_geom(n: &NodeInfo, x: &Shape, f: &Shape) -> Result<Conv2dGeom> {
    let xd = dims4(n, "input (NHWC)", x)?;
    let fd = dims4(n, "filter (HWIO)", f)?;
    Conv2dGeom::new(xd, fd, pair(n, "strides")?, padding(n)?).map_err(|e| n.shape_err(format!("{e} (input {x}, filter {f})")))
}

fn pool_geom(n: &NodeInfo, x: &Shape) -> Result<Pool2dGeom> {
    let xd = dims4(n, "input (NHWC)", x)?;
    Pool2dGeom::new(xd, pair(n, "ksize")?, pair(n, "strides")?, padding(n)?).map_err(|e| n.shape_err(format!("{e} (input {x})")))
}

/// Partial output shape: unknown dims stand in as 1 for the geometry check.
fn infer_conv(c: &InferCtx) -> Result<Vec<TensorType>> {
    let dt = same_dtype(c, FLOATS)?;
    let (x, f) = (&c.inputs[0].shape, &c.inputs[1].shape);
    if x.rank() != 4 || f.rank() != 4 {
        return Err(c.n.shape_err(format!("input {x} (NHWC) and filter {f} (HWIO) must have rank 4")));
    }
    let Some(fs) = f.to_shape() else {
        return Err(c.n.shape_err(format!("filter shape {f} must be fully known")));
    };
    // Unknown input dims stand in with values that always fit the window
    // (their output dims stay unknown).
    let stand_in = |i: usize| match i {
        0 => 1,
        1 | 2 => fs.dims()[i - 1] * 2 + 8,
        _ => fs.dims()[2],
    };
    let xs = Shape::new(x.dims().iter().enumerate().map(|(i, d)| d.unwrap_or_else(|| stand_in(i))).collect());
    let g = conv_geom(&c.n, &xs, &fs)?;
    let d = x.dims();
    let out = vec![d[0], d[1].map(|_| g.out_h), d[2].map(|_| g.out_w), Some(g.out_c)];
    Ok(vec![TensorType { dtype: dt, shape: PartialShape::new(out) }])
}

fn infer_pool(c: &InferCtx) -> Result<Vec<TensorType>> {
    let dt = same_dtype(c, FLOATS)?;
    let x = &c.inputs[0].shape;
    if x.rank() != 4 {
        return Err(c.n.shape_err(format!("input {x} must have rank 4 (NHWC)")));
    }
    let k = pair(&c.n, "ksize")?;
    let xs = Shape::new(x.dims().iter().enumerate().map(|(i, d)| d.unwrap_or(if i == 1 || i == 2 { k[i - 1].max(1) * 8 } else { 1 })).collect());
    let g = pool_geom(&c.n, &xs)?;
    let d = x.dims();
    let out = vec![d[0], d[1].map(|_| g.out_h), d[2].map(|_| g.out_w), d[3]];
    Ok(vec![TensorType { dtype: dt, shape: PartialShape::new(out) }])
}

fn k_conv(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, f) = (&c.inputs[0], &c.inputs[1]);
    let g = conv_geom(&c.n, x.shape(), f.shape())?;
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.output_len());
        conv2d(x.as_slice::<T>()?, f.as_slice::<T>()?, &mut out, &g, c.threads);
        Ok(vec![Tensor::from_vec(out, [g.batch, g.out_h, g.out_w, g.out_c])?])
    })
}

/// What a `_FusedConv2D` applies after its bias, from its `fused_ops`:
/// `[BiasAdd]`, then optionally `Add` (of input 3, the residual), then
/// optionally `Relu`.
#[derive(Clone, Copy)]
struct FusedOps {
    add: bool,
    relu: bool,
}

fn fused_ops(n: &NodeInfo) -> Result<FusedOps> {
    let ops = n.strs_or_empty("fused_ops")?;
    let names: Vec<&str> = ops.iter().map(String::as_str).collect();
    match names.as_slice() {
        ["BiasAdd"] => Ok(FusedOps { add: false, relu: false }),
        ["BiasAdd", "Relu"] => Ok(FusedOps { add: false, relu: true }),
        ["BiasAdd", "Add"] => Ok(FusedOps { add: true, relu: false }),
        ["BiasAdd", "Add", "Relu"] => Ok(FusedOps { add: true, relu: true }),
        other => Err(n.attr_err("fused_ops", format!("expected [BiasAdd], [BiasAdd, Relu], [BiasAdd, Add] or [BiasAdd, Add, Relu], got {other:?}"))),
    }
}

/// Whether a fused convolution applies Relu last.
fn fused_relu(n: &NodeInfo) -> Result<bool> {
    fused_ops(n).map(|f| f.relu)
}

fn infer_fused_conv(c: &InferCtx) -> Result<Vec<TensorType>> {
    let ops = fused_ops(&c.n)?;
    let want = if ops.add { 4 } else { 3 };
    if c.inputs.len() != want {
        return Err(c.n.shape_err(format!("fused_ops {} take {want} inputs, got {}", if ops.add { "with Add" } else { "without Add" }, c.inputs.len())));
    }
    let out = infer_conv(&InferCtx { n: c.n, inputs: &c.inputs[..2], graph: c.graph })?;
    let b = &c.inputs[2];
    let oc = out[0].shape.dims()[3];
    if b.dtype != out[0].dtype || b.shape.rank() != 1 || b.shape.dims()[0].is_some_and(|n| Some(n) != oc) {
        return Err(c.n.shape_err(format!("bias {}{} must be a vector of the {} output channels", b.dtype, b.shape, out[0].shape)));
    }
    if let Some(r) = c.inputs.get(3)
        && (r.dtype != out[0].dtype || !r.shape.compatible(&out[0].shape))
    {
        return Err(c.n.shape_err(format!("residual {}{} must have the output's type {}{}", r.dtype, r.shape, out[0].dtype, out[0].shape)));
    }
    Ok(out)
}

/// A fused convolution's ops and geometry, its bias (and residual) checked.
fn fused_conv_geom(c: &KernelCtx) -> Result<(FusedOps, Conv2dGeom)> {
    let ops = fused_ops(&c.n)?;
    let (x, f, b) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let g = conv_geom(&c.n, x.shape(), f.shape())?;
    if b.dims() != [g.out_c] {
        return Err(c.n.shape_err(format!("bias {} must match the {} output channels", b.shape(), g.out_c)));
    }
    match (ops.add, c.inputs.get(3)) {
        (false, None) => {}
        (true, Some(r)) if r.dims() == [g.batch, g.out_h, g.out_w, g.out_c] => {}
        (_, r) => return Err(c.n.shape_err(format!("residual {:?} must be the output's [{}, {}, {}, {}] exactly where fused_ops has Add", r.map(|r| r.shape().clone()), g.batch, g.out_h, g.out_w, g.out_c))),
    }
    Ok((ops, g))
}

fn k_fused_conv(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (ops, g) = fused_conv_geom(c)?;
    let (x, f, b) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.output_len());
        let residual = c.inputs.get(3).map(|r| r.as_slice::<T>()).transpose()?;
        conv2d_bias(x.as_slice::<T>()?, f.as_slice::<T>()?, Epilogue { bias: b.as_slice::<T>()?, residual, relu: ops.relu }, &mut out, &g, c.threads);
        Ok(vec![Tensor::from_vec(out, [g.batch, g.out_h, g.out_w, g.out_c])?])
    })
}

fn check_grad_shape(c: &KernelCtx, grad: &Tensor, want: [usize; 4]) -> Result<()> {
    if grad.dims() != want {
        return Err(c.n.shape_err(format!("gradient {} does not match the forward output {:?}", grad.shape(), want)));
    }
    Ok(())
}

/// Conv2DBackpropInput(x, f, g) -> dL/dx.
fn k_conv_bp_input(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, f, gr) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let g = conv_geom(&c.n, x.shape(), f.shape())?;
    check_grad_shape(c, gr, [g.batch, g.out_h, g.out_w, g.out_c])?;
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.input_len());
        conv2d_backprop_input(gr.as_slice::<T>()?, f.as_slice::<T>()?, &mut out, &g, c.threads);
        Ok(vec![Tensor::from_vec(out, x.shape().clone())?])
    })
}

/// Conv2DBackpropFilter(x, f, g) -> dL/df.
fn k_conv_bp_filter(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (x, f, gr) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let g = conv_geom(&c.n, x.shape(), f.shape())?;
    check_grad_shape(c, gr, [g.batch, g.out_h, g.out_w, g.out_c])?;
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.filter_len());
        conv2d_backprop_filter(x.as_slice::<T>()?, gr.as_slice::<T>()?, &mut out, &g, c.threads);
        Ok(vec![Tensor::from_vec(out, f.shape().clone())?])
    })
}

fn k_pool(c: &mut KernelCtx, max: bool) -> Result<Vec<Tensor>> {
    let x = &c.inputs[0];
    let g = pool_geom(&c.n, x.shape())?;
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.output_len());
        if max { max_pool(x.as_slice::<T>()?, &mut out, &g, c.threads) } else { avg_pool(x.as_slice::<T>()?, &mut out, &g, c.threads) }
        Ok(vec![Tensor::from_vec(out, [g.batch, g.out_h, g.out_w, g.channels])?])
    })
}

/// Which pooling gradient a kernel computes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PoolGrad {
    Max,
    /// `_FusedMaxPoolGrad`: MaxPoolGrad, then ReluGrad against the pool's input.
    MaxRelu,
    Avg,
}

/// `_FusedMaxPoolGrad`'s `fused_ops` must be `[ReluGrad]`.
fn check_fused_relu_grad(n: &NodeInfo) -> Result<()> {
    match n.strs_or_empty("fused_ops")? {
        [r] if r == "ReluGrad" => Ok(()),
        other => Err(n.attr_err("fused_ops", format!("expected [ReluGrad], got {other:?}"))),
    }
}

/// MaxPoolGrad(x, g) / _FusedMaxPoolGrad(x, g) / AvgPoolGrad(x, g) -> dL/dx.
fn k_pool_grad(c: &mut KernelCtx, kind: PoolGrad) -> Result<Vec<Tensor>> {
    if kind == PoolGrad::MaxRelu {
        check_fused_relu_grad(&c.n)?;
    }
    let (x, gr) = (&c.inputs[0], &c.inputs[1]);
    let g = pool_geom(&c.n, x.shape())?;
    check_grad_shape(c, gr, [g.batch, g.out_h, g.out_w, g.channels])?;
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.input_len());
        if kind == PoolGrad::Max {
            max_pool_grad(x.as_slice::<T>()?, gr.as_slice::<T>()?, &mut out, &g, c.threads)
        } else if kind == PoolGrad::MaxRelu {
            max_pool_relu_grad(x.as_slice::<T>()?, gr.as_slice::<T>()?, &mut out, &g, c.threads)
        } else {
            avg_pool_grad(gr.as_slice::<T>()?, &mut out, &g, c.threads)
        }
        Ok(vec![Tensor::from_vec(out, x.shape().clone())?])
    })
}

/// A workspace's windows (attr `key`) are at most `MAX_WORKSPACE_WINDOW` positions.
fn check_workspace_window(n: &NodeInfo, key: &str) -> Result<()> {
    let [kh, kw] = pair(n, key)?;
    match kh.checked_mul(kw) {
        Some(p) if p <= MAX_WORKSPACE_WINDOW => Ok(()),
        _ => Err(n.attr_err(key, format!("a pool's workspace indexes windows of at most {MAX_WORKSPACE_WINDOW} positions, got {kh}x{kw}"))),
    }
}

/// `_MaxPoolWithWorkspace(x) -> (y, workspace)`: MaxPool's output, and an
/// i8 per output element naming where its gradient goes.
fn infer_pool_with_workspace(c: &InferCtx) -> Result<Vec<TensorType>> {
    check_workspace_window(&c.n, "ksize")?;
    let mut out = infer_pool(c)?;
    let shape = out[0].shape.clone();
    out.push(TensorType { dtype: DType::I8, shape });
    Ok(out)
}

/// `_MaxPoolGradWithWorkspace`'s `fused_ops`: none (MaxPoolGrad) or
/// `[ReluGrad]` (`_FusedMaxPoolGrad`).
fn workspace_grad_relu(n: &NodeInfo) -> Result<bool> {
    match n.strs_or_empty("fused_ops")? {
        [] => Ok(false),
        [r] if r == "ReluGrad" => Ok(true),
        other => Err(n.attr_err("fused_ops", format!("expected [] or [ReluGrad], got {other:?}"))),
    }
}

/// The pool's geometry from its workspace's shape (batch, pooled size,
/// channels) and the `input_hw` attr; the pooled size must be the one
/// those give.
fn workspace_geom(n: &NodeInfo, ws: &Shape) -> Result<Pool2dGeom> {
    let [b, oh, ow, ch] = dims4(n, "workspace (NHWC)", ws)?;
    let [h, w] = pair(n, "input_hw")?;
    let g = Pool2dGeom::new([b, h, w, ch], pair(n, "ksize")?, pair(n, "strides")?, padding(n)?)
        .map_err(|e| n.shape_err(format!("{e} (input_hw {h}x{w})")))?;
    if (g.out_h, g.out_w) != (oh, ow) {
        return Err(n.shape_err(format!("workspace {ws} is not the pooled shape of a {h}x{w} input ({}x{})", g.out_h, g.out_w)));
    }
    Ok(g)
}

/// `_MaxPoolGradWithWorkspace(workspace, g) -> dL/dx`.
fn infer_pool_grad_with_workspace(c: &InferCtx) -> Result<Vec<TensorType>> {
    workspace_grad_relu(&c.n)?;
    check_workspace_window(&c.n, "ksize")?;
    let (ws, gr) = (&c.inputs[0], &c.inputs[1]);
    if ws.dtype != DType::I8 {
        return Err(c.n.dtype_err(format!("workspace (input 0) must be i8, got {}", ws.dtype)));
    }
    if !FLOATS.contains(&gr.dtype) {
        return Err(c.n.dtype_err(format!("gradient dtype {} not supported (supported: {})", gr.dtype, super::names(FLOATS))));
    }
    if ws.shape.rank() != 4 {
        return Err(c.n.shape_err(format!("workspace {} must have rank 4 (NHWC)", ws.shape)));
    }
    if let Some(s) = ws.shape.to_shape() {
        let g = workspace_geom(&c.n, &s)?;
        if let Some(gs) = gr.shape.to_shape().filter(|gs| gs.dims() != s.dims()) {
            return Err(c.n.shape_err(format!("gradient {gs} does not match the workspace {s} ({}x{} input)", g.in_h, g.in_w)));
        }
    }
    let [h, w] = pair(&c.n, "input_hw")?;
    let d = ws.shape.dims();
    Ok(vec![TensorType { dtype: gr.dtype, shape: PartialShape::new(vec![d[0], Some(h), Some(w), d[3]]) }])
}

fn k_pool_with_workspace(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    check_workspace_window(&c.n, "ksize")?;
    let x = &c.inputs[0];
    let g = pool_geom(&c.n, x.shape())?;
    let dims = [g.batch, g.out_h, g.out_w, g.channels];
    with_float!(c, x.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.output_len());
        let mut ws = c.overwritten_output::<i8>(g.output_len());
        max_pool_with_workspace(x.as_slice::<T>()?, &mut out, &mut ws, &g, c.threads);
        Ok(vec![Tensor::from_vec(out, dims)?, Tensor::from_vec(ws, dims)?])
    })
}

fn k_pool_grad_with_workspace(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let relu = workspace_grad_relu(&c.n)?;
    check_workspace_window(&c.n, "ksize")?;
    let (ws, gr) = (&c.inputs[0], &c.inputs[1]);
    let g = workspace_geom(&c.n, ws.shape())?;
    check_grad_shape(c, gr, [g.batch, g.out_h, g.out_w, g.channels])?;
    let entries = ws.as_slice::<i8>().map_err(|_| c.n.dtype_err(format!("workspace (input 0) must be i8, got {}", ws.dtype())))?;
    with_float!(c, gr.dtype(), T => {
        let mut out = c.overwritten_output::<T>(g.input_len());
        max_pool_grad_with_workspace(entries, gr.as_slice::<T>()?, &mut out, &g, c.threads, relu);
        Ok(vec![Tensor::from_vec(out, [g.batch, g.in_h, g.in_w, g.channels])?])
    })
}

/// `_FusedConv2DMaxPool`'s pool over the convolution's output `out`
/// (NHWC): attrs `pool_ksize`, `pool_strides`, `pool_padding`.
fn conv_pool_geom(n: &NodeInfo, out: [usize; 4]) -> Result<Pool2dGeom> {
    check_workspace_window(n, "pool_ksize")?;
    Pool2dGeom::new(out, pair(n, "pool_ksize")?, pair(n, "pool_strides")?, padding_at(n, "pool_padding")?)
        .map_err(|e| n.shape_err(format!("{e} (pooling the convolution's output {out:?})")))
}

/// `_FusedConv2DMaxPool(x, filter, bias) -> (pooled, workspace)`:
/// `_MaxPoolWithWorkspace(_FusedConv2D(x, filter, bias))` with the pool's
/// window in the `pool_*` attrs.
fn infer_fused_conv_pool(c: &InferCtx) -> Result<Vec<TensorType>> {
    let conv = infer_fused_conv(c)?;
    let (dt, y) = (conv[0].dtype, &conv[0].shape);
    let k = pair(&c.n, "pool_ksize")?;
    // Unknown dims stand in as in `infer_pool` for the geometry check.
    let d = y.dims();
    let stand_in = |i: usize| d[i].unwrap_or(if i == 1 || i == 2 { k[i - 1].max(1) * 8 } else { 1 });
    let g = conv_pool_geom(&c.n, [stand_in(0), stand_in(1), stand_in(2), stand_in(3)])?;
    let shape = PartialShape::new(vec![d[0], d[1].map(|_| g.out_h), d[2].map(|_| g.out_w), d[3]]);
    Ok(vec![TensorType { dtype: dt, shape: shape.clone() }, TensorType { dtype: DType::I8, shape }])
}

fn k_fused_conv_pool(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (FusedOps { relu, .. }, g) = fused_conv_geom(c)?;
    let (x, f, b) = (&c.inputs[0], &c.inputs[1], &c.inputs[2]);
    let pg = conv_pool_geom(&c.n, [g.batch, g.out_h, g.out_w, g.out_c])?;
    let dims = [pg.batch, pg.out_h, pg.out_w, pg.channels];
    with_float!(c, x.dtype(), T => {
        let mut pooled = c.overwritten_output::<T>(pg.output_len());
        let mut ws = c.overwritten_output::<i8>(pg.output_len());
        let epi = Epilogue { bias: b.as_slice::<T>()?, residual: None, relu };
        conv2d_bias_max_pool(x.as_slice::<T>()?, f.as_slice::<T>()?, epi, PooledOut { values: &mut pooled, argmax: &mut ws }, &g, &pg, c.threads);
        Ok(vec![Tensor::from_vec(pooled, dims)?, Tensor::from_vec(ws, dims)?])
    })
}

/// A pool's gradient visits each window once per incoming gradient element
/// (the pooled shape, input 1), not per element of its output.
fn pool_grad_flops(c: &super::CostCtx) -> f64 {
    let k = c.n.ints("ksize").map(|k| k.iter().product::<i64>()).unwrap_or(1) as f64;
    k * c.inputs.get(1).map_or(0, |(_, s)| s.num_elements()) as f64
}

fn copy_attrs(n: &NodeInfo) -> crate::graph::Attrs {
    n.attrs.clone()
}

/// A convolution as its im2col product: `[N·OH·OW, F] = columns [N·OH·OW,
/// KH·KW·C] · filter [KH·KW·C, F]` (a fused bias and activation are a few
/// operations per output beside it).
fn conv_gemm(c: &super::CostCtx) -> Option<super::Gemm> {
    let f = c.inputs.get(1)?.1.dims();
    let out = c.outputs.first()?.1.dims();
    if f.len() != 4 || out.len() != 4 {
        return None;
    }
    Some(super::Gemm::plain(out[0] * out[1] * out[2], out[3], f[0] * f[1] * f[2]))
}

/// `_FusedConv2DMaxPool`'s convolution, whose output (before the pool) it
/// does not return.
fn conv_pool_gemm(c: &super::CostCtx) -> Option<super::Gemm> {
    let (x, f) = (&c.inputs.first()?.1, &c.inputs.get(1)?.1);
    let g = conv_geom(&c.n, x, f).ok()?;
    Some(super::Gemm::plain(g.batch * g.out_h * g.out_w, g.out_c, g.k_h * g.k_w * g.in_c))
}

/// The input gradient's product: columns of dX `[N·OH·OW, KH·KW·C] = dY
/// [N·OH·OW, F] · filterᵀ [F, KH·KW·C]`, scattered back into dX. The
/// kernel lays its operands out for the product (im2col chunks of at most
/// 1 MiB), so the plain layout's rates apply.
fn conv_bp_input_gemm(c: &super::CostCtx) -> Option<super::Gemm> {
    let f = c.inputs.get(1)?.1.dims();
    let dy = c.inputs.get(2)?.1.dims();
    if f.len() != 4 || dy.len() != 4 {
        return None;
    }
    Some(super::Gemm::plain(dy[0] * dy[1] * dy[2], f[0] * f[1] * f[2], dy[3]))
}

/// The filter gradient's product: `dW [KH·KW·C, F] = columnsᵀ [KH·KW·C,
/// N·OH·OW] · dY [N·OH·OW, F]`, laid out as for the input gradient.
fn conv_bp_filter_gemm(c: &super::CostCtx) -> Option<super::Gemm> {
    let out = c.outputs.first()?.1.dims();
    let dy = c.inputs.get(2)?.1.dims();
    if out.len() != 4 || dy.len() != 4 {
        return None;
    }
    Some(super::Gemm::plain(out[0] * out[1] * out[2], out[3], dy[0] * dy[1] * dy[2]))
}

pub(crate) fn register(r: &mut Registry) {
    r.def("Conv2D", 2, Some(2), infer_conv)
        .class(super::OpClass::Conv)
        .gemm(conv_gemm)
        .flops(|c| {
            // 2 · output elements · (kh · kw · in_c)
            let out = c.outputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64;
            let f = c.inputs.get(1).map(|(_, s)| s.dims().to_vec()).unwrap_or_default();
            let patch = if f.len() == 4 { f[0] * f[1] * f[2] } else { 0 };
            2.0 * out * patch as f64
        })
        .grad(|c| {
            let ins = vec![c.inputs[0].clone(), c.inputs[1].clone(), c.grads[0].clone()];
            let gx = c.g.build1("Conv2DBackpropInput", ins.clone(), copy_attrs(&c.n))?;
            let gf = c.g.build1("Conv2DBackpropFilter", ins, copy_attrs(&c.n))?;
            Ok(vec![Some(gx), Some(gf)])
        });
    r.cpu("Conv2D", FLOATS, k_conv);
    let conv_bp_flops = |c: &super::CostCtx| -> f64 {
        let g = c.inputs.get(2).map(|(_, s)| s.num_elements()).unwrap_or(0) as f64;
        let f = c.inputs.get(1).map(|(_, s)| s.dims().to_vec()).unwrap_or_default();
        let patch = if f.len() == 4 { f[0] * f[1] * f[2] } else { 0 };
        2.0 * g * patch as f64
    };
    r.def("_FusedConv2D", 3, Some(4), infer_fused_conv)
        .class(super::OpClass::Conv)
        .gemm(conv_gemm)
        .flops(|c| {
            // The convolution's 2 · outputs · patch, then one add per output
            // (two with a residual) and one compare with Relu.
            let out = c.outputs.first().map(|(_, s)| s.num_elements()).unwrap_or(0) as f64;
            let f = c.inputs.get(1).map(|(_, s)| s.dims().to_vec()).unwrap_or_default();
            let patch = if f.len() == 4 { f[0] * f[1] * f[2] } else { 0 };
            let ops = fused_ops(&c.n).unwrap_or(FusedOps { add: false, relu: false });
            let post = 1.0 + f64::from(u8::from(ops.add)) + f64::from(u8::from(ops.relu));
            (2.0 * patch as f64 + post) * out
        })
        .grad(|c| {
            // As the unfused chain's gradients: ReluGrad on the output, then
            // BiasAddGrad and the two convolution backprops of that; the
            // residual's gradient is that same gradient (an Add's).
            let gy = if fused_relu(&c.n)? {
                c.g.build1("ReluGrad", vec![c.grads[0].clone(), c.outputs[0].clone()], attrs! {})?
            } else {
                c.grads[0].clone()
            };
            let mut conv_attrs = copy_attrs(&c.n);
            conv_attrs.remove("fused_ops");
            let ins = vec![c.inputs[0].clone(), c.inputs[1].clone(), gy.clone()];
            let gx = c.g.build1("Conv2DBackpropInput", ins.clone(), conv_attrs.clone())?;
            let gf = c.g.build1("Conv2DBackpropFilter", ins, conv_attrs)?;
            let gb = c.g.build1("BiasAddGrad", vec![gy.clone()], attrs! {})?;
            let mut grads = vec![Some(gx), Some(gf), Some(gb)];
            if c.inputs.len() == 4 {
                grads.push(Some(gy));
            }
            Ok(grads)
        });
    r.cpu("_FusedConv2D", FLOATS, k_fused_conv);
    r.def("Conv2DBackpropInput", 3, Some(3), |c| Ok(vec![c.inputs[0].clone()]))
        .flops(conv_bp_flops)
        .class(super::OpClass::Conv)
        .gemm(conv_bp_input_gemm);
    r.cpu("Conv2DBackpropInput", FLOATS, k_conv_bp_input);
    r.def("Conv2DBackpropFilter", 3, Some(3), |c| Ok(vec![c.inputs[1].clone()]))
        .flops(conv_bp_flops)
        .class(super::OpClass::Conv)
        .gemm(conv_bp_filter_gemm);
    r.cpu("Conv2DBackpropFilter", FLOATS, k_conv_bp_filter);

    let pool_flops = |c: &super::CostCtx| -> f64 {
        let k = c.n.ints("ksize").map(|k| k.iter().product::<i64>()).unwrap_or(1) as f64;
        k * super::flops_per_output(c)
    };
    r.def("MaxPool", 1, Some(1), infer_pool).flops(pool_flops).grad(|c| {
        Ok(vec![Some(c.g.build1("MaxPoolGrad", vec![c.inputs[0].clone(), c.grads[0].clone()], copy_attrs(&c.n))?)])
    });
    r.cpu("MaxPool", FLOATS, |c| k_pool(c, true));
    r.def("AvgPool", 1, Some(1), infer_pool).flops(pool_flops).grad(|c| {
        Ok(vec![Some(c.g.build1("AvgPoolGrad", vec![c.inputs[0].clone(), c.grads[0].clone()], copy_attrs(&c.n))?)])
    });
    r.cpu("AvgPool", FLOATS, |c| k_pool(c, false));
    r.def("MaxPoolGrad", 2, Some(2), |c| Ok(vec![c.inputs[0].clone()])).flops(pool_grad_flops);
    r.cpu("MaxPoolGrad", FLOATS, |c| k_pool_grad(c, PoolGrad::Max));
    r.def("_FusedMaxPoolGrad", 2, Some(2), |c| {
        check_fused_relu_grad(&c.n)?;
        Ok(vec![c.inputs[0].clone()])
    })
    // The pooling gradient's visits, then one compare per input element.
    .flops(|c| pool_grad_flops(c) + c.inputs.first().map_or(0, |(_, s)| s.num_elements()) as f64);
    r.cpu("_FusedMaxPoolGrad", FLOATS, |c| k_pool_grad(c, PoolGrad::MaxRelu));
    // The executor's rewrite of a max pool whose gradient runs in the same
    // step (`runtime::fusion`): the pool writes where each window's
    // gradient goes, and the gradient reads that instead of the input.
    r.def("_MaxPoolWithWorkspace", 1, Some(1), infer_pool_with_workspace).flops(pool_flops);
    r.cpu("_MaxPoolWithWorkspace", FLOATS, k_pool_with_workspace);
    r.def("_MaxPoolGradWithWorkspace", 2, Some(2), infer_pool_grad_with_workspace).flops(pool_grad_flops);
    r.cpu("_MaxPoolGradWithWorkspace", FLOATS, k_pool_grad_with_workspace);
    // And such a pool over a fused convolution's output, which nothing else
    // reads: one node, pooling each image while it is in cache.
    r.def("_FusedConv2DMaxPool", 3, Some(3), infer_fused_conv_pool).class(super::OpClass::Conv).gemm(conv_pool_gemm).flops(|c| {
        // The fused convolution's (over its own output, which this node
        // does not return), then the pool's visits.
        let (Some((_, xs)), Some((_, fs))) = (c.inputs.first(), c.inputs.get(1)) else { return 0.0 };
        let Ok(g) = conv_geom(&c.n, xs, fs) else { return 0.0 };
        let patch = (g.k_h * g.k_w * g.in_c) as f64;
        let post = if fused_relu(&c.n).unwrap_or(false) { 2.0 } else { 1.0 };
        let k = c.n.ints("pool_ksize").map(|k| k.iter().product::<i64>()).unwrap_or(1) as f64;
        let pooled = c.outputs.first().map_or(0, |(_, s)| s.num_elements()) as f64;
        (2.0 * patch + post) * g.output_len() as f64 + k * pooled
    });
    r.cpu("_FusedConv2DMaxPool", FLOATS, k_fused_conv_pool);
    r.def("AvgPoolGrad", 2, Some(2), |c| Ok(vec![c.inputs[0].clone()])).flops(pool_grad_flops);
    r.cpu("AvgPoolGrad", FLOATS, |c| k_pool_grad(c, PoolGrad::Avg));
}

fn padding_name(same: bool) -> AttrValue {
    AttrValue::Str(if same { "SAME" } else { "VALID" }.into())
}

/// The attrs of an EXPLICIT padding of `[top, bottom, left, right]`.
fn explicit_attrs(attrs: &mut crate::graph::Attrs, [t, b, l, r]: [usize; 4]) {
    attrs.insert("padding".into(), AttrValue::Str("EXPLICIT".into()));
    attrs.insert("explicit_paddings".into(), AttrValue::Ints(vec![0, 0, t as i64, b as i64, l as i64, r as i64, 0, 0]));
}

impl Graph {
    /// 2-D convolution of NHWC `input` with HWIO `filter`; `same` selects
    /// SAME padding, otherwise VALID.
    pub fn conv2d(&self, input: impl IntoOutput, filter: impl IntoOutput, strides: [usize; 2], same: bool) -> Result<Output> {
        let (x, f) = (input.into_output()?, filter.into_output()?);
        self.build1(
            "Conv2D",
            vec![x, f],
            attrs! {"strides" => AttrValue::Ints(strides.iter().map(|&s| s as i64).collect()), "padding" => padding_name(same)},
        )
    }
    /// [`conv2d`](Self::conv2d) with `pads` `[top, bottom, left, right]`
    /// given (ONNX's and PyTorch's padding, which SAME cannot always
    /// express: a 7x7 stride-2 window pads 3 and 3 there, 2 and 3 in SAME).
    pub fn conv2d_padded(&self, input: impl IntoOutput, filter: impl IntoOutput, strides: [usize; 2], pads: [usize; 4]) -> Result<Output> {
        let (x, f) = (input.into_output()?, filter.into_output()?);
        let mut a = attrs! {"strides" => AttrValue::Ints(strides.iter().map(|&s| s as i64).collect())};
        explicit_attrs(&mut a, pads);
        self.build1("Conv2D", vec![x, f], a)
    }
    /// Max (`max: true`) or average pooling with `pads` `[top, bottom,
    /// left, right]` given; padding is never a maximum and never counted in
    /// an average.
    pub fn pool_padded(&self, max: bool, input: impl IntoOutput, ksize: [usize; 2], strides: [usize; 2], pads: [usize; 4]) -> Result<Output> {
        let mut a = attrs! {
            "ksize" => AttrValue::Ints(ksize.iter().map(|&s| s as i64).collect()),
            "strides" => AttrValue::Ints(strides.iter().map(|&s| s as i64).collect()),
        };
        explicit_attrs(&mut a, pads);
        self.build1(if max { "MaxPool" } else { "AvgPool" }, vec![input.into_output()?], a)
    }
    /// Max pooling over `ksize` windows of NHWC `input`.
    pub fn max_pool(&self, input: impl IntoOutput, ksize: [usize; 2], strides: [usize; 2], same: bool) -> Result<Output> {
        self.pool("MaxPool", input, ksize, strides, same)
    }
    /// Average pooling over `ksize` windows of NHWC `input` (padding excluded from the count).
    pub fn avg_pool(&self, input: impl IntoOutput, ksize: [usize; 2], strides: [usize; 2], same: bool) -> Result<Output> {
        self.pool("AvgPool", input, ksize, strides, same)
    }
    fn pool(&self, op: &str, input: impl IntoOutput, ksize: [usize; 2], strides: [usize; 2], same: bool) -> Result<Output> {
        self.build1(
            op,
            vec![input.into_output()?],
            attrs! {
                "ksize" => AttrValue::Ints(ksize.iter().map(|&s| s as i64).collect()),
                "strides" => AttrValue::Ints(strides.iter().map(|&s| s as i64).collect()),
                "padding" => padding_name(same),
            },
        )
    }
}
