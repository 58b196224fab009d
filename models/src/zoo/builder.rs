//! The layer vocabulary the zoo's models share: seeded variables, dense and
//! convolution layers, batch norm (one fused op, as TensorFlow's models run
//! it) and layer norm (composed of primitive ops), and the final assembly of loss,
//! gradients, optimizer and batch-norm moving-average updates into one
//! train op. Trainable and non-trainable variables are tracked apart so a
//! model's parameter count is exactly the count of what the optimizer updates.

use super::ModelGraph;
use flowlab_engine::{AttrValue, DType, Graph, Optimizer, Output, Result, Shape, Tensor};

/// How a variable's initial value is drawn (every draw is seeded).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Init {
    /// Truncated normal with stddev sqrt(2 / fan_in) (He et al.).
    HeNormal { fan_in: usize },
    /// Uniform in ±sqrt(6 / (fan_in + fan_out)) (Glorot and Bengio).
    Glorot { fan_in: usize, fan_out: usize },
    /// Uniform in ±scale (the PTB LSTM's `init_scale`).
    Uniform(f64),
    /// Normal with this stddev.
    Normal(f64),
    /// Every element equal to this value.
    Const(f64),
}

/// One LSTM layer's weights (TensorFlow's fused block cell: kernel
/// `[input + units, 4 units]` over concat(x, h), bias `[4 units]`).
pub(crate) struct LstmCell {
    kernel: Output,
    bias: Output,
    forget_bias: f64,
}

impl LstmCell {
    /// One step from state `(h, c)`: the new `(h, c)`.
    pub fn step(&self, g: &Graph, x: &Output, (h, c): &(Output, Output)) -> Result<(Output, Output)> {
        let cell = g.lstm_block_cell(x, c, h, &self.kernel, &self.bias, self.forget_bias)?;
        Ok((cell.h, cell.cs))
    }
}

/// Batch-norm variant: with or without the learned scale gamma.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BnConfig {
    pub scale: bool,
    pub epsilon: f64,
    /// Decay of the moving mean and variance.
    pub momentum: f64,
}

/// A convolution layer: a `k[0]` x `k[1]` kernel from `cin` to `cout`
/// channels, the same stride both ways, SAME padding or VALID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvSpec {
    pub k: [usize; 2],
    pub cin: usize,
    pub cout: usize,
    pub stride: usize,
    pub same: bool,
}

impl ConvSpec {
    /// A square `k` x `k` kernel with SAME padding.
    pub fn square(k: usize, cin: usize, cout: usize, stride: usize) -> ConvSpec {
        ConvSpec { k: [k, k], cin, cout, stride, same: true }
    }
}

/// A model under construction: the graph plus the variables and the
/// side-effect updates that the final train op must include.
pub(crate) struct Net {
    pub g: Graph,
    trainable: Vec<Output>,
    non_trainable: Vec<Output>,
    updates: Vec<Output>,
    seed: u64,
}

impl Net {
    pub fn new(seed: u64) -> Net {
        Net { g: Graph::new(), trainable: Vec::new(), non_trainable: Vec::new(), updates: Vec::new(), seed: seed.wrapping_mul(1_000_003) }
    }

    fn next_seed(&mut self) -> u64 {
        self.seed = self.seed.wrapping_add(1);
        self.seed
    }

    fn init_value(&mut self, s: &Graph, shape: &[usize], init: Init) -> Result<Output> {
        let shape = Shape::new(shape.to_vec());
        match init {
            Init::HeNormal { fan_in } => {
                let std = (2.0 / fan_in.max(1) as f64).sqrt();
                s.truncated_normal(shape, DType::F32, 0.0, std, self.next_seed())
            }
            Init::Glorot { fan_in, fan_out } => {
                let limit = (6.0 / (fan_in + fan_out).max(1) as f64).sqrt();
                s.random_uniform(shape, DType::F32, -limit, limit, self.next_seed())
            }
            Init::Uniform(a) => s.random_uniform(shape, DType::F32, -a, a, self.next_seed()),
            Init::Normal(std) => s.random_normal(shape, DType::F32, 0.0, std, self.next_seed()),
            Init::Const(v) => {
                let v = s.scalar(v, DType::F32)?;
                s.fill(shape, v)
            }
        }
    }

    /// A trainable f32 variable `name` (under the scope of `s`).
    pub fn param(&mut self, s: &Graph, name: &str, shape: &[usize], init: Init) -> Result<Output> {
        let v = self.init_value(s, shape, init)?;
        let var = s.variable(name, v)?;
        self.trainable.push(var.clone());
        Ok(var)
    }

    /// A non-trainable f32 variable (batch-norm moving statistics, an RNN
    /// state carried between steps).
    pub fn state(&mut self, s: &Graph, name: &str, shape: &[usize], value: f64) -> Result<Output> {
        let v = self.init_value(s, shape, Init::Const(value))?;
        let var = s.variable(name, v)?;
        self.non_trainable.push(var.clone());
        Ok(var)
    }

    /// A side effect the train op must run (a moving-average or state update).
    pub fn update(&mut self, op: Output) {
        self.updates.push(op);
    }

    /// An LSTM layer's variables `kernel` (drawn by `init`) and `bias`
    /// (zeros) under the scope of `s`.
    pub fn lstm_cell(&mut self, s: &Graph, input: usize, units: usize, init: Init, forget_bias: f64) -> Result<LstmCell> {
        let kernel = self.param(s, "kernel", &[input + units, 4 * units], init)?;
        let bias = self.param(s, "bias", &[4 * units], Init::Const(0.0))?;
        Ok(LstmCell { kernel, bias, forget_bias })
    }

    /// `x · W (+ b)` for `x` of shape [rows, fan_in].
    pub fn dense(&mut self, g: &Graph, name: &str, x: &Output, fan_in: usize, units: usize, bias: bool) -> Result<Output> {
        let s = g.scope(name);
        let w = self.param(&s, "kernel", &[fan_in, units], Init::Glorot { fan_in, fan_out: units })?;
        let y = s.matmul(x, &w)?;
        if !bias {
            return Ok(y);
        }
        let b = self.param(&s, "bias", &[units], Init::Const(0.0))?;
        s.bias_add(&y, &b)
    }

    /// The convolution `c` of NHWC `x` (no bias).
    pub fn conv(&mut self, s: &Graph, x: &Output, c: ConvSpec) -> Result<Output> {
        let ConvSpec { k, cin, cout, stride, same } = c;
        let w = self.param(s, "weights", &[k[0], k[1], cin, cout], Init::HeNormal { fan_in: k[0] * k[1] * cin })?;
        s.conv2d(x, &w, [stride, stride], same)
    }

    /// Convolution plus bias then ReLU (the small CNN's layer).
    pub fn conv_bias_relu(&mut self, g: &Graph, name: &str, x: &Output, k: usize, cin: usize, cout: usize) -> Result<Output> {
        let s = g.scope(name);
        let y = self.conv(&s, x, ConvSpec::square(k, cin, cout, 1))?;
        let b = self.param(&s, "bias", &[cout], Init::Const(0.0))?;
        s.relu(s.bias_add(&y, &b)?)
    }

    /// Training-mode batch normalization over all axes but the last, as
    /// TensorFlow's models run it (`FusedBatchNorm`, one kernel each way):
    /// batch mean and variance, `(x - mean) · rsqrt(var + eps) · gamma +
    /// beta`, and moving-average updates of the statistics run with the
    /// train op.
    pub fn batch_norm(&mut self, g: &Graph, x: &Output, channels: usize, cfg: BnConfig) -> Result<Output> {
        let s = g.scope("BatchNorm");
        let beta = self.param(&s, "beta", &[channels], Init::Const(0.0))?;
        let gamma = if cfg.scale { Some(self.param(&s, "gamma", &[channels], Init::Const(1.0))?) } else { None };
        let moving_mean = self.state(&s, "moving_mean", &[channels], 0.0)?;
        let moving_var = self.state(&s, "moving_variance", &[channels], 1.0)?;

        // One fused op each way, as TensorFlow's models run it
        // (`FusedBatchNorm`); a layer without gamma scales by ones.
        let scale = match &gamma {
            Some(gamma) => gamma.clone(),
            None => s.constant(Tensor::from_vec(vec![1f32; channels], [channels])?)?,
        };
        let (y, mean, var) = s.fused_batch_norm(x, &scale, &beta, cfg.epsilon)?;

        let decay = 1.0 - cfg.momentum;
        for (moving, stat) in [(&moving_mean, &mean), (&moving_var, &var)] {
            let flat = s.reshape(stat, &[channels as i64])?;
            let delta = ((moving - &flat)? * decay)?;
            self.updates.push(s.assign_sub(moving, &delta)?);
        }
        Ok(y)
    }

    /// Layer normalization over the last axis with gain and bias.
    pub fn layer_norm(&mut self, g: &Graph, name: &str, x: &Output, d: usize) -> Result<Output> {
        let s = g.scope(name);
        let gamma = self.param(&s, "gamma", &[d], Init::Const(1.0))?;
        let beta = self.param(&s, "beta", &[d], Init::Const(0.0))?;
        // One fused op each way, as PyTorch and XLA run it (`LayerNorm`).
        Ok(s.layer_norm(x, &gamma, &beta, 1e-6)?.0)
    }

    /// Mean cross entropy of `logits` [rows, classes] against i64 `labels` [rows].
    /// The node is named `name` at the top level of the graph.
    pub fn softmax_loss(&self, name: &str, logits: &Output, labels: &Output) -> Result<Output> {
        let xent = self.g.scope(name).sparse_softmax_cross_entropy_with_logits(logits, labels)?;
        self.g
            .op("Mean")
            .name(name)
            .input(xent)
            .attr("axes", AttrValue::Ints(Vec::new()))
            .attr("keep_dims", AttrValue::Bool(false))
            .build()
    }

    /// Appends gradients and `optimizer`'s updates of every trainable
    /// variable, grouped with the moving-average updates into `train_op`.
    pub fn finish(self, name: &str, batch: usize, inputs: Vec<Output>, loss: Output, optimizer: &Optimizer) -> Result<ModelGraph> {
        // The loss through the root handle: autodiff and the optimizer name
        // their nodes after the handle's scope (`gradients/...`, `Momentum/...`).
        let loss = self.g.output_by_name(&loss.name(), loss.index())?;
        let vars: Vec<&Output> = self.trainable.iter().collect();
        let step = optimizer.minimize(&loss, &vars)?;
        let mut deps: Vec<&Output> = vec![&step];
        deps.extend(self.updates.iter());
        let train_op = self.g.group("train_op", &deps)?;
        Ok(ModelGraph {
            name: name.to_string(),
            graph: self.g.clone(),
            input_limits: vec![None; inputs.len()],
            inputs,
            eval_loss: loss.clone(),
            state_update: None,
            state_reset: None,
            loss,
            train_op,
            batch,
            params: count(&self.trainable),
            non_trainable_params: count(&self.non_trainable),
        })
    }
}

/// Total elements of variables (their shapes are always fully known here).
fn count(vars: &[Output]) -> u64 {
    vars.iter().map(|v| v.shape().num_elements().unwrap_or(0) as u64).sum()
}
