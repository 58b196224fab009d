//! GNMT v2 (Wu et al., 2016, as TensorFlow's `tensorflow/nmt` tutorial
//! builds it) in the configuration Baechi places (Jeon et al., SoCC 2020;
//! the README of github.com/beomyeol/baechi: `--model_name=gnmt_v2
//! --num_layers=4 --rnn_units=512 --encoder_type=gnmt --residual
//! --vocab_size=30000 --max_seq_length=40 --batch_size=128
//! --optimizer=adam`).
//!
//! - Encoder: source embedding; a bidirectional first layer (a forward and a
//!   backward LSTM of 512 units, outputs concatenated); three more LSTM
//!   layers, the last two with residual connections (`tensorflow/nmt`'s
//!   `num_encoder_residual_layers = num_layers - 2`).
//! - Attention: normalized Bahdanau (`normed_bahdanau`): keys are the
//!   encoder outputs through a 512 x 512 memory layer, the query is the
//!   bottom decoder layer's new output through a 512 x 512 query layer,
//!   score `g · v/|v| · tanh(keys + query + b)`, softmax over the source
//!   positions, context = the weighted encoder outputs.
//! - Decoder (`GNMTAttentionMultiCell` with `use_new_attention`): layer 0
//!   reads the target embedding with the previous step's context; every
//!   upper layer reads the layer below with this step's context; layers 1-3
//!   add their input back (residual, `num_decoder_residual_layers =
//!   num_layers - 1`). Teacher forcing: the targets shifted right, id 0 as
//!   the start symbol.
//! - A 512 x 30,000 projection without bias to the target vocabulary,
//!   separate source and target embeddings (`share_vocab` off).
//!
//! Every LSTM is TensorFlow's fused block cell (forget bias 1.0, the
//! tutorial's default), unrolled over all 40 steps. Dropout is left out (it
//! does not change the parameters). Parameters, counted by hand from those
//! definitions: embeddings and projection 3 x 15,360,000; encoder cells
//! 4 x 2,099,200 + 3,147,776; attention 2 x 262,144 + 512 + 512 + 1;
//! decoder cells 4 x 3,147,776: 70,740,993 in all.

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{Init, LstmCell, Net};
use flowlab_engine::{DType, Graph, Optimizer, Output, Result};

const VOCAB: usize = 30_000;
const UNITS: usize = 512;
const LAYERS: usize = 4;
const STEPS: usize = 40;
/// `tensorflow/nmt`'s `init_weight`: uniform in ±0.1.
const INIT: f64 = 0.1;
const FORGET_BIAS: f64 = 1.0;

/// One LSTM layer over every step of `xs` (in reverse when `backward`),
/// from a zero state; outputs in time order.
fn run_layer(cell: &LstmCell, g: &Graph, xs: &[Output], zero: &Output, backward: bool) -> Result<Vec<Output>> {
    let mut state = (zero.clone(), zero.clone());
    let mut out: Vec<Option<Output>> = vec![None; xs.len()];
    let order: Vec<usize> = if backward { (0..xs.len()).rev().collect() } else { (0..xs.len()).collect() };
    for t in order {
        state = cell.step(&g.scope(&format!("step_{t}")), &xs[t], &state)?;
        out[t] = Some(state.0.clone());
    }
    Ok(out.into_iter().flatten().collect())
}

/// Normalized Bahdanau attention over fixed encoder outputs.
struct Attention {
    /// `[B, T, H]`: the encoder outputs (the values).
    memory: Output,
    /// `[B, T, H]`: the memory through the memory layer (the keys).
    keys: Output,
    query: Output,
    bias: Output,
    /// `g · v / |v|`, `[H]`.
    v_normed: Output,
}

impl Attention {
    fn new(net: &mut Net, g: &Graph, memory: Output, b: i64, t: i64, h: usize) -> Result<Attention> {
        let s = g.scope("attention");
        let mem_w = net.param(&s, "memory_layer/kernel", &[h, h], Init::Uniform(INIT))?;
        let flat = s.reshape(&memory, &[b * t, h as i64])?;
        let keys = s.reshape(s.matmul(&flat, &mem_w)?, &[b, t, h as i64])?;
        let query = net.param(&s, "query_layer/kernel", &[h, h], Init::Uniform(INIT))?;
        let v = net.param(&s, "attention_v", &[h], Init::Uniform(INIT))?;
        let gain = net.param(&s, "attention_g", &[], Init::Const((1.0 / h as f64).sqrt()))?;
        let bias = net.param(&s, "attention_b", &[h], Init::Const(0.0))?;
        let inv_norm = s.rsqrt(s.reduce_sum(s.square(&v)?, &[0], false)?)?;
        let v_normed = s.mul(s.mul(&v, &inv_norm)?, &gain)?;
        Ok(Attention { memory, keys, query, bias, v_normed })
    }

    /// The context `[B, H]` for query `q` `[B, H]`.
    fn context(&self, g: &Graph, q: &Output, b: i64, t: i64, h: usize) -> Result<Output> {
        let pq = g.expand_dims(g.matmul(q, &self.query)?, 1)?;
        let e = g.tanh(g.add(g.add(&self.keys, &pq)?, &self.bias)?)?;
        let scores = g.reduce_sum(g.mul(&e, &self.v_normed)?, &[2], false)?;
        let alpha = g.reshape(g.softmax(&scores)?, &[b, 1, t])?;
        g.reshape(g.batch_matmul(&alpha, &self.memory)?, &[b, h as i64])
    }
}

pub(crate) fn build(o: &ZooOptions) -> Result<ModelGraph> {
    let vocab = o.vocab.unwrap_or(VOCAB);
    let h = o.hidden.unwrap_or(UNITS);
    let layers = o.layers.unwrap_or(LAYERS);
    let steps = o.seq_len.unwrap_or(STEPS);
    let (b, t) = (o.batch as i64, steps as i64);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let source = g.placeholder("source", DType::I64, [b, t])?;
    let targets = g.placeholder("targets", DType::I64, [b, t])?;
    let zero = g.scope("zero_state").zeros(DType::F32, [o.batch, h])?;
    let unstack = |s: &Graph, x: &Output| -> Result<Vec<Output>> {
        s.split(x, steps, 1)?.iter().map(|x| s.reshape(x, &[b, h as i64])).collect()
    };

    // Encoder.
    let enc = g.scope("encoder");
    let emb_enc = net.param(&enc, "embedding", &[vocab, h], Init::Uniform(INIT))?;
    let xs = unstack(&enc, &enc.gather(&emb_enc, &source)?)?;
    let (fw_scope, bw_scope) = (enc.scope("bidirectional/fw"), enc.scope("bidirectional/bw"));
    let fw = net.lstm_cell(&fw_scope, h, h, Init::Uniform(INIT), FORGET_BIAS)?;
    let bw = net.lstm_cell(&bw_scope, h, h, Init::Uniform(INIT), FORGET_BIAS)?;
    let f = run_layer(&fw, &fw_scope, &xs, &zero, false)?;
    let r = run_layer(&bw, &bw_scope, &xs, &zero, true)?;
    let mut xs: Vec<Output> = f.iter().zip(&r).map(|(a, c)| enc.concat(&[a, c], 1)).collect::<Result<_>>()?;
    for l in 1..layers {
        let input = if l == 1 { 2 * h } else { h };
        let name = format!("layer_{l}");
        let s = enc.scope(&name);
        let cell = net.lstm_cell(&s, input, h, Init::Uniform(INIT), FORGET_BIAS)?;
        let ys = run_layer(&cell, &s, &xs, &zero, false)?;
        xs = if l >= 2 { ys.iter().zip(&xs).map(|(y, x)| s.add(y, x)).collect::<Result<_>>()? } else { ys };
    }
    let refs: Vec<&Output> = xs.iter().collect();
    let memory = enc.reshape(enc.concat(&refs, 1)?, &[b, t, h as i64])?;

    // Decoder.
    let dec = g.scope("decoder");
    let att = Attention::new(&mut net, &dec, memory, b, t, h)?;
    let emb_dec = net.param(&dec, "embedding", &[vocab, h], Init::Uniform(INIT))?;
    let start = dec.zeros(DType::I64, [o.batch, 1])?;
    let shifted = if t > 1 { dec.concat(&[&start, &dec.slice(&targets, &[0, 0], &[b, t - 1])?], 1)? } else { start };
    let ys = unstack(&dec, &dec.gather(&emb_dec, &shifted)?)?;
    let cells: Vec<LstmCell> =
        (0..layers).map(|l| net.lstm_cell(&dec.scope(&format!("layer_{l}")), 2 * h, h, Init::Uniform(INIT), FORGET_BIAS)).collect::<Result<_>>()?;
    let mut state: Vec<(Output, Output)> = vec![(zero.clone(), zero.clone()); layers];
    let mut context = zero.clone();
    let mut outputs = Vec::with_capacity(steps);
    for (ti, y) in ys.iter().enumerate() {
        let s = dec.scope(&format!("step_{ti}"));
        state[0] = cells[0].step(&s.scope("layer_0"), &s.concat(&[y, &context], 1)?, &state[0])?;
        context = att.context(&s.scope("attention"), &state[0].0, b, t, h)?;
        let mut cur = state[0].0.clone();
        for l in 1..layers {
            let ls = s.scope(&format!("layer_{l}"));
            state[l] = cells[l].step(&ls, &ls.concat(&[&cur, &context], 1)?, &state[l])?;
            cur = ls.add(&state[l].0, &cur)?;
        }
        outputs.push(cur);
    }
    let out = g.scope("output_projection");
    let refs: Vec<&Output> = outputs.iter().collect();
    let flat = out.reshape(out.concat(&refs, 1)?, &[b * t, h as i64])?;
    let logits = net.dense(&g, "output_projection", &flat, h, vocab, false)?;
    let labels = g.scope("loss").reshape(&targets, &[b * t])?;
    let loss = net.softmax_loss("loss", &logits, &labels)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::adam(1e-3));
    net.finish("gnmt", o.batch, vec![source, targets], loss, &opt)
}
