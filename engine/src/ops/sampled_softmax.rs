//! Sampled softmax (Jean et al. 2015; paper section 4.2): the
//! LogUniformCandidateSampler op and the `sampled_softmax_loss` builder.
//!
//! Contract. The sampler draws `num_sampled` classes (with replacement)
//! from the log-uniform (Zipf) distribution over `0..range_max`,
//! P(c) = (ln(c + 2) - ln(c + 1)) / ln(range_max + 1), which fits a
//! vocabulary sorted by falling frequency, and returns each true and
//! sampled class's expected count num_sampled x P(c). The loss is the
//! softmax cross entropy over [true class, sampled classes] with logits
//! corrected by -ln(expected count), so its gradient estimates the full
//! softmax's while touching only 1 + num_sampled rows of the weights.
//! Accidental hits (a sampled class equal to the true one) are kept, as in
//! TensorFlow with `remove_accidental_hits=False`.

use super::{KernelCtx, Registry};
use crate::error::{EngineError, Result};
use crate::graph::{AttrValue, Graph, IntoOutput, Output};
use crate::tensor::{DType, PartialShape, Tensor, TensorType};
use rand::Rng;

fn prob(c: i64, range: i64) -> f64 {
    (((c + 2) as f64).ln() - ((c + 1) as f64).ln()) / ((range + 1) as f64).ln()
}

fn k_sampler(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let s = c.n.int("num_sampled")? as usize;
    let range = c.n.int("range_max")?;
    let dtype = c.n.dtype("dtype")?;
    let seed = c.n.int("seed")? as u64;
    let mut rng = super::random::run_rng(c, seed);
    let log_range = ((range + 1) as f64).ln();
    let sampled: Vec<i64> = (0..s).map(|_| (((rng.random::<f64>() * log_range).exp() as i64) - 1).clamp(0, range - 1)).collect();
    let truth: Vec<i64> = match c.inputs[0].dtype() {
        DType::I32 => c.inputs[0].to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        _ => c.inputs[0].to_vec::<i64>()?,
    };
    if let Some(&bad) = truth.iter().find(|&&t| t < 0 || t >= range) {
        return Err(c.n.kernel_err(format!("true class {bad} is outside 0..{range}")));
    }
    let te: Vec<f64> = truth.iter().map(|&t| s as f64 * prob(t, range)).collect();
    let se: Vec<f64> = sampled.iter().map(|&t| s as f64 * prob(t, range)).collect();
    Ok(vec![Tensor::from_vec(sampled, [s])?, Tensor::from_f64s(dtype, &te, [truth.len()])?, Tensor::from_f64s(dtype, &se, [s])?])
}

pub(crate) fn register(r: &mut Registry) {
    // LogUniformCandidateSampler(true_classes [B]) -> sampled [S], true_expected [B], sampled_expected [S].
    r.def("LogUniformCandidateSampler", 1, Some(1), |c| {
        let s = c.n.int("num_sampled")?;
        let range = c.n.int("range_max")?;
        c.n.int("seed")?;
        if s < 1 || range < 1 {
            return Err(c.n.attr_err("num_sampled", format!("num_sampled {s} and range_max {range} must be at least 1")));
        }
        let dtype = c.n.dtype("dtype")?;
        let t = &c.inputs[0];
        if !matches!(t.dtype, DType::I32 | DType::I64) || t.shape.rank() != 1 {
            return Err(c.n.shape_err(format!("true classes must be a vector of i32 or i64, got {t}")));
        }
        Ok(vec![
            TensorType::new(DType::I64, PartialShape::new(vec![Some(s as usize)])),
            TensorType { dtype, shape: t.shape.clone() },
            TensorType::new(dtype, PartialShape::new(vec![Some(s as usize)])),
        ])
    })
    .stateful()
    .cheap()
    // A draw (exp of a uniform) or an expected count (logs) per output element.
    .flops(super::flops_per_output);
    r.cpu("LogUniformCandidateSampler", &[], k_sampler);
}

impl Graph {
    /// `num_sampled` classes drawn log-uniformly from `0..range_max`, with the
    /// expected counts of `true_classes` and of the samples (see the module
    /// comment). Each run draws new samples; the stream is fixed by `seed`.
    pub fn log_uniform_candidate_sampler(&self, true_classes: impl IntoOutput, num_sampled: usize, range_max: usize, dtype: DType, seed: u64) -> Result<Vec<Output>> {
        self.op("LogUniformCandidateSampler")
            .input(true_classes)
            .attr("num_sampled", AttrValue::Int(num_sampled as i64))
            .attr("range_max", AttrValue::Int(range_max as i64))
            .attr("dtype", AttrValue::DType(dtype))
            .attr("seed", AttrValue::Int(seed as i64))
            .build_all()
    }

    /// Per example, the sampled softmax loss of `labels` [B] given `inputs`
    /// [B, d] and the output layer `weights` [V, d], `biases` [V]: cross
    /// entropy over the true class and `num_sampled` log-uniform samples.
    pub fn sampled_softmax_loss(&self, weights: &Output, biases: &Output, labels: &Output, inputs: &Output, num_sampled: usize, seed: u64) -> Result<Output> {
        let v = weights.shape().dims().first().copied().flatten().ok_or_else(|| EngineError::Shape {
            node: weights.name(),
            op: weights.op(),
            detail: format!("the number of classes (dimension 0 of {}) must be known", weights.shape()),
        })?;
        let dt = inputs.dtype();
        let s = self.log_uniform_candidate_sampler(labels, num_sampled, v, dt, seed)?;
        self.sampled_softmax_loss_with(weights, biases, labels, inputs, [&s[0], &s[1], &s[2]])
    }

    /// [`sampled_softmax_loss`](Self::sampled_softmax_loss) for given
    /// `sampled_values`: the samples, the true classes' expected counts and
    /// the samples' (what the sampler returns; TensorFlow's argument of the
    /// same name).
    pub fn sampled_softmax_loss_with(&self, weights: &Output, biases: &Output, labels: &Output, inputs: &Output, sampled_values: [&Output; 3]) -> Result<Output> {
        let [sampled, true_expected, sampled_expected] = sampled_values;
        let true_w = self.gather(weights, labels)?;
        let true_b = self.gather(biases, labels)?;
        let true_logits = self.sub(self.add(self.reduce_sum(self.mul(inputs, &true_w)?, &[1], false)?, &true_b)?, self.log(true_expected)?)?;
        let samp_w = self.gather(weights, sampled)?;
        let samp_b = self.gather(biases, sampled)?;
        let samp_logits = self.sub(self.add(self.matmul_ex(inputs, &samp_w, false, true)?, &samp_b)?, self.log(sampled_expected)?)?;
        let logits = self.concat(&[&self.expand_dims(&true_logits, 1)?, &samp_logits], 1)?;
        let zeros = self.zeros_like(labels)?;
        self.sparse_softmax_cross_entropy_with_logits(&logits, &zeros)
    }
}
