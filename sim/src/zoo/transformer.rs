//! A Transformer encoder (Vaswani et al., 2017, the base model's encoder
//! stack): token embedding scaled by sqrt(d_model) plus a learned position
//! embedding, then 6 post-norm layers of 8-head self-attention (Q, K, V and
//! output projections with bias, BatchMatMul scores scaled by 1/sqrt(d_k),
//! Softmax) and a 2048-wide ReLU feed-forward network, each wrapped in a
//! residual connection and layer norm (composed: Mean, Sub, Square, Rsqrt,
//! Mul, Add). Sequence length 128, vocabulary 32,000. The default head is a
//! language model whose output matrix is the embedding, transposed (shared
//! as in the paper); `ZooOptions::classes` selects a classifier of the
//! mean-pooled sequence instead.
//!
//! Each layer has 3,152,384 parameters at d_model 512 and ff 2048; with the
//! 16,384,000-entry embedding and 65,536 position entries, 35,363,840 in all.

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{Init, Net};
use flowlab_engine::{DType, Graph, Optimizer, Output, Result};

pub(crate) const D_MODEL: usize = 512;
pub(crate) const HEADS: usize = 8;
const FF: usize = 2048;
const LAYERS: usize = 6;
const SEQ_LEN: usize = 128;
const VOCAB: usize = 32_000;

struct Dims {
    batch: i64,
    seq: i64,
    d: usize,
    heads: usize,
    ff: usize,
}

/// [B*S, d] -> [B, heads, S, d/heads].
fn split_heads(g: &Graph, x: &Output, k: &Dims) -> Result<Output> {
    let dk = (k.d / k.heads) as i64;
    g.transpose(g.reshape(x, &[k.batch, k.seq, k.heads as i64, dk])?, &[0, 2, 1, 3])
}

fn attention(net: &mut Net, g: &Graph, x: &Output, k: &Dims) -> Result<Output> {
    let q = split_heads(g, &net.dense(g, "query", x, k.d, k.d, true)?, k)?;
    let kk = split_heads(g, &net.dense(g, "key", x, k.d, k.d, true)?, k)?;
    let v = split_heads(g, &net.dense(g, "value", x, k.d, k.d, true)?, k)?;
    let scale = 1.0 / ((k.d / k.heads) as f64).sqrt();
    let scores = (g.batch_matmul_ex(&q, &kk, false, true)? * scale)?;
    let probs = g.softmax(&scores)?;
    let ctx = g.transpose(g.batch_matmul(&probs, &v)?, &[0, 2, 1, 3])?;
    let ctx = g.reshape(&ctx, &[k.batch * k.seq, k.d as i64])?;
    net.dense(g, "output", &ctx, k.d, k.d, true)
}

fn encoder_layer(net: &mut Net, g: &Graph, x: &Output, k: &Dims) -> Result<Output> {
    let a = attention(net, &g.scope("attention"), x, k)?;
    let x = net.layer_norm(g, "attention_norm", &g.add(x, &a)?, k.d)?;
    let f = g.scope("ffn");
    let h = f.relu(net.dense(&f, "dense_1", &x, k.d, k.ff, true)?)?;
    let h = net.dense(&f, "dense_2", &h, k.ff, k.d, true)?;
    net.layer_norm(g, "ffn_norm", &g.add(&x, &h)?, k.d)
}

pub(crate) fn build(o: &ZooOptions) -> Result<ModelGraph> {
    let k = Dims {
        batch: o.batch as i64,
        seq: o.seq_len.unwrap_or(SEQ_LEN) as i64,
        d: o.hidden.unwrap_or(D_MODEL),
        heads: o.heads.unwrap_or(HEADS),
        ff: o.ff.unwrap_or(FF),
    };
    let vocab = o.vocab.unwrap_or(VOCAB);
    let layers = o.layers.unwrap_or(LAYERS);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let tokens = g.placeholder("tokens", DType::I64, [k.batch, k.seq])?;
    let label_shape = if o.classes.is_some() { vec![k.batch] } else { vec![k.batch, k.seq] };
    let labels = g.placeholder("labels", DType::I64, label_shape.as_slice())?;

    let e = g.scope("embeddings");
    let d_std = 1.0 / (k.d as f64).sqrt();
    let table = net.param(&e, "token", &[vocab, k.d], Init::Normal(d_std))?;
    let positions = net.param(&e, "position", &[k.seq as usize, k.d], Init::Normal(0.02))?;
    let x = (e.gather(&table, &tokens)? * (k.d as f64).sqrt())?;
    let x = e.add(&x, &positions)?;
    let mut x = e.reshape(&x, &[k.batch * k.seq, k.d as i64])?;
    for l in 0..layers {
        x = encoder_layer(&mut net, &g.scope(&format!("encoder/layer_{l}")), &x, &k)?;
    }
    let (logits, labels_flat) = match o.classes {
        None => {
            let h = g.scope("lm_head");
            (h.matmul_ex(&x, &table, false, true)?, h.reshape(&labels, &[k.batch * k.seq])?)
        }
        Some(classes) => {
            let h = g.scope("classifier");
            let pooled = h.reduce_mean(h.reshape(&x, &[k.batch, k.seq, k.d as i64])?, &[1], false)?;
            (net.dense(&h, "dense", &pooled, k.d, classes, true)?, labels.clone())
        }
    };
    let loss = net.softmax_loss("loss", &logits, &labels_flat)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::adam(1e-4));
    net.finish("transformer", o.batch, vec![tokens, labels], loss, &opt)
}
