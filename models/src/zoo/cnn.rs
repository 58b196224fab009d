//! The small convolutional network of TensorFlow's "Deep MNIST" tutorial on
//! 28x28x1 images: conv 5x5x32 + ReLU, 2x2 max pool, conv 5x5x64 + ReLU,
//! 2x2 max pool, dense 1024 + ReLU, dense 10. 3,274,634 trainable parameters.

use super::ZooOptions;
use super::builder::Net;
use super::ModelGraph;
use flowlab_engine::{DType, Optimizer, Result};

pub(crate) const IMAGE_SIZE: usize = 28;
const CLASSES: usize = 10;
const FC_UNITS: usize = 1024;

/// `size` is a multiple of 4 (checked by the caller).
pub(crate) fn build(o: &ZooOptions, size: usize) -> Result<ModelGraph> {
    let classes = o.classes.unwrap_or(CLASSES);
    let (c1, c2) = (o.width(32), o.width(64));
    let fc = o.hidden.unwrap_or(FC_UNITS);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let b = o.batch as i64;
    let x = g.placeholder("x", DType::F32, [b, size as i64, size as i64, 1])?;
    let labels = g.placeholder("labels", DType::I64, [b])?;
    let h = net.conv_bias_relu(&g, "conv1", &x, 5, 1, c1)?;
    let h = g.max_pool(&h, [2, 2], [2, 2], true)?;
    let h = net.conv_bias_relu(&g, "conv2", &h, 5, c1, c2)?;
    let h = g.max_pool(&h, [2, 2], [2, 2], true)?;
    let flat_len = (size / 4) * (size / 4) * c2;
    let h = g.reshape(&h, &[b, flat_len as i64])?;
    let h = g.relu(net.dense(&g, "fc1", &h, flat_len, fc, true)?)?;
    let logits = net.dense(&g, "fc2", &h, fc, classes, true)?;
    let loss = net.softmax_loss("loss", &logits, &labels)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Momentum { lr: 0.01, momentum: 0.9 });
    net.finish("cnn", o.batch, vec![x, labels], loss, &opt)
}
