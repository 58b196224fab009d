//! Constants, shapes and index operators. Over constants they fold (the
//! importer computes them once); over values of the running graph they
//! become the engine's Reshape, Transpose, Concat, Slice and Gather.

use super::super::convert::{Importer, Node};
use super::super::lit::{Lit, norm_index, numel};
use super::super::tensor;
use super::{Str, axis, const_ints, dims_i64};
use flowlab_engine::{DType, Graph, Output};

fn out0<'n>(n: &Node<'n>) -> Result<&'n str, String> {
    n.output(0).ok_or_else(|| "no output".to_string())
}

pub(super) fn constant(imp: &mut Importer, n: &Node, _g: &Graph) -> Result<(), String> {
    let l = if let Some(t) = n.tensor("value") {
        Lit::from_tensor(&tensor::to_tensor(t, std::path::Path::new("."))?)?
    } else if let Some(f) = n.p.attribute.iter().find(|a| a.name() == "value_float").and_then(|a| a.f) {
        Lit::new(DType::F32, vec![], vec![f64::from(f)])?
    } else if let Some(i) = n.p.attribute.iter().find(|a| a.name() == "value_int").and_then(|a| a.i) {
        Lit::new(DType::I64, vec![], vec![i as f64])?
    } else if let Some(v) = n.p.attribute.iter().find(|a| a.name() == "value_floats") {
        Lit::new(DType::F32, vec![v.floats.len()], v.floats.iter().map(|&f| f64::from(f)).collect())?
    } else if let Some(v) = n.p.attribute.iter().find(|a| a.name() == "value_ints") {
        Lit::ints(DType::I64, &v.ints)
    } else {
        return Err("holds none of value, value_float(s), value_int(s) (sparse and string constants are not imported)".into());
    };
    imp.set_lit(out0(n)?, l);
    Ok(())
}

pub(super) fn constant_of_shape(imp: &mut Importer, n: &Node, _g: &Graph) -> Result<(), String> {
    let shape = const_ints(imp, n, 0, "shape")?.ok_or("input 0 is required")?;
    let shape: Vec<usize> = shape.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}"))).collect::<Result<_, _>>()?;
    let (dtype, v) = match n.tensor("value") {
        Some(t) => {
            let l = Lit::from_tensor(&tensor::to_tensor(t, std::path::Path::new("."))?)?;
            (l.dtype, l.data.first().copied().unwrap_or(0.0))
        }
        None => (DType::F32, 0.0),
    };
    let count = super::super::lit::folded_len(&shape)?;
    imp.set_lit(out0(n)?, Lit::new(dtype, shape, vec![v; count])?);
    Ok(())
}

pub(super) fn shape(imp: &mut Importer, n: &Node, _g: &Graph) -> Result<(), String> {
    let s = dims_i64(&imp.shape(n.need(0)?)?);
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (start, end) = (clamp(n.int("start", 0)), clamp(n.int("end", r)));
    imp.set_lit(out0(n)?, Lit::ints(DType::I64, &s[start..end.max(start)]));
    Ok(())
}

/// The target shape of a Reshape: 0 copies the input's dimension (unless
/// `allowzero`), -1 takes what is left.
fn reshape_dims(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let total = numel(input).ok_or_else(|| format!("input shape {input:?} overflows"))?;
    let mut out: Vec<Option<usize>> = Vec::with_capacity(spec.len());
    for (i, &d) in spec.iter().enumerate() {
        out.push(match d {
            -1 => None,
            0 if !allowzero => Some(*input.get(i).ok_or_else(|| format!("0 at position {i} copies no dimension of {input:?}"))?),
            d if d >= 0 => Some(d as usize),
            d => return Err(format!("dimension {d} in shape {spec:?}")),
        });
    }
    let known = out.iter().flatten().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| format!("shape {spec:?} overflows"))?;
    match out.iter().filter(|d| d.is_none()).count() {
        0 if known == total => Ok(out.into_iter().flatten().collect()),
        1 if known > 0 && total % known == 0 => Ok(out.into_iter().map(|d| d.unwrap_or(total / known)).collect()),
        _ => Err(format!("cannot reshape {input:?} ({total} elements) to {spec:?}")),
    }
}

fn reshape_to(imp: &mut Importer, g: &Graph, x: &str, out: &str, dims: Vec<usize>) -> Result<(), String> {
    if let Some(l) = imp.lit(x) {
        let l = l.reshape(dims)?;
        imp.set_lit(out, l);
        return Ok(());
    }
    let o = imp.out(x)?;
    let y = g.reshape(&o, &dims_i64(&dims)).s()?;
    imp.set_out(out, y);
    Ok(())
}

pub(super) fn reshape(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let spec = const_ints(imp, n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
    let dims = reshape_dims(&imp.shape(x)?, &spec, n.int("allowzero", 0) != 0)?;
    reshape_to(imp, g, x, out0(n)?, dims)
}

pub(super) fn flatten(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let s = imp.shape(x)?;
    let a = norm_index(n.int("axis", 1), s.len() + 1).ok_or("axis outside the rank")?;
    let dims = vec![numel(&s[..a]).ok_or("shape overflows")?, numel(&s[a..]).ok_or("shape overflows")?];
    reshape_to(imp, g, x, out0(n)?, dims)
}

fn axes_of(imp: &Importer, n: &Node) -> Result<Option<Vec<i64>>, String> {
    match n.ints("axes") {
        Some(a) => Ok(Some(a.to_vec())),
        None => const_ints(imp, n, 1, "axes"),
    }
}

pub(super) fn squeeze(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let s = imp.shape(x)?;
    let axes: Vec<usize> = match axes_of(imp, n)? {
        Some(a) => a.iter().map(|&v| axis(v, s.len())).collect::<Result<_, _>>()?,
        None => (0..s.len()).filter(|&i| s[i] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| s[a] != 1) {
        return Err(format!("axis {a} of {s:?} is not 1"));
    }
    let dims = s.iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
    reshape_to(imp, g, x, out0(n)?, dims)
}

pub(super) fn unsqueeze(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let s = imp.shape(x)?;
    let axes = axes_of(imp, n)?.ok_or("axes are required")?;
    let rank = s.len() + axes.len();
    let mut axes: Vec<usize> = axes.iter().map(|&v| axis(v, rank)).collect::<Result<_, _>>()?;
    axes.sort_unstable();
    let mut dims = s.clone();
    for a in axes {
        dims.insert(a, 1);
    }
    reshape_to(imp, g, x, out0(n)?, dims)
}

pub(super) fn transpose(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let rank = imp.shape(x)?.len();
    let perm: Vec<usize> = match n.ints("perm") {
        Some(p) => p.iter().map(|&v| axis(v, rank)).collect::<Result<_, _>>()?,
        None => (0..rank).rev().collect(),
    };
    let mut seen = vec![false; rank];
    if perm.len() != rank || perm.iter().any(|&p| std::mem::replace(&mut seen[p], true)) {
        return Err(format!("perm {:?} is not a permutation of {rank} axes", n.ints("perm").unwrap_or_default()));
    }
    if let Some(l) = imp.lit(x) {
        let l = l.transpose(&perm);
        imp.set_lit(out0(n)?, l);
        return Ok(());
    }
    // NCHW -> NHWC of an image carried as NHWC is that image
    let y = if imp.is_nhwc(x) && perm == [0, 2, 3, 1] {
        imp.nhwc(x)?
    } else {
        let o = imp.out(x)?;
        g.transpose(&o, &perm.iter().map(|&p| p as i64).collect::<Vec<_>>()).s()?
    };
    imp.set_out(out0(n)?, y);
    Ok(())
}

pub(super) fn concat(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let names: Vec<&str> = n.p.input.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
    let first = names.first().ok_or("no inputs")?;
    let rank = imp.shape(first)?.len();
    let ax = axis(n.int("axis", 0), rank)?;
    if names.iter().all(|x| imp.lit(x).is_some()) {
        let parts: Vec<Lit> = names.iter().filter_map(|x| imp.lit(x).cloned()).collect();
        let l = Lit::concat(&parts, ax)?;
        imp.set_lit(out0(n)?, l);
        return Ok(());
    }
    let nhwc = rank == 4 && names.iter().any(|x| imp.is_nhwc(x));
    let parts: Vec<Output> = names.iter().map(|x| if nhwc { imp.nhwc(x) } else { imp.out(x) }).collect::<Result<_, _>>()?;
    let refs: Vec<&Output> = parts.iter().collect();
    if nhwc {
        let y = g.concat(&refs, [0, 3, 1, 2][ax]).s()?;
        imp.set_nhwc(out0(n)?, y);
    } else {
        let y = g.concat(&refs, ax as i64).s()?;
        imp.set_out(out0(n)?, y);
    }
    Ok(())
}

/// Part of `x` from `begin` with `size` per axis.
fn slice_to(imp: &mut Importer, g: &Graph, x: &str, out: &str, begin: &[usize], size: &[usize]) -> Result<(), String> {
    if let Some(l) = imp.lit(x) {
        let l = l.slice(begin, size);
        imp.set_lit(out, l);
        return Ok(());
    }
    let o = imp.out(x)?;
    let y = g.slice(&o, &dims_i64(begin), &dims_i64(size)).s()?;
    imp.set_out(out, y);
    Ok(())
}

pub(super) fn split(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let s = imp.shape(x)?;
    let ax = axis(n.int("axis", 0), s.len())?;
    let outs: Vec<&str> = n.p.output.iter().map(String::as_str).collect();
    let sizes: Vec<usize> = match const_ints(imp, n, 1, "split")?.or_else(|| n.ints("split").map(<[i64]>::to_vec)) {
        Some(v) => v.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative split {d}"))).collect::<Result<_, _>>()?,
        None => {
            let k = outs.len().max(1);
            let chunk = s[ax].div_ceil(k);
            (0..k).map(|i| chunk.min(s[ax].saturating_sub(i * chunk))).collect()
        }
    };
    if sizes.len() != outs.len() || sizes.iter().sum::<usize>() != s[ax] {
        return Err(format!("split {sizes:?} into {} outputs does not cover axis {ax} of {s:?}", outs.len()));
    }
    let mut at = 0;
    for (o, len) in outs.iter().zip(sizes) {
        let mut begin = vec![0; s.len()];
        let mut size = s.clone();
        begin[ax] = at;
        size[ax] = len;
        at += len;
        if !o.is_empty() {
            slice_to(imp, g, x, o, &begin, &size)?;
        }
    }
    Ok(())
}

pub(super) fn slice(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let s = imp.shape(x)?;
    let starts = const_ints(imp, n, 1, "starts")?.ok_or("starts are required")?;
    let ends = const_ints(imp, n, 2, "ends")?.ok_or("ends are required")?;
    let axes = const_ints(imp, n, 3, "axes")?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = const_ints(imp, n, 4, "steps")?.unwrap_or_else(|| vec![1; starts.len()]);
    if [ends.len(), axes.len(), steps.len()].iter().any(|&l| l != starts.len()) {
        return Err("starts, ends, axes and steps differ in length".into());
    }
    let (mut begin, mut size) = (vec![0; s.len()], s.clone());
    for k in 0..starts.len() {
        let a = axis(axes[k], s.len())?;
        if steps[k] != 1 {
            return Err(format!("step {} along axis {a} is not imported (only 1)", steps[k]));
        }
        let dim = s[a] as i64;
        let clamp = |v: i64| (if v < 0 { v + dim } else { v }).clamp(0, dim);
        let (b, e) = (clamp(starts[k]), clamp(ends[k]));
        begin[a] = b as usize;
        size[a] = (e - b).max(0) as usize;
    }
    slice_to(imp, g, x, out0(n)?, &begin, &size)
}

pub(super) fn gather(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, idx, out) = (n.need(0)?, n.need(1)?, out0(n)?);
    let s = imp.shape(x)?;
    let ax = axis(n.int("axis", 0), s.len())?;
    if let (Some(d), Some(i)) = (imp.lit(x), imp.lit(idx)) {
        let l = d.gather(ax, i)?;
        imp.set_lit(out, l);
        return Ok(());
    }
    let indices: Output = match imp.lit(idx) {
        // constant indices counted from the end are made plain
        Some(l) => {
            let fixed: Vec<i64> = l.as_ints().iter().map(|&i| norm_index(i, s[ax]).map(|v| v as i64).ok_or(format!("index {i} outside a dimension of {}", s[ax]))).collect::<Result<_, _>>()?;
            imp.g.constant(Lit::new(DType::I64, l.shape.clone(), fixed.iter().map(|&v| v as f64).collect())?.to_tensor()?).s()?
        }
        None => imp.out(idx)?,
    };
    let data = imp.out(x)?;
    let y = if ax == 0 {
        g.gather(&data, &indices).s()?
    } else {
        // the axis to the front, gathered, and back after the index dims
        let mut perm: Vec<i64> = (0..s.len() as i64).collect();
        perm.remove(ax);
        perm.insert(0, ax as i64);
        let front = g.gather(g.transpose(&data, &perm).s()?, &indices).s()?;
        let ir = imp.shape(idx)?.len();
        let r = front.shape().rank();
        // front: [idx.., s without ax]; want [s[..ax], idx.., s[ax+1..]]
        let mut back: Vec<i64> = (ir..ir + ax).map(|v| v as i64).collect();
        back.extend((0..ir).map(|v| v as i64));
        back.extend((ir + ax..r).map(|v| v as i64));
        g.transpose(&front, &back).s()?
    };
    imp.set_out(out, y);
    Ok(())
}

pub(super) fn expand(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let x = n.need(0)?;
    let spec = const_ints(imp, n, 1, "shape")?.ok_or("input 1 (shape) is required")?;
    let want: Vec<usize> = spec.iter().map(|&d| d.max(1) as usize).collect();
    let shape = super::super::lit::broadcast(&imp.shape(x)?, &want)?;
    if let Some(l) = imp.lit(x) {
        let ones = Lit::new(l.dtype, shape.clone(), vec![0.0; super::super::lit::folded_len(&shape)?])?;
        let e = l.zip(&ones, l.dtype, |a, _| a)?;
        imp.set_lit(out0(n)?, e);
        return Ok(());
    }
    let o = imp.out(x)?;
    let y = g.add(&o, g.zeros(o.dtype(), shape).s()?).s()?;
    imp.set_out(out0(n)?, y);
    Ok(())
}

pub(super) fn range(imp: &mut Importer, n: &Node, _g: &Graph) -> Result<(), String> {
    let get = |i: usize| imp.lit(n.need(i)?).and_then(|l| l.data.first().copied()).ok_or(format!("input {i} must be a constant scalar"));
    let (start, limit, delta) = (get(0)?, get(1)?, get(2)?);
    if delta == 0.0 {
        return Err("delta 0".into());
    }
    let count = ((limit - start) / delta).ceil().max(0.0) as usize;
    if count > super::super::lit::MAX_FOLDED {
        return Err(format!("{count} elements are too many to fold"));
    }
    let dtype = imp.lit(n.need(0)?).map_or(DType::I64, |l| l.dtype);
    let data = (0..count).map(|i| start + i as f64 * delta).collect();
    imp.set_lit(out0(n)?, Lit::new(dtype, vec![count], data)?);
    Ok(())
}
