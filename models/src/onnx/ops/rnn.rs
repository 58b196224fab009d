//! ONNX's LSTM unrolled over its (static) sequence into the engine's
//! LSTMBlockCell, TensorFlow's fused cell. ONNX orders the gates i, o, f, c
//! and keeps input and recurrent weights apart (`W [dirs, 4H, I]`,
//! `R [dirs, 4H, H]`, two biases); the cell takes one kernel
//! `[I + H, 4H]` over `concat(x, h)` with gates i, c, f, o and one bias,
//! so the weights are laid out once, at import, and train as that kernel.

use super::super::convert::{Importer, Node};
use super::super::lit::Lit;
use super::Str;
use flowlab_engine::{DType, Graph, Output, Tensor};

/// For each of the cell's gates (i, c, f, o), its block in ONNX's order.
const ONNX_BLOCK: [usize; 4] = [0, 3, 2, 1];

fn weights(imp: &Importer, name: &str) -> Result<Lit, String> {
    match (imp.weight(name), imp.lit(name)) {
        (Some(t), _) => Lit::from_tensor(t),
        (_, Some(l)) => Ok(l.clone()),
        _ => Err(format!("'{name}' must be an initializer (the importer lays the LSTM's weights out once)")),
    }
}

pub(super) fn lstm(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    let activations = n.strings("activations");
    if !activations.is_empty() && activations.chunks(3).any(|a| a != ["Sigmoid", "Tanh", "Tanh"]) {
        return Err(format!("activations {activations:?} are not imported (only Sigmoid, Tanh, Tanh)"));
    }
    if n.float("clip", 0.0) != 0.0 || n.int("input_forget", 0) != 0 || n.input(7).is_some() {
        return Err("clip, input_forget and peepholes are not imported".into());
    }
    let layout = n.int("layout", 0);
    let x = n.need(0)?;
    let xs = imp.shape(x)?;
    let &[a, b, input] = xs.as_slice() else { return Err(format!("X of shape {xs:?} is not rank 3")) };
    let (seq, batch) = if layout == 0 { (a, b) } else { (b, a) };
    // each step is its own cell in the graph
    const MAX_STEPS: usize = 10_000;
    if seq > MAX_STEPS {
        return Err(format!("a sequence of {seq} steps is more than the {MAX_STEPS} the importer unrolls"));
    }
    let hidden = usize::try_from(n.int("hidden_size", 0)).ok().filter(|&h| h > 0).ok_or("hidden_size is required")?;
    let dirs = match n.string("direction").as_deref().unwrap_or("forward") {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(format!("direction '{d}' is none of forward, reverse, bidirectional")),
    };
    if let Some(lens) = n.input(4) {
        match imp.lit(lens) {
            Some(l) if l.data.iter().all(|&v| v as usize == seq) => {}
            _ => return Err("sequence_lens other than the whole sequence are not imported".into()),
        }
    }
    let (w, r) = (weights(imp, n.need(1)?)?, weights(imp, n.need(2)?)?);
    let bias = n.input(3).map(|b| weights(imp, b)).transpose()?;
    if let Some(b) = bias.as_ref().filter(|b| b.shape != [dirs.len(), 8 * hidden]) {
        return Err(format!("B {:?} is not [{}, {}]", b.shape, dirs.len(), 8 * hidden));
    }
    if w.shape != [dirs.len(), 4 * hidden, input] || r.shape != [dirs.len(), 4 * hidden, hidden] {
        return Err(format!("W {:?} and R {:?} do not match {} direction(s), hidden {hidden}, input {input}", w.shape, r.shape, dirs.len()));
    }
    let xo = imp.out(x)?;
    let dtype = xo.dtype();
    let mut ys: Vec<Vec<Output>> = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in dirs.iter().enumerate() {
        let (kernel, b4) = cell_weights(&w, &r, bias.as_ref(), d, input, hidden, dtype)?;
        let name = format!("{}/{}", n.name, if reverse { "bw" } else { "fw" });
        let kernel = imp.variable(&format!("{name}/kernel"), kernel)?;
        let b4 = imp.variable(&format!("{name}/bias"), b4)?;
        let mut init = |k: usize| -> Result<Output, String> {
            match n.input(k) {
                Some(s) => {
                    let o = imp_out_slice(imp, g, s, d, batch, hidden)?;
                    Ok(o)
                }
                None => g.zeros(dtype, [batch, hidden]).s(),
            }
        };
        let (mut h, mut c) = (init(5)?, init(6)?);
        let mut out = vec![None; seq];
        let steps: Vec<usize> = if reverse { (0..seq).rev().collect() } else { (0..seq).collect() };
        for t in steps {
            let begin = if layout == 0 { [t as i64, 0, 0] } else { [0, t as i64, 0] };
            let size = if layout == 0 { [1, batch as i64, input as i64] } else { [batch as i64, 1, input as i64] };
            let xt = g.reshape(g.slice(&xo, &begin, &size).s()?, &[batch as i64, input as i64]).s()?;
            let cell = g.lstm_block_cell(&xt, &c, &h, &kernel, &b4, 0.0).s()?;
            (h, c) = (cell.h, cell.cs);
            out[t] = Some(h.clone());
        }
        ys.push(out.into_iter().collect::<Option<Vec<_>>>().ok_or("an unrolled step is missing")?);
        hs.push(h);
        cs.push(c);
    }
    // Y: [seq, dirs, batch, H] (layout 0) or [batch, seq, dirs, H]
    if let Some(yname) = n.output(0) {
        let mut steps = Vec::with_capacity(seq);
        for t in 0..seq {
            let per_dir: Vec<Output> = ys.iter().map(|y| g.reshape(&y[t], &[1, batch as i64, hidden as i64])).collect::<Result<_, _>>().s()?;
            let refs: Vec<&Output> = per_dir.iter().collect();
            steps.push(g.concat(&refs, 0).s()?);
        }
        let refs: Vec<&Output> = steps.iter().collect();
        // [seq * dirs, batch, H] -> [seq, dirs, batch, H]
        let y = g.reshape(g.concat(&refs, 0).s()?, &[seq as i64, dirs.len() as i64, batch as i64, hidden as i64]).s()?;
        let y = if layout == 0 { y } else { g.transpose(&y, &[2, 0, 1, 3]).s()? };
        imp.set_out(yname, y);
    }
    for (k, states) in [(1, &hs), (2, &cs)] {
        if let Some(name) = n.output(k) {
            let parts: Vec<Output> = states.iter().map(|s| g.reshape(s, &[1, batch as i64, hidden as i64])).collect::<Result<_, _>>().s()?;
            let refs: Vec<&Output> = parts.iter().collect();
            let s = g.concat(&refs, 0).s()?;
            let s = if layout == 0 { s } else { g.transpose(&s, &[1, 0, 2]).s()? };
            imp.set_out(name, s);
        }
    }
    Ok(())
}

/// Direction `d`'s initial state `[dirs, batch, H]` as `[batch, H]`.
fn imp_out_slice(imp: &mut Importer, g: &Graph, name: &str, d: usize, batch: usize, hidden: usize) -> Result<Output, String> {
    let o = imp.out(name)?;
    g.reshape(g.slice(&o, &[d as i64, 0, 0], &[1, batch as i64, hidden as i64]).s()?, &[batch as i64, hidden as i64]).s()
}

/// The cell's kernel `[I + H, 4H]` and bias `[4H]` of direction `d`.
fn cell_weights(w: &Lit, r: &Lit, bias: Option<&Lit>, d: usize, input: usize, hidden: usize, dtype: DType) -> Result<(Tensor, Tensor), String> {
    let h4 = 4 * hidden;
    let mut kernel = vec![0.0f64; (input + hidden) * h4];
    let mut b = vec![0.0f64; h4];
    for (gate, &blk) in ONNX_BLOCK.iter().enumerate() {
        for j in 0..hidden {
            let row = blk * hidden + j;
            let col = gate * hidden + j;
            for k in 0..input {
                kernel[k * h4 + col] = w.data[(d * h4 + row) * input + k];
            }
            for k in 0..hidden {
                kernel[(input + k) * h4 + col] = r.data[(d * h4 + row) * hidden + k];
            }
            if let Some(bias) = bias {
                b[col] = bias.data[d * 2 * h4 + row] + bias.data[d * 2 * h4 + h4 + row];
            }
        }
    }
    let kt = Lit::new(dtype, vec![input + hidden, h4], kernel)?.to_tensor()?;
    let bt = Lit::new(dtype, vec![h4], b)?.to_tensor()?;
    Ok((kt, bt))
}
