//! End-to-end training on the digits set: a 64-128-10 MLP or a small CNN,
//! built with the graph API, trained with Adam on mini-batches, evaluated on
//! a held-out fifth chosen by a seeded shuffle. Used by `flowlab train` and
//! by the end-to-end tests.
//!
//! On several local CPU devices a run is either model parallel
//! ([`ParallelPlacement::Layers`]: consecutive layers, with their variables,
//! forward and backward ops and optimizer updates, on consecutive devices)
//! or data parallel ([`ParallelPlacement::Replicas`]: one replica per device
//! sharing variables on device 0, see [`crate::replicate`]). Cross-device
//! tensors travel in the configured [`CommFormat`].

use flowlab_engine::{DType, DeviceName, DeviceSet, EngineError, Graph, Optimizer, Output, PartitionOptions, Result, Session, SessionOptions, StepStats, Tensor};
use flowlab_engine::replicate::{ReplicaDevices, data_parallel, data_parallel_sharded};
use crate::datasets::Dataset;
use flowlab_hw::CommFormat;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use flowlab_engine::checkpoint::CheckpointManager;
use flowlab_engine::{EmulatedLink, LinkMap};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which network to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// 64-128-10, ReLU.
    Mlp,
    /// 784-512-512-10, ReLU: the MNIST-sized MLP that `flowlab bench
    /// engine` and `flowlab bench cluster` time (no data set here has its
    /// 784 features, so it is for synthetic batches only).
    Mlp784,
    /// conv 3x3x16 - maxpool - conv 3x3x32 - maxpool - dense 10.
    Cnn,
}

/// How a model is spread over several devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ParallelPlacement {
    /// Model parallel: the layers are cut into one contiguous group per
    /// device; each layer's variables live with it.
    Layers,
    /// Data parallel: one replica per device, variables on device 0.
    Replicas,
}

/// Number of steps at the end of training that `--trace` records.
const TRACED_STEPS: usize = 3;

/// Settings of one training run.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    pub model: ModelKind,
    pub epochs: usize,
    pub seed: u64,
    pub batch: usize,
    pub learning_rate: f64,
    /// Worker threads per device.
    pub threads: usize,
    /// Local CPU devices (1 = everything on one device).
    pub devices: usize,
    /// How the model uses `devices` > 1.
    pub placement: ParallelPlacement,
    /// Format of cross-device transfers.
    pub comm: CommFormat,
    /// Write a Chrome/Perfetto trace of the last few training steps here.
    pub trace: Option<PathBuf>,
    /// Save checkpoints during training (and resume from them).
    pub checkpoint: Option<CheckpointConfig>,
    /// An emulated link between every pair of devices (devices > 1).
    pub link: Option<EmulatedLink>,
}

/// Checkpoints of a training run: `every` steps into `dir`, the newest
/// `keep` kept; with `resume`, training continues from the newest intact
/// checkpoint there and ends with the same result as a run never stopped.
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    pub dir: PathBuf,
    pub every: usize,
    pub keep: usize,
    pub resume: bool,
}

/// Examples per step when none is given.
pub const DEFAULT_BATCH: usize = 32;

/// [`DEFAULT_BATCH`] rounded up to a multiple of `replicas`, the gradients a
/// synchronous step averages (each takes an equal shard), so that the
/// defaults train on any number of devices or workers: 33 for 3.
pub fn default_batch(replicas: usize) -> usize {
    let n = replicas.max(1);
    DEFAULT_BATCH.div_ceil(n) * n
}

impl TrainConfig {
    pub fn new(model: ModelKind) -> TrainConfig {
        TrainConfig {
            model,
            epochs: 30,
            seed: 1,
            batch: DEFAULT_BATCH,
            learning_rate: 3e-3,
            threads: 1,
            devices: 1,
            placement: ParallelPlacement::Replicas,
            comm: CommFormat::F32,
            trace: None,
            checkpoint: None,
            link: None,
        }
    }

    /// Rejects settings that cannot train, naming the setting.
    /// Errors are [`EngineError::Config`] whose key is the field's name.
    pub fn validate(&self) -> Result<()> {
        fn bad(key: &str, detail: String) -> Result<()> {
            Err(EngineError::Config { key: key.into(), detail })
        }
        if self.batch == 0 {
            return bad("batch", "must be at least 1 (got 0)".into());
        }
        if self.epochs == 0 {
            return bad("epochs", "must be at least 1 (got 0)".into());
        }
        if !(self.learning_rate.is_finite() && self.learning_rate > 0.0) {
            return bad("learning_rate", format!("must be a finite positive number (got {})", self.learning_rate));
        }
        if self.threads == 0 || self.threads > flowlab_engine::MAX_THREADS {
            return bad("threads", format!("must be between 1 and {} (got {})", flowlab_engine::MAX_THREADS, self.threads));
        }
        if self.devices == 0 {
            return bad("devices", "must be at least 1 (got 0)".into());
        }
        if self.link.is_some() && self.devices < 2 {
            return bad("link", "emulates transfers between devices: use --devices 2 or more".into());
        }
        if let Some(c) = &self.checkpoint {
            if c.every == 0 {
                return bad("checkpoint_every", "must be at least 1 step (got 0)".into());
            }
            if c.keep == 0 {
                return bad("keep", "must keep at least 1 checkpoint (got 0)".into());
            }
        }
        if self.devices > 1 && self.placement == ParallelPlacement::Replicas && self.batch % self.devices != 0 {
            return bad("batch", format!(
                "{} does not split evenly into {} replicas: use a batch that is a multiple of {}",
                self.batch, self.devices, self.devices
            ));
        }
        let layers = model_layers(self.model).len();
        if self.placement == ParallelPlacement::Layers && self.devices > layers {
            return bad("devices", format!(
                "placement layers puts whole layers on devices: the {} has {layers} layers, so at most {layers} devices (got {})",
                model_label(self.model),
                self.devices
            ));
        }
        Ok(())
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
    /// Examples per step (every replica's shard together).
    pub batch: usize,
    /// Whole run, graph building and evaluation included.
    pub seconds: f64,
    /// Training steps only, divided by the epochs.
    pub seconds_per_epoch: f64,
    pub train_examples: usize,
    pub test_examples: usize,
    pub devices: usize,
    pub placement: ParallelPlacement,
    pub comm: CommFormat,
    /// Cross-device transfers over the whole run (devices > 1 only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfers: Option<u64>,
    /// Bytes those transfers put on the wire in `comm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_sent: Option<u64>,
    /// Bytes the same transfers would have taken as f32.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_f32: Option<u64>,
    /// The checkpoint step training resumed from (`resume` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from_step: Option<u64>,
    /// Newer checkpoints that could not be read when resuming, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_checkpoints: Vec<String>,
}

/// Splits off a held-out fifth after a seeded shuffle: (train, test).
pub fn split_holdout(data: &Dataset, seed: u64) -> (Dataset, Dataset) {
    let mut idx: Vec<usize> = (0..data.len()).collect();
    idx.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
    let n_test = data.len() / 5;
    let (test, train) = idx.split_at(n_test);
    (data.select(train), data.select(test))
}

fn model_label(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Mlp => "mlp",
        ModelKind::Mlp784 => "mlp784",
        ModelKind::Cnn => "cnn",
    }
}

/// One trainable layer: its kind and shape; its variables are `<name>/w`
/// and `<name>/b`.
#[derive(Clone, Copy, Debug)]
enum LayerSpec {
    /// `x·W + b` (inputs reshaped to [-1, inputs]), then ReLU if `relu`.
    Dense { name: &'static str, inputs: usize, units: usize, relu: bool },
    /// 3x3 same convolution + bias + ReLU, then 2x2 max-pool (inputs
    /// reshaped to 8x8x1 images when they come flat).
    ConvPool { name: &'static str, cin: usize, cout: usize },
}

impl LayerSpec {
    /// (name, W's shape, fan-in + fan-out, units).
    fn shapes(&self) -> (&'static str, Vec<usize>, usize, usize) {
        match *self {
            LayerSpec::Dense { name, inputs, units, .. } => (name, vec![inputs, units], inputs + units, units),
            LayerSpec::ConvPool { name, cin, cout } => (name, vec![3, 3, cin, cout], (cin + cout) * 9, cout),
        }
    }
}

/// Where each variable of `kind` lives when the variables are spread over
/// the parameter devices `params`: TensorFlow's greedy load balancing by
/// size (`replica_device_setter` with `GreedyLoadBalancingStrategy`): the
/// variables, largest first (ties in creation order), each go to the
/// least-loaded device so far (ties to the first). The cluster simulator's
/// `variables:` workload places the same way. Returns (variable name,
/// elements, index into `params`) in creation order.
pub fn shard_variables(kind: ModelKind, params: usize) -> Vec<(String, usize, usize)> {
    let mut vars: Vec<(String, usize, usize)> = Vec::new();
    for spec in model_layers(kind) {
        let (name, wshape, _, units) = spec.shapes();
        vars.push((format!("{name}/w"), wshape.iter().product(), 0));
        vars.push((format!("{name}/b"), units, 0));
    }
    let mut order: Vec<usize> = (0..vars.len()).collect();
    order.sort_by(|&a, &b| vars[b].1.cmp(&vars[a].1).then(a.cmp(&b)));
    let mut load = vec![0usize; params.max(1)];
    for i in order {
        let k = (0..load.len()).min_by_key(|&k| (load[k], k)).unwrap_or(0);
        load[k] += vars[i].1;
        vars[i].2 = k;
    }
    vars
}

/// Features per example the model reads: the first dense layer's inputs,
/// or an 8x8 image.
pub fn model_features(kind: ModelKind) -> usize {
    match model_layers(kind).first() {
        Some(LayerSpec::Dense { inputs, .. }) => *inputs,
        _ => 64,
    }
}

fn model_layers(kind: ModelKind) -> Vec<LayerSpec> {
    match kind {
        ModelKind::Mlp => vec![
            LayerSpec::Dense { name: "hidden", inputs: 64, units: 128, relu: true },
            LayerSpec::Dense { name: "logits", inputs: 128, units: 10, relu: false },
        ],
        ModelKind::Mlp784 => vec![
            LayerSpec::Dense { name: "hidden1", inputs: 784, units: 512, relu: true },
            LayerSpec::Dense { name: "hidden2", inputs: 512, units: 512, relu: true },
            LayerSpec::Dense { name: "logits", inputs: 512, units: 10, relu: false },
        ],
        ModelKind::Cnn => vec![
            LayerSpec::ConvPool { name: "conv1", cin: 1, cout: 16 },
            LayerSpec::ConvPool { name: "conv2", cin: 16, cout: 32 },
            LayerSpec::Dense { name: "logits", inputs: 128, units: 10, relu: false },
        ],
    }
}

/// A layer with its variables.
#[derive(Clone, Debug)]
struct Layer {
    spec: LayerSpec,
    w: Output,
    b: Output,
}

impl Layer {
    /// Creates the variables (Glorot-uniform W, zero b): W on `gw`'s
    /// device, b on `gb`'s.
    fn new(gw: &Graph, gb: &Graph, spec: LayerSpec, seed: u64) -> Result<Layer> {
        let (name, wshape, fan, units) = spec.shapes();
        let limit = (6.0 / fan as f64).sqrt();
        let s = gw.scope(name);
        let w = s.variable("w", s.random_uniform(wshape, DType::F32, -limit, limit, seed)?)?;
        let s = gb.scope(name);
        let b = s.variable("b", s.zeros(DType::F32, [units])?)?;
        Ok(Layer { spec, w, b })
    }

    fn apply(&self, g: &Graph, x: &Output) -> Result<Output> {
        match self.spec {
            LayerSpec::Dense { name, inputs, relu, .. } => {
                let s = g.scope(name);
                let x = if x.shape().rank() == 2 { x.clone() } else { s.reshape(x, &[-1, inputs as i64])? };
                let z = s.bias_add(s.matmul(&x, &self.w)?, &self.b)?;
                if relu { g.relu(z) } else { Ok(z) }
            }
            LayerSpec::ConvPool { name, .. } => {
                let s = g.scope(name);
                let x = if x.shape().rank() == 4 { x.clone() } else { s.reshape(x, &[-1, 8, 8, 1])? };
                let c = s.relu(s.bias_add(s.conv2d(&x, &self.w, [1, 1], true)?, &self.b)?)?;
                g.max_pool(&c, [2, 2], [2, 2], true)
            }
        }
    }

    fn vars(&self) -> [&Output; 2] {
        [&self.w, &self.b]
    }
}

/// Creates the model's layers; layer i's variables on `device_of(i)`.
fn create_layers(kind: ModelKind, seed: u64, device_of: impl Fn(usize) -> Graph) -> Result<Vec<Layer>> {
    let seed = seed.wrapping_mul(1000);
    model_layers(kind)
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let g = device_of(i);
            Layer::new(&g, &g, spec, seed + 1 + i as u64)
        })
        .collect()
}

/// Creates the model's layers with their variables sharded over `params`
/// by [`shard_variables`] (one device: all there). The values are those of
/// [`create_layers`] with the same seed, wherever they live.
fn create_sharded_layers(g: &Graph, kind: ModelKind, seed: u64, params: &[DeviceName]) -> Result<Vec<Layer>> {
    let Some(first) = params.first() else {
        return Err(EngineError::Config { key: "ps".into(), detail: "no parameter device to hold the variables".into() });
    };
    let placed = shard_variables(kind, params.len());
    let on = |var: String| -> Graph {
        let k = placed.iter().find(|(n, _, _)| *n == var).map_or(0, |p| p.2);
        g.device(&params.get(k).unwrap_or(first).to_string())
    };
    let seed = seed.wrapping_mul(1000);
    model_layers(kind)
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            let name = spec.shapes().0;
            Layer::new(&on(format!("{name}/w")), &on(format!("{name}/b")), spec, seed + 1 + i as u64)
        })
        .collect()
}

fn forward(g: &Graph, layers: &[Layer], x: &Output) -> Result<Output> {
    layers.iter().try_fold(x.clone(), |h, l| l.apply(g, &h))
}

/// The model's logits for `x` ([batch, 64] floats in [0, 1]).
pub fn build_model(g: &Graph, kind: ModelKind, x: &Output, seed: u64) -> Result<Output> {
    let layers = create_layers(kind, seed, |_| g.clone())?;
    forward(g, &layers, x)
}

/// Mean cross entropy and accuracy of logits against labels.
fn loss_and_accuracy(g: &Graph, logits: &Output, y: &Output) -> Result<(Output, Output)> {
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(logits, y)?, &[], false)?;
    let correct = g.cast(g.equal(g.argmax(logits, 1)?, y)?, DType::F32)?;
    Ok((loss, g.reduce_mean(&correct, &[], false)?))
}

/// The local CPU device `i` (the names `DeviceSet::local_cpus` holds).
pub fn local_cpu(i: usize) -> DeviceName {
    DeviceName::full("localhost", 0, 0, "CPU", i as u32)
}

/// The nodes a run needs: placeholders, training loss and op, evaluation.
struct TrainGraph {
    x: Output,
    y: Output,
    loss: Output,
    train_op: Output,
    eval_loss: Output,
    eval_accuracy: Output,
}

/// Model parallel (and the single-device case): layers cut into `devices`
/// contiguous groups; backpropagation runs group by group from the last,
/// each group's backward ops and updates on its own device.
fn build_layers(g: &Graph, cfg: &TrainConfig, features: usize) -> Result<TrainGraph> {
    let n_layers = model_layers(cfg.model).len();
    let group_of = |layer: usize| layer * cfg.devices / n_layers;
    let dev = |group: usize| -> Graph { if cfg.devices == 1 { g.clone() } else { g.device(&local_cpu(group).to_string()) } };
    let first = dev(0);
    let x = first.placeholder("x", DType::F32, [-1, features as i64])?;
    let last = dev(cfg.devices - 1);
    let y = last.placeholder("y", DType::I64, [-1])?;
    let layers = create_layers(cfg.model, cfg.seed, |i| dev(group_of(i)))?;
    // Forward, group by group; boundaries[k] is the input of group k.
    let mut boundaries = vec![x.clone()];
    let mut h = x.clone();
    for k in 0..cfg.devices {
        let gk = dev(k);
        for (i, l) in layers.iter().enumerate() {
            if group_of(i) == k {
                h = l.apply(&gk, &h)?;
            }
        }
        boundaries.push(h.clone());
    }
    let (loss, accuracy) = loss_and_accuracy(&last, &h, &y)?;
    let opt = Optimizer::adam(cfg.learning_rate);
    // Backward: group k gets d loss / d (its output) from group k+1.
    let mut upstream: Option<Output> = None;
    let mut updates = Vec::new();
    for k in (0..cfg.devices).rev() {
        let gk = dev(k);
        let vars: Vec<&Output> = layers.iter().enumerate().filter(|(i, _)| group_of(*i) == k).flat_map(|(_, l)| l.vars()).collect();
        let mut xs = vars.clone();
        if k > 0 {
            xs.push(&boundaries[k]);
        }
        let grads = match &upstream {
            None => gk.gradients(&[&loss], &xs)?,
            Some(up) => gk.gradients_with(&[&boundaries[k + 1]], &xs, Some(&[up]))?,
        };
        let mut pairs = Vec::new();
        for (v, gr) in xs.iter().zip(&grads) {
            let gr = gr.clone().ok_or_else(|| EngineError::NoGradient { node: v.name(), op: "the loss does not depend on it".into() })?;
            pairs.push(((*v).clone(), gr));
        }
        upstream = if k > 0 { pairs.pop().map(|(_, gr)| gr) } else { None };
        updates.push(opt.apply_gradients(&gk, &pairs)?);
    }
    let train_op = if updates.len() == 1 { updates.remove(0) } else { g.group("train", &updates.iter().collect::<Vec<_>>())? };
    Ok(TrainGraph { x, y, loss: loss.clone(), train_op, eval_loss: loss, eval_accuracy: accuracy })
}

/// Data parallel: variables, inputs, averaging and the update on device 0;
/// replica i on device i; evaluation as one tower on device 0.
fn build_replicas(g: &Graph, cfg: &TrainConfig, features: usize) -> Result<TrainGraph> {
    let param = local_cpu(0);
    let pg = g.device(&param.to_string());
    let x = pg.placeholder("x", DType::F32, [-1, features as i64])?;
    let y = pg.placeholder("y", DType::I64, [-1])?;
    let layers = create_layers(cfg.model, cfg.seed, |_| pg.clone())?;
    let vars: Vec<&Output> = layers.iter().flat_map(|l| l.vars()).collect();
    let devices: Vec<DeviceName> = (0..cfg.devices).map(local_cpu).collect();
    let r = data_parallel(g, ReplicaDevices { replicas: &devices, params: &param }, &x, &y, &vars, &Optimizer::adam(cfg.learning_rate), |rg, xs, ys| {
        Ok(loss_and_accuracy(rg, &forward(rg, &layers, xs)?, ys)?.0)
    })?;
    let eval = pg.scope("eval");
    let (eval_loss, eval_accuracy) = loss_and_accuracy(&eval, &forward(&eval, &layers, &x)?, &y)?;
    Ok(TrainGraph { x, y, loss: r.loss, train_op: r.train_op, eval_loss, eval_accuracy })
}

/// The graph of synchronous data parallelism over named devices, each
/// replica fed its own shard where it runs (between-graph replication over
/// the tasks of a cluster: the distributed runtime partitions it).
/// Variables live on the parameter devices (sharded over several by
/// [`shard_variables`]), each one's gradient average and update with it;
/// the loss and the evaluation tower on the first. With the same seed and
/// shards it computes what
/// [`train`] does with `--placement replicas` over as many local devices.
#[derive(Clone, Debug)]
pub struct ShardedGraph {
    /// Per replica: its input and label placeholders, on its device.
    pub xs: Vec<Output>,
    pub ys: Vec<Output>,
    /// Mean of the replica losses (the full-batch loss).
    pub loss: Output,
    pub train_op: Output,
    /// Per replica: its gradients (variable order), what the average reads.
    pub replica_gradients: Vec<Vec<Output>>,
    /// Initializes every variable.
    pub init: Output,
    /// Evaluation placeholders and results, on the parameter device.
    pub eval_x: Output,
    pub eval_y: Output,
    pub eval_loss: Output,
    pub eval_accuracy: Output,
}

/// Builds [`ShardedGraph`] for `cfg.model` on `g`: variables sharded over
/// `params` ([`shard_variables`]; each one's gradient average and update
/// with it), the loss and the evaluation tower on `params[0]`, replica i on
/// `replicas[i]`.
pub fn build_sharded(g: &Graph, cfg: &TrainConfig, features: usize, params: &[DeviceName], replicas: &[DeviceName]) -> Result<ShardedGraph> {
    let layers = create_sharded_layers(g, cfg.model, cfg.seed, params)?;
    let param = &params[0];
    let pg = g.device(&param.to_string());
    let mut xs = Vec::with_capacity(replicas.len());
    let mut ys = Vec::with_capacity(replicas.len());
    for (i, d) in replicas.iter().enumerate() {
        let rg = g.device(&d.to_string());
        xs.push(rg.placeholder(&format!("x_{i}"), DType::F32, [-1, features as i64])?);
        ys.push(rg.placeholder(&format!("y_{i}"), DType::I64, [-1])?);
    }
    let vars: Vec<&Output> = layers.iter().flat_map(|l| l.vars()).collect();
    let r = data_parallel_sharded(g, ReplicaDevices { replicas, params: param }, &xs, &ys, &vars, &Optimizer::adam(cfg.learning_rate), |rg, x, y| {
        Ok(loss_and_accuracy(rg, &forward(rg, &layers, x)?, y)?.0)
    })?;
    let (eval_x, eval_y, eval_loss, eval_accuracy) = eval_tower(&pg, &layers, features)?;
    let init = g.global_variables_initializer()?;
    Ok(ShardedGraph { xs, ys, loss: r.loss, train_op: r.train_op, replica_gradients: r.replica_gradients, init, eval_x, eval_y, eval_loss, eval_accuracy })
}

/// The evaluation placeholders, loss and accuracy on the parameter device.
fn eval_tower(pg: &Graph, layers: &[Layer], features: usize) -> Result<(Output, Output, Output, Output)> {
    let eval_x = pg.placeholder("x", DType::F32, [-1, features as i64])?;
    let eval_y = pg.placeholder("y", DType::I64, [-1])?;
    let eval = pg.scope("eval");
    let (eval_loss, eval_accuracy) = loss_and_accuracy(&eval, &forward(&eval, layers, &eval_x)?, &eval_y)?;
    Ok((eval_x, eval_y, eval_loss, eval_accuracy))
}

/// Replica `i` on device `d`: its placeholders, its batch loss, and the
/// gradient of that loss for each variable (an error names a variable the
/// loss does not depend on).
#[allow(clippy::type_complexity)]
fn replica_gradients(
    g: &Graph,
    i: usize,
    d: &DeviceName,
    layers: &[Layer],
    vars: &[&Output],
    features: usize,
) -> Result<(Output, Output, Output, Vec<(Output, Output)>)> {
    let rg = g.device(&d.to_string()).scope(&format!("replica_{i}"));
    let x = rg.placeholder("x", DType::F32, [-1, features as i64])?;
    let y = rg.placeholder("y", DType::I64, [-1])?;
    let loss = loss_and_accuracy(&rg, &forward(&rg, layers, &x)?, &y)?.0;
    let grads = rg.gradients(&[&loss], vars)?;
    let pairs = vars
        .iter()
        .zip(grads)
        .map(|(v, gr)| {
            gr.map(|gr| ((*v).clone(), gr))
                .ok_or_else(|| EngineError::NoGradient { node: v.name(), op: "the loss does not depend on it".into() })
        })
        .collect::<Result<_>>()?;
    Ok((x, y, loss, pairs))
}

/// The graph of asynchronous data parallelism over named devices: replica
/// i has its own placeholders, loss and gradients on its device and its own
/// Adam update on the parameter device, all updates sharing the variables
/// and one optimizer state there. A worker's step runs only its own update,
/// on the variables as they are when its step reads them.
#[derive(Clone, Debug)]
pub struct AsyncGraph {
    pub xs: Vec<Output>,
    pub ys: Vec<Output>,
    /// Per replica: its batch loss, its update and the gradients (variable
    /// order) the update applies.
    pub losses: Vec<Output>,
    pub train_ops: Vec<Output>,
    pub gradients: Vec<Vec<Output>>,
    pub init: Output,
    pub eval_x: Output,
    pub eval_y: Output,
    pub eval_loss: Output,
    pub eval_accuracy: Output,
}

/// Builds [`AsyncGraph`] for `cfg.model` on `g`: variables sharded over
/// `params` as [`build_sharded`] does (each update op on its variable's
/// device), replica i on `replicas[i]`.
pub fn build_async(g: &Graph, cfg: &TrainConfig, features: usize, params: &[DeviceName], replicas: &[DeviceName]) -> Result<AsyncGraph> {
    let layers = create_sharded_layers(g, cfg.model, cfg.seed, params)?;
    let pg = g.device(&params[0].to_string());
    let vars: Vec<&Output> = layers.iter().flat_map(|l| l.vars()).collect();
    let opt = Optimizer::adam(cfg.learning_rate);
    let (mut xs, mut ys, mut losses, mut train_ops, mut gradients) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, d) in replicas.iter().enumerate() {
        let (x, y, loss, pairs) = replica_gradients(g, i, d, &layers, &vars, features)?;
        train_ops.push(opt.apply_gradients_shared(&pg, &pairs)?);
        gradients.push(pairs.into_iter().map(|(_, gr)| gr).collect());
        xs.push(x);
        ys.push(y);
        losses.push(loss);
    }
    let (eval_x, eval_y, eval_loss, eval_accuracy) = eval_tower(&pg, &layers, features)?;
    let init = g.global_variables_initializer()?;
    Ok(AsyncGraph { xs, ys, losses, train_ops, gradients, init, eval_x, eval_y, eval_loss, eval_accuracy })
}

/// The graph of synchronous data parallelism with backup workers
/// (TensorFlow's SyncReplicasOptimizer): each of the `replicas.len()`
/// workers computes the gradients of its shard and leaves them in its own
/// stash variables on the parameter device (`computes[i]`); `apply` then
/// averages the stashes weighted by the fed scalars `masks` (1 for the
/// first `needed` workers to finish, 0 for the rest) over `needed`, and
/// makes one Adam update. With every mask 1 and no backup it computes what
/// [`ShardedGraph`] does, bit for bit (x * 1 and + 0 are exact).
#[derive(Clone, Debug)]
pub struct BackupGraph {
    pub xs: Vec<Output>,
    pub ys: Vec<Output>,
    pub losses: Vec<Output>,
    /// Per worker: its gradients into its stash (run as a target).
    pub computes: Vec<Output>,
    /// Per worker: a scalar f32 placeholder on the parameter device.
    pub masks: Vec<Output>,
    pub apply: Output,
    pub init: Output,
    pub eval_x: Output,
    pub eval_y: Output,
    pub eval_loss: Output,
    pub eval_accuracy: Output,
}

/// Builds [`BackupGraph`]: variables sharded over `params` as
/// [`build_sharded`] does, each variable's stashes, average and update with
/// it, the masks on `params[0]`, worker i on `replicas[i]`, `needed`
/// gradients per update.
pub fn build_backup(g: &Graph, cfg: &TrainConfig, features: usize, params: &[DeviceName], replicas: &[DeviceName], needed: usize) -> Result<BackupGraph> {
    if needed == 0 || needed > replicas.len() {
        return Err(EngineError::Config {
            key: "sync_backup".into(),
            detail: format!("{} workers cannot give {needed} gradients per step", replicas.len()),
        });
    }
    let layers = create_sharded_layers(g, cfg.model, cfg.seed, params)?;
    let pg = g.device(&params[0].to_string());
    let vars: Vec<&Output> = layers.iter().flat_map(|l| l.vars()).collect();
    let (mut xs, mut ys, mut losses, mut computes, mut masks, mut stashes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (i, d) in replicas.iter().enumerate() {
        let (x, y, loss, pairs) = replica_gradients(g, i, d, &layers, &vars, features)?;
        let mut assigns = Vec::with_capacity(vars.len());
        let mut mine = Vec::with_capacity(vars.len());
        for (v, gr) in &pairs {
            let ps = pg.on_device_of(v).scope(&format!("stash_{i}"));
            let ty = v.tensor_type();
            let shape = ty.shape.to_shape().ok_or_else(|| EngineError::Shape { node: v.name(), op: "Variable".into(), detail: "a stash needs a known shape".into() })?;
            let stash = ps.variable(&v.name(), ps.zeros(ty.dtype, shape)?)?;
            assigns.push(ps.assign(&stash, gr)?);
            mine.push(stash);
        }
        computes.push(pg.scope(&format!("stash_{i}")).group("compute", &assigns.iter().collect::<Vec<_>>())?);
        masks.push(pg.placeholder(&format!("mask_{i}"), DType::F32, [] as [i64; 0])?);
        stashes.push(mine);
        xs.push(x);
        ys.push(y);
        losses.push(loss);
    }
    let mut pairs = Vec::with_capacity(vars.len());
    for (k, v) in vars.iter().enumerate() {
        let avg = pg.on_device_of(v).scope("average");
        let mut sum: Option<Output> = None;
        for (i, st) in stashes.iter().enumerate() {
            let term = avg.mul(&st[k], &masks[i])?;
            sum = Some(match sum {
                None => term,
                Some(acc) => avg.add(&acc, &term)?,
            });
        }
        let sum = sum.ok_or_else(|| EngineError::Tensor("no workers".into()))?;
        let mean = if needed == 1 { sum } else { avg.mul(&sum, avg.scalar(1.0 / needed as f64, v.dtype())?)? };
        pairs.push(((*v).clone(), mean));
    }
    let apply = Optimizer::adam(cfg.learning_rate).apply_gradients(&pg, &pairs)?;
    let (eval_x, eval_y, eval_loss, eval_accuracy) = eval_tower(&pg, &layers, features)?;
    let init = g.global_variables_initializer()?;
    Ok(BackupGraph { xs, ys, losses, computes, masks, apply, init, eval_x, eval_y, eval_loss, eval_accuracy })
}

/// The mini-batches of each epoch: a seeded shuffle of the training set
/// per epoch, cut into `batch`-sized batches; with `replicas` > 1 the last
/// batch is cut down to a multiple of `replicas` (dropped if that leaves
/// nothing) so every replica gets an equal shard. [`train`] and the
/// distributed runtime draw the same batches for the same config.
pub struct Batches {
    rng: ChaCha8Rng,
    order: Vec<usize>,
    batch: usize,
    replicas: usize,
}

impl Batches {
    pub fn new(train_examples: usize, cfg: &TrainConfig, replicas: usize) -> Batches {
        Batches {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_0f_ba7c4),
            order: (0..train_examples).collect(),
            batch: cfg.batch.max(1),
            replicas: replicas.max(1),
        }
    }

    /// The next epoch's batches (example indices).
    pub fn next_epoch(&mut self) -> Vec<&[usize]> {
        self.order.shuffle(&mut self.rng);
        let mut batches: Vec<&[usize]> = self.order.chunks(self.batch).collect();
        if self.replicas > 1 && let Some(last) = batches.pop() {
            let keep = last.len() - last.len() % self.replicas;
            if keep > 0 {
                batches.push(&last[..keep]);
            }
        }
        batches
    }
}

/// Seconds one worker's forward and backward pass takes on a shard of
/// `shard` examples of `data`, in this process on one CPU (the median of
/// `reps` timed runs after one untimed): the compute time that injected
/// stragglers scale (`flowlab train --straggler`).
pub fn time_replica_compute(data: &Dataset, cfg: &TrainConfig, shard: usize, reps: usize) -> Result<f64> {
    let g = Graph::new();
    let one = TrainConfig { devices: 1, ..cfg.clone() };
    let sess = session_for(&g, &one)?;
    let sg = build_sharded(&g, &one, data.features, &[local_cpu(0)], &[local_cpu(0)])?;
    sess.run(&[], &[], &[&sg.init])?;
    let compute = g.group("time_compute", &sg.replica_gradients[0].iter().collect::<Vec<_>>())?;
    let idx: Vec<usize> = (0..shard.clamp(1, data.len().max(1))).collect();
    let (x, y) = batch_tensors(data, &idx)?;
    let feeds = [(&sg.xs[0], &x), (&sg.ys[0], &y)];
    sess.run(&feeds, &[], &[&compute])?;
    let mut times = Vec::with_capacity(reps.max(1));
    for _ in 0..reps.max(1) {
        let t = std::time::Instant::now();
        sess.run(&feeds, &[], &[&compute])?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// The inputs and labels of examples `idx` of `d`.
pub fn batch_tensors(d: &Dataset, idx: &[usize]) -> Result<(Tensor, Tensor)> {
    let b = d.select(idx);
    Ok((Tensor::from_vec(b.x, [idx.len(), d.features])?, Tensor::from_vec(b.y, [idx.len()])?))
}

/// The session for `cfg`: `threads` workers on each of `devices` CPUs.
fn session_for(g: &Graph, cfg: &TrainConfig) -> Result<Session> {
    Session::with_options(
        g,
        SessionOptions {
            threads: cfg.threads,
            devices: DeviceSet::local_cpus(cfg.devices),
            partition: PartitionOptions::in_format(cfg.comm),
            links: LinkMap { all: cfg.link, ..Default::default() },
            ..Default::default()
        },
    )
}

/// (transfers, bytes sent, bytes as f32) of the session so far.
fn comm_figures(sess: &Session) -> Option<(u64, u64, u64)> {
    let c = sess.comm_stats();
    Some((c.transfers, c.bytes_sent, c.bytes_f32))
}

/// Trains on `data` (held-out fifth by `cfg.seed`) and reports held-out accuracy.
/// Data parallel runs drop the last batch's few examples beyond a multiple
/// of `devices` (at most `devices - 1` per epoch) so every replica gets an
/// equal shard.
pub fn train(data: &Dataset, cfg: &TrainConfig) -> Result<TrainReport> {
    cfg.validate()?;
    let wanted = model_features(cfg.model);
    if data.features != wanted {
        return Err(EngineError::Config {
            key: "model".into(),
            detail: format!("{} takes {wanted} features per example; the data has {}", model_label(cfg.model), data.features),
        });
    }
    let start = Instant::now();
    let (train_set, test_set) = split_holdout(data, cfg.seed);
    if train_set.is_empty() || test_set.is_empty() {
        return Err(EngineError::Config {
            key: "data".into(),
            detail: format!(
                "{} examples give {} to train on and {} held out: at least 5 are needed (one held out in five)",
                data.len(),
                train_set.len(),
                test_set.len()
            ),
        });
    }
    let g = Graph::new();
    let replicas = cfg.devices > 1 && cfg.placement == ParallelPlacement::Replicas;
    let tg = if replicas { build_replicas(&g, cfg, data.features)? } else { build_layers(&g, cfg, data.features)? };
    let init = g.global_variables_initializer()?;

    let sess = session_for(&g, cfg)?;
    sess.run(&[], &[], &[&init])?;
    let checkpoints = match &cfg.checkpoint {
        Some(c) => Some(CheckpointManager::new(&c.dir, c.keep)?),
        None => None,
    };
    let mut resume = Progress::default();
    let (mut resumed_from_step, mut skipped_checkpoints) = (None, Vec::new());
    if let (Some(m), Some(c)) = (&checkpoints, &cfg.checkpoint)
        && c.resume
        && let Some(r) = m.restore_latest(&sess)?
    {
        resume = Progress::from_metadata(&r.info.metadata, cfg, &r.path)?;
        resumed_from_step = Some(r.step);
        skipped_checkpoints = r.skipped;
    }
    let mut schedule = Batches::new(train_set.len(), cfg, if replicas { cfg.devices } else { 1 });
    let mut steps = 0u64;
    let mut train_loss = resume.train_loss;
    let mut traced: Vec<StepStats> = Vec::new();
    let train_start = Instant::now();
    for epoch in 0..cfg.epochs {
        // Shuffled even for epochs a resumed run skips, so the order of
        // every later epoch is the one an uninterrupted run uses.
        let batches = schedule.next_epoch();
        // The loss sum of this epoch so far: restored when the checkpoint
        // was taken inside it.
        let epoch_start = steps;
        let (mut sum, mut n) = if resume.step > epoch_start && resume.step < epoch_start + batches.len() as u64 {
            (resume.epoch_loss_sum, resume.epoch_examples)
        } else {
            (0.0, 0usize)
        };
        for (bi, idx) in batches.iter().enumerate() {
            if steps < resume.step {
                steps += 1;
                continue;
            }
            let (bx, by) = batch_tensors(&train_set, idx)?;
            let feeds = [(&tg.x, &bx), (&tg.y, &by)];
            let traced_step = epoch + 1 == cfg.epochs && bi + TRACED_STEPS >= batches.len();
            let out = if traced_step && cfg.trace.is_some() {
                let (v, s) = sess.run_traced(&feeds, &[&tg.loss], &[&tg.train_op])?;
                traced.push(s);
                v
            } else {
                sess.run(&feeds, &[&tg.loss], &[&tg.train_op])?
            };
            sum += out[0].scalar_f64()? * idx.len() as f64;
            n += idx.len();
            steps += 1;
            if bi + 1 == batches.len() {
                train_loss = sum / n.max(1) as f64;
            }
            if let (Some(m), Some(c)) = (&checkpoints, &cfg.checkpoint)
                && steps % c.every as u64 == 0
            {
                let p = Progress { step: steps, epoch_loss_sum: sum, epoch_examples: n, train_loss };
                m.save(&sess, steps, &p.to_metadata(cfg))?;
            }
        }
    }
    if resume.step > steps {
        let file = cfg.checkpoint.as_ref().map(|c| c.dir.display().to_string()).unwrap_or_default();
        return Err(EngineError::Checkpoint {
            file,
            detail: format!(
                "the checkpoint restored is of step {}, beyond this run's {steps} steps (--epochs {}): nothing is left to train; ask for more epochs, or another --checkpoint-dir",
                resume.step, cfg.epochs
            ),
        });
    }
    // the end of training is checkpointed too, whatever `every` is
    if let (Some(m), Some(c)) = (&checkpoints, &cfg.checkpoint)
        && steps % c.every as u64 != 0
        && steps > resume.step
    {
        let p = Progress { step: steps, epoch_loss_sum: 0.0, epoch_examples: 0, train_loss };
        m.save(&sess, steps, &p.to_metadata(cfg))?;
    }
    let train_seconds = train_start.elapsed().as_secs_f64();
    let comm = if cfg.devices > 1 { comm_figures(&sess) } else { None };
    let all: Vec<usize> = (0..test_set.len()).collect();
    let (tx, ty) = batch_tensors(&test_set, &all)?;
    let out = sess.run(&[(&tg.x, &tx), (&tg.y, &ty)], &[&tg.eval_accuracy, &tg.eval_loss], &[])?;
    if let Some(path) = &cfg.trace {
        std::fs::write(path, StepStats::chrome_trace_of(&traced)).map_err(|e| EngineError::Io { file: path.display().to_string(), cause: e })?;
    }
    Ok(TrainReport {
        model: cfg.model,
        accuracy: out[0].scalar_f64()?,
        loss: out[1].scalar_f64()?,
        train_loss,
        steps: steps as usize,
        epochs: cfg.epochs,
        batch: cfg.batch,
        seconds: start.elapsed().as_secs_f64(),
        seconds_per_epoch: train_seconds / cfg.epochs as f64,
        train_examples: train_set.len(),
        test_examples: test_set.len(),
        devices: cfg.devices,
        placement: cfg.placement,
        comm: cfg.comm,
        transfers: comm.map(|c| c.0),
        bytes_sent: comm.map(|c| c.1),
        bytes_f32: comm.map(|c| c.2),
        resumed_from_step,
        skipped_checkpoints,
    })
}

/// Where a run stands after a step: what a checkpoint must hold besides the
/// variables for a resumed run to end exactly as an uninterrupted one.
#[derive(Clone, Copy, Debug, Default)]
struct Progress {
    /// Steps done.
    step: u64,
    /// Sum of (batch loss x batch size) over the current epoch so far.
    epoch_loss_sum: f64,
    epoch_examples: usize,
    /// Mean training loss of the last completed epoch.
    train_loss: f64,
}

impl Progress {
    /// The run's settings that a resumed run must share, by checkpoint key.
    /// Settings a resumed run must share with the checkpoint's when the
    /// checkpoint records them (those written before it did are resumed
    /// without the check).
    fn optimizer(cfg: &TrainConfig) -> [(&'static str, String); 2] {
        [("learning_rate", cfg.learning_rate.to_string()), ("comm", format!("{:?}", cfg.comm))]
    }

    fn settings(cfg: &TrainConfig) -> [(&'static str, String); 5] {
        [
            ("model", model_label(cfg.model).to_string()),
            ("seed", cfg.seed.to_string()),
            ("batch", cfg.batch.to_string()),
            ("devices", cfg.devices.to_string()),
            ("placement", format!("{:?}", cfg.placement).to_lowercase()),
        ]
    }

    /// Floats as their exact bits, so a resumed run continues bit for bit.
    fn to_metadata(self, cfg: &TrainConfig) -> BTreeMap<String, String> {
        let mut m: BTreeMap<String, String> = Progress::settings(cfg).into_iter().chain(Progress::optimizer(cfg)).map(|(k, v)| (k.to_string(), v)).collect();
        m.insert("step".into(), self.step.to_string());
        m.insert("epoch_loss_sum".into(), format!("{:016x}", self.epoch_loss_sum.to_bits()));
        m.insert("epoch_examples".into(), self.epoch_examples.to_string());
        m.insert("train_loss".into(), format!("{:016x}", self.train_loss.to_bits()));
        m
    }

    fn from_metadata(m: &BTreeMap<String, String>, cfg: &TrainConfig, file: &Path) -> Result<Progress> {
        let bad = |detail: String| EngineError::Checkpoint { file: file.display().to_string(), detail };
        for (key, want) in Progress::settings(cfg) {
            match m.get(key) {
                Some(v) if *v == want => {}
                Some(v) => {
                    return Err(bad(format!(
                        "was written by a run with {key} {v}, this run has {key} {want}: resume with the same settings or another --checkpoint-dir"
                    )));
                }
                None => return Err(bad(format!("metadata '{key}' is missing: not a checkpoint of `flowlab train`"))),
            }
        }
        for (key, want) in Progress::optimizer(cfg) {
            if let Some(v) = m.get(key)
                && *v != want
            {
                return Err(bad(format!("was written by a run with {key} {v}, this run has {key} {want}: resume with the same settings or another --checkpoint-dir")));
            }
        }
        let get = |key: &str| m.get(key).ok_or_else(|| bad(format!("metadata '{key}' is missing")));
        let int = |key: &str| get(key)?.parse::<u64>().map_err(|e| bad(format!("metadata '{key}': {e}")));
        let float = |key: &str| {
            u64::from_str_radix(get(key)?, 16).map(f64::from_bits).map_err(|e| bad(format!("metadata '{key}': {e}")))
        };
        Ok(Progress {
            step: int("step")?,
            epoch_loss_sum: float("epoch_loss_sum")?,
            epoch_examples: int("epoch_examples")? as usize,
            train_loss: float("train_loss")?,
        })
    }
}
