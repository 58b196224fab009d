//! ResNet-50 (He et al., 2016) on 224x224x3 images: a 7x7/2 stem and 3x3/2
//! max pool, then bottleneck blocks (1x1, 3x3, 1x1 x4 with batch norm and
//! ReLU, projection shortcuts where the shape changes) in four stages of
//! 3, 4, 6 and 3 blocks, global average pool and a 1000-way dense layer.
//! Convolutions have no bias; batch norm learns gamma and beta. The stride of
//! a downsampling block sits on its 3x3 convolution (torchvision's "v1.5";
//! the parameter count is the same either way): 25,557,032 trainable
//! parameters, torchvision's `resnet50` figure.

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{BnConfig, ConvSpec, Net};
use flowlab_engine::{DType, Graph, Optimizer, Output, Result};

pub(crate) const IMAGE_SIZE: usize = 224;
/// The five stride-2 steps leave at least one pixel.
pub(crate) const MIN_IMAGE_SIZE: usize = 32;
const CLASSES: usize = 1000;
const STAGES: [(usize, usize); 4] = [(3, 64), (4, 128), (6, 256), (3, 512)];
const EXPANSION: usize = 4;
const BN: BnConfig = BnConfig { scale: true, epsilon: 1e-5, momentum: 0.9 };

/// Convolution (no bias), batch norm, optional ReLU.
fn conv_bn(net: &mut Net, g: &Graph, name: &str, x: &Output, c: ConvSpec, relu: bool) -> Result<Output> {
    let s = g.scope(name);
    let y = net.conv(&s, x, c)?;
    let y = net.batch_norm(&s, &y, c.cout, BN)?;
    if relu { s.relu(&y) } else { Ok(y) }
}

fn bottleneck(net: &mut Net, g: &Graph, x: &Output, cin: usize, width: usize, cout: usize, stride: usize) -> Result<Output> {
    let shortcut = if stride != 1 || cin != cout { conv_bn(net, g, "shortcut", x, ConvSpec::square(1, cin, cout, stride), false)? } else { x.clone() };
    let h = conv_bn(net, g, "conv1", x, ConvSpec::square(1, cin, width, 1), true)?;
    let h = conv_bn(net, g, "conv2", &h, ConvSpec::square(3, width, width, stride), true)?;
    let h = conv_bn(net, g, "conv3", &h, ConvSpec::square(1, width, cout, 1), false)?;
    g.relu(g.add(&h, &shortcut)?)
}

pub(crate) fn build(o: &ZooOptions, size: usize) -> Result<ModelGraph> {
    let classes = o.classes.unwrap_or(CLASSES);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let b = o.batch as i64;
    let x = g.placeholder("images", DType::F32, [b, size as i64, size as i64, 3])?;
    let labels = g.placeholder("labels", DType::I64, [b])?;

    let stem = o.width(64);
    let h = conv_bn(&mut net, &g, "conv1", &x, ConvSpec::square(7, 3, stem, 2), true)?;
    let mut h = g.scope("pool1").max_pool(&h, [3, 3], [2, 2], true)?;
    let mut cin = stem;
    for (si, &(blocks, width)) in STAGES.iter().enumerate() {
        let (width, cout) = (o.width(width), o.width(width * EXPANSION));
        for bi in 0..blocks {
            let stride = if bi == 0 && si > 0 { 2 } else { 1 };
            let s = g.scope(&format!("block{}/unit{}", si + 1, bi + 1));
            h = bottleneck(&mut net, &s, &h, cin, width, cout, stride)?;
            cin = cout;
        }
    }
    let pooled = g.scope("pool5").reduce_mean(&h, &[1, 2], false)?;
    let logits = net.dense(&g, "fc", &pooled, cin, classes, true)?;
    let loss = net.softmax_loss("loss", &logits, &labels)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Momentum { lr: 0.1, momentum: 0.9 });
    net.finish("resnet50", o.batch, vec![x, labels], loss, &opt)
}
