//! `flowlab train lstm-lm`: trains the model zoo's LSTM language model (the
//! same graph `flowlab place --model lstm_lm` and the simulators use, at the
//! sizes given) on a text corpus with the real engine, and prints the
//! validation perplexity per epoch.
//!
//! Corpora: `shakespeare` (the default; 59,620 words of tinyshakespeare,
//! public domain, shipped in data/ and compiled in, see data/README.md),
//! `markov` (generated: a seeded first-order Markov source over 500
//! made-up words, each followed by one of 8 words with Zipf weights; its
//! entropy rate is known in closed form, so the best perplexity any model
//! can reach on it is known too, `perplexity_floor`), or a text file.

use anyhow::{Context, bail};
use flowlab_engine::{Optimizer, Session, SessionOptions, Tensor};
use flowlab_models::zoo::{self, ZooOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::time::Instant;

/// What `flowlab train lstm-lm` was asked for.
pub(crate) struct LmArgs<'a> {
    /// `shakespeare`, `markov` or a path.
    pub corpus: &'a str,
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub seq_len: usize,
    /// Candidates of a sampled softmax (`None`: the full softmax).
    pub sampled: Option<usize>,
    /// Truncated BPTT: the state flows from batch to batch of a stream.
    pub carry_state: bool,
    /// The time steps in a while_loop instead of unrolled.
    pub dynamic: bool,
    pub batch: usize,
    pub epochs: usize,
    pub lr: f64,
    pub seed: u64,
    pub threads: usize,
    pub json: bool,
}

/// The shipped corpus (data/shakespeare.txt).
const SHAKESPEARE: &str = include_str!("../../data/shakespeare.txt");

const SOURCE_WORDS: usize = 500;
const SUCCESSORS: usize = 8;
const SOURCE_LENGTH: usize = 60_000;

/// The generated corpus and its entropy rate in nats per word.
fn builtin_corpus(seed: u64) -> (String, f64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6c73_746d);
    const SYL: [&str; 16] = ["ka", "lo", "mi", "ne", "tu", "ra", "si", "po", "ve", "da", "gu", "fe", "zo", "bi", "hu", "ja"];
    let words: Vec<String> = (0..SOURCE_WORDS).map(|i| format!("{}{}{}", SYL[i % 16], SYL[(i / 16) % 16], SYL[(i / 256) % 16])).collect();
    let zipf: Vec<f64> = (1..=SUCCESSORS).map(|k| 1.0 / k as f64).collect();
    let norm: f64 = zipf.iter().sum();
    let probs: Vec<f64> = zipf.iter().map(|z| z / norm).collect();
    let succ: Vec<Vec<usize>> = (0..SOURCE_WORDS).map(|_| (0..SUCCESSORS).map(|_| rng.random_range(0..SOURCE_WORDS)).collect()).collect();
    // Every row has the same distribution over its successor slots; a word
    // repeated among them merges slots, which lowers that row's entropy.
    let row_entropy: Vec<f64> = succ
        .iter()
        .map(|s| {
            let mut p: HashMap<usize, f64> = HashMap::new();
            for (w, q) in s.iter().zip(&probs) {
                *p.entry(*w).or_default() += q;
            }
            -p.values().map(|q| q * q.ln()).sum::<f64>()
        })
        .collect();
    let mut text = String::with_capacity(SOURCE_LENGTH * 7);
    let mut counts = vec![0usize; SOURCE_WORDS];
    let mut w = 0usize;
    for _ in 0..SOURCE_LENGTH {
        text.push_str(&words[w]);
        text.push(' ');
        counts[w] += 1;
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut next = succ[w][SUCCESSORS - 1];
        for (k, q) in probs.iter().enumerate() {
            acc += q;
            if u < acc {
                next = succ[w][k];
                break;
            }
        }
        w = next;
    }
    // Entropy rate under the empirical state frequencies.
    let total: f64 = counts.iter().sum::<usize>() as f64;
    let h = counts.iter().zip(&row_entropy).map(|(&c, h)| c as f64 / total * h).sum();
    (text, h)
}

/// Word ids: the `vocab - 1` most frequent words (ties by first
/// appearance), every other word `<unk>` (id 0).
fn encode(text: &str, vocab: usize) -> (Vec<i64>, usize) {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut count: HashMap<&str, (usize, usize)> = HashMap::new();
    for (i, w) in words.iter().enumerate() {
        count.entry(w).or_insert((0, i)).0 += 1;
    }
    let mut ranked: Vec<(&str, usize, usize)> = count.into_iter().map(|(w, (c, first))| (w, c, first)).collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
    let ids: HashMap<&str, i64> = ranked.iter().take(vocab.saturating_sub(1)).enumerate().map(|(i, (w, _, _))| (*w, i as i64 + 1)).collect();
    let distinct = ranked.len();
    (words.iter().map(|w| ids.get(w).copied().unwrap_or(0)).collect(), distinct)
}

/// (inputs, targets) windows of `[batch, t]`: the ids cut into `batch`
/// contiguous streams, each read `t` words at a time (as the PTB recipe).
fn windows(ids: &[i64], batch: usize, t: usize) -> Vec<(Vec<i64>, Vec<i64>)> {
    let per = ids.len() / batch;
    let mut out = Vec::new();
    let mut start = 0;
    while start + t < per {
        let mut x = Vec::with_capacity(batch * t);
        let mut y = Vec::with_capacity(batch * t);
        for b in 0..batch {
            let s = &ids[b * per + start..b * per + start + t + 1];
            x.extend_from_slice(&s[..t]);
            y.extend_from_slice(&s[1..]);
        }
        out.push((x, y));
        start += t;
    }
    out
}

/// The most LSTM cells a language model's graph may hold (layers x time
/// steps unrolled; layers in the while_loop form).
const MAX_LSTM_CELLS: usize = 65_536;

pub(crate) fn run(a: &LmArgs) -> anyhow::Result<serde_json::Value> {
    check_args(a)?;
    let (text, floor, source) = match a.corpus {
        "shakespeare" => (SHAKESPEARE.to_string(), None, "shakespeare (tinyshakespeare, first 10,001 lines)".to_string()),
        "markov" => {
            let (t, h) = builtin_corpus(a.seed);
            (t, Some(h.exp()), "markov (seeded Markov source)".to_string())
        }
        p => {
            let t = std::fs::read_to_string(p).with_context(|| format!("--corpus {p}"))?;
            (t, None, p.to_string())
        }
    };
    let (ids, distinct) = encode(&text, a.vocab);
    // Last 10% held out, whole windows on both sides.
    let split = ids.len() * 9 / 10;
    let (train_ids, valid_ids) = ids.split_at(split);
    let train = windows(train_ids, a.batch, a.seq_len);
    let valid = windows(valid_ids, a.batch, a.seq_len);
    if train.is_empty() || valid.is_empty() {
        bail!(
            "--corpus {source}: {} words give {} training and {} validation windows of {} x {} words: at least one of each is needed",
            ids.len(),
            train.len(),
            valid.len(),
            a.batch,
            a.seq_len
        );
    }
    let m = build_model(a)?;
    let init = m.graph.global_variables_initializer()?;
    let sess = Session::with_options(&m.graph, SessionOptions { threads: a.threads, ..Default::default() })?;
    sess.run(&[], &[], &[&init])?;
    let shape = vec![a.batch, a.seq_len];
    let feed = |x: &[i64]| Tensor::from_vec(x.to_vec(), shape.clone());
    let mean_loss = |batches: &[(Vec<i64>, Vec<i64>)], train_step: bool| -> anyhow::Result<f64> {
        let mut sum = 0.0;
        // Each pass reads its streams from their start.
        if let Some(reset) = &m.state_reset {
            sess.run(&[], &[], &[reset])?;
        }
        let eval_targets: Vec<&flowlab_engine::Output> = m.state_update.iter().collect();
        for (x, y) in batches {
            let (xt, yt) = (feed(x)?, feed(y)?);
            let feeds = [(&m.inputs[0], &xt), (&m.inputs[1], &yt)];
            // Training steps report the training objective (a sampled
            // softmax's loss is not the model's perplexity); evaluation the
            // full softmax.
            let out = if train_step { sess.run(&feeds, &[&m.loss], &[&m.train_op])? } else { sess.run(&feeds, &[&m.eval_loss], &eval_targets)? };
            sum += out[0].to_vec::<f32>()?[0] as f64;
        }
        Ok(sum / batches.len() as f64)
    };
    let start = mean_loss(&valid, false)?.exp();
    let mut per_epoch = Vec::with_capacity(a.epochs);
    let mut train_loss = f64::NAN;
    let t0 = Instant::now();
    // Training steps only (the validation passes are not counted).
    let mut train_seconds = 0.0;
    for epoch in 1..=a.epochs {
        let t = Instant::now();
        train_loss = mean_loss(&train, true)?;
        train_seconds += t.elapsed().as_secs_f64();
        let v = mean_loss(&valid, false)?.exp();
        per_epoch.push(v);
        if !a.json {
            match a.sampled {
                None => println!("epoch {epoch:>3}: train perplexity {:.2}, validation perplexity {v:.2}", train_loss.exp()),
                Some(_) => println!("epoch {epoch:>3}: train sampled loss {train_loss:.3}, validation perplexity {v:.2}"),
            }
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let steps = train.len() * a.epochs;
    let words = (steps * a.batch * a.seq_len) as f64;
    Ok(serde_json::json!({
        "model": "lstm_lm",
        "corpus": source,
        "words": ids.len(),
        "distinct_words": distinct,
        "vocab": a.vocab,
        "params": m.params,
        "perplexity_start": start,
        "perplexity": per_epoch.last().copied().unwrap_or(start),
        "perplexity_per_epoch": per_epoch,
        // The full softmax's perplexity over the training steps; with
        // --sampled the steps see only the sampled loss, reported as such.
        "train_perplexity": if a.sampled.is_none() { serde_json::json!(train_loss.exp()) } else { serde_json::Value::Null },
        "train_sampled_loss": if a.sampled.is_some() { serde_json::json!(train_loss) } else { serde_json::Value::Null },
        "sampled": a.sampled,
        "carry_state": a.carry_state,
        "dynamic": a.dynamic,
        "graph_nodes": m.graph.num_nodes(),
        "perplexity_floor": floor,
        "steps": steps,
        "seconds": seconds,
        "words_per_second": words / train_seconds.max(1e-9),
    }))
}

/// Every flag in range, and the graph's size bounded, before anything is
/// read or built.
fn check_args(a: &LmArgs) -> anyhow::Result<()> {
    for (flag, v) in [("--vocab", a.vocab), ("--hidden", a.hidden), ("--layers", a.layers), ("--seq-len", a.seq_len), ("--batch", a.batch), ("--epochs", a.epochs), ("--threads", a.threads)] {
        if v == 0 {
            bail!("{flag}: must be at least 1");
        }
    }
    if a.vocab < 2 {
        bail!("--vocab: must be at least 2 (one word and <unk>)");
    }
    if let Some(k) = a.sampled
        && (k == 0 || k >= a.vocab)
    {
        bail!("--sampled: {k} candidates; must be between 1 and the vocabulary minus one ({})", a.vocab - 1);
    }
    // the unrolled graph holds a cell per layer and time step (the
    // while_loop one a cell per layer): 100,000 layers exhausted memory
    // while the graph was built
    let cells = if a.dynamic { a.layers } else { a.layers.saturating_mul(a.seq_len) };
    if cells > MAX_LSTM_CELLS {
        bail!(
            "--layers {} x --seq-len {}: {cells} LSTM cells in the graph, at most {MAX_LSTM_CELLS} (fewer layers or time steps{})",
            a.layers,
            a.seq_len,
            if a.dynamic { "" } else { ", or --dynamic, which loops over the time steps" }
        );
    }
    if a.dynamic && (a.sampled.is_some() || a.carry_state) {
        bail!("--dynamic: the while_loop LSTM takes neither --sampled nor --carry-state yet");
    }
    if !(a.lr.is_finite() && a.lr > 0.0) {
        bail!("--lr: must be a finite positive number");
    }
    Ok(())
}

/// The zoo's LSTM language model at the flags' sizes, refused when its
/// parameters, Adam's slots and the gradients would not fit this machine.
fn build_model(a: &LmArgs) -> anyhow::Result<zoo::ModelGraph> {
    let mut o = ZooOptions::new(a.batch);
    o.vocab = Some(a.vocab);
    o.hidden = Some(a.hidden);
    o.layers = Some(a.layers);
    o.seq_len = Some(a.seq_len);
    o.sampled = a.sampled;
    o.carry_state = a.carry_state;
    o.dynamic = a.dynamic;
    o.seed = a.seed;
    o.optimizer = Some(Optimizer::Adam { lr: a.lr, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 });
    let m = zoo::build_with("lstm_lm", &o).map_err(|e| anyhow::anyhow!("{e}"))?;
    // the variables, Adam's two slots and the gradients, 4 bytes a value,
    // must fit: a 100,000,000-word vocabulary (100 GB of embedding) aborted
    // on its allocation
    let need = m.params as f64 * 16.0;
    if let Some(available) = flowlab_sim::cluster::available_memory_bytes()
        && need > available
    {
        bail!(
            "--vocab {} --hidden {} --layers {}: {} parameters need about {:.1} GB (with Adam's slots and the gradients); this machine has {:.1} GB available",
            a.vocab,
            a.hidden,
            a.layers,
            m.params,
            need / 1e9,
            available / 1e9
        );
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cut_streams_and_shift_targets_by_one() {
        let ids: Vec<i64> = (0..21).collect();
        // 2 streams of 10 (0..10, 10..20), windows of 3: [0,1,2]->[1,2,3], [3,4,5]->[4,5,6], [6,7,8]->[7,8,9].
        let w = windows(&ids, 2, 3);
        assert_eq!(w.len(), 3);
        assert_eq!(w[0], (vec![0, 1, 2, 10, 11, 12], vec![1, 2, 3, 11, 12, 13]));
        assert_eq!(w[2], (vec![6, 7, 8, 16, 17, 18], vec![7, 8, 9, 17, 18, 19]));
    }

    #[test]
    fn rare_words_become_unknown() {
        let (ids, distinct) = encode("a b a c a b d", 3);
        // a (3) -> 1, b (2) -> 2, c and d -> <unk> 0.
        assert_eq!(ids, vec![1, 2, 1, 0, 1, 2, 0]);
        assert_eq!(distinct, 4);
    }

    #[test]
    fn the_builtin_source_has_the_entropy_of_its_rows() {
        // Zipf weights over 8 distinct successors: H = ln(H8) + sum(ln k / k) / H8,
        // H8 = sum 1/k. Merged duplicate successors only lower it.
        let h8: f64 = (1..=8).map(|k| 1.0 / k as f64).sum();
        let distinct_rows = h8.ln() + (1..=8).map(|k| (k as f64).ln() / k as f64).sum::<f64>() / h8;
        let (text, h) = builtin_corpus(1);
        assert!(h <= distinct_rows + 1e-12 && h > distinct_rows - 0.1, "{h} vs {distinct_rows}");
        assert_eq!(text.split_whitespace().count(), SOURCE_LENGTH);
        assert_eq!(builtin_corpus(1).0, text, "seeded");
    }

    #[test]
    fn the_shipped_corpus_is_the_documented_cut() {
        // Counts stated in data/make_shakespeare.py.
        let words: Vec<&str> = SHAKESPEARE.split_whitespace().collect();
        assert_eq!(words.len(), 59_620);
        assert_eq!(words.iter().collect::<std::collections::HashSet<_>>().len(), 5_802);
        assert_eq!(&words[..3], ["first", "citizen", ":"]);
    }
}
