//! The multilayer perceptron: 784 inputs (a flattened 28x28 image), two
//! hidden layers of 512 ReLU units, 10 classes. 669,706 trainable parameters.

use super::ZooOptions;
use super::builder::Net;
use super::ModelGraph;
use flowlab_engine::{DType, Optimizer, Result};

pub(crate) const FEATURES: usize = 784;
const HIDDEN: usize = 512;
const LAYERS: usize = 2;
const CLASSES: usize = 10;

pub(crate) fn build(o: &ZooOptions) -> Result<ModelGraph> {
    let (hidden, layers, classes) = (o.hidden.unwrap_or(HIDDEN), o.layers.unwrap_or(LAYERS), o.classes.unwrap_or(CLASSES));
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let x = g.placeholder("x", DType::F32, [o.batch as i64, FEATURES as i64])?;
    let labels = g.placeholder("labels", DType::I64, [o.batch as i64])?;
    let mut h = x.clone();
    let mut width = FEATURES;
    for i in 0..layers {
        h = g.relu(net.dense(&g, &format!("dense_{i}"), &h, width, hidden, true)?)?;
        width = hidden;
    }
    let logits = net.dense(&g, "logits", &h, width, classes, true)?;
    let loss = net.softmax_loss("loss", &logits, &labels)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Momentum { lr: 0.01, momentum: 0.9 });
    net.finish("mlp", o.batch, vec![x, labels], loss, &opt)
}
