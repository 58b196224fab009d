//! Every differentiable op's gradient against central finite differences in
//! f64. `check` builds the op on f64 placeholders, reduces its output with a
//! fixed pseudo-random weighting to a scalar loss, and compares the symbolic
//! gradient of that loss with (L(x+h) - L(x-h)) / 2h for every input element.

use flowlab_engine::{DType, Graph, Output, Result, Session, SessionOptions, Tensor};

/// Deterministic values in [-1, 1] that avoid 0 (no ties, no kinks).
fn values(n: usize, salt: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(salt.wrapping_mul(0xBF58_476D_1CE4_E5B9));
            let u = ((h >> 11) as f64) / ((1u64 << 53) as f64);
            let v = 2.0 * u - 1.0;
            if v.abs() < 0.1 { v + 0.2f64.copysign(v) } else { v }
        })
        .collect()
}

fn run1(s: &Session, feeds: &[(&Output, &Tensor)], y: &Output) -> f64 {
    s.run(feeds, &[y], &[]).unwrap()[0].scalar_f64().unwrap()
}

/// Checks d(loss)/d(input) for each input shape given, with inputs drawn by
/// `values` (or taken from `data` where given, mapped by `map`).
fn check_with(name: &str, shapes: &[&[usize]], map: impl Fn(usize, f64) -> f64, eps: f64, tol: f64, build: impl Fn(&Graph, &[Output]) -> Result<Output>) {
    let g = Graph::new();
    let xs: Vec<Output> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| g.placeholder(&format!("x{i}"), DType::F64, PartialShapeOf(s).get()).unwrap())
        .collect();
    let y = build(&g, &xs).unwrap_or_else(|e| panic!("{name}: build failed: {e}"));
    let y = if y.dtype() == DType::F64 { y } else { g.cast(&y, DType::F64).unwrap() };
    let inputs: Vec<Tensor> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n: usize = s.iter().product();
            let v: Vec<f64> = values(n, i as u64 + 7).into_iter().map(|v| map(i, v)).collect();
            Tensor::from_vec(v, s.to_vec()).unwrap()
        })
        .collect();
    let sess = Session::with_options(&g, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    let feeds: Vec<(&Output, &Tensor)> = xs.iter().zip(&inputs).collect();
    let y_val = &sess.run(&feeds, &[&y], &[]).unwrap()[0];
    let w = Tensor::from_vec(values(y_val.num_elements(), 99), y_val.shape().clone()).unwrap();
    let loss = g.reduce_sum(g.mul(&y, g.constant(w).unwrap()).unwrap(), &[], false).unwrap();
    let grads = g.gradients(&[&loss], &xs.iter().collect::<Vec<_>>()).unwrap();
    for (i, gr) in grads.iter().enumerate() {
        let gr = gr.as_ref().unwrap_or_else(|| panic!("{name}: no gradient for input {i}"));
        let analytic = sess.run(&feeds, &[gr], &[]).unwrap()[0].to_vec::<f64>().unwrap();
        assert_eq!(analytic.len(), inputs[i].num_elements(), "{name}: gradient {i} has the wrong size");
        let base = inputs[i].to_vec::<f64>().unwrap();
        for j in 0..base.len() {
            let eval = |d: f64| {
                let mut v = base.clone();
                v[j] += d;
                let t = Tensor::from_vec(v, inputs[i].shape().clone()).unwrap();
                let mut f: Vec<(&Output, &Tensor)> = feeds.clone();
                f[i] = (&xs[i], &t);
                run1(&sess, &f, &loss)
            };
            let numeric = (eval(eps) - eval(-eps)) / (2.0 * eps);
            let a = analytic[j];
            assert!(
                (a - numeric).abs() <= tol * (1.0 + numeric.abs()),
                "{name}: d/dx{i}[{j}] analytic {a} vs numeric {numeric}"
            );
        }
    }
}

struct PartialShapeOf<'a>(&'a [usize]);
impl PartialShapeOf<'_> {
    fn get(&self) -> flowlab_engine::PartialShape {
        flowlab_engine::PartialShape::from(flowlab_engine::Shape::from(self.0))
    }
}

fn check(name: &str, shapes: &[&[usize]], build: impl Fn(&Graph, &[Output]) -> Result<Output>) {
    check_with(name, shapes, |_, v| v, 1e-6, 1e-6, build)
}

/// Inputs shifted to be positive (for log, sqrt, pow, div).
fn check_positive(name: &str, shapes: &[&[usize]], build: impl Fn(&Graph, &[Output]) -> Result<Output>) {
    check_with(name, shapes, |_, v| v.abs() + 0.5, 1e-6, 1e-6, build)
}

#[test]
fn elementwise_binary_ops_with_broadcasting() {
    check("Add", &[&[2, 3], &[3]], |g, x| g.add(&x[0], &x[1]));
    check("Add column", &[&[2, 3], &[2, 1]], |g, x| g.add(&x[0], &x[1]));
    check("Sub", &[&[2, 3], &[2, 3]], |_, x| &x[0] - &x[1]);
    check("Sub scalar", &[&[], &[2, 3]], |_, x| &x[0] - &x[1]);
    check("Mul", &[&[2, 3], &[1, 3]], |_, x| &x[0] * &x[1]);
    check_positive("Div", &[&[2, 3], &[3]], |_, x| &x[0] / &x[1]);
    check("Maximum", &[&[2, 3], &[2, 3]], |g, x| g.maximum(&x[0], &x[1]));
    check("Minimum", &[&[2, 3], &[3]], |g, x| g.minimum(&x[0], &x[1]));
    check_positive("Pow", &[&[2, 3], &[2, 3]], |g, x| g.pow(&x[0], &x[1]));
}

#[test]
fn elementwise_unary_ops() {
    check("Identity", &[&[2, 3]], |g, x| g.identity(&x[0]));
    check("Neg", &[&[2, 3]], |g, x| g.neg(&x[0]));
    check("Exp", &[&[2, 3]], |g, x| g.exp(&x[0]));
    check_positive("Log", &[&[2, 3]], |g, x| g.log(&x[0]));
    check_positive("Sqrt", &[&[2, 3]], |g, x| g.sqrt(&x[0]));
    check_positive("Rsqrt", &[&[2, 3]], |g, x| g.rsqrt(&x[0]));
    check("Square", &[&[2, 3]], |g, x| g.square(&x[0]));
    check("Tanh", &[&[2, 3]], |g, x| g.tanh(&x[0]));
    check("Sigmoid", &[&[2, 3]], |g, x| g.sigmoid(&x[0]));
    check("Erf", &[&[2, 3]], |g, x| g.erf(&x[0]));
    // a mask broadcast over rows, the other branch over columns
    check("Select", &[&[2, 3], &[3]], |g, x| {
        let mask = g.constant(flowlab_engine::Tensor::from_vec(vec![true, false, true], [3]).unwrap())?;
        g.select(&mask, &x[0], &x[1])
    });
    check("Relu", &[&[3, 4]], |g, x| g.relu(&x[0]));
    check_with("Cast f64->f32->f64", &[&[2, 3]], |_, v| v, 1e-2, 1e-4, |g, x| g.cast(g.cast(&x[0], DType::F32)?, DType::F64));
}

#[test]
fn matmul_with_every_transpose_combination() {
    check("MatMul", &[&[2, 3], &[3, 4]], |g, x| g.matmul(&x[0], &x[1]));
    check("MatMul ta", &[&[3, 2], &[3, 4]], |g, x| g.matmul_ex(&x[0], &x[1], true, false));
    check("MatMul tb", &[&[2, 3], &[4, 3]], |g, x| g.matmul_ex(&x[0], &x[1], false, true));
    check("MatMul ta tb", &[&[3, 2], &[4, 3]], |g, x| g.matmul_ex(&x[0], &x[1], true, true));
    check("BatchMatMul", &[&[2, 2, 3], &[2, 3, 4]], |g, x| g.batch_matmul(&x[0], &x[1]));
    check("BatchMatMul adj", &[&[2, 3, 2], &[2, 4, 3]], |g, x| g.batch_matmul_ex(&x[0], &x[1], true, true));
}

#[test]
fn reductions() {
    check("Sum all", &[&[2, 3]], |g, x| g.reduce_sum(&x[0], &[], false));
    check("Sum axis 1", &[&[2, 3, 2]], |g, x| g.reduce_sum(&x[0], &[1], false));
    check("Sum axes 0,2 keep", &[&[2, 3, 2]], |g, x| g.reduce_sum(&x[0], &[0, -1], true));
    check("Mean axis 0", &[&[4, 3]], |g, x| g.reduce_mean(&x[0], &[0], false));
    check("Mean all", &[&[2, 3]], |g, x| g.reduce_mean(&x[0], &[], false));
    check("Max axis 1", &[&[3, 4]], |g, x| g.reduce_max(&x[0], &[1], false));
    check("Max all keep", &[&[3, 4]], |g, x| g.reduce_max(&x[0], &[], true));
}

#[test]
fn shape_ops() {
    check("Reshape", &[&[2, 6]], |g, x| g.reshape(&x[0], &[3, -1]));
    check("Transpose", &[&[2, 3, 4]], |g, x| g.transpose(&x[0], &[2, 0, 1]));
    check("Concat", &[&[2, 3], &[2, 1]], |g, x| g.concat(&[&x[0], &x[1]], 1));
    check("Split", &[&[4, 3]], |g, x| {
        let parts = g.split(&x[0], 2, 0)?;
        g.mul(&parts[0], g.exp(&parts[1])?)
    });
    check("Split one used", &[&[2, 6]], |g, x| Ok(g.split(&x[0], 3, 1)?[1].clone()));
    check("Slice", &[&[3, 4]], |g, x| g.slice(&x[0], &[1, 1], &[2, -1]));
    check("ExpandDims", &[&[2, 3]], |g, x| g.expand_dims(&x[0], 1));
    check("Squeeze", &[&[2, 1, 3]], |g, x| g.squeeze(&x[0], &[]));
    check("Gather", &[&[4, 3]], |g, x| {
        let idx = g.constant(Tensor::from_vec(vec![3i64, 0, 3, 1], [4]).unwrap())?;
        g.gather(&x[0], &idx)
    });
}

#[test]
fn neural_network_ops() {
    check("Softmax", &[&[2, 4]], |g, x| g.softmax(&x[0]));
    check("LogSoftmax", &[&[2, 4]], |g, x| g.log_softmax(&x[0]));
    check("BiasAdd", &[&[2, 3], &[3]], |g, x| g.bias_add(&x[0], &x[1]));
    check("SoftmaxCrossEntropyWithLogits", &[&[3, 4], &[3, 4]], |g, x| {
        g.softmax_cross_entropy_with_logits(&x[0], g.softmax(&x[1])?)
    });
    check("SparseSoftmaxCrossEntropyWithLogits", &[&[3, 4]], |g, x| {
        let labels = g.constant(Tensor::from_vec(vec![1i64, 3, 0], [3]).unwrap())?;
        g.sparse_softmax_cross_entropy_with_logits(&x[0], &labels)
    });
}

#[test]
fn fused_batch_norm_through_its_output_and_its_statistics() {
    // y alone (the one FusedBatchNormGrad node): x, scale and offset.
    check("FusedBatchNorm y", &[&[2, 3, 4], &[4], &[4]], |g, x| Ok(g.fused_batch_norm(&x[0], &x[1], &x[2], 1e-3)?.0));
    // Through the batch statistics too (the extra terms of the gradient).
    check("FusedBatchNorm y + mean + variance", &[&[5, 3], &[3], &[3]], |g, x| {
        let (y, mean, var) = g.fused_batch_norm(&x[0], &x[1], &x[2], 1e-3)?;
        let stats = g.add((&mean * 3.0)?, (&var * -2.0)?)?;
        g.add(&y, &stats)
    });
}

#[test]
fn layer_norm_through_its_output_and_its_statistics() {
    // y alone (the one LayerNormGrad node): x, gamma and beta.
    check("LayerNorm y", &[&[2, 3, 4], &[4], &[4]], |g, x| Ok(g.layer_norm(&x[0], &x[1], &x[2], 1e-3)?.0));
    // Through the row statistics too (the extra terms of the gradient).
    check("LayerNorm y + mean + variance", &[&[5, 3], &[3], &[3]], |g, x| {
        let (y, mean, var) = g.layer_norm(&x[0], &x[1], &x[2], 1e-3)?;
        let stats = g.expand_dims(g.add((&mean * 3.0)?, (&var * -2.0)?)?, -1)?;
        g.add(&y, &stats)
    });
}

#[test]
fn convolution_and_pooling() {
    check("Conv2D SAME", &[&[2, 5, 5, 2], &[3, 3, 2, 3]], |g, x| g.conv2d(&x[0], &x[1], [1, 1], true));
    check("Conv2D VALID stride 2", &[&[1, 6, 5, 2], &[3, 2, 2, 2]], |g, x| g.conv2d(&x[0], &x[1], [2, 2], false));
    check("MaxPool", &[&[1, 4, 4, 2]], |g, x| g.max_pool(&x[0], [2, 2], [2, 2], false));
    check("MaxPool SAME overlapping", &[&[2, 5, 5, 1]], |g, x| g.max_pool(&x[0], [3, 3], [2, 2], true));
    check("AvgPool SAME", &[&[1, 5, 4, 2]], |g, x| g.avg_pool(&x[0], [2, 2], [2, 2], true));
    // ONNX's and PyTorch's pads, which SAME cannot express
    check("Conv2D explicit 3/3 stride 2", &[&[1, 7, 6, 2], &[4, 4, 2, 2]], |g, x| g.conv2d_padded(&x[0], &x[1], [2, 2], [3, 3, 1, 2]));
    check("MaxPool explicit 1/1 stride 2", &[&[2, 6, 5, 1]], |g, x| g.pool_padded(true, &x[0], [3, 3], [2, 2], [1, 1, 1, 1]));
    check("AvgPool explicit", &[&[1, 5, 4, 2]], |g, x| g.pool_padded(false, &x[0], [3, 3], [1, 1], [1, 1, 0, 2]));
}

/// `_FusedConv2D` built directly (both `fused_ops` forms), and the Conv2D,
/// BiasAdd, Relu chain the executor fuses into it at run time.
#[test]
fn fused_convolution_with_bias_and_relu() {
    use flowlab_engine::AttrValue;
    let shapes: &[&[usize]] = &[&[2, 5, 5, 2], &[3, 3, 2, 3], &[3]];
    for ops in [&["BiasAdd"][..], &["BiasAdd", "Relu"]] {
        check(&format!("_FusedConv2D {ops:?}"), shapes, |g, x| {
            g.op("_FusedConv2D")
                .input(&x[0])
                .input(&x[1])
                .input(&x[2])
                .attr("strides", AttrValue::Ints(vec![1, 1]))
                .attr("padding", AttrValue::Str("SAME".into()))
                .attr("fused_ops", AttrValue::Strs(ops.iter().map(|s| s.to_string()).collect()))
                .build()
        });
    }
    check("Conv2D -> BiasAdd -> Relu", shapes, |g, x| g.relu(g.bias_add(g.conv2d(&x[0], &x[1], [1, 1], true)?, &x[2])?));
    // the fused convolution and pool keep the given pads
    check("explicit Conv2D -> BiasAdd -> Relu -> MaxPool", shapes, |g, x| {
        let y = g.relu(g.bias_add(g.conv2d_padded(&x[0], &x[1], [1, 1], [2, 0, 1, 1])?, &x[2])?)?;
        g.pool_padded(true, &y, [3, 3], [2, 2], [1, 1, 1, 1])
    });
}

#[test]
fn stop_gradient_treats_its_input_as_a_constant() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F64, [3]).unwrap();
    // d/dx (sg(x) * x) = sg(x) = x, not 2x.
    let y = g.reduce_sum(g.stop_gradient(&x).unwrap() * &x, &[], false).unwrap();
    let gx = g.gradients(&[&y], &[&x]).unwrap()[0].clone().unwrap();
    let s = Session::with_options(&g, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    let v = Tensor::from_vec(vec![1.0f64, -2.0, 3.0], [3]).unwrap();
    assert_eq!(s.run(&[(&x, &v)], &[&gx], &[]).unwrap()[0].to_vec::<f64>().unwrap(), vec![1.0, -2.0, 3.0]);
}

#[test]
fn sparse_softmax_cross_entropy_has_the_closed_form_loss() {
    // Logits [0, ln 3, very negative]: softmax (1/4, 3/4, ~0). Label 1 loses
    // ln(4/3); label 2's probability underflows to 0 in f32, its loss is
    // still finite: 1000 + ln 4 (from the logits, not from the probability).
    let g = Graph::new();
    let x = g.constant(Tensor::from_vec(vec![0.0f32, 3f32.ln(), -1000.0, 0.0, 3f32.ln(), -1000.0], [2, 3]).unwrap()).unwrap();
    let y = g.constant(Tensor::from_vec(vec![1i64, 2], [2]).unwrap()).unwrap();
    let l = g.sparse_softmax_cross_entropy_with_logits(&x, &y).unwrap();
    let s = Session::new(&g).unwrap();
    let v = s.run(&[], &[&l], &[]).unwrap()[0].to_vec::<f32>().unwrap();
    assert!((v[0] - (4.0f32 / 3.0).ln()).abs() < 1e-6, "{v:?}");
    assert!((v[1] - (1000.0 + 4f32.ln())).abs() < 1e-3, "{v:?}");
}

/// Rows of 1,003 classes (125 eight-lane blocks and a remainder of 3) with
/// logits spread over [-40, 40]: every kernel of the softmax family against
/// the textbook formulas evaluated in f64, one class at a time.
#[test]
fn softmax_family_on_long_rows_matches_an_f64_reference() {
    let (n, c) = (3usize, 1003usize);
    let logits: Vec<f32> = (0..n * c).map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 80.0).collect();
    let labels: Vec<i64> = vec![0, 517, 1002];
    let dense: Vec<f32> = (0..n * c).map(|i| if i % c == (i / c) * 300 { 0.75 } else if i % c == 1 { 0.25 } else { 0.0 }).collect();
    // Reference: p_j = e^(x_j) / sum_k e^(x_k), in f64.
    let reference = |r: &[f32]| -> Vec<f64> {
        let m = r.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = r.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|v| v / s).collect()
    };
    let g = Graph::new();
    let x = g.constant(Tensor::from_vec(logits.clone(), [n, c]).unwrap()).unwrap();
    let y = g.constant(Tensor::from_vec(labels.clone(), [n]).unwrap()).unwrap();
    let t = g.constant(Tensor::from_vec(dense.clone(), [n, c]).unwrap()).unwrap();
    let sm = g.softmax(&x).unwrap();
    let lsm = g.log_softmax(&x).unwrap();
    let sparse = g.sparse_softmax_cross_entropy_with_logits(&x, &y).unwrap();
    let full = g.softmax_cross_entropy_with_logits(&x, &t).unwrap();
    let sg = g.gradients(&[&g.reduce_sum(&sparse, &[], false).unwrap()], &[&x]).unwrap().remove(0).unwrap();
    let fg = g.gradients(&[&g.reduce_sum(&full, &[], false).unwrap()], &[&x]).unwrap().remove(0).unwrap();
    let s = Session::new(&g).unwrap();
    let out = s.run(&[], &[&sm, &lsm, &sparse, &full, &sg, &fg], &[]).unwrap();
    let v: Vec<Vec<f32>> = out.iter().map(|o| o.to_vec::<f32>().unwrap()).collect();
    for i in 0..n {
        let p = reference(&logits[i * c..(i + 1) * c]);
        let (mut sparse_loss, mut full_loss) = (-p[labels[i] as usize].ln(), 0.0);
        for j in 0..c {
            let k = i * c + j;
            let tk = dense[k] as f64;
            full_loss -= tk * p[j].ln().max(-1e300);
            assert!((v[0][k] as f64 - p[j]).abs() <= 1e-6 * p[j].max(1e-30) + 1e-12, "softmax [{i},{j}]: {} vs {}", v[0][k], p[j]);
            if p[j] > 1e-30 {
                assert!((v[1][k] as f64 - p[j].ln()).abs() <= 1e-5 * p[j].ln().abs().max(1.0), "log_softmax [{i},{j}]: {} vs {}", v[1][k], p[j].ln());
            }
            let one = if j == labels[i] as usize { 1.0 } else { 0.0 };
            assert!((v[4][k] as f64 - (p[j] - one)).abs() <= 1e-6, "sparse gradient [{i},{j}]");
            assert!((v[5][k] as f64 - (p[j] - tk)).abs() <= 1e-6, "dense gradient [{i},{j}]");
        }
        if sparse_loss.is_infinite() {
            // The label's probability underflows f64 too: the loss from the logits.
            let r = &logits[i * c..(i + 1) * c];
            let m = r.iter().map(|&v| v as f64).fold(f64::NEG_INFINITY, f64::max);
            sparse_loss = m - r[labels[i] as usize] as f64 + r.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln();
        }
        assert!((v[2][i] as f64 - sparse_loss).abs() <= 1e-5 * sparse_loss.max(1.0), "sparse loss {i}: {} vs {sparse_loss}", v[2][i]);
        assert!((v[3][i] as f64 - full_loss).abs() <= 1e-5 * full_loss.max(1.0), "dense loss {i}: {} vs {full_loss}", v[3][i]);
    }
}

/// The fused LSTM cell: x [2,3], cs [2,4], h [2,4], w [7,16], b [16].
#[test]
fn lstm_block_cell_through_its_state_its_gates_and_two_steps() {
    let shapes: &[&[usize]] = &[&[2, 3], &[2, 4], &[2, 4], &[7, 16], &[16]];
    check("LSTMBlockCell h", shapes, |g, x| Ok(g.lstm_block_cell(&x[0], &x[1], &x[2], &x[3], &x[4], 0.0)?.h));
    check("LSTMBlockCell cs, forget bias 1", shapes, |g, x| Ok(g.lstm_block_cell(&x[0], &x[1], &x[2], &x[3], &x[4], 1.0)?.cs));
    // Every output used: the gate gradients enter the backward kernel.
    check("LSTMBlockCell all outputs", shapes, |g, x| {
        let c = g.lstm_block_cell(&x[0], &x[1], &x[2], &x[3], &x[4], 0.5)?;
        g.concat(&[&c.i, &c.cs, &c.f, &c.o, &c.ci, &c.co, &c.h], 1)
    });
    // Two steps sharing the weights: gradients flow back through cs and h.
    check("LSTMBlockCell two steps", shapes, |g, x| {
        let c1 = g.lstm_block_cell(&x[0], &x[1], &x[2], &x[3], &x[4], 0.0)?;
        let c2 = g.lstm_block_cell(&x[0], &c1.cs, &c1.h, &x[3], &x[4], 0.0)?;
        g.concat(&[&c2.h, &c2.cs], 1)
    });
}

/// A weight that six products use, as an unrolled RNN's kernel is used at
/// every step: autodiff gathers its six `xᵢᵀ·dy` into one product over
/// row-concatenated operands (`gather_weight_products`), and the result
/// must still match finite differences, for the weight and for every input
/// (rows of different counts included). With three uses the gradient stays
/// a sum of three products.
#[test]
fn a_weight_shared_by_many_products_gets_one_gathered_gradient() {
    let build = |g: &Graph, xs: &[Output]| -> Result<Output> {
        let w = &xs[0];
        let mut y: Option<Output> = None;
        for x in &xs[1..] {
            // rows differ per use; sum each product's rows so the shapes meet
            let p = g.reduce_sum(g.matmul(x, w)?, &[0], false)?;
            y = Some(match y {
                Some(s) => g.add(&s, &p)?,
                None => p,
            });
        }
        Ok(y.expect("at least one use"))
    };
    let six: [&[usize]; 7] = [&[3, 4], &[2, 3], &[1, 3], &[3, 3], &[2, 3], &[2, 3], &[4, 3]];
    check("weight shared by six products", &six, build);
    check("weight shared by three products", &six[..4], build);
    // The structure: the weight's gradient is one MatMul of two Concats with six uses, an Add with three.
    for (uses, gathered) in [(6usize, true), (3, false)] {
        let g = Graph::new();
        let xs: Vec<Output> = six[..=uses].iter().enumerate().map(|(i, s)| g.placeholder(&format!("x{i}"), DType::F64, PartialShapeOf(s).get()).unwrap()).collect();
        let y = build(&g, &xs).unwrap();
        let loss = g.reduce_sum(&y, &[], false).unwrap();
        let dw = g.gradients(&[&loss], &[&xs[0]]).unwrap().remove(0).unwrap();
        let nodes = g.nodes();
        let node = &nodes[dw.node_id()];
        let inputs: Vec<&str> = node.inputs.iter().map(|&(p, _)| nodes[p].op.as_str()).collect();
        if gathered {
            assert_eq!((node.op.as_str(), inputs), ("MatMul", vec!["Concat", "Concat"]), "{uses} uses");
        } else {
            assert_eq!(node.op, "Add", "{uses} uses");
        }
    }
}

/// Erf's values against Abramowitz and Stegun's table 7.1 (to its 10
/// digits): f64 (libm) to 1e-9; f32 (Eigen's rational fit, TensorFlow's
/// CPU erf, 4.5e-7 from the exact value at worst) to 5e-7.
#[test]
fn erf_takes_its_tabulated_values() {
    let xs = [0.0, 0.5, 1.0, -1.5, 2.0];
    let want = [0.0, 0.5204998778, 0.8427007929, -0.9661051465, 0.9953222650];
    let g = Graph::new();
    let x32 = g.constant(flowlab_engine::Tensor::from_vec(xs.map(|v| v as f32).to_vec(), [5]).unwrap()).unwrap();
    let x64 = g.constant(flowlab_engine::Tensor::from_vec(xs.to_vec(), [5]).unwrap()).unwrap();
    let sess = flowlab_engine::Session::new(&g).unwrap();
    let y = sess.run(&[], &[&g.erf(&x32).unwrap(), &g.erf(&x64).unwrap()], &[]).unwrap();
    for ((a, c), b) in y[0].to_vec::<f32>().unwrap().iter().zip(y[1].to_vec::<f64>().unwrap()).zip(want) {
        assert!((f64::from(*a) - b).abs() < 5e-7, "f32 {a} vs {b}");
        assert!((c - b).abs() < 1e-9, "f64 {c} vs {b}");
    }
}

/// Select against numpy: where([[T, F], [F, T]], [[1, 2], [3, 4]], [9]) == [[1, 9], [9, 4]].
#[test]
fn select_picks_as_numpys_where() {
    use flowlab_engine::Tensor;
    let g = Graph::new();
    let c = g.constant(Tensor::from_vec(vec![true, false, false, true], [2, 2]).unwrap()).unwrap();
    let x = g.constant(Tensor::from_vec(vec![1i64, 2, 3, 4], [2, 2]).unwrap()).unwrap();
    let y = g.constant(Tensor::from_vec(vec![9i64], [1]).unwrap()).unwrap();
    let out = flowlab_engine::Session::new(&g).unwrap().run(&[], &[&g.select(&c, &x, &y).unwrap()], &[]).unwrap().remove(0);
    assert_eq!(out.to_vec::<i64>().unwrap(), vec![1, 9, 9, 4]);
    let e = g.select(&x, &x, &y).unwrap_err().to_string();
    assert!(e.contains("the condition must be bool, got i64"), "{e}");
}
