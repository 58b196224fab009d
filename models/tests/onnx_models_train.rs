//! Imported models made trainable: the engine's gradients of the loss with
//! respect to every variable of each fixture against central finite
//! differences of the loss itself, and a few steps of SGD lowering it.

use flowlab_engine::{DType, Optimizer, Session, SessionOptions, Tensor};
use flowlab_models::{npy, onnx};
use std::path::PathBuf;

fn fixture(name: &str, input: &str, lr: f64) -> (flowlab_models::ModelGraph, Vec<Tensor>) {
    fixture_with(name, input, lr, false)
}

/// `training`: batch norm by each batch's statistics.
fn fixture_with(name: &str, input: &str, lr: f64, training: bool) -> (flowlab_models::ModelGraph, Vec<Tensor>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/onnx");
    let x = npy::read(&dir.join(format!("{name}.{input}.npy"))).unwrap();
    let batch = x.shape().dims()[0];
    let m = onnx::import(&dir.join(format!("{name}.onnx")), &onnx::ImportOptions { batch: Some(batch), training, ..Default::default() }).unwrap();
    let loss = onnx::Loss::default_for(&m);
    assert_eq!(loss, onnx::Loss::SoftmaxXent, "{name}");
    let shape = m.outputs[0].1.shape();
    let dims = shape.dims();
    // one label per output row (a recurrent fixture's first input axis is its sequence)
    let (rows, classes) = (dims[0].unwrap(), dims[1].unwrap() as i64);
    let labels = Tensor::from_vec((0..rows as i64).map(|i| (i * 7 + 3) % classes).collect::<Vec<i64>>(), [rows]).unwrap();
    let mg = onnx::training(m, name, batch, loss, &Optimizer::Sgd { lr }).unwrap();
    (mg, vec![x, labels])
}

#[test]
fn gradients_of_every_variable_match_finite_differences() {
    for (name, input, training) in [("mlp", "x", false), ("cnn", "x", false), ("cnn_bn", "x", true), ("encoder", "tokens", false), ("lstm", "x", false), ("masked", "x", false), ("gru_rnn", "x", false), ("seq_lens", "x", false)] {
        let (m, data) = fixture_with(name, input, 0.1, training);
        check_gradients(name, &m, &data, 1e-2);
    }
}

/// Grouped, depthwise and dilated convolutions (split, convolved and
/// concatenated; a dilated filter spread by a 0/1 product): the gradients
/// of a mean squared error reach every filter tap, the finite differences
/// agree.
#[test]
fn grouped_and_dilated_convolutions_have_the_finite_difference_gradients() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/onnx");
    let x = npy::read(&dir.join("conv_groups.x.npy")).unwrap();
    let m = onnx::import(&dir.join("conv_groups.onnx"), &onnx::ImportOptions { batch: Some(2), ..Default::default() }).unwrap();
    assert_eq!(onnx::Loss::default_for(&m), onnx::Loss::Mse);
    let target = npy::read(&dir.join("conv_groups.output.npy")).unwrap().to_f64_vec().unwrap();
    // a target the model misses everywhere: half of ONNX Runtime's output
    let target = Tensor::from_f64s(DType::F32, &target.iter().map(|v| 0.5 * v).collect::<Vec<_>>(), [2, 4, 6, 6]).unwrap();
    let mg = onnx::training(m, "conv_groups", 2, onnx::Loss::Mse, &Optimizer::Sgd { lr: 0.01 }).unwrap();
    // a smaller step: a ReLU between the convolutions, and 1e-2 moves
    // some of its inputs across zero
    check_gradients("conv_groups", &mg, &[x, target], 1e-3);
}

/// Each variable's analytic gradient at its first element and at its
/// largest against central differences of the loss, steps of `h`.
fn check_gradients(name: &str, m: &flowlab_models::ModelGraph, data: &[Tensor], h: f64) {
    let sess = Session::with_options(&m.graph, SessionOptions { threads: 1, ..Default::default() }).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let feeds: Vec<_> = m.inputs.iter().zip(data).collect();
    let vars = m.graph.variables();
    let grads = m.graph.gradients(&[&m.loss], &vars.iter().collect::<Vec<_>>()).unwrap();
    let mut checked = 0;
    let mut untrained = 0;
    for (v, grad) in vars.iter().zip(grads) {
        // the running batch-norm statistics are the only variables the loss does not reach
        let Some(grad) = grad else {
            untrained += v.shape().num_elements().unwrap_or(0) as u64;
            continue;
        };
        let analytic = sess.run(&feeds, &[&grad], &[]).unwrap()[0].to_f64_vec().unwrap();
        let w0 = sess.variable_value(&v.name()).unwrap();
        let base = w0.to_f64_vec().unwrap();
        // the element with the largest gradient and the first one
        let big = (0..analytic.len()).max_by(|&a, &b| analytic[a].abs().total_cmp(&analytic[b].abs())).unwrap();
        for i in [0, big] {
            let f = |d: f64| {
                let mut x = base.clone();
                x[i] += d;
                sess.set_variable(&v.name(), Tensor::from_f64s(DType::F32, &x, w0.shape().clone()).unwrap()).unwrap();
                sess.run(&feeds, &[&m.loss], &[]).unwrap()[0].scalar_f64().unwrap()
            };
            let fd = (f(h) - f(-h)) / (2.0 * h);
            sess.set_variable(&v.name(), w0.clone()).unwrap();
            assert!((fd - analytic[i]).abs() < 2e-2 * (1.0 + fd.abs()), "{name}: {}[{i}]: analytic {} vs finite difference {fd}", v.name(), analytic[i]);
            checked += 1;
        }
    }
    assert_eq!(untrained, m.non_trainable_params, "{name}: variables without a gradient");
    println!("{name}: {checked} gradient elements over {} variables", vars.len());
}

#[test]
fn sgd_on_an_imported_model_lowers_its_loss() {
    let (m, data) = fixture("cnn", "x", 0.05);
    let sess = Session::new(&m.graph).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let feeds: Vec<_> = m.inputs.iter().zip(&data).collect();
    let first = sess.run(&feeds, &[&m.loss], &[]).unwrap()[0].scalar_f64().unwrap();
    for _ in 0..20 {
        sess.run(&feeds, &[], &[&m.train_op]).unwrap();
    }
    let last = sess.run(&feeds, &[&m.loss], &[]).unwrap()[0].scalar_f64().unwrap();
    assert!(last < 0.5 * first, "loss {first} -> {last}");
}
