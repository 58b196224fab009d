use super::*;
use flowlab_engine::{DType, Node, Session, SessionOptions, Shape, Tensor, op_cost};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

fn count_ops(m: &ModelGraph) -> HashMap<String, usize> {
    let mut c = HashMap::new();
    for n in m.graph.nodes() {
        *c.entry(n.op).or_insert(0) += 1;
    }
    c
}

fn full(n: &Node, t: &flowlab_engine::TensorType) -> (DType, Shape) {
    let s = t.shape.to_shape().unwrap_or_else(|| panic!("node '{}' ({}) has a partial shape {}", n.name, n.op, t.shape));
    (t.dtype, s)
}

/// Every node has fully known shapes and a cost from the op registry; the
/// products and their gradients do arithmetic.
fn check_costs(m: &ModelGraph) {
    let nodes = m.graph.nodes();
    for n in &nodes {
        let ins: Vec<(DType, Shape)> = n.inputs.iter().map(|&(s, i)| full(&nodes[s], &nodes[s].outputs[i])).collect();
        let outs: Vec<(DType, Shape)> = n.outputs.iter().map(|t| full(n, t)).collect();
        let cost = op_cost(&n.op, &n.attrs, &ins, &outs).unwrap_or_else(|e| panic!("{}: node '{}': {e}", m.name, n.name));
        if matches!(n.op.as_str(), "MatMul" | "BatchMatMul" | "Conv2D" | "Conv2DBackpropInput" | "Conv2DBackpropFilter") {
            assert!(cost.flops > 0.0, "{}: node '{}' ({}) has no flops", m.name, n.name, n.op);
        }
        // Views hand their input's buffer on (engine test
        // `views_move_no_bytes_in_their_cost_and_share_storage_when_run`).
        const VIEWS: &[&str] = &["NoOp", "Variable", "Assign", "Reshape", "ReshapeLike", "ExpandDims", "Squeeze", "Identity", "StopGradient"];
        if VIEWS.contains(&n.op.as_str()) {
            assert_eq!(cost.bytes, 0.0, "{}: node '{}' ({}) is a view", m.name, n.name, n.op);
        } else {
            assert!(cost.bytes > 0.0, "{}: node '{}' ({}) moves no bytes", m.name, n.name, n.op);
        }
    }
}

#[test]
fn published_parameter_counts() {
    // mlp: 784·512+512 + 512·512+512 + 512·10+10.
    assert_eq!(build("mlp", 1).unwrap().params, 669_706);
    // cnn: TF "Deep MNIST": 5·5·32+32 + 5·5·32·64+64 + 3136·1024+1024 + 1024·10+10.
    assert_eq!(build("cnn", 1).unwrap().params, 3_274_634);
    // resnet50: torchvision's figure (conv without bias, BN gamma and beta, fc with bias);
    // Keras' 53,120 non-trainable are the BN moving statistics.
    let r = build("resnet50", 1).unwrap();
    assert_eq!((r.params, r.non_trainable_params), (25_557_032, 53_120));
    // inception_v3: Keras InceptionV3(weights=None): 23,817,352 trainable,
    // 34,432 non-trainable, 23,851,784 total.
    let i = build("inception_v3", 1).unwrap();
    assert_eq!((i.params, i.non_trainable_params), (23_817_352, 34_432));
    assert_eq!(i.params + i.non_trainable_params, 23_851_784);
    // lstm_lm (PTB medium): embedding 10000·650, two layers of (650+650)·2600+2600,
    // softmax 650·10000+10000.
    assert_eq!(build("lstm_lm", 1).unwrap().params, 6_500_000 + 2 * 3_382_600 + 6_510_000);
    // transformer: per layer 4·(512·512+512) + 2·2·512 + 512·2048+2048 + 2048·512+512,
    // plus the shared 32000·512 embedding and 128·512 positions.
    let layer = 4 * (512 * 512 + 512) + 2 * 2 * 512 + 512 * 2048 + 2048 + 2048 * 512 + 512;
    assert_eq!(layer, 3_152_384);
    assert_eq!(build("transformer", 1).unwrap().params, 32_000 * 512 + 128 * 512 + 6 * layer);
    // transformer_base: a decoder layer is two attentions, the FFN and three
    // norms; one 37000·512 matrix for both embeddings and the softmax;
    // sinusoidal positions are constants. The paper's Table 3 says 65M.
    let dec = 2 * 4 * (512 * 512 + 512) + 3 * 2 * 512 + 512 * 2048 + 2048 + 2048 * 512 + 512;
    assert_eq!(dec, 4_204_032);
    let base = build("transformer_base", 1).unwrap().params;
    assert_eq!(base, 37_000 * 512 + 6 * layer + 6 * dec);
    assert!((base as f64 / 65e6 - 1.0).abs() < 0.05, "{base}");
    // gnmt (tensorflow/nmt gnmt_v2, 4 x 512, vocab 30000): an LSTM of n
    // inputs has (n+512)·2048+2048; encoder fw, bw (512 in), layer 1
    // (1024 in), layers 2-3 (512 in); attention memory and query layers
    // 512·512, v, b, g; four decoder layers of 1024 inputs (the context
    // beside the input); two embeddings and the projection 30000·512.
    let lstm = |n: u64| (n + 512) * 2048 + 2048;
    let enc = 2 * lstm(512) + lstm(1024) + 2 * lstm(512);
    let att = 2 * 512 * 512 + 512 + 512 + 1;
    assert_eq!(build("gnmt", 1).unwrap().params, 3 * 30_000 * 512 + enc + att + 4 * lstm(1024));
    assert_eq!(build("gnmt", 1).unwrap().params, 70_740_993);
}

#[test]
fn inception_aux_head_adds_slims_aux_logits() {
    let mut o = ZooOptions::new(1);
    o.aux_head = true;
    let m = build_with("inception_v3", &o).unwrap();
    // 1x1x768x128 + beta 128, 5x5x128x768 + beta 768, dense 768x1000 + 1000.
    let aux = 768 * 128 + 128 + 5 * 5 * 128 * 768 + 768 + 768 * 1000 + 1000;
    assert_eq!(m.params, 23_817_352 + aux);
    assert_eq!(m.non_trainable_params, 34_432 + 2 * (128 + 768));
}

#[test]
fn architectures_have_the_published_layers() {
    let i = count_ops(&build("inception_v3", 2).unwrap());
    // Keras InceptionV3 has 94 convolutions, each with its filter gradient.
    assert_eq!(i["Conv2D"], 94);
    assert_eq!(i["Conv2DBackpropFilter"], 94);
    assert_eq!(i["ApplyMomentum"], 94 * 2 + 2); // kernels, BN betas, dense kernel and bias
    assert_eq!(i["Concat"], 11 + 4); // mixed_0..10 plus the split 3x3 branches of mixed_9, mixed_10
    let r = count_ops(&build("resnet50", 2).unwrap());
    assert_eq!(r["Conv2D"], 53); // 1 stem + 16 blocks x 3 + 4 projections
    assert_eq!(r["ApplyMomentum"], 53 * 3 + 2);
    let l = count_ops(&build("lstm_lm", 2).unwrap());
    assert_eq!(l["Split"], 1); // unstacking the inputs
    assert_eq!(l["LSTMBlockCell"], 2 * 35); // one fused cell per layer and step
    assert_eq!(l["LSTMBlockCellGrad"], 2 * 35);
    assert_eq!(l["Transpose"], 2); // each layer's kernel once, shared by its 35 cell gradients
    assert_eq!(l["ApplyGradientDescent"], 7); // embedding, 2 x (kernel, bias), softmax kernel and bias
    let t = count_ops(&build("transformer", 2).unwrap());
    assert_eq!(t["Softmax"], 6);
    assert_eq!(t["BatchMatMul"], 6 * 2 * 3); // scores and context, forward and two gradients each
    assert_eq!(t["ApplyAdam"], 2 + 6 * 16);
    let t = count_ops(&build("transformer_base", 2).unwrap());
    assert_eq!(t["Softmax"], 6 + 2 * 6); // encoder self, decoder self and encoder-decoder
    assert_eq!(t["ApplyAdam"], 1 + 6 * 16 + 6 * 26);
    let n = count_ops(&build("gnmt", 2).unwrap());
    // Encoder 5 cells (fw, bw, 3 uni) and decoder 4 per step, 40 steps.
    assert_eq!(n["LSTMBlockCell"], 9 * 40);
    assert_eq!(n["LSTMBlockCellGrad"], 9 * 40);
    assert_eq!(n["Softmax"], 40); // one attention per target step
    assert_eq!(n["ApplyAdam"], 3 + 2 * 9 + 5); // embeddings and projection, cells, attention
}

#[test]
fn inception_factorizes_seven_by_seven_convolutions() {
    let m = build("inception_v3", 1).unwrap();
    let nodes = m.graph.nodes();
    let kernel = |n: &Node| nodes[n.inputs[1].0].outputs[0].shape.to_shape().unwrap().dims()[..2].to_vec();
    let convs: Vec<Vec<usize>> = nodes.iter().filter(|n| n.op == "Conv2D").map(kernel).collect();
    // mixed_4..7 have 3 each of 1x7 and 7x1, mixed_8 one each.
    assert_eq!(convs.iter().filter(|k| **k == [1, 7]).count(), 13);
    assert_eq!(convs.iter().filter(|k| **k == [7, 1]).count(), 13);
    let logits = m.graph.output_by_name("predictions/BiasAdd", 0).unwrap();
    assert_eq!(logits.shape().to_shape().unwrap(), Shape::new(vec![1, 1000]));
    let pooled = m.graph.output_by_name("avg_pool/Mean", 0).unwrap();
    let last = &nodes[m.graph.node(pooled.node_id()).unwrap().inputs[0].0];
    assert_eq!((last.name.as_str(), last.op.as_str()), ("mixed_10/Concat_2", "Concat"));
    assert_eq!(last.outputs[0].shape.to_shape().unwrap(), Shape::new(vec![1, 8, 8, 2048]));
}

#[test]
fn every_node_of_every_model_has_a_cost() {
    for &name in names() {
        let m = build(name, 2).unwrap();
        assert_eq!(m.batch, 2);
        assert_eq!(m.inputs.len(), 2);
        check_costs(&m);
    }
}

#[test]
fn same_seed_same_graph() {
    let a = build("resnet50", 4).unwrap().graph.nodes();
    let b = build("resnet50", 4).unwrap().graph.nodes();
    assert_eq!(a, b);
    let mut o = ZooOptions::new(4);
    o.seed = 2;
    assert_ne!(a, build_with("resnet50", &o).unwrap().graph.nodes());
}

#[test]
fn bad_requests_name_what_is_wrong() {
    let e = build("vgg16", 8).unwrap_err();
    assert_eq!(
        e.to_string(),
        "unknown model `vgg16` (known: mlp, cnn, resnet50, inception_v3, lstm_lm, transformer, transformer_base, gnmt)"
    );
    assert_eq!(build("mlp", 0).unwrap_err().to_string(), "invalid parameter `batch`: must be positive, got 0");
    let mut o = ZooOptions::new(2);
    o.image_size = Some(74);
    assert_eq!(
        build_with("inception_v3", &o).unwrap_err().to_string(),
        "invalid parameter `image_size`: inception_v3 needs at least 75, got 74"
    );
    o.image_size = Some(30);
    assert_eq!(build_with("cnn", &o).unwrap_err().to_string(), "invalid parameter `image_size`: cnn needs a multiple of 4 (two 2x2 pools), got 30");
    let mut o = ZooOptions::new(2);
    o.heads = Some(7);
    assert_eq!(build_with("transformer", &o).unwrap_err().to_string(), "invalid parameter `heads`: 7 heads do not divide d_model 512");
}

/// Random inputs for a model's placeholders: normal floats, ids below `ids`.
fn random_feeds(m: &ModelGraph, ids: usize, rng: &mut ChaCha8Rng) -> Vec<Tensor> {
    m.inputs
        .iter()
        .map(|p| {
            let s = p.shape().to_shape().unwrap();
            match p.dtype() {
                DType::I64 => Tensor::from_vec((0..s.num_elements()).map(|_| rng.random_range(0..ids as i64)).collect::<Vec<i64>>(), s),
                _ => Tensor::from_vec((0..s.num_elements()).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>(), s),
            }
            .unwrap()
        })
        .collect()
}

/// Runs `steps` training steps on one fixed random batch; returns the losses.
/// A one-thread session of `m` with its variables initialized.
fn open_session(m: &ModelGraph) -> Session {
    let sess = Session::with_options(&m.graph, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    sess
}

fn train_losses(m: &ModelGraph, ids: usize, steps: usize) -> Vec<f64> {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let feeds = random_feeds(m, ids, &mut rng);
    let sess = open_session(m);
    let pairs: Vec<_> = m.inputs.iter().zip(&feeds).collect();
    // A sampled loss is noisy (new candidates every step): watch the full
    // softmax's loss, evaluated before each step.
    let sampled = m.eval_loss.name() != m.loss.name();
    (0..steps)
        .map(|_| {
            if sampled {
                let l = sess.run(&pairs, &[&m.eval_loss], &[]).unwrap()[0].scalar_f64().unwrap();
                sess.run(&pairs, &[], &[&m.train_op]).unwrap();
                l
            } else {
                sess.run(&pairs, &[&m.loss], &[&m.train_op]).unwrap()[0].scalar_f64().unwrap()
            }
        })
        .collect()
}

fn assert_learns(m: &ModelGraph, ids: usize, steps: usize) {
    let l = train_losses(m, ids, steps);
    assert!(l.iter().all(|v| v.is_finite()), "{}: {l:?}", m.name);
    assert!(l[steps - 1] < l[0], "{}: loss did not fall: {l:?}", m.name);
}

#[test]
fn mlp_and_cnn_train() {
    assert_learns(&build("mlp", 8).unwrap(), 10, 4);
    assert_learns(&build("cnn", 4).unwrap(), 10, 4);
}

#[test]
fn tiny_lstm_lm_trains() {
    let mut o = ZooOptions::new(3);
    (o.vocab, o.hidden, o.seq_len) = (Some(20), Some(8), Some(4));
    assert_learns(&build_with("lstm_lm", &o).unwrap(), 20, 4);
}

/// A sampled softmax keeps the parameters (the output layer stored
/// transposed) and evaluates with the full softmax over them.
#[test]
fn tiny_lstm_lm_with_a_sampled_softmax_trains_and_keeps_its_parameters() {
    let mut o = ZooOptions::new(3);
    (o.vocab, o.hidden, o.seq_len) = (Some(20), Some(8), Some(4));
    let full = build_with("lstm_lm", &o).unwrap();
    o.sampled = Some(5);
    let m = build_with("lstm_lm", &o).unwrap();
    assert_eq!(m.params, full.params);
    assert_ne!(m.eval_loss.name(), m.loss.name());
    assert_eq!(full.eval_loss.name(), full.loss.name());
    assert_learns(&m, 20, 4);
    o.sampled = Some(20);
    assert_eq!(
        build_with("lstm_lm", &o).unwrap_err().to_string(),
        "invalid parameter `sampled`: 20 samples must be fewer than the vocabulary of 20 words"
    );
}

/// Truncated BPTT: two 4-word windows with the state carried give the same
/// losses as one 8-word unroll of the same weights (forward only), while
/// the second window from a zero state scores differently; a reset starts
/// from zeros again, and a training step stores the state too.
#[test]
fn a_carried_lstm_state_continues_the_stream_exactly() {
    let (b, v) = (2usize, 12usize);
    let words: Vec<i64> = (0..b * 9).map(|i| ((i * 7 + 3) % v) as i64).collect();
    // Stream j is words[j*9 .. j*9+9]: inputs are 8 words, targets the next 8.
    let window = |from: usize, len: usize, shift: usize| -> Tensor {
        let x: Vec<i64> = (0..b).flat_map(|j| words[j * 9 + from + shift..j * 9 + from + shift + len].to_vec()).collect();
        Tensor::from_vec(x, [b, len]).unwrap()
    };
    let mut o = ZooOptions::new(b);
    (o.vocab, o.hidden, o.layers) = (Some(v), Some(6), Some(2));
    o.optimizer = Some(flowlab_engine::Optimizer::adam(0.05));
    o.seq_len = Some(8);
    let long = build_with("lstm_lm", &o).unwrap();
    assert!(long.state_update.is_none());
    o.seq_len = Some(4);
    o.carry_state = true;
    let m = build_with("lstm_lm", &o).unwrap();
    assert_eq!(m.params, long.params, "the same trainable weights");
    assert_eq!(m.non_trainable_params as usize, 2 * 2 * b * 6, "h and c per layer");
    let (s8, s4) = (open_session(&long), open_session(&m));
    // Train the long unroll until its predictions lean on context (small
    // initial weights predict nearly uniformly whatever the state), then
    // give the carrying model the same weights.
    let (x8, y8) = (window(0, 8, 0), window(0, 8, 1));
    for _ in 0..40 {
        s8.run(&[(&long.inputs[0], &x8), (&long.inputs[1], &y8)], &[], &[&long.train_op]).unwrap();
    }
    for (name, value) in s8.variable_values().unwrap() {
        if s4.variable_value(&name).is_ok() {
            s4.set_variable(&name, value).unwrap();
        }
    }
    let loss_of = |m: &ModelGraph, sess: &Session, from: usize, len: usize, store: bool| -> f64 {
        let (x, y) = (window(from, len, 0), window(from, len, 1));
        let feeds = [(&m.inputs[0], &x), (&m.inputs[1], &y)];
        let targets: Vec<&Output> = if store { vec![m.state_update.as_ref().unwrap()] } else { vec![] };
        sess.run(&feeds, &[&m.eval_loss], &targets).unwrap()[0].scalar_f64().unwrap()
    };
    let whole = loss_of(&long, &s8, 0, 8, false);
    let first = loss_of(&m, &s4, 0, 4, true);
    let second = loss_of(&m, &s4, 4, 4, true);
    assert!(((first + second) / 2.0 - whole).abs() < 1e-5, "{first} + {second} vs {whole}");
    // From zeros, the second window scores differently...
    s4.run(&[], &[], &[m.state_reset.as_ref().unwrap()]).unwrap();
    let cold = loss_of(&m, &s4, 4, 4, false);
    assert!((cold - second).abs() > 1e-2, "{cold} vs {second}");
    // ...and the first window after a reset scores as at the start.
    assert!((loss_of(&m, &s4, 0, 4, false) - first).abs() < 1e-6);
    // The train op stores the state as well.
    let h = m.graph.output_by_name("lstm/layer_0/state/h", 0).unwrap();
    let norm = |sess: &Session| sess.run(&[], &[&h], &[]).unwrap()[0].to_vec::<f32>().unwrap().iter().map(|x| x.abs()).sum::<f32>();
    assert_eq!(norm(&s4), 0.0, "reset");
    let (x, y) = (window(0, 4, 0), window(0, 4, 1));
    s4.run(&[(&m.inputs[0], &x), (&m.inputs[1], &y)], &[], &[&m.train_op]).unwrap();
    assert!(norm(&s4) > 1e-3);
}

/// The while_loop LSTM and the unrolled one are the same model: equal loss
/// from the same seed, and equal weights after training steps (so equal
/// gradients through the loop's backward pass).
#[test]
fn the_while_loop_lstm_equals_the_unrolled_one() {
    let mut o = ZooOptions::new(3);
    (o.vocab, o.hidden, o.seq_len, o.layers) = (Some(15), Some(8), Some(5), Some(2));
    o.optimizer = Some(flowlab_engine::Optimizer::adam(0.01));
    let unrolled = build_with("lstm_lm", &o).unwrap();
    o.dynamic = true;
    let dynamic = build_with("lstm_lm", &o).unwrap();
    assert_eq!(dynamic.params, unrolled.params);
    // Its graph does not grow with the sequence; the unrolled one does.
    let mut longer = o.clone();
    longer.seq_len = Some(50);
    assert_eq!(build_with("lstm_lm", &longer).unwrap().graph.num_nodes(), dynamic.graph.num_nodes());
    longer.dynamic = false;
    assert!(build_with("lstm_lm", &longer).unwrap().graph.num_nodes() > 5 * unrolled.graph.num_nodes());
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let feeds = random_feeds(&unrolled, 15, &mut rng);
    let run = |m: &ModelGraph| {
        let sess = open_session(m);
        let pairs: Vec<_> = m.inputs.iter().zip(&feeds).collect();
        let losses: Vec<f64> =
            (0..3).map(|_| sess.run(&pairs, &[&m.loss], &[&m.train_op]).unwrap()[0].scalar_f64().unwrap()).collect();
        let mut weights = sess.variable_values().unwrap();
        weights.retain(|(n, _)| !n.contains("Adam"));
        weights.sort_by(|a, b| a.0.cmp(&b.0));
        (losses, weights)
    };
    let (lu, wu) = run(&unrolled);
    let (ld, wd) = run(&dynamic);
    for (a, b) in lu.iter().zip(&ld) {
        assert!((a - b).abs() < 1e-5, "losses {lu:?} vs {ld:?}");
    }
    assert!(lu[2] < lu[0], "it learns: {lu:?}");
    assert_eq!(wu.iter().map(|w| &w.0).collect::<Vec<_>>(), wd.iter().map(|w| &w.0).collect::<Vec<_>>());
    for ((name, a), (_, b)) in wu.iter().zip(&wd) {
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-5, "{name}: weights differ by {worst} after three steps");
    }
}

#[test]
fn tiny_gnmt_trains() {
    let mut o = ZooOptions::new(3);
    (o.vocab, o.hidden, o.seq_len, o.layers) = (Some(12), Some(8), Some(4), Some(3));
    o.optimizer = Some(flowlab_engine::Optimizer::adam(1e-2));
    assert_learns(&build_with("gnmt", &o).unwrap(), 12, 4);
    o.layers = Some(1);
    assert_eq!(
        build_with("gnmt", &o).unwrap_err().to_string(),
        "invalid parameter `layers`: gnmt needs at least 2 (a bidirectional layer and one above it)"
    );
}

/// The decoder of transformer_base sees only earlier targets: changing the
/// last target changes no loss term but the last one's, and the first
/// position's prediction depends on the source alone.
#[test]
fn transformer_base_decoder_is_causal() {
    let mut o = ZooOptions::new(1);
    (o.vocab, o.hidden, o.heads, o.ff, o.layers, o.seq_len) = (Some(10), Some(8), Some(2), Some(16), Some(1), Some(4));
    let m = build_with("transformer_base", &o).unwrap();
    let sess = Session::with_options(&m.graph, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let logits = m.graph.output_by_name("lm_head/MatMul", 0).unwrap();
    let src = Tensor::from_vec(vec![1i64, 2, 3, 4], [1, 4]).unwrap();
    let run = |tgt: Vec<i64>| sess.run(&[(&m.inputs[0], &src), (&m.inputs[1], &Tensor::from_vec(tgt, [1, 4]).unwrap())], &[&logits], &[]).unwrap()[0].to_f64_vec().unwrap();
    let a = run(vec![5, 6, 7, 8]);
    let b = run(vec![5, 6, 7, 9]); // the last target is never read
    assert_eq!(a, b);
    let c = run(vec![5, 1, 7, 8]); // the second target is read by positions 2 and 3
    assert_eq!(a[..20], c[..20]);
    assert_ne!(a[20..], c[20..]);
}

#[test]
fn tiny_transformers_train() {
    let mut o = ZooOptions::new(2);
    (o.vocab, o.hidden, o.heads, o.ff, o.layers, o.seq_len) = (Some(20), Some(8), Some(2), Some(16), Some(2), Some(4));
    o.optimizer = Some(flowlab_engine::Optimizer::adam(1e-2));
    assert_learns(&build_with("transformer", &o).unwrap(), 20, 4);
    o.classes = Some(3);
    assert_learns(&build_with("transformer", &o).unwrap(), 3, 4);
    o.classes = None;
    assert_learns(&build_with("transformer_base", &o).unwrap(), 20, 4);
}

/// Whole-model gradient check for the deep models, where per-element finite
/// differences drown in ReLU and max-pool kinks: moving every variable by
/// `±t·g` must change the loss by `±t·|g|²` (central difference, within
/// 15%: the weights are f32). Then the train op (SGD)
/// must lower the loss on the batch. Returns `|g|²`.
fn check_descent(m: &ModelGraph) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let feeds = random_feeds(m, 5, &mut rng);
    let sess = Session::with_options(&m.graph, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let pairs: Vec<_> = m.inputs.iter().zip(&feeds).collect();
    let nodes = m.graph.nodes();
    let (mut vars, mut grads) = (Vec::new(), Vec::new());
    for n in nodes.iter().filter(|n| n.op == "ApplyGradientDescent") {
        let Some(flowlab_engine::AttrValue::Str(v)) = n.attrs.get("var") else { panic!("{} names no variable", n.name) };
        vars.push(v.clone());
        grads.push(m.graph.output_by_name(&nodes[n.inputs[1].0].name, n.inputs[1].1).unwrap());
    }
    // SGD has no slots: every variable but the moving statistics is updated.
    assert_eq!(vars.len() as u64, m.graph.variables().len() as u64 - count_state_vars(m));
    let mut fetch = vec![&m.loss];
    fetch.extend(grads.iter());
    let v = sess.run(&pairs, &fetch, &[]).unwrap();
    let l0 = v[0].scalar_f64().unwrap();
    let gs: Vec<Vec<f64>> = v[1..].iter().map(|t| t.to_f64_vec().unwrap()).collect();
    let norm2: f64 = gs.iter().flatten().map(|x| x * x).sum();
    let w0: Vec<Tensor> = vars.iter().map(|n| sess.variable_value(n).unwrap()).collect();
    let t = 5e-3 / norm2;
    let loss_at = |step: f64| {
        for ((n, w), g) in vars.iter().zip(&w0).zip(&gs) {
            let x: Vec<f64> = w.to_f64_vec().unwrap().iter().zip(g).map(|(a, b)| a + step * b).collect();
            sess.set_variable(n, Tensor::from_f64s(DType::F32, &x, w.shape().clone()).unwrap()).unwrap();
        }
        sess.run(&pairs, &[&m.loss], &[]).unwrap()[0].scalar_f64().unwrap()
    };
    // Central difference: the curvature term cancels.
    let slope = (loss_at(t) - loss_at(-t)) / (2.0 * t);
    assert!((slope / norm2 - 1.0).abs() < 0.15, "{}: loss fell at rate {slope} along the gradient, |g|² is {norm2} (loss {l0})", m.name);
    for (n, w) in vars.iter().zip(w0) {
        sess.set_variable(n, w).unwrap();
    }
    let losses: Vec<f64> =
        (0..2).map(|_| sess.run(&pairs, &[&m.loss], &[&m.train_op]).unwrap()[0].scalar_f64().unwrap()).collect();
    assert!(losses[1] < losses[0], "{}: the train op did not lower the loss: {losses:?} (|g|² {norm2})", m.name);
    norm2
}

/// Batch-norm moving statistics: two per batch norm.
fn count_state_vars(m: &ModelGraph) -> u64 {
    m.graph.variables().iter().filter(|v| v.name().ends_with("/moving_mean") || v.name().ends_with("/moving_variance")).count() as u64
}

#[test]
fn narrow_resnet50_and_inception_v3_run_and_descend() {
    let mut o = ZooOptions::new(4);
    (o.width_divisor, o.image_size, o.classes) = (16, Some(64), Some(5));
    o.optimizer = Some(flowlab_engine::Optimizer::Sgd { lr: 1e-8 });
    check_descent(&build_with("resnet50", &o).unwrap());
    (o.image_size, o.aux_head) = (Some(139), true);
    check_descent(&build_with("inception_v3", &o).unwrap());
}

/// Finite differences of `loss` w.r.t. the first elements of `var` against autodiff.
fn check_gradient(sess: &Session, loss: &flowlab_engine::Output, var: &flowlab_engine::Output, feeds: &[(&flowlab_engine::Output, &Tensor)]) {
    let grad = sess.graph().gradients(&[loss], &[var]).unwrap()[0].clone().unwrap();
    let analytic = sess.run(feeds, &[&grad], &[]).unwrap()[0].to_f64_vec().unwrap();
    let w0 = sess.variable_value(&var.name()).unwrap();
    let base = w0.to_f64_vec().unwrap();
    for i in 0..base.len().min(6) {
        let f = |d: f64| {
            let mut x = base.clone();
            x[i] += d;
            sess.set_variable(&var.name(), Tensor::from_f64s(DType::F32, &x, w0.shape().clone()).unwrap()).unwrap();
            sess.run(feeds, &[loss], &[]).unwrap()[0].scalar_f64().unwrap()
        };
        let h = 1e-2;
        let fd = (f(h) - f(-h)) / (2.0 * h);
        sess.set_variable(&var.name(), w0.clone()).unwrap();
        assert!((fd - analytic[i]).abs() < 2e-2 * (1.0 + fd.abs()), "{}[{i}]: analytic {} vs finite difference {fd}", var.name(), analytic[i]);
    }
}

#[test]
fn composed_batch_norm_and_layer_norm_have_the_right_gradients() {
    let mut net = builder::Net::new(3);
    let g = net.g.clone();
    let x = g.placeholder("x", DType::F32, [4, 3, 3, 2]).unwrap();
    let bn_in = net.conv(&g.scope("conv"), &x, builder::ConvSpec::square(1, 2, 3, 1)).unwrap();
    let bn = builder::BnConfig { scale: true, epsilon: 1e-3, momentum: 0.9 };
    let y = net.batch_norm(&g, &bn_in, 3, bn).unwrap();
    let y = g.reshape(&y, &[12, 9]).unwrap();
    let y = net.layer_norm(&g, "ln", &y, 9).unwrap();
    // A fixed random projection makes the loss depend on every output unevenly.
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let r = Tensor::from_vec((0..108).map(|_| rng.random::<f32>() - 0.5).collect::<Vec<f32>>(), [12, 9]).unwrap();
    let loss = g.reduce_sum(g.mul(&y, g.constant(r).unwrap()).unwrap(), &[], false).unwrap();
    let xv = Tensor::from_vec((0..72).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect::<Vec<f32>>(), [4, 3, 3, 2]).unwrap();
    let sess = Session::with_options(&g, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    sess.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
    for name in ["conv/weights", "BatchNorm/gamma", "BatchNorm/beta", "ln/gamma"] {
        let v = g.output_by_name(name, 0).unwrap();
        check_gradient(&sess, &loss, &v, &[(&x, &xv)]);
    }
}
