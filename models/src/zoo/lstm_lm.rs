//! A word-level LSTM language model unrolled over a fixed number of steps,
//! as TensorFlow's PTB tutorial builds it (Zaremba et al., 2014, "medium"
//! configuration): embedding lookup (Gather), two stacked LSTM layers of 650
//! units (TensorFlow's fused LSTMBlockCell, the tutorial's "block" mode: one
//! node per layer and step computing concat(x, h) · W + b, split into the
//! input, candidate, forget and output gates, forget bias 0), 35 steps, and a
//! softmax over the 10,000-word vocabulary at every step. Weights start
//! uniform in ±0.05; the initial state is zero; dropout and gradient
//! clipping of the recipe are left out (they do not change the parameter
//! count). 19,775,200 trainable parameters.

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{Init, LstmCell, Net};
use flowlab_engine::{DType, Optimizer, Output, Result};

pub(crate) const VOCAB: usize = 10_000;
const HIDDEN: usize = 650;
const LAYERS: usize = 2;
const STEPS: usize = 35;
const INIT_SCALE: f64 = 0.05;

pub(crate) fn build(o: &ZooOptions) -> Result<ModelGraph> {
    let vocab = o.vocab.unwrap_or(VOCAB);
    let hidden = o.hidden.unwrap_or(HIDDEN);
    let layers = o.layers.unwrap_or(LAYERS);
    let steps = o.seq_len.unwrap_or(STEPS);
    if o.dynamic {
        return build_dynamic(o, vocab, hidden, layers, steps);
    }
    let (b, t) = (o.batch as i64, steps as i64);
    let (mut net, tokens, targets, embedding) = start(o, vocab, hidden, steps)?;
    let g = net.g.clone();
    let emb = g.scope("embedding_lookup");
    let inputs = emb.gather(&embedding, &tokens)?;
    let inputs: Vec<Output> =
        emb.split(&inputs, steps, 1)?.iter().map(|x| emb.reshape(x, &[b, hidden as i64])).collect::<Result<_>>()?;

    let cells: Vec<LstmCell> = (0..layers)
        .map(|l| net.lstm_cell(&g.scope(&format!("lstm/layer_{l}")), hidden, hidden, Init::Uniform(INIT_SCALE), 0.0))
        .collect::<Result<_>>()?;
    let zero_scope = g.scope("lstm/zero_state");
    let zero = zero_scope.zeros(DType::F32, [o.batch, hidden])?;
    // A carried state lives in variables: read at the first step, stored
    // after the last (gradients stop at the read: truncated BPTT).
    let carried: Vec<(Output, Output)> = if o.carry_state {
        (0..layers)
            .map(|l| {
                let s = g.scope(&format!("lstm/layer_{l}/state"));
                Ok((net.state(&s, "h", &[o.batch, hidden], 0.0)?, net.state(&s, "c", &[o.batch, hidden], 0.0)?))
            })
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let mut state: Vec<(Output, Output)> = if o.carry_state { carried.clone() } else { vec![(zero.clone(), zero.clone()); layers] };
    let mut outputs = Vec::with_capacity(steps);
    for (ti, x) in inputs.iter().enumerate() {
        let mut x = x.clone();
        for (l, cell) in cells.iter().enumerate() {
            let s = g.scope(&format!("lstm/layer_{l}/step_{ti}"));
            state[l] = cell.step(&s, &x, &state[l])?;
            x = state[l].0.clone();
        }
        outputs.push(x);
    }
    let mut stores = Vec::new();
    let mut resets = Vec::new();
    for (l, ((h, c), (h_end, c_end))) in carried.iter().zip(&state).enumerate() {
        let s = g.scope(&format!("lstm/layer_{l}/state"));
        for (var, value) in [(h, h_end), (c, c_end)] {
            let store = s.assign(var, value)?;
            net.update(store.clone());
            stores.push(store);
            resets.push(s.assign(var, &zero)?);
        }
    }
    let carry = |m: &mut ModelGraph| -> Result<()> {
        if !stores.is_empty() {
            m.state_update = Some(m.graph.group("lstm/state_update", &stores.iter().collect::<Vec<_>>())?);
            m.state_reset = Some(m.graph.group("lstm/state_reset", &resets.iter().collect::<Vec<_>>())?);
        }
        Ok(())
    };
    let out = g.scope("softmax");
    let refs: Vec<&Output> = outputs.iter().collect();
    let flat = out.reshape(out.concat(&refs, 1)?, &[b * t, hidden as i64])?;
    let labels = g.scope("loss").reshape(&targets, &[b * t])?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Sgd { lr: 1.0 });
    let Some(samples) = o.sampled else {
        let logits = net.dense(&g, "softmax", &flat, hidden, vocab, true)?;
        let loss = net.softmax_loss("loss", &logits, &labels)?;
        let mut m = net.finish("lstm_lm", o.batch, vec![tokens, targets], loss, &opt)?;
        carry(&mut m)?;
        return Ok(m);
    };
    // Sampled softmax (TensorFlow's `sampled_softmax_loss`): the output
    // layer is stored [vocab, hidden] so that the sampled rows are gathered;
    // training sees the true word and `samples` log-uniform candidates,
    // evaluation the full softmax over the same weights.
    let s = g.scope("softmax");
    let w = net.param(&s, "kernel", &[vocab, hidden], Init::Glorot { fan_in: hidden, fan_out: vocab })?;
    let bias = net.param(&s, "bias", &[vocab], Init::Const(0.0))?;
    let sampled = g.scope("sampled_loss").sampled_softmax_loss(&w, &bias, &labels, &flat, samples, o.seed)?;
    let loss = g.scope("sampled_loss").reduce_mean(&sampled, &[0], false)?;
    let logits = s.bias_add(&s.matmul_ex(&flat, &w, false, true)?, &bias)?;
    let full = net.softmax_loss("loss", &logits, &labels)?;
    let mut m = net.finish("lstm_lm", o.batch, vec![tokens, targets], loss, &opt)?;
    m.eval_loss = m.graph.output_by_name(&full.name(), full.index())?;
    carry(&mut m)?;
    Ok(m)
}

/// The same model with its time steps in a `while_loop` (TensorFlow's
/// `dynamic_rnn`): the embedded inputs and the targets are read one time
/// step per iteration, the loop carries every layer's state and the summed
/// per-step loss. Variables are created in the unrolled model's order, so a
/// seed gives both the same weights.
fn build_dynamic(o: &ZooOptions, vocab: usize, hidden: usize, layers: usize, steps: usize) -> Result<ModelGraph> {
    let t = steps as i64;
    let (mut net, tokens, targets, embedding) = start(o, vocab, hidden, steps)?;
    let g = net.g.clone();
    let emb = g.scope("embedding_lookup");
    // [batch, time, hidden] -> [time, batch, hidden]: step i is row i.
    let inputs = emb.transpose(emb.gather(&embedding, &tokens)?, &[1, 0, 2])?;
    let labels = g.scope("loss").transpose(&targets, &[1, 0])?;
    let cells: Vec<LstmCell> = (0..layers)
        .map(|l| net.lstm_cell(&g.scope(&format!("lstm/layer_{l}")), hidden, hidden, Init::Uniform(INIT_SCALE), 0.0))
        .collect::<Result<_>>()?;
    let s = g.scope("softmax");
    let w = net.param(&s, "kernel", &[hidden, vocab], Init::Glorot { fan_in: hidden, fan_out: vocab })?;
    let bias = net.param(&s, "bias", &[vocab], Init::Const(0.0))?;
    let zero = g.scope("lstm/zero_state").zeros(DType::F32, [o.batch, hidden])?;
    let step0 = g.scalar(0.0, DType::I64)?;
    let loss0 = g.scalar(0.0, DType::F32)?;
    let mut init: Vec<&Output> = vec![&step0, &loss0];
    for _ in 0..layers {
        init.push(&zero);
        init.push(&zero);
    }
    let out = g.scope("lstm").while_loop(
        |c, v| c.less(&v[0], c.scalar(t as f64, DType::I64)?),
        |body, v| {
            let mut x = body.gather(&inputs, &v[0])?;
            let mut next = vec![body.add(&v[0], body.scalar(1.0, DType::I64)?)?, v[1].clone()];
            for (l, cell) in cells.iter().enumerate() {
                let (h, c) = cell.step(&body.scope(&format!("layer_{l}")), &x, &(v[2 + 2 * l].clone(), v[3 + 2 * l].clone()))?;
                x = h.clone();
                next.push(h);
                next.push(c);
            }
            let head = body.scope("softmax");
            let logits = head.bias_add(head.matmul(&x, &w)?, &bias)?;
            let xent = head.sparse_softmax_cross_entropy_with_logits(&logits, &body.gather(&labels, &v[0])?)?;
            next[1] = body.add(&v[1], head.reduce_mean(&xent, &[0], false)?)?;
            Ok(next)
        },
        &init,
    )?;
    let loss = g.op("Mul").name("loss").input(&out[1]).input(g.scalar(1.0 / steps as f64, DType::F32)?).build()?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Sgd { lr: 1.0 });
    net.finish("lstm_lm", o.batch, vec![tokens, targets], loss, &opt)
}

/// Both variants' first nodes, in the same order (so a seed gives both the
/// same weights): the token and target placeholders and the embedding.
fn start(o: &ZooOptions, vocab: usize, hidden: usize, steps: usize) -> Result<(Net, Output, Output, Output)> {
    let (b, t) = (o.batch as i64, steps as i64);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let tokens = g.placeholder("tokens", DType::I64, [b, t])?;
    let targets = g.placeholder("targets", DType::I64, [b, t])?;
    let embedding = net.param(&g, "embedding", &[vocab, hidden], Init::Uniform(INIT_SCALE))?;
    Ok((net, tokens, targets, embedding))
}
