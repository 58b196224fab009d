//! Inception-v3 (Szegedy et al., 2016), the paper's workload, layer for
//! layer as Keras `InceptionV3` builds it on 299x299x3 images: a stem of
//! five convolutions and two max pools; three Inception-A blocks (35x35);
//! a grid reduction; four Inception-B blocks with factorized 1x7 / 7x1
//! convolutions (17x17); a grid reduction; two Inception-C blocks with
//! split 1x3 / 3x1 branches (8x8); global average pool and a 1000-way dense
//! layer. Every convolution is a conv-BN-ReLU unit without bias whose batch
//! norm learns beta only (`scale=False`, as in Keras and TF-slim).
//!
//! Parameter convention, matching Keras `InceptionV3(weights=None)` exactly:
//! 23,817,352 trainable parameters (convolution kernels, BN beta, dense
//! kernel and bias) and 34,432 non-trainable (BN moving mean and variance),
//! 23,851,784 in all. The auxiliary classifier (`ZooOptions::aux_head`) is
//! off by default, as in Keras.

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{BnConfig, ConvSpec, Net};
use flowlab_engine::{DType, Graph, Optimizer, Output, Result};

pub(crate) const IMAGE_SIZE: usize = 299;
/// Keras' minimum input: the last grid reduction leaves 1x1.
pub(crate) const MIN_IMAGE_SIZE: usize = 75;
const CLASSES: usize = 1000;
const BN: BnConfig = BnConfig { scale: false, epsilon: 1e-3, momentum: 0.99 };
/// Weight of the auxiliary classifier's loss.
const AUX_WEIGHT: f64 = 0.4;

/// Channel count of an NHWC tensor (its shape is always known here).
fn channels(x: &Output) -> usize {
    x.shape().dims().last().copied().flatten().unwrap_or(0)
}

/// Spatial side of an NHWC tensor.
fn side(x: &Output) -> usize {
    x.shape().dims().get(1).copied().flatten().unwrap_or(0)
}

struct Builder<'a> {
    net: Net,
    o: &'a ZooOptions,
}

impl Builder<'_> {
    /// Convolution (no bias) with `filters` at published width, BN (beta
    /// only), ReLU; `same` says whether the padding is SAME or VALID.
    fn cbr(&mut self, g: &Graph, name: &str, x: &Output, filters: usize, (k, stride, same): ([usize; 2], usize, bool)) -> Result<Output> {
        let s = g.scope(name);
        let cout = self.o.width(filters);
        let y = self.net.conv(&s, x, ConvSpec { k, cin: channels(x), cout, stride, same })?;
        let y = self.net.batch_norm(&s, &y, cout, BN)?;
        s.relu(&y)
    }

    /// [`cbr`](Self::cbr) at stride 1 with SAME padding.
    fn same(&mut self, g: &Graph, name: &str, x: &Output, filters: usize, k: [usize; 2]) -> Result<Output> {
        self.cbr(g, name, x, filters, (k, 1, true))
    }

    /// [`cbr`](Self::cbr) with VALID padding.
    fn valid(&mut self, g: &Graph, name: &str, x: &Output, filters: usize, k: [usize; 2], stride: usize) -> Result<Output> {
        self.cbr(g, name, x, filters, (k, stride, false))
    }

    /// 3x3 average pool, stride 1, SAME (padding excluded from the mean).
    fn avg3(g: &Graph, x: &Output) -> Result<Output> {
        g.avg_pool(x, [3, 3], [1, 1], true)
    }

    fn max3s2(g: &Graph, x: &Output) -> Result<Output> {
        g.max_pool(x, [3, 3], [2, 2], false)
    }

    fn stem(&mut self, g: &Graph, x: &Output) -> Result<Output> {
        let h = self.valid(g, "conv_1a", x, 32, [3, 3], 2)?;
        let h = self.valid(g, "conv_2a", &h, 32, [3, 3], 1)?;
        let h = self.same(g, "conv_2b", &h, 64, [3, 3])?;
        let h = Self::max3s2(&g.scope("pool_3a"), &h)?;
        let h = self.valid(g, "conv_3b", &h, 80, [1, 1], 1)?;
        let h = self.valid(g, "conv_4a", &h, 192, [3, 3], 1)?;
        Self::max3s2(&g.scope("pool_5a"), &h)
    }

    /// Inception-A (35x35): 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avgpool-1x1.
    fn block_a(&mut self, g: &Graph, x: &Output, pool_filters: usize) -> Result<Output> {
        let b1 = self.same(g, "branch1x1", x, 64, [1, 1])?;
        let b5 = self.same(g, "branch5x5_1", x, 48, [1, 1])?;
        let b5 = self.same(g, "branch5x5_2", &b5, 64, [5, 5])?;
        let b3 = self.same(g, "branch3x3dbl_1", x, 64, [1, 1])?;
        let b3 = self.same(g, "branch3x3dbl_2", &b3, 96, [3, 3])?;
        let b3 = self.same(g, "branch3x3dbl_3", &b3, 96, [3, 3])?;
        let bp = Self::avg3(&g.scope("branch_pool"), x)?;
        let bp = self.same(g, "branch_pool_conv", &bp, pool_filters, [1, 1])?;
        g.concat(&[&b1, &b5, &b3, &bp], 3)
    }

    /// Grid reduction 35 -> 17: 3x3/2 | 1x1-3x3-3x3/2 | maxpool/2.
    fn reduction_a(&mut self, g: &Graph, x: &Output) -> Result<Output> {
        let b3 = self.valid(g, "branch3x3", x, 384, [3, 3], 2)?;
        let bd = self.same(g, "branch3x3dbl_1", x, 64, [1, 1])?;
        let bd = self.same(g, "branch3x3dbl_2", &bd, 96, [3, 3])?;
        let bd = self.valid(g, "branch3x3dbl_3", &bd, 96, [3, 3], 2)?;
        let bp = Self::max3s2(&g.scope("branch_pool"), x)?;
        g.concat(&[&b3, &bd, &bp], 3)
    }

    /// Inception-B (17x17) with 7x7 convolutions factorized into 1x7 and 7x1.
    fn block_b(&mut self, g: &Graph, x: &Output, c7: usize) -> Result<Output> {
        let b1 = self.same(g, "branch1x1", x, 192, [1, 1])?;
        let b7 = self.same(g, "branch7x7_1", x, c7, [1, 1])?;
        let b7 = self.same(g, "branch7x7_2", &b7, c7, [1, 7])?;
        let b7 = self.same(g, "branch7x7_3", &b7, 192, [7, 1])?;
        let bd = self.same(g, "branch7x7dbl_1", x, c7, [1, 1])?;
        let bd = self.same(g, "branch7x7dbl_2", &bd, c7, [7, 1])?;
        let bd = self.same(g, "branch7x7dbl_3", &bd, c7, [1, 7])?;
        let bd = self.same(g, "branch7x7dbl_4", &bd, c7, [7, 1])?;
        let bd = self.same(g, "branch7x7dbl_5", &bd, 192, [1, 7])?;
        let bp = Self::avg3(&g.scope("branch_pool"), x)?;
        let bp = self.same(g, "branch_pool_conv", &bp, 192, [1, 1])?;
        g.concat(&[&b1, &b7, &bd, &bp], 3)
    }

    /// Grid reduction 17 -> 8: 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2 | maxpool/2.
    fn reduction_b(&mut self, g: &Graph, x: &Output) -> Result<Output> {
        let b3 = self.same(g, "branch3x3_1", x, 192, [1, 1])?;
        let b3 = self.valid(g, "branch3x3_2", &b3, 320, [3, 3], 2)?;
        let b7 = self.same(g, "branch7x7x3_1", x, 192, [1, 1])?;
        let b7 = self.same(g, "branch7x7x3_2", &b7, 192, [1, 7])?;
        let b7 = self.same(g, "branch7x7x3_3", &b7, 192, [7, 1])?;
        let b7 = self.valid(g, "branch7x7x3_4", &b7, 192, [3, 3], 2)?;
        let bp = Self::max3s2(&g.scope("branch_pool"), x)?;
        g.concat(&[&b3, &b7, &bp], 3)
    }

    /// Inception-C (8x8) with the 3x3 outputs split into parallel 1x3 and 3x1.
    fn block_c(&mut self, g: &Graph, x: &Output) -> Result<Output> {
        let b1 = self.same(g, "branch1x1", x, 320, [1, 1])?;
        let b3 = self.same(g, "branch3x3_1", x, 384, [1, 1])?;
        let b3a = self.same(g, "branch3x3_2a", &b3, 384, [1, 3])?;
        let b3b = self.same(g, "branch3x3_2b", &b3, 384, [3, 1])?;
        let b3 = g.concat(&[&b3a, &b3b], 3)?;
        let bd = self.same(g, "branch3x3dbl_1", x, 448, [1, 1])?;
        let bd = self.same(g, "branch3x3dbl_2", &bd, 384, [3, 3])?;
        let bda = self.same(g, "branch3x3dbl_3a", &bd, 384, [1, 3])?;
        let bdb = self.same(g, "branch3x3dbl_3b", &bd, 384, [3, 1])?;
        let bd = g.concat(&[&bda, &bdb], 3)?;
        let bp = Self::avg3(&g.scope("branch_pool"), x)?;
        let bp = self.same(g, "branch_pool_conv", &bp, 192, [1, 1])?;
        g.concat(&[&b1, &b3, &bd, &bp], 3)
    }

    /// The auxiliary classifier on the 17x17 grid (TF-slim's `AuxLogits`):
    /// 5x5/3 average pool, 1x1x128 and 5x5x768 conv units, dense. Windows
    /// shrink to fit smaller grids, as slim's `_reduced_kernel_size_for_small_input`.
    fn aux_head(&mut self, g: &Graph, x: &Output, classes: usize) -> Result<Output> {
        let k = side(x).min(5);
        let h = g.avg_pool(x, [k, k], [3, 3], false)?;
        let h = self.same(g, "conv_1", &h, 128, [1, 1])?;
        let k = side(&h).min(5);
        let h = self.valid(g, "conv_2", &h, 768, [k, k], 1)?;
        let width = side(&h) * side(&h) * channels(&h);
        let flat = g.reshape(&h, &[self.o.batch as i64, width as i64])?;
        self.net.dense(g, "logits", &flat, width, classes, true)
    }
}

pub(crate) fn build(o: &ZooOptions, size: usize) -> Result<ModelGraph> {
    let classes = o.classes.unwrap_or(CLASSES);
    let mut b = Builder { net: Net::new(o.seed), o };
    let g = b.net.g.clone();
    let n = o.batch as i64;
    let x = g.placeholder("images", DType::F32, [n, size as i64, size as i64, 3])?;
    let labels = g.placeholder("labels", DType::I64, [n])?;

    let mut h = b.stem(&g, &x)?;
    for (i, pool) in [32, 64, 64].into_iter().enumerate() {
        h = b.block_a(&g.scope(&format!("mixed_{i}")), &h, pool)?;
    }
    h = b.reduction_a(&g.scope("mixed_3"), &h)?;
    for (i, c7) in [128, 160, 160, 192].into_iter().enumerate() {
        h = b.block_b(&g.scope(&format!("mixed_{}", i + 4)), &h, c7)?;
    }
    let aux = if o.aux_head { Some(b.aux_head(&g.scope("aux_logits"), &h, classes)?) } else { None };
    h = b.reduction_b(&g.scope("mixed_8"), &h)?;
    for i in [9, 10] {
        h = b.block_c(&g.scope(&format!("mixed_{i}")), &h)?;
    }
    let pooled = g.scope("avg_pool").reduce_mean(&h, &[1, 2], false)?;
    let logits = b.net.dense(&g, "predictions", &pooled, channels(&h), classes, true)?;
    let mut loss = b.net.softmax_loss("loss", &logits, &labels)?;
    if let Some(aux) = aux {
        let aux_loss = b.net.softmax_loss("aux_loss", &aux, &labels)?;
        loss = g.op("Add").name("total_loss").input(&loss).input(&aux_loss * AUX_WEIGHT).build()?;
    }
    let opt = o.optimizer.clone().unwrap_or(Optimizer::Momentum { lr: 0.045, momentum: 0.9 });
    b.net.finish("inception_v3", o.batch, vec![x, labels], loss, &opt)
}
