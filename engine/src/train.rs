//! End-to-end training on the digits set: a 64-128-10 MLP or a small CNN,
//! built with the graph API, trained with Adam on mini-batches, evaluated on
//! a held-out fifth chosen by a seeded shuffle. Used by `flowlab train` and
//! by the end-to-end tests.

use crate::datasets::Dataset;
use crate::dtype::DType;
use crate::error::{EngineError, Result};
use crate::graph::{Graph, Output};
use crate::optimizers::Optimizer;
use crate::session::{Session, SessionOptions};
use crate::tensor::Tensor;
use crate::trace::StepStats;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// Which network to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// 64-128-10, ReLU.
    Mlp,
    /// conv 3x3x16 - maxpool - conv 3x3x32 - maxpool - dense 10.
    Cnn,
}

/// Settings of one training run.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub model: ModelKind,
    pub epochs: usize,
    pub seed: u64,
    pub batch: usize,
    pub learning_rate: f64,
    pub threads: usize,
    /// Write a Chrome/Perfetto trace of the last training step here.
    pub trace: Option<PathBuf>,
}

impl TrainConfig {
    pub fn new(model: ModelKind) -> TrainConfig {
        TrainConfig { model, epochs: 30, seed: 1, batch: 32, learning_rate: 3e-3, threads: 1, trace: None }
    }
}

/// Outcome of a training run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TrainReport {
    pub model: ModelKind,
    /// Held-out accuracy in [0, 1].
    pub accuracy: f64,
    /// Held-out mean cross entropy.
    pub loss: f64,
    /// Mean training loss over the last epoch.
    pub train_loss: f64,
    pub steps: usize,
    pub epochs: usize,
    pub seconds: f64,
    pub train_examples: usize,
    pub test_examples: usize,
}

/// Splits off a held-out fifth after a seeded shuffle: (train, test).
pub fn split_holdout(data: &Dataset, seed: u64) -> (Dataset, Dataset) {
    let mut idx: Vec<usize> = (0..data.len()).collect();
    idx.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let n_test = data.len() / 5;
    let (test, train) = idx.split_at(n_test);
    (data.select(train), data.select(test))
}

/// A dense layer `x·W + b` with Glorot-uniform W and zero b.
fn dense(g: &Graph, name: &str, x: &Output, inputs: usize, units: usize, seed: u64) -> Result<Output> {
    let s = g.scope(name);
    let limit = (6.0 / (inputs + units) as f64).sqrt();
    let w = s.variable("w", s.random_uniform([inputs, units], DType::F32, -limit, limit, seed)?)?;
    let b = s.variable("b", s.zeros(DType::F32, [units])?)?;
    s.bias_add(s.matmul(x, &w)?, &b)
}

fn conv_relu(g: &Graph, name: &str, x: &Output, k: usize, cin: usize, cout: usize, seed: u64) -> Result<Output> {
    let s = g.scope(name);
    let limit = (6.0 / ((cin + cout) * k * k) as f64).sqrt();
    let w = s.variable("w", s.random_uniform([k, k, cin, cout], DType::F32, -limit, limit, seed)?)?;
    let b = s.variable("b", s.zeros(DType::F32, [cout])?)?;
    s.relu(s.bias_add(s.conv2d(x, &w, [1, 1], true)?, &b)?)
}

/// The model's logits for `x` ([batch, 64] floats in [0, 1]).
pub fn build_model(g: &Graph, kind: ModelKind, x: &Output, seed: u64) -> Result<Output> {
    let seed = seed.wrapping_mul(1000);
    match kind {
        ModelKind::Mlp => {
            let h = g.relu(dense(g, "hidden", x, 64, 128, seed + 1)?)?;
            dense(g, "logits", &h, 128, 10, seed + 2)
        }
        ModelKind::Cnn => {
            let img = g.reshape(x, &[-1, 8, 8, 1])?;
            let c1 = conv_relu(g, "conv1", &img, 3, 1, 16, seed + 1)?;
            let p1 = g.max_pool(&c1, [2, 2], [2, 2], true)?;
            let c2 = conv_relu(g, "conv2", &p1, 3, 16, 32, seed + 2)?;
            let p2 = g.max_pool(&c2, [2, 2], [2, 2], true)?;
            let flat = g.reshape(&p2, &[-1, 128])?;
            dense(g, "logits", &flat, 128, 10, seed + 3)
        }
    }
}

fn batch_tensors(d: &Dataset, idx: &[usize]) -> Result<(Tensor, Tensor)> {
    let b = d.select(idx);
    Ok((Tensor::from_vec(b.x, [idx.len(), d.features])?, Tensor::from_vec(b.y, [idx.len()])?))
}

/// Trains on `data` (held-out fifth by `cfg.seed`) and reports held-out accuracy.
pub fn train(data: &Dataset, cfg: &TrainConfig) -> Result<TrainReport> {
    if cfg.batch == 0 || cfg.epochs == 0 {
        return Err(EngineError::Tensor(format!("batch ({}) and epochs ({}) must be positive", cfg.batch, cfg.epochs)));
    }
    let start = Instant::now();
    let (train_set, test_set) = split_holdout(data, cfg.seed);
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1, data.features as i64])?;
    let y = g.placeholder("y", DType::I64, [-1])?;
    let logits = build_model(&g, cfg.model, &x, cfg.seed)?;
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, &y)?, &[], false)?;
    let correct = g.cast(g.equal(g.argmax(&logits, 1)?, &y)?, DType::F32)?;
    let accuracy = g.reduce_mean(&correct, &[], false)?;
    let vars = g.variables();
    let train_op = Optimizer::adam(cfg.learning_rate).minimize(&loss, &vars.iter().collect::<Vec<_>>())?;
    let init = g.global_variables_initializer()?;

    let sess = Session::with_options(&g, SessionOptions { threads: cfg.threads, ..Default::default() })?;
    sess.run(&[], &[], &[&init])?;
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f_ba7c4);
    let mut order: Vec<usize> = (0..train_set.len()).collect();
    let mut steps = 0;
    let mut train_loss = 0.0;
    let mut last_trace: Option<StepStats> = None;
    for epoch in 0..cfg.epochs {
        order.shuffle(&mut rng);
        let (mut sum, mut n) = (0.0, 0usize);
        let batches: Vec<&[usize]> = order.chunks(cfg.batch).collect();
        for (bi, idx) in batches.iter().enumerate() {
            let (bx, by) = batch_tensors(&train_set, idx)?;
            let feeds = [(&x, &bx), (&y, &by)];
            let last = epoch + 1 == cfg.epochs && bi + 1 == batches.len();
            let out = if last && cfg.trace.is_some() {
                let (v, s) = sess.run_traced(&feeds, &[&loss], &[&train_op])?;
                last_trace = Some(s);
                v
            } else {
                sess.run(&feeds, &[&loss], &[&train_op])?
            };
            sum += out[0].scalar_f64()? * idx.len() as f64;
            n += idx.len();
            steps += 1;
        }
        train_loss = sum / n.max(1) as f64;
    }
    let all: Vec<usize> = (0..test_set.len()).collect();
    let (tx, ty) = batch_tensors(&test_set, &all)?;
    let out = sess.run(&[(&x, &tx), (&y, &ty)], &[&accuracy, &loss], &[])?;
    if let (Some(path), Some(t)) = (&cfg.trace, &last_trace) {
        t.write_chrome_trace(path)?;
    }
    Ok(TrainReport {
        model: cfg.model,
        accuracy: out[0].scalar_f64()?,
        loss: out[1].scalar_f64()?,
        train_loss,
        steps,
        epochs: cfg.epochs,
        seconds: start.elapsed().as_secs_f64(),
        train_examples: train_set.len(),
        test_examples: test_set.len(),
    })
}
