//! Models exported by PyTorch (`bench/onnx/make_fixtures.py`) imported and
//! run forward, against ONNX Runtime's outputs for the same inputs, saved
//! beside them when the fixtures were made. Bound (the issue's, set before
//! any run): each element within 1e-4 of the reference relative to
//! max(|reference|, 1e-2 x the largest |reference|), the floor keeping an
//! element near zero out of a relative test f32 sums cannot pass.

use flowlab_engine::{Session, Tensor};
use flowlab_models::{npy, onnx};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/onnx")
}

/// Imports `name.onnx` at its input's batch, runs it, and returns the
/// largest relative error and the model.
fn run(name: &str, input: &str) -> (f64, onnx::OnnxModel) {
    let dir = fixtures();
    let x = npy::read(&dir.join(format!("{name}.{input}.npy"))).unwrap();
    let want = npy::read(&dir.join(format!("{name}.output.npy"))).unwrap();
    let opts = onnx::ImportOptions { batch: Some(x.shape().dims()[0]), ..Default::default() };
    let m = onnx::import(&dir.join(format!("{name}.onnx")), &opts).unwrap();
    let sess = Session::new(&m.graph).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let got: Tensor = sess.run(&[(&m.inputs[0].placeholder, &x)], &[&m.outputs[0].1], &[]).unwrap().remove(0);
    assert_eq!(got.shape(), want.shape(), "{name}");
    let (g, w) = (got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    let scale = w.iter().fold(0.0f64, |a, &v| a.max(f64::from(v).abs()));
    let worst = g.iter().zip(&w).map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs() / f64::from(b).abs().max(1e-2 * scale)).fold(0.0, f64::max);
    (worst, m)
}

#[test]
fn every_fixture_gives_onnx_runtimes_outputs() {
    // parameters: PyTorch's count of the exported module (make_fixtures.py
    // prints it); the CNN's batch norm was folded into its convolution by
    // the export (8 fewer), the LSTM's two biases train as one (64 fewer)
    for (name, input, params) in [("mlp", "x", 3_466), ("cnn", "x", 3_685 - 8), ("encoder", "tokens", 18_787), ("lstm", "x", 1_988 - 64)] {
        let (worst, m) = run(name, input);
        println!("{name}: largest relative error {worst:.2e} over {} ops ({} parameters)", m.op_counts.values().sum::<usize>(), m.params);
        assert!(worst <= 1e-4, "{name}: {worst:e}");
        assert_eq!(m.params, params, "{name}");
    }
}
