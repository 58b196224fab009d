//! ONNX's recurrent ops unrolled over their (static) sequence.
//!
//! LSTM goes into the engine's LSTMBlockCell, TensorFlow's fused cell.
//! ONNX orders the gates i, o, f, c and keeps input and recurrent weights
//! apart (`W [dirs, 4H, I]`, `R [dirs, 4H, H]`, two biases); the cell takes
//! one kernel `[I + H, 4H]` over `concat(x, h)` with gates i, c, f, o and
//! one bias, so the weights are laid out once, at import, and train as that
//! kernel. GRU and RNN are built from MatMul, Sigmoid, Tanh and elementwise
//! ops, as TensorFlow 2016's `GRUCell` and `BasicRNNCell` were: the input
//! projection of every step in one product, the recurrent one per step,
//! weights `W^T [I, gates H]` and `R^T [H, gates H]` with both biases.

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

/// What the three recurrent ops share: the sequence's sizes, directions
/// and layout, and their weights checked against them.
struct Recurrence {
    seq: usize,
    batch: usize,
    input: usize,
    hidden: usize,
    /// `true` for a reverse direction, one entry per direction.
    dirs: Vec<bool>,
    layout: i64,
    w: Lit,
    r: Lit,
    bias: Option<Lit>,
    /// `sequence_lens` where some batch element is shorter than the
    /// sequence (or not known at import).
    lens: Option<String>,
}

/// For each step, a `[batch, 1]` 0/1 mask of the batch elements whose
/// sequence reaches it (`None`: all do).
type StepMasks = Option<Vec<Output>>;

impl Recurrence {
    /// Reads and checks `n`, an op of `gates` gates whose activations, when
    /// given, are `activations` per direction.
    fn read(imp: &Importer, n: &Node, gates: usize, activations: &[&str]) -> Result<Recurrence, String> {
        let given = n.strings("activations");
        if !given.is_empty() && given.chunks(activations.len()).any(|a| a != activations) {
            return Err(format!("activations {given:?} are not imported (only {activations:?})"));
        }
        if n.float("clip", 0.0) != 0.0 {
            return Err("clip is not imported".into());
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
        let lens = match n.input(4).map(|l| (l, imp.lit(l))) {
            None => None,
            Some((_, Some(l))) if l.data.iter().all(|&v| v as usize == seq) => None,
            Some((_, Some(l))) if l.data.len() != batch || l.data.iter().any(|&v| v < 1.0 || v > seq as f64) => {
                return Err(format!("sequence_lens {:?} are not {batch} lengths between 1 and {seq}", l.data));
            }
            Some((name, _)) => Some(name.to_string()),
        };
        let (w, r) = (weights(imp, n.need(1)?)?, weights(imp, n.need(2)?)?);
        let bias = n.input(3).map(|b| weights(imp, b)).transpose()?;
        let gh = gates * hidden;
        if let Some(b) = bias.as_ref().filter(|b| b.shape != [dirs.len(), 2 * gh]) {
            return Err(format!("B {:?} is not [{}, {}]", b.shape, dirs.len(), 2 * gh));
        }
        if w.shape != [dirs.len(), gh, input] || r.shape != [dirs.len(), gh, hidden] {
            return Err(format!("W {:?} and R {:?} do not match {} direction(s), hidden {hidden}, input {input}", w.shape, r.shape, dirs.len()));
        }
        Ok(Recurrence { seq, batch, input, hidden, dirs, layout, w, r, bias, lens })
    }

    /// Step masks from `sequence_lens`: step t of element b runs where
    /// t < lens[b]. A masked step keeps the state and outputs zeros, so
    /// the final state is the one after the element's last step (ONNX's
    /// Y_h) and a reverse direction starts at its element's last step.
    fn masks(&self, imp: &mut Importer, g: &Graph, dtype: DType) -> Result<StepMasks, String> {
        let Some(lens) = &self.lens else { return Ok(None) };
        let lens = g.reshape(g.cast(imp.out(lens)?, dtype).s()?, &[self.batch as i64, 1]).s()?;
        let steps = Lit::new(dtype, vec![1, self.seq], (0..self.seq).map(|t| t as f64).collect())?.to_tensor()?;
        let mask = g.cast(g.less(g.constant(steps).s()?, &lens).s()?, dtype).s()?;
        (0..self.seq).map(|t| g.slice(&mask, &[0, t as i64], &[self.batch as i64, 1]).s()).collect::<Result<Vec<_>, _>>().map(Some)
    }

    /// `new` where step `t` runs, `old` elsewhere.
    fn keep(g: &Graph, masks: &StepMasks, t: usize, new: Output, old: &Output) -> Result<Output, String> {
        match masks {
            None => Ok(new),
            Some(m) => g.add(old, &g.mul(&m[t], &g.sub(&new, old).s()?).s()?).s(),
        }
    }

    /// Step `t`'s output: the state where the step runs, zeros elsewhere.
    fn emit(g: &Graph, masks: &StepMasks, t: usize, h: &Output) -> Result<Output, String> {
        match masks {
            None => Ok(h.clone()),
            Some(m) => g.mul(&m[t], h).s(),
        }
    }

    /// The steps of a direction in the order they run.
    fn steps(&self, reverse: bool) -> Vec<usize> {
        if reverse { (0..self.seq).rev().collect() } else { (0..self.seq).collect() }
    }

    /// Step `t` of `x` as `[batch, input]`.
    fn step_input(&self, g: &Graph, x: &Output, t: usize) -> Result<Output, String> {
        let (b, i) = (self.batch as i64, self.input as i64);
        let (begin, size) = if self.layout == 0 { ([t as i64, 0, 0], [1, b, i]) } else { ([0, t as i64, 0], [b, 1, i]) };
        g.reshape(g.slice(x, &begin, &size).s()?, &[b, i]).s()
    }

    /// Direction `d`'s initial state from input `k`, or zeros.
    fn initial(&self, imp: &mut Importer, g: &Graph, n: &Node, k: usize, d: usize, dtype: DType) -> Result<Output, String> {
        match n.input(k) {
            Some(s) => imp_out_slice(imp, g, s, d, self.batch, self.hidden),
            None => g.zeros(dtype, [self.batch, self.hidden]).s(),
        }
    }

    /// Output 0, Y (`[seq, dirs, batch, H]`, or `[batch, seq, dirs, H]`
    /// in layout 1), from each direction's states in time order; then the
    /// final states (`[dirs, batch, H]`), `finals[j]` as output `j + 1`.
    fn set_outputs(&self, imp: &mut Importer, g: &Graph, n: &Node, ys: &[Vec<Output>], finals: &[&[Output]]) -> Result<(), String> {
        let (batch, hidden) = (self.batch as i64, self.hidden as i64);
        if let Some(yname) = n.output(0) {
            let mut steps = Vec::with_capacity(self.seq);
            for t in 0..self.seq {
                let per_dir: Vec<Output> = ys.iter().map(|y| g.reshape(&y[t], &[1, batch, hidden])).collect::<Result<_, _>>().s()?;
                let refs: Vec<&Output> = per_dir.iter().collect();
                steps.push(g.concat(&refs, 0).s()?);
            }
            let refs: Vec<&Output> = steps.iter().collect();
            // [seq * dirs, batch, H] -> [seq, dirs, batch, H]
            let y = g.reshape(g.concat(&refs, 0).s()?, &[self.seq as i64, self.dirs.len() as i64, batch, hidden]).s()?;
            let y = if self.layout == 0 { y } else { g.transpose(&y, &[2, 0, 1, 3]).s()? };
            imp.set_out(yname, y);
        }
        for (j, states) in finals.iter().enumerate() {
            if let Some(name) = n.output(j + 1) {
                let parts: Vec<Output> = states.iter().map(|s| g.reshape(s, &[1, batch, hidden])).collect::<Result<_, _>>().s()?;
                let refs: Vec<&Output> = parts.iter().collect();
                let s = g.concat(&refs, 0).s()?;
                let s = if self.layout == 0 { s } else { g.transpose(&s, &[1, 0, 2]).s()? };
                imp.set_out(name, s);
            }
        }
        Ok(())
    }
}

pub(super) fn lstm(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    if n.int("input_forget", 0) != 0 || n.input(7).is_some() {
        return Err("input_forget and peepholes are not imported".into());
    }
    let rec = Recurrence::read(imp, n, 4, &["Sigmoid", "Tanh", "Tanh"])?;
    let xo = imp.out(n.need(0)?)?;
    let dtype = xo.dtype();
    let masks = rec.masks(imp, g, dtype)?;
    let mut ys: Vec<Vec<Output>> = Vec::new();
    let (mut hs, mut cs) = (Vec::new(), Vec::new());
    for (d, &reverse) in rec.dirs.iter().enumerate() {
        let (kernel, b4) = cell_weights(&rec.w, &rec.r, rec.bias.as_ref(), d, rec.input, rec.hidden, dtype)?;
        let name = format!("{}/{}", n.name, if reverse { "bw" } else { "fw" });
        let kernel = imp.variable(&format!("{name}/kernel"), kernel)?;
        let b4 = imp.variable(&format!("{name}/bias"), b4)?;
        let (mut h, mut c) = (rec.initial(imp, g, n, 5, d, dtype)?, rec.initial(imp, g, n, 6, d, dtype)?);
        let mut out = vec![None; rec.seq];
        for t in rec.steps(reverse) {
            let xt = rec.step_input(g, &xo, t)?;
            let cell = g.lstm_block_cell(&xt, &c, &h, &kernel, &b4, 0.0).s()?;
            out[t] = Some(Recurrence::emit(g, &masks, t, &cell.h)?);
            (h, c) = (Recurrence::keep(g, &masks, t, cell.h, &h)?, Recurrence::keep(g, &masks, t, cell.cs, &c)?);
        }
        ys.push(out.into_iter().collect::<Option<Vec<_>>>().ok_or("an unrolled step is missing")?);
        hs.push(h);
        cs.push(c);
    }
    rec.set_outputs(imp, g, n, &ys, &[&hs, &cs])
}

pub(super) fn gru(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    gated(imp, n, g, true)
}

pub(super) fn rnn(imp: &mut Importer, n: &Node, g: &Graph) -> Result<(), String> {
    gated(imp, n, g, false)
}

/// GRU (gates z, r, h in ONNX's order) and RNN (one gate), unrolled.
/// GRU: z = sigmoid(x Wz + h Rz + Wbz + Rbz), r likewise, the candidate
/// tanh(x Wh + Wbh + r (h Rh + Rbh)) with `linear_before_reset` (PyTorch's
/// export) or tanh(x Wh + Wbh + (r h) Rh + Rbh) without, and
/// h' = (1 - z) candidate + z h. RNN: h' = tanh(x Wi + h Ri + Wbi + Rbi).
fn gated(imp: &mut Importer, n: &Node, g: &Graph, gru: bool) -> Result<(), String> {
    let rec = if gru { Recurrence::read(imp, n, 3, &["Sigmoid", "Tanh"])? } else { Recurrence::read(imp, n, 1, &["Tanh"])? };
    let gates = if gru { 3 } else { 1 };
    let linear_before_reset = n.int("linear_before_reset", 0) != 0;
    let (batch, gh) = (rec.batch as i64, (gates * rec.hidden) as i64);
    let xo = imp.out(n.need(0)?)?;
    let dtype = xo.dtype();
    let masks = rec.masks(imp, g, dtype)?;
    // every step's input projection in one product: rows [seq * batch, I], time-major
    let rows = if rec.layout == 0 { xo.clone() } else { g.transpose(&xo, &[1, 0, 2]).s()? };
    let rows = g.reshape(&rows, &[rec.seq as i64 * batch, rec.input as i64]).s()?;
    let (mut ys, mut hs) = (Vec::new(), Vec::new());
    for (d, &reverse) in rec.dirs.iter().enumerate() {
        let name = format!("{}/{}", n.name, if reverse { "bw" } else { "fw" });
        let [wt, rt, wb, rb] = gated_weights(&rec, d, gates, dtype)?;
        let wt = imp.variable(&format!("{name}/input_kernel"), wt)?;
        let rt = imp.variable(&format!("{name}/recurrent_kernel"), rt)?;
        let wb = imp.variable(&format!("{name}/input_bias"), wb)?;
        let rb = imp.variable(&format!("{name}/recurrent_bias"), rb)?;
        let xw = g.add(&g.matmul(&rows, &wt).s()?, &wb).s()?;
        let mut h = rec.initial(imp, g, n, 5, d, dtype)?;
        let mut out = vec![None; rec.seq];
        for t in rec.steps(reverse) {
            let xt = g.slice(&xw, &[t as i64 * batch, 0], &[batch, gh]).s()?;
            let next = if gru {
                gru_step(g, &xt, &h, &rt, &rb, rec.hidden, linear_before_reset)?
            } else {
                g.tanh(&g.add(&xt, &g.add(&g.matmul(&h, &rt).s()?, &rb).s()?).s()?).s()?
            };
            out[t] = Some(Recurrence::emit(g, &masks, t, &next)?);
            h = Recurrence::keep(g, &masks, t, next, &h)?;
        }
        ys.push(out.into_iter().collect::<Option<Vec<_>>>().ok_or("an unrolled step is missing")?);
        hs.push(h);
    }
    rec.set_outputs(imp, g, n, &ys, &[&hs])
}

/// One GRU step from `xt` (the step's input projection with its bias,
/// `[batch, 3H]`) and the state `h` (`[batch, H]`).
fn gru_step(g: &Graph, xt: &Output, h: &Output, rt: &Output, rb: &Output, hidden: usize, linear_before_reset: bool) -> Result<Output, String> {
    let hh = hidden as i64;
    // columns [k H, (k + n) H) of a [rows, 3H] matrix
    let cols = |x: &Output, rows: i64, k: i64, n: i64| g.slice(x, &[0, k * hh], &[rows, n * hh]).s();
    let batch = xt.shape().dims()[0].ok_or("a GRU input of unknown batch")? as i64;
    let (xzr, xh) = (cols(xt, batch, 0, 2)?, cols(xt, batch, 2, 1)?);
    let (r_zr, r_h) = (cols(rt, hh, 0, 2)?, cols(rt, hh, 2, 1)?);
    let (b_zr, b_h) = (g.slice(rb, &[0], &[2 * hh]).s()?, g.slice(rb, &[2 * hh], &[hh]).s()?);
    let zr = g.sigmoid(&g.add(&xzr, &g.add(&g.matmul(h, &r_zr).s()?, &b_zr).s()?).s()?).s()?;
    let (z, r) = (cols(&zr, batch, 0, 1)?, cols(&zr, batch, 1, 1)?);
    let recurrent = if linear_before_reset {
        g.mul(&r, &g.add(&g.matmul(h, &r_h).s()?, &b_h).s()?).s()?
    } else {
        g.add(&g.matmul(&g.mul(&r, h).s()?, &r_h).s()?, &b_h).s()?
    };
    let candidate = g.tanh(&g.add(&xh, &recurrent).s()?).s()?;
    // (1 - z) candidate + z h = candidate + z (h - candidate)
    g.add(&candidate, &g.mul(&z, &g.sub(h, &candidate).s()?).s()?).s()
}

/// Direction `d`'s `W^T [I, gates H]`, `R^T [H, gates H]` and its two
/// biases `[gates H]` (zeros where B is absent).
fn gated_weights(rec: &Recurrence, d: usize, gates: usize, dtype: DType) -> Result<[Tensor; 4], String> {
    let gh = gates * rec.hidden;
    let transposed = |m: &Lit, cols: usize| -> Vec<f64> {
        let mut t = vec![0.0; cols * gh];
        for row in 0..gh {
            for k in 0..cols {
                t[k * gh + row] = m.data[(d * gh + row) * cols + k];
            }
        }
        t
    };
    let (wb, rb) = match &rec.bias {
        Some(b) => (b.data[d * 2 * gh..d * 2 * gh + gh].to_vec(), b.data[d * 2 * gh + gh..(d + 1) * 2 * gh].to_vec()),
        None => (vec![0.0; gh], vec![0.0; gh]),
    };
    Ok([
        Lit::new(dtype, vec![rec.input, gh], transposed(&rec.w, rec.input))?.to_tensor()?,
        Lit::new(dtype, vec![rec.hidden, gh], transposed(&rec.r, rec.hidden))?.to_tensor()?,
        Lit::new(dtype, vec![gh], wb)?.to_tensor()?,
        Lit::new(dtype, vec![gh], rb)?.to_tensor()?,
    ])
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
