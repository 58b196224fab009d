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
//!
//! [`build_base`] is the whole Transformer (base) of the paper, the model
//! placement studies use: the same encoder, a decoder of 6 layers of masked
//! self-attention, encoder-decoder attention and the feed-forward network
//! (4,204,032 parameters each), sinusoidal position encodings (constants,
//! section 3.5) and one 37,000 x 512 matrix shared by the source and target
//! embeddings and the pre-softmax projection (section 3.4, the shared
//! English-German BPE vocabulary of section 5.1): 63,082,496 parameters,
//! against the 65M of the paper's Table 3 (a rounded figure; the vocabulary
//! is "about 37000").

use super::ModelGraph;
use super::ZooOptions;
use super::builder::{Init, Net};
use flowlab_engine::{DType, Graph, Optimizer, Output, Result, Tensor};

pub(crate) const D_MODEL: usize = 512;
pub(crate) const HEADS: usize = 8;
const FF: usize = 2048;
const LAYERS: usize = 6;
const SEQ_LEN: usize = 128;
const VOCAB: usize = 32_000;
/// The shared source-target vocabulary of the base model (section 5.1).
const VOCAB_BASE: usize = 37_000;

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

/// Multi-head attention of queries from `q_in` over keys and values from
/// `kv_in` (the same tensor for self-attention); `mask` is added to the
/// scaled scores (0 where allowed, -1e9 where not).
fn attention(net: &mut Net, g: &Graph, q_in: &Output, kv_in: &Output, k: &Dims, mask: Option<&Output>) -> Result<Output> {
    let q = split_heads(g, &net.dense(g, "query", q_in, k.d, k.d, true)?, k)?;
    let kk = split_heads(g, &net.dense(g, "key", kv_in, k.d, k.d, true)?, k)?;
    let v = split_heads(g, &net.dense(g, "value", kv_in, k.d, k.d, true)?, k)?;
    let scale = 1.0 / ((k.d / k.heads) as f64).sqrt();
    let mut scores = (g.batch_matmul_ex(&q, &kk, false, true)? * scale)?;
    if let Some(mask) = mask {
        scores = g.add(&scores, mask)?;
    }
    let probs = g.softmax(&scores)?;
    let ctx = g.transpose(g.batch_matmul(&probs, &v)?, &[0, 2, 1, 3])?;
    let ctx = g.reshape(&ctx, &[k.batch * k.seq, k.d as i64])?;
    net.dense(g, "output", &ctx, k.d, k.d, true)
}

/// The position-wise ReLU network, then the residual connection and norm.
fn ffn_block(net: &mut Net, g: &Graph, x: &Output, k: &Dims) -> Result<Output> {
    let f = g.scope("ffn");
    let h = f.relu(net.dense(&f, "dense_1", x, k.d, k.ff, true)?)?;
    let h = net.dense(&f, "dense_2", &h, k.ff, k.d, true)?;
    net.layer_norm(g, "ffn_norm", &g.add(x, &h)?, k.d)
}

fn encoder_layer(net: &mut Net, g: &Graph, x: &Output, k: &Dims) -> Result<Output> {
    let a = attention(net, &g.scope("attention"), x, x, k, None)?;
    let x = net.layer_norm(g, "attention_norm", &g.add(x, &a)?, k.d)?;
    ffn_block(net, g, &x, k)
}

fn decoder_layer(net: &mut Net, g: &Graph, x: &Output, memory: &Output, causal: &Output, k: &Dims) -> Result<Output> {
    let a = attention(net, &g.scope("self_attention"), x, x, k, Some(causal))?;
    let x = net.layer_norm(g, "self_attention_norm", &g.add(x, &a)?, k.d)?;
    let c = attention(net, &g.scope("encdec_attention"), &x, memory, k, None)?;
    let x = net.layer_norm(g, "encdec_attention_norm", &g.add(&x, &c)?, k.d)?;
    ffn_block(net, g, &x, k)
}

/// The sinusoidal position encodings of section 3.5, `[seq, d]`.
fn sinusoids(seq: usize, d: usize) -> Result<Tensor> {
    let mut pe = vec![0f32; seq * d];
    for p in 0..seq {
        for i in 0..d {
            let angle = p as f64 / 10_000f64.powf((i - i % 2) as f64 / d as f64);
            pe[p * d + i] = if i % 2 == 0 { angle.sin() } else { angle.cos() } as f32;
        }
    }
    Tensor::from_vec(pe, [seq, d])
}

/// 0 on and below the diagonal, -1e9 above: position i attends to 0..=i.
fn causal_mask(seq: usize) -> Result<Tensor> {
    let m: Vec<f32> = (0..seq * seq).map(|x| if x % seq > x / seq { -1e9 } else { 0.0 }).collect();
    Tensor::from_vec(m, [seq, seq])
}

fn dims(o: &ZooOptions) -> Dims {
    Dims {
        batch: o.batch as i64,
        seq: o.seq_len.unwrap_or(SEQ_LEN) as i64,
        d: o.hidden.unwrap_or(D_MODEL),
        heads: o.heads.unwrap_or(HEADS),
        ff: o.ff.unwrap_or(FF),
    }
}

/// The encoder-decoder Transformer (base); see the module comment.
pub(crate) fn build_base(o: &ZooOptions) -> Result<ModelGraph> {
    let k = dims(o);
    let vocab = o.vocab.unwrap_or(VOCAB_BASE);
    let layers = o.layers.unwrap_or(LAYERS);
    let mut net = Net::new(o.seed);
    let g = net.g.clone();
    let source = g.placeholder("source", DType::I64, [k.batch, k.seq])?;
    let targets = g.placeholder("targets", DType::I64, [k.batch, k.seq])?;

    let e = g.scope("embeddings");
    let table = net.param(&e, "shared", &[vocab, k.d], Init::Normal(1.0 / (k.d as f64).sqrt()))?;
    let positions = e.constant(sinusoids(k.seq as usize, k.d)?)?;
    let embed = |ids: &Output| -> Result<Output> {
        let x = (e.gather(&table, ids)? * (k.d as f64).sqrt())?;
        e.reshape(e.add(&x, &positions)?, &[k.batch * k.seq, k.d as i64])
    };
    let mut x = embed(&source)?;
    for l in 0..layers {
        x = encoder_layer(&mut net, &g.scope(&format!("encoder/layer_{l}")), &x, &k)?;
    }
    let memory = x;

    // Teacher forcing: the decoder reads the targets shifted right by one,
    // id 0 standing for the start of the sentence.
    let d = g.scope("decoder");
    let start = d.zeros(DType::I64, [o.batch, 1])?;
    let shifted = if k.seq > 1 { d.concat(&[&start, &d.slice(&targets, &[0, 0], &[k.batch, k.seq - 1])?], 1)? } else { start };
    let causal = d.constant(causal_mask(k.seq as usize)?)?;
    let mut y = embed(&shifted)?;
    for l in 0..layers {
        y = decoder_layer(&mut net, &g.scope(&format!("decoder/layer_{l}")), &y, &memory, &causal, &k)?;
    }
    let h = g.scope("lm_head");
    let logits = h.matmul_ex(&y, &table, false, true)?;
    let labels = h.reshape(&targets, &[k.batch * k.seq])?;
    let loss = net.softmax_loss("loss", &logits, &labels)?;
    let opt = o.optimizer.clone().unwrap_or(Optimizer::adam(1e-4));
    net.finish("transformer_base", o.batch, vec![source, targets], loss, &opt)
}

pub(crate) fn build(o: &ZooOptions) -> Result<ModelGraph> {
    let k = dims(o);
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
