//! The model zoo: real training graphs (forward pass, gradients from the
//! engine's autodiff, one optimizer update per variable, batch-norm
//! moving-average updates) of the workloads the paper and its successors
//! measure, built with the engine's graph builder.
//!
//! Every graph is built at a fixed batch size, so every tensor's shape is
//! fully known and the simulator can ask the op registry for each node's
//! cost. [`build`] gives the published architecture; [`build_with`] takes
//! [`ZooOptions`] for smaller variants (tests, quick experiments).
//!
//! | name | architecture | trainable parameters |
//! |---|---|---|
//! | `mlp` | 784-512-512-10, ReLU | 669,706 |
//! | `cnn` | TF "Deep MNIST": conv5x5x32, pool, conv5x5x64, pool, fc1024, fc10 | 3,274,634 |
//! | `resnet50` | He et al. 2016, bottlenecks 3-4-6-3, BN with gamma and beta | 25,557,032 |
//! | `inception_v3` | Szegedy et al. 2016 as in Keras `InceptionV3`, BN without gamma | 23,817,352 |
//! | `lstm_lm` | Zaremba et al. 2014 PTB "medium": 2x650 LSTM, vocab 10,000, 35 steps | 19,775,200 |
//! | `transformer` | Vaswani et al. 2017 base encoder: 6 x (d 512, 8 heads, ff 2048), seq 128 | 35,363,840 |
//! | `transformer_base` | Vaswani et al. 2017 Transformer (base), encoder and decoder, shared 37,000-token embedding, seq 128 | 63,082,496 (Table 3: 65M) |
//! | `gnmt` | GNMT v2 as Baechi places it: 4 x 512 LSTM, bidirectional first encoder layer, normed Bahdanau attention, vocab 30,000, 40 steps | 70,740,993 |

mod builder;
mod cnn;
mod gnmt;
mod inception;
mod lstm_lm;
mod mlp;
mod resnet;
mod transformer;
#[cfg(test)]
mod tests;

use crate::ModelError;
use flowlab_engine::{Graph, NodeId, Optimizer, Output};

/// What one step runs, as `Session::run(feeds, fetches, targets)` takes it
/// (node ids of the full graph).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepSpec {
    pub feeds: Vec<(NodeId, usize)>,
    pub fetches: Vec<(NodeId, usize)>,
    pub targets: Vec<NodeId>,
}

/// One model's training graph and what a caller needs to run or simulate it.
#[derive(Clone, Debug)]
pub struct ModelGraph {
    pub name: String,
    pub graph: Graph,
    /// Placeholders to feed each step: the input (images, features or token
    /// ids) then the labels (class ids or next-token ids), both fully shaped.
    pub inputs: Vec<Output>,
    /// For each input, the exclusive bound of its integer values where the
    /// model sets one below the zoo's smallest (an imported classifier's
    /// class count); `None` where any value under 10 is valid.
    pub input_limits: Vec<Option<u64>>,
    /// Mean cross entropy over the batch (and, for language models, over
    /// time): the training objective.
    pub loss: Output,
    /// The loss to evaluate with: `loss` itself, except for a language
    /// model trained on a sampled softmax, where it is the full softmax's.
    pub eval_loss: Output,
    /// A recurrent model carrying its state between steps (truncated
    /// backpropagation through time): the op that stores this step's final
    /// state for the next one without training (`train_op` stores it too),
    /// and the op that sets the state back to zero (a new stream).
    pub state_update: Option<Output>,
    pub state_reset: Option<Output>,
    /// Runs one training step: every optimizer update and every batch-norm
    /// moving-average update.
    pub train_op: Output,
    pub batch: usize,
    /// Trainable parameters: exactly the elements the optimizer updates.
    pub params: u64,
    /// Non-trainable variables of the model (batch-norm moving mean and
    /// variance, a carried RNN state); optimizer slots are not counted.
    pub non_trainable_params: u64,
}

impl ModelGraph {
    /// One training step as the engine runs it: feed the inputs, fetch the
    /// loss, run the train op.
    pub fn step(&self) -> StepSpec {
        StepSpec {
            feeds: self.inputs.iter().map(|o| (o.node_id(), o.index())).collect(),
            fetches: vec![(self.loss.node_id(), self.loss.index())],
            targets: vec![self.train_op.node_id()],
        }
    }
}

/// The largest batch a zoo graph is built with (the CLI and every
/// experiment kind check against this one bound: beyond it shapes and
/// memory estimates overflow long before a machine could hold the graph).
pub const MAX_BATCH: usize = 1 << 16;

/// The zoo's model names, in the order of the table above.
pub fn names() -> &'static [&'static str] {
    &["mlp", "cnn", "resnet50", "inception_v3", "lstm_lm", "transformer", "transformer_base", "gnmt"]
}

/// Sizes of a model variant. `None` keeps the published value of the model
/// being built (listed per field).
#[derive(Clone, Debug, PartialEq)]
pub struct ZooOptions {
    pub batch: usize,
    /// Square input side: cnn 28, resnet50 224, inception_v3 299.
    pub image_size: Option<usize>,
    /// Output classes of the image models (mlp and cnn 10, else 1000); for
    /// `transformer`, `Some(k)` swaps the language-model head for a
    /// k-way classifier of the mean-pooled sequence.
    pub classes: Option<usize>,
    /// Divides every convolution's channel count (at least 1 channel is
    /// kept); 1 is the published width.
    pub width_divisor: usize,
    /// Inception-v3's auxiliary classifier on the 17x17 grid (loss weight 0.4).
    pub aux_head: bool,
    /// Unrolled steps (lstm_lm 35, gnmt 40) or sequence length (transformer 128).
    pub seq_len: Option<usize>,
    /// Vocabulary (lstm_lm 10,000, transformer 32,000, transformer_base 37,000, gnmt 30,000).
    pub vocab: Option<usize>,
    /// Width: mlp hidden units 512, lstm_lm hidden 650, transformer d_model 512, gnmt units 512.
    pub hidden: Option<usize>,
    /// Depth: mlp hidden layers 2, lstm_lm layers 2, transformer layers 6
    /// (each of encoder and decoder for transformer_base), gnmt layers 4.
    pub layers: Option<usize>,
    /// Attention heads (transformer 8).
    pub heads: Option<usize>,
    /// lstm_lm: each step starts from the previous step's final LSTM state
    /// (truncated backpropagation through time, as TensorFlow's PTB recipe
    /// carries it between batches of the same streams); else from zeros.
    pub carry_state: bool,
    /// lstm_lm: run the time steps in a `while_loop` (TensorFlow's
    /// `dynamic_rnn`, section 3.4 of the paper) instead of unrolling them:
    /// the same weights, loss and gradients in a graph whose size does not
    /// grow with the sequence. The graph-level simulator cannot replay such
    /// a graph yet (its frames); the engine runs it.
    pub dynamic: bool,
    /// lstm_lm: train on a sampled softmax of this many log-uniform
    /// candidates (Jean et al., 2015) instead of the full softmax; the
    /// model's `eval_loss` stays the full softmax.
    pub sampled: Option<usize>,
    /// Feed-forward width (transformer 2048).
    pub ff: Option<usize>,
    /// The update rule; `None` picks the model's usual one (momentum 0.9 for
    /// the image models, SGD lr 1.0 for lstm_lm as in the PTB recipe, Adam
    /// for the transformers and gnmt).
    pub optimizer: Option<Optimizer>,
    /// Seeds the variables' initializers.
    pub seed: u64,
}

impl ZooOptions {
    /// The published model at batch size `batch`.
    pub fn new(batch: usize) -> ZooOptions {
        ZooOptions {
            batch,
            image_size: None,
            classes: None,
            width_divisor: 1,
            aux_head: false,
            seq_len: None,
            vocab: None,
            hidden: None,
            layers: None,
            heads: None,
            sampled: None,
            carry_state: false,
            dynamic: false,
            ff: None,
            optimizer: None,
            seed: 1,
        }
    }

    /// `c` divided by the width divisor, at least 1.
    pub(crate) fn width(&self, c: usize) -> usize {
        (c / self.width_divisor.max(1)).max(1)
    }
}

/// The published model `name` at batch size `batch`.
pub fn build(name: &str, batch: usize) -> Result<ModelGraph, ModelError> {
    build_with(name, &ZooOptions::new(batch))
}

/// Model `name` with the sizes in `opts`. An unknown name, a zero size or
/// a size the architecture cannot take is an error naming it.
pub fn build_with(name: &str, opts: &ZooOptions) -> Result<ModelGraph, ModelError> {
    let unknown = || ModelError::UnknownModel { name: name.to_string(), known: names().join(", ") };
    if !names().contains(&name) {
        return Err(unknown());
    }
    check_positive("batch", Some(opts.batch))?;
    if opts.batch > MAX_BATCH {
        return Err(ModelError::param("batch", format!("must be between 1 and {MAX_BATCH}, got {}", opts.batch)));
    }
    check_positive("width_divisor", Some(opts.width_divisor))?;
    for (key, v) in [
        ("image_size", opts.image_size),
        ("classes", opts.classes),
        ("seq_len", opts.seq_len),
        ("vocab", opts.vocab),
        ("hidden", opts.hidden),
        ("layers", opts.layers),
        ("heads", opts.heads),
        ("ff", opts.ff),
        ("sampled", opts.sampled),
    ] {
        check_positive(key, v)?;
    }
    let engine_err = |e: flowlab_engine::EngineError| ModelError::ModelBuild { model: name.to_string(), detail: e.to_string() };
    match name {
        "mlp" => mlp::build(opts).map_err(engine_err),
        "cnn" => {
            let size = opts.image_size.unwrap_or(cnn::IMAGE_SIZE);
            if !size.is_multiple_of(4) {
                return Err(ModelError::param("image_size", format!("cnn needs a multiple of 4 (two 2x2 pools), got {size}")));
            }
            cnn::build(opts, size).map_err(engine_err)
        }
        "resnet50" => {
            let size = opts.image_size.unwrap_or(resnet::IMAGE_SIZE);
            if size < resnet::MIN_IMAGE_SIZE {
                return Err(ModelError::param("image_size", format!("resnet50 needs at least {}, got {size}", resnet::MIN_IMAGE_SIZE)));
            }
            resnet::build(opts, size).map_err(engine_err)
        }
        "inception_v3" => {
            let size = opts.image_size.unwrap_or(inception::IMAGE_SIZE);
            if size < inception::MIN_IMAGE_SIZE {
                return Err(ModelError::param(
                    "image_size",
                    format!("inception_v3 needs at least {}, got {size}", inception::MIN_IMAGE_SIZE),
                ));
            }
            inception::build(opts, size).map_err(engine_err)
        }
        "lstm_lm" => {
            let vocab = opts.vocab.unwrap_or(lstm_lm::VOCAB);
            if opts.dynamic && (opts.sampled.is_some() || opts.carry_state) {
                return Err(ModelError::param("dynamic", "the while_loop LSTM takes neither a sampled softmax nor a carried state yet".to_string()));
            }
            if let Some(k) = opts.sampled.filter(|&k| k >= vocab) {
                return Err(ModelError::param("sampled", format!("{k} samples must be fewer than the vocabulary of {vocab} words")));
            }
            lstm_lm::build(opts).map_err(engine_err)
        }
        "transformer" | "transformer_base" => {
            let d = opts.hidden.unwrap_or(transformer::D_MODEL);
            let h = opts.heads.unwrap_or(transformer::HEADS);
            if !d.is_multiple_of(h) {
                return Err(ModelError::param("heads", format!("{h} heads do not divide d_model {d}")));
            }
            if name == "transformer" { transformer::build(opts) } else { transformer::build_base(opts) }.map_err(engine_err)
        }
        "gnmt" => {
            if opts.layers.is_some_and(|l| l < 2) {
                return Err(ModelError::param("layers", "gnmt needs at least 2 (a bidirectional layer and one above it)"));
            }
            gnmt::build(opts).map_err(engine_err)
        }
        _ => Err(unknown()),
    }
}

fn check_positive(key: &str, v: Option<usize>) -> Result<(), ModelError> {
    match v {
        Some(0) => Err(ModelError::param(key, "must be positive, got 0")),
        _ => Ok(()),
    }
}
