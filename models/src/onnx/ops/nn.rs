//! Convolution, pooling, normalization and reductions. Images are NHWC
//! here (the engine's Conv2D and pools), filters HWIO: a filter read by
//! one convolution only is laid out once, when its variable is made.

use super::super::convert::{Importer, Node};
use super::super::lit::Lit;
use super::{Str, axis, const_ints, dims_i64};
use flowlab_engine::{Graph, Output};

/// The 2-D window attributes shared by Conv and the pools.
struct Window {
    kernel: [usize; 2],
    strides: [usize; 2],
    /// `[top, bottom, left, right]`
    pads: [usize; 4],
}

/// A 2-D window attribute: two positive values, `default` where absent.
fn pair(n: &Node, key: &str, default: usize) -> Result<[usize; 2], String> {
    match n.ints(key) {
        None => Ok([default; 2]),
        Some(&[a, b]) if a > 0 && b > 0 => Ok([a as usize, b as usize]),
        Some(v) => Err(format!("attribute {key} {v:?} is not two positive values (only 2-D windows are imported)")),
    }
}

/// The window of a node whose `kernel` is its extent on the input (a
/// dilated filter's, for Conv); a pool's dilations are refused.
fn window(n: &Node, in_hw: [usize; 2], kernel: [usize; 2]) -> Result<Window, String> {
    if n.op != "Conv" && pair(n, "dilations", 1)? != [1, 1] {
        return Err("dilated pooling windows are not imported".into());
    }
    let strides = pair(n, "strides", 1)?;
    let pads = match n.string("auto_pad").as_deref().unwrap_or("NOTSET") {
        "NOTSET" => match n.ints("pads") {
            None => [0; 4],
            // ONNX orders pads [top, left, bottom, right]
            Some(&[t, l, b, r]) if [t, l, b, r].iter().all(|&p| p >= 0) => [t as usize, b as usize, l as usize, r as usize],
            Some(v) => Err(format!("attribute pads {v:?} is not four non-negative values"))?,
        },
        "VALID" => [0; 4],
        mode @ ("SAME_UPPER" | "SAME_LOWER") => {
            let mut p = [0; 4];
            for i in 0..2 {
                let out = in_hw[i].div_ceil(strides[i]);
                let total = ((out - 1) * strides[i] + kernel[i]).saturating_sub(in_hw[i]);
                let (small, big) = (total / 2, total - total / 2);
                (p[2 * i], p[2 * i + 1]) = if mode == "SAME_UPPER" { (small, big) } else { (big, small) };
            }
            p
        }
        other => return Err(format!("auto_pad '{other}' is none of NOTSET, VALID, SAME_UPPER, SAME_LOWER")),
    };
    Ok(Window { kernel, strides, pads })
}

impl Window {
    /// TensorFlow's SAME or VALID where it pads alike (the graph a
    /// TensorFlow model of the same layers has), else the given pads.
    fn tf_padding(&self, in_hw: [usize; 2]) -> Option<bool> {
        if self.pads == [0; 4] {
            return Some(false);
        }
        let same = (0..2).all(|i| {
            let out = in_hw[i].div_ceil(self.strides[i]);
            let total = ((out - 1) * self.strides[i] + self.kernel[i]).saturating_sub(in_hw[i]);
            [self.pads[2 * i], self.pads[2 * i + 1]] == [total / 2, total - total / 2]
        });
        same.then_some(true)
    }
}

fn image(imp: &Importer, n: &Node, name: &str) -> Result<[usize; 4], String> {
    match imp.shape(name)?.as_slice() {
        &[b, c, h, w] => Ok([b, c, h, w]),
        s => Err(format!("{} input '{name}' of shape {s:?} is not an NCHW image (only 2-D {} is imported)", n.op, n.op)),
    }
}

pub(super) fn conv(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, w, out) = (n.need(0)?, n.need(1)?, n.output(0).ok_or("no output")?);
    let [_, c, h, wd] = image(imp, n, x)?;
    let ws = imp.shape(w)?;
    let &[o, i, kh, kw] = ws.as_slice() else {
        return Err(format!("filter '{w}' of shape {ws:?} is not [out, in, kh, kw]"));
    };
    let group = n.int("group", 1);
    let groups = usize::try_from(group).ok().filter(|&k| k >= 1 && c % k == 0 && o % k == 0 && i * k == c).ok_or_else(|| {
        format!("group {group} does not split {c} input channels and {o} outputs into groups of the filter's {i} inputs (filter {ws:?})")
    })?;
    let dilation = pair(n, "dilations", 1)?;
    if dilation != [1, 1] && n.string("auto_pad").is_some_and(|p| p.starts_with("SAME")) {
        return Err("dilations with auto_pad SAME_UPPER/SAME_LOWER are not imported (ONNX Runtime refuses them too): give pads".into());
    }
    // a dilated filter covers (k - 1) d + 1 input pixels per axis
    let extent = [(kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1];
    let win = window(n, [h, wd], extent)?;
    let mut filter = hwio(imp, w)?;
    if dilation != [1, 1] {
        filter = dilate(g, &filter, [kh, kw, i, o], dilation)?;
    }
    let xi = imp.nhwc(x)?;
    let conv = |x: &Output, f: &Output| match win.tf_padding([h, wd]) {
        Some(same) => g.conv2d(x, f, win.strides, same),
        None => g.conv2d_padded(x, f, win.strides, win.pads),
    };
    // Grouped and depthwise: each group's channels convolved with its
    // filters, the outputs concatenated (channels are NHWC's last axis).
    let mut y = if groups == 1 {
        conv(&xi, &filter).s()?
    } else {
        let (xs, fs) = (g.split(&xi, groups, 3).s()?, g.split(&filter, groups, 3).s()?);
        let ys = xs.iter().zip(&fs).map(|(a, b)| conv(a, b)).collect::<Result<Vec<_>, _>>().s()?;
        g.concat(&ys.iter().collect::<Vec<_>>(), 3).s()?
    };
    if let Some(b) = n.input(2) {
        if imp.shape(b)? != [o] {
            return Err(format!("bias '{b}' of shape {:?} is not [{o}]", imp.shape(b)?));
        }
        y = g.bias_add(&y, imp.out(b)?).s()?;
    }
    imp.set_nhwc(out, y);
    Ok(())
}

/// A `[kh, kw, i, o]` filter dilated by `d`: its taps spread `d` apart
/// with zeros between, `[(kh - 1) d + 1, (kw - 1) d + 1, i, o]`. Made by a
/// 0/1 matrix product from the filter itself (not a dilated copy of its
/// weights), so training updates the taps only and the gaps stay zero.
fn dilate(g: &Graph, filter: &Output, [kh, kw, i, o]: [usize; 4], d: [usize; 2]) -> Result<Output, String> {
    let (eh, ew) = ((kh - 1) * d[0] + 1, (kw - 1) * d[1] + 1);
    let mut spread = vec![0f32; eh * ew * kh * kw];
    for r in 0..kh {
        for c in 0..kw {
            spread[(r * d[0] * ew + c * d[1]) * kh * kw + r * kw + c] = 1.0;
        }
    }
    let spread = g.constant(flowlab_engine::Tensor::from_vec(spread, vec![eh * ew, kh * kw]).s()?).s()?;
    let taps = g.reshape(filter, &[(kh * kw) as i64, (i * o) as i64]).s()?;
    let spread = g.matmul(&spread, &taps).s()?;
    g.reshape(&spread, &[eh as i64, ew as i64, i as i64, o as i64]).s()
}

/// The filter `w` ([out, in, kh, kw]) as HWIO: a weight read only here
/// becomes a variable already in that layout, anything else a transpose.
fn hwio(imp: &mut Importer, w: &str) -> Result<Output, String> {
    if imp.readers(w) == 1
        && let Some(t) = imp.weight(w).cloned()
    {
        return imp.variable(w, oihw_to_hwio(&t)?);
    }
    let o = imp.out(w)?;
    imp.g.transpose(&o, &[2, 3, 1, 0]).s()
}

/// A filter `[O, I, H, W]` as `[H, W, I, O]`, in its own element type.
fn oihw_to_hwio(t: &flowlab_engine::Tensor) -> Result<flowlab_engine::Tensor, String> {
    use super::super::lit::permute;
    const HWIO: [usize; 4] = [2, 3, 1, 0];
    let dims = t.shape().dims();
    if dims.len() != 4 {
        return Err(format!("filter of shape {} is not rank 4", t.shape()));
    }
    match t.dtype() {
        flowlab_engine::DType::F32 => {
            let (shape, data) = permute(t.as_slice::<f32>().s()?, dims, &HWIO);
            flowlab_engine::Tensor::from_vec(data, shape).s()
        }
        flowlab_engine::DType::F64 => {
            let (shape, data) = permute(t.as_slice::<f64>().s()?, dims, &HWIO);
            flowlab_engine::Tensor::from_vec(data, shape).s()
        }
        other => Err(format!("{other} filters are not imported (f32, f64)")),
    }
}

pub(super) fn pool(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let [_, _, h, w] = image(imp, n, x)?;
    let kernel = match n.ints("kernel_shape") {
        Some(&[a, b]) if a > 0 && b > 0 => [a as usize, b as usize],
        k => return Err(format!("kernel_shape {k:?} is not two positive values")),
    };
    let win = window(n, [h, w], kernel)?;
    if n.int("ceil_mode", 0) != 0 {
        // ceil and floor agree where every window fits exactly
        let exact = (0..2).all(|i| ([h, w][i] + win.pads[2 * i] + win.pads[2 * i + 1]).saturating_sub(kernel[i]) % win.strides[i] == 0);
        if !exact {
            return Err("ceil_mode 1 with windows that do not tile the input is not imported".into());
        }
    }
    n.only_default("storage_order", 0)?;
    let max = n.op == "MaxPool";
    if max && n.output(1).is_some_and(|o| imp.readers(o) > 0) {
        return Err("MaxPool's Indices output is read; it is not imported".into());
    }
    let xi = imp.nhwc(x)?;
    let mut y = match (win.tf_padding([h, w]), max) {
        (Some(same), true) => g.max_pool(&xi, kernel, win.strides, same),
        (Some(same), false) => g.avg_pool(&xi, kernel, win.strides, same),
        (None, _) => g.pool_padded(max, &xi, kernel, win.strides, win.pads),
    }
    .s()?;
    if !max && n.int("count_include_pad", 0) != 0 && win.pads != [0; 4] {
        // the engine averages over the input's cells; counting the padding
        // too scales each output by (cells in its window) / (window size)
        y = g.mul(&y, g.constant(include_pad_scale([h, w], &win, y.dtype())?.to_tensor()?).s()?).s()?;
    }
    imp.set_nhwc(out, y);
    Ok(())
}

/// `[1, OH, OW, 1]`: the share of each output's window inside the input.
fn include_pad_scale(in_hw: [usize; 2], win: &Window, dtype: flowlab_engine::DType) -> Result<Lit, String> {
    let out = |i: usize| (in_hw[i] + win.pads[2 * i] + win.pads[2 * i + 1] - win.kernel[i]) / win.strides[i] + 1;
    let inside = |i: usize, o: usize| {
        let start = (o * win.strides[i]) as i64 - win.pads[2 * i] as i64;
        let end = (start + win.kernel[i] as i64).min(in_hw[i] as i64);
        (end - start.max(0)) as f64
    };
    let (oh, ow) = (out(0), out(1));
    let area = (win.kernel[0] * win.kernel[1]) as f64;
    let data = (0..oh).flat_map(|y| (0..ow).map(move |x| (y, x))).map(|(y, x)| inside(0, y) * inside(1, x) / area).collect();
    Lit::new(dtype, vec![1, oh, ow, 1], data)
}

pub(super) fn global_pool(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    image(imp, n, x)?;
    let xi = imp.nhwc(x)?;
    let y = if n.op == "GlobalMaxPool" { g.reduce_max(&xi, &[1, 2], true) } else { g.reduce_mean(&xi, &[1, 2], true) }.s()?;
    imp.set_nhwc(out, y);
    Ok(())
}

/// Inference-time batch norm: `x * k + (beta - mean * k)` with
/// `k = gamma / sqrt(var + eps)`; gamma and beta train, the running
/// statistics are constants.
pub(super) fn batch_norm(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    n.only_default("training_mode", 0)?;
    if (1..3).any(|k| n.output(k).is_some_and(|o| imp.readers(o) > 0)) {
        return Err("the running mean and variance outputs (training mode) are not imported".into());
    }
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let rank = imp.shape(x)?.len();
    let nhwc = rank == 4;
    if rank != 4 && rank != 2 {
        return Err(format!("input of rank {rank} is not imported (NCHW images or [N, C] rows)"));
    }
    let xi = if nhwc { imp.nhwc(x)? } else { imp.out(x)? };
    let (gamma, beta) = (imp.out(n.need(1)?)?, imp.out(n.need(2)?)?);
    if imp.training {
        return train_batch_norm(imp, n, g, xi, (gamma, beta), nhwc);
    }
    let (mean, var) = (frozen(imp, n.need(3)?)?, frozen(imp, n.need(4)?)?);
    let eps = g.scalar(f64::from(n.float("epsilon", 1e-5)), xi.dtype()).s()?;
    let k = g.mul(&gamma, g.rsqrt(g.add(&var, &eps).s()?).s()?).s()?;
    let shift = g.sub(&beta, g.mul(&mean, &k).s()?).s()?;
    let y = g.add(g.mul(&xi, &k).s()?, &shift).s()?;
    if nhwc { imp.set_nhwc(out, y) } else { imp.set_out(out, y) }
    Ok(())
}

/// Training-time batch norm, one fused op as the zoo's: each batch by its
/// own statistics, the running ones (state variables) moved toward them
/// by `1 - momentum` in the train op.
fn train_batch_norm(imp: &mut Importer, n: &Node, g: &Graph, x: Output, (gamma, beta): (Output, Output), nhwc: bool) -> Result<(), String> {
    let (y, mean, var) = g.fused_batch_norm(&x, &gamma, &beta, f64::from(n.float("epsilon", 1e-5))).s()?;
    let decay = 1.0 - f64::from(n.float("momentum", 0.9));
    for (k, stat) in [(3, &mean), (4, &var)] {
        let name = n.need(k)?;
        let t = imp.weight(name).cloned().ok_or_else(|| format!("running statistic '{name}' must be an initializer"))?;
        let channels = t.shape().num_elements() as i64;
        let running = imp.state(name, t)?;
        let delta = g.mul(g.sub(&running, g.reshape(stat, &[channels]).s()?).s()?, g.scalar(decay, running.dtype()).s()?).s()?;
        imp.updates.push(g.assign_sub(&running, &delta).s()?);
    }
    let out = n.output(0).ok_or("no output")?;
    if nhwc { imp.set_nhwc(out, y) } else { imp.set_out(out, y) }
    Ok(())
}

/// A weight read as a constant, never trained (batch-norm statistics).
fn frozen(imp: &mut Importer, name: &str) -> Result<Output, String> {
    match imp.weight(name).cloned() {
        Some(t) => imp.g.constant(t).s(),
        None => imp.out(name),
    }
}

pub(super) fn layer_norm(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    if (1..3).any(|k| n.output(k).is_some_and(|o| imp.readers(o) > 0)) {
        return Err("the Mean and InvStdDev outputs are read; they are not imported".into());
    }
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let shape = imp.shape(x)?;
    let ax = axis(n.int("axis", -1), shape.len())?;
    let features = super::super::lit::numel(&shape[ax..]).ok_or("shape overflows")?;
    let xi = imp.out(x)?;
    let flat = |o: &Output| if ax + 1 == shape.len() { Ok(o.clone()) } else { g.reshape(o, &[-1, features as i64]).s() };
    let gamma = g.reshape(imp.out(n.need(1)?)?, &[features as i64]).s()?;
    let beta = match n.input(2) {
        Some(b) => g.reshape(imp.out(b)?, &[features as i64]).s()?,
        None => g.zeros(xi.dtype(), [features]).s()?,
    };
    let (y, _, _) = g.layer_norm(flat(&xi)?, &gamma, &beta, f64::from(n.float("epsilon", 1e-5))).s()?;
    let y = if ax + 1 == shape.len() { y } else { g.reshape(&y, &dims_i64(&shape)).s()? };
    imp.set_out(out, y);
    Ok(())
}

pub(super) fn reduce(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let rank = imp.shape(x)?.len();
    let given = match n.ints("axes") {
        Some(a) => Some(a.to_vec()),
        None => const_ints(imp, n, 1, "axes")?,
    };
    let axes: Vec<usize> = match given.filter(|a| !a.is_empty()) {
        Some(a) => a.iter().map(|&v| axis(v, rank)).collect::<Result<_, _>>()?,
        None if n.int("noop_with_empty_axes", 0) != 0 => return imp.alias(out, x),
        None => (0..rank).collect(),
    };
    let keep = n.int("keepdims", 1) != 0;
    // NCHW axis i sits at NHWC position [0, 3, 1, 2][i]; an NHWC result is
    // the NCHW one when its kept axes stay in the same order
    let pos = [0usize, 3, 1, 2];
    let order_kept = keep || axes.contains(&1) || (axes.contains(&2) && axes.contains(&3));
    let nhwc = imp.is_nhwc(x) && rank == 4 && order_kept;
    let (xi, axes): (Output, Vec<i64>) = if nhwc {
        (imp.nhwc(x)?, axes.iter().map(|&a| pos[a] as i64).collect())
    } else {
        (imp.out(x)?, axes.iter().map(|&a| a as i64).collect())
    };
    let y = match n.op {
        "ReduceMean" => g.reduce_mean(&xi, &axes, keep),
        "ReduceSum" => g.reduce_sum(&xi, &axes, keep),
        _ => g.reduce_max(&xi, &axes, keep),
    }
    .s()?;
    if nhwc && keep { imp.set_nhwc(out, y) } else { imp.set_out(out, y) }
    Ok(())
}
