//! Elementwise operators, Cast, Where and Softmax. Constants are folded;
//! an image carried as NHWC stays NHWC through them, its other operand
//! laid out to match (a `[C, 1, 1]` bias becomes `[C]` on the last axis).

use super::super::convert::{Importer, Node};
use super::super::lit::Lit;
use super::{Str, axis};
use flowlab_engine::{DType, Graph, Output};

fn fold_binary(op: &str, a: &Lit, b: &Lit, fmod: bool) -> Result<Lit, String> {
    let int = a.is_int();
    let cmp = |f: fn(f64, f64) -> bool| move |x: f64, y: f64| if f(x, y) { 1.0 } else { 0.0 };
    match op {
        "Add" => a.zip(b, a.dtype, |x, y| x + y),
        "Sub" => a.zip(b, a.dtype, |x, y| x - y),
        "Mul" => a.zip(b, a.dtype, |x, y| x * y),
        "Div" if int => {
            if b.data.contains(&0.0) {
                return Err("integer division by zero".into());
            }
            a.zip(b, a.dtype, |x, y| (x / y).trunc())
        }
        "Div" => a.zip(b, a.dtype, |x, y| x / y),
        "Pow" => a.zip(b, a.dtype, f64::powf),
        "Max" => a.zip(b, a.dtype, f64::max),
        "Min" => a.zip(b, a.dtype, f64::min),
        "Mod" if int && b.data.contains(&0.0) => Err("integer modulo by zero".into()),
        // fmod 0: the sign of the divisor (Python's %); 1: of the dividend (C's fmod)
        "Mod" if fmod => a.zip(b, a.dtype, |x, y| x % y),
        "Mod" => a.zip(b, a.dtype, |x, y| x - (x / y).floor() * y),
        "Equal" => a.zip(b, DType::Bool, cmp(|x, y| x == y)),
        "Less" => a.zip(b, DType::Bool, cmp(|x, y| x < y)),
        "Greater" => a.zip(b, DType::Bool, cmp(|x, y| x > y)),
        _ => Err(format!("{op} is not folded")),
    }
}

/// Operand `name` for an op with an engine value of `dtype`: a constant
/// takes that type (ONNX files mix an f32 tensor with a double scalar).
fn operand(imp: &mut Importer, name: &str, dtype: DType, nhwc: bool) -> Result<Output, String> {
    let shape = imp.shape(name)?;
    if let Some(l) = imp.lit(name).cloned() {
        let mut l = Lit { dtype, ..l };
        if nhwc && !shape.is_empty() {
            let padded: Vec<usize> = std::iter::repeat_n(1, 4usize.saturating_sub(shape.len())).chain(shape.iter().copied()).collect();
            l = l.reshape(padded)?.transpose(&[0, 2, 3, 1]);
        }
        return imp.g.constant(l.to_tensor()?).s();
    }
    if !nhwc || shape.is_empty() {
        return imp.out(name);
    }
    if shape.len() == 4 {
        return imp.nhwc(name);
    }
    // a lower-rank operand broadcast against NCHW: [.., C, H, W] -> NHWC
    let padded: Vec<i64> = std::iter::repeat_n(1, 4 - shape.len()).chain(shape.iter().map(|&d| d as i64)).collect();
    let o = imp.out(name)?;
    let g = imp.g.clone();
    g.transpose(g.reshape(&o, &padded).s()?, &[0, 2, 3, 1]).s()
}

pub(super) fn binary(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    if n.p.input.len() != 2 {
        return Err(format!("takes 2 inputs here, got {}", n.p.input.len()));
    }
    let (a, b, out) = (n.need(0)?, n.need(1)?, n.output(0).ok_or("no output")?);
    if let (Some(x), Some(y)) = (imp.lit(a), imp.lit(b)) {
        let l = fold_binary(n.op, x, y, n.int("fmod", 0) != 0)?;
        imp.set_lit(out, l);
        return Ok(());
    }
    // an engine value gives the element type; a constant follows it
    let dtype = if imp.lit(a).is_none() { imp.dtype(a)? } else { imp.dtype(b)? };
    let (ra, rb) = (imp.shape(a)?.len(), imp.shape(b)?.len());
    let nhwc = (imp.is_nhwc(a) || imp.is_nhwc(b)) && ra <= 4 && rb <= 4 && (ra == 4 || rb == 4);
    // x ** 2 and x ** 0.5 as the ops their gradients are simplest for
    if n.op == "Pow"
        && let Some(e) = imp.lit(b).filter(|l| l.data.len() == 1).map(|l| l.data[0])
        && (e == 2.0 || e == 0.5)
    {
        let x = if imp.is_nhwc(a) { imp.nhwc(a)? } else { imp.out(a)? };
        let y = if e == 2.0 { g.square(&x) } else { g.sqrt(&x) }.s()?;
        return set(imp, out, y, imp.is_nhwc(a));
    }
    let (x, y) = (operand(imp, a, dtype, nhwc)?, operand(imp, b, dtype, nhwc)?);
    let r = match n.op {
        "Add" => g.add(&x, &y),
        "Sub" => g.sub(&x, &y),
        "Mul" => g.mul(&x, &y),
        "Div" => g.div(&x, &y),
        "Pow" => g.pow(&x, &y),
        "Max" => g.maximum(&x, &y),
        "Min" => g.minimum(&x, &y),
        "Equal" => g.equal(&x, &y),
        "Less" => g.less(&x, &y),
        "Greater" => g.greater(&x, &y),
        op => return Err(format!("{op} of values of the running graph is not imported (only of constants)")),
    }
    .s()?;
    set(imp, out, r, nhwc)
}

fn set(imp: &mut Importer, name: &str, o: Output, nhwc: bool) -> Result<(), String> {
    if nhwc { imp.set_nhwc(name, o) } else { imp.set_out(name, o) }
    Ok(())
}

pub(super) fn unary(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (a, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    if let Some(l) = imp.lit(a) {
        let f: fn(f64) -> f64 = match n.op {
            "Abs" => f64::abs,
            "Neg" => |x| -x,
            "Relu" => |x| x.max(0.0),
            "Sqrt" => f64::sqrt,
            "Exp" => f64::exp,
            "Log" => f64::ln,
            "Reciprocal" => f64::recip,
            "Tanh" => f64::tanh,
            "Sigmoid" => |x| 1.0 / (1.0 + (-x).exp()),
            "Erf" => libm::erf,
            op => return Err(format!("{op} is not folded")),
        };
        let l = l.map(l.dtype, f);
        imp.set_lit(out, l);
        return Ok(());
    }
    let nhwc = imp.is_nhwc(a);
    let x = if nhwc { imp.nhwc(a)? } else { imp.out(a)? };
    let y = match n.op {
        "Relu" => g.relu(&x),
        "Sigmoid" => g.sigmoid(&x),
        "Tanh" => g.tanh(&x),
        "Erf" => g.erf(&x),
        "Sqrt" => g.sqrt(&x),
        "Exp" => g.exp(&x),
        "Log" => g.log(&x),
        "Neg" => g.neg(&x),
        "Abs" => g.maximum(&x, g.neg(&x).s()?),
        "Reciprocal" => g.div(g.scalar(1.0, x.dtype()).s()?, &x),
        op => return Err(format!("{op} is not imported")),
    }
    .s()?;
    set(imp, out, y, nhwc)
}

/// Identity and inference-time Dropout: the output is the input.
pub(super) fn identity(imp: &mut Importer, n: &Node, _g: &Graph) -> Result<(), String> {
    if n.op == "Dropout" && n.output(1).is_some_and(|m| imp.readers(m) > 0) {
        return Err("Dropout's mask is read; only inference-time Dropout (the identity) is imported".into());
    }
    imp.alias(n.output(0).ok_or("no output")?, n.need(0)?)
}

pub(super) fn cast(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (a, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let to = super::super::tensor::dtype_of(n.int("to", 0) as i32)?;
    if let Some(l) = imp.lit(a) {
        let l = l.map(to, |x| match to {
            DType::I64 | DType::I32 | DType::I8 => x.trunc(),
            DType::Bool => f64::from(u8::from(x != 0.0)),
            _ => x,
        });
        imp.set_lit(out, l);
        return Ok(());
    }
    if imp.dtype(a)? == to {
        return imp.alias(out, a);
    }
    let nhwc = imp.is_nhwc(a);
    let x = if nhwc { imp.nhwc(a)? } else { imp.out(a)? };
    let y = g.cast(&x, to).s()?;
    set(imp, out, y, nhwc)
}

pub(super) fn where_(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (c, a, b, out) = (n.need(0)?, n.need(1)?, n.need(2)?, n.output(0).ok_or("no output")?);
    if let (Some(cl), Some(al), Some(bl)) = (imp.lit(c), imp.lit(a), imp.lit(b)) {
        let l = Lit::select(cl, al, bl)?;
        imp.set_lit(out, l);
        return Ok(());
    }
    // an engine value gives the branches' element type; a constant follows it
    let dtype = if imp.lit(a).is_none() { imp.dtype(a)? } else { imp.dtype(b)? };
    let cond = match imp.lit(c) {
        Some(l) => imp.g.constant(Lit { dtype: DType::Bool, ..l.clone() }.to_tensor()?).s()?,
        None => imp.out(c)?,
    };
    let (x, y) = (operand(imp, a, dtype, false)?, operand(imp, b, dtype, false)?);
    let r = g.select(&cond, &x, &y).s()?;
    imp.set_out(out, r);
    Ok(())
}

/// The upper (`upper` 1) or lower triangle of the last two axes from
/// diagonal `k`, the rest zero: folded over a constant, else a Select
/// over a mask computed here from the static shape.
pub(super) fn trilu(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (x, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let k = super::const_ints(imp, n, 1, "k")?.and_then(|v| v.first().copied()).unwrap_or(0);
    let upper = n.int("upper", 1) != 0;
    let shape = imp.shape(x)?;
    let [.., rows, cols] = shape[..] else { return Err(format!("input of shape {shape:?} has no matrix axes")) };
    let keep = |i: usize, j: usize| if upper { j as i64 - i as i64 >= k } else { j as i64 - i as i64 <= k };
    let mask: Vec<f64> = (0..rows * cols).map(|p| if keep(p / cols, p % cols) { 1.0 } else { 0.0 }).collect();
    let mask = Lit::new(DType::Bool, vec![rows, cols], mask)?;
    if let Some(l) = imp.lit(x) {
        let zero = Lit::new(l.dtype, vec![], vec![0.0])?;
        let r = Lit::select(&mask, l, &zero)?;
        imp.set_lit(out, r);
        return Ok(());
    }
    let xo = imp.out(x)?;
    let r = g.select(g.constant(mask.to_tensor()?).s()?, &xo, g.zeros_like(&xo).s()?).s()?;
    imp.set_out(out, r);
    Ok(())
}

pub(super) fn softmax(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let (a, out) = (n.need(0)?, n.output(0).ok_or("no output")?);
    let rank = imp.shape(a)?.len();
    let ax = axis(n.int("axis", -1), rank)?;
    let x = imp.out(a)?;
    let y = if ax + 1 == rank {
        g.softmax(&x).s()?
    } else {
        let mut perm: Vec<i64> = (0..rank as i64).collect();
        perm.swap(ax, rank - 1);
        g.transpose(g.softmax(g.transpose(&x, &perm).s()?).s()?, &perm).s()?
    };
    imp.set_out(out, y);
    Ok(())
}
