//! LayerNorm's forward and backward passes against a hand-worked case and
//! against the same normalization built from primitive ops (mean, centred
//! square, rsqrt and their gradients: the engine's other kernels); bad
//! inputs against their errors.

use flowlab_engine::{DType, Graph, Output, Session, Tensor};

fn run(g: &Graph, outs: &[&Output]) -> Vec<Vec<f32>> {
    let s = Session::new(g).unwrap();
    s.run(&[], outs, &[]).unwrap().iter().map(|t| t.to_vec::<f32>().unwrap()).collect()
}

fn close(what: &str, a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 2e-5 * (1.0 + y.abs()), "{what}: {x} vs {y}");
    }
}

#[test]
fn a_hand_worked_case_normalizes_each_row() {
    // Row 0 holds 1 and 3 (mean 2, variance 1), row 1 holds 2 and 6 (mean 4,
    // variance 4): with epsilon 0 both become -1 and +1, then scaled by
    // (2, 0.5) and shifted by (10, -1) per feature.
    let g = Graph::new();
    let x = g.constant(Tensor::from_vec(vec![1f32, 3.0, 2.0, 6.0], [2, 2]).unwrap()).unwrap();
    let gamma = g.constant(Tensor::from_vec(vec![2f32, 0.5], [2]).unwrap()).unwrap();
    let beta = g.constant(Tensor::from_vec(vec![10f32, -1.0], [2]).unwrap()).unwrap();
    let (y, mean, var) = g.layer_norm(&x, &gamma, &beta, 0.0).unwrap();
    assert_eq!(mean.shape().dims(), &[Some(2)]);
    let r = run(&g, &[&y, &mean, &var]);
    assert_eq!(r[0], vec![8.0, -0.5, 8.0, -0.5]);
    assert_eq!(r[1], vec![2.0, 4.0]);
    assert_eq!(r[2], vec![1.0, 4.0]);
}

#[test]
fn it_and_its_gradient_equal_the_normalization_built_from_primitive_ops() {
    let g = Graph::new();
    let (b, t, d) = (3, 4, 8);
    let n = b * t * d;
    let xs: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0 + (i % 5) as f32).collect();
    let x = g.constant(Tensor::from_vec(xs, [b, t, d]).unwrap()).unwrap();
    let gamma = g.constant(Tensor::from_vec((0..d).map(|k| 0.5 + k as f32 / 4.0).collect::<Vec<_>>(), [d]).unwrap()).unwrap();
    let beta = g.constant(Tensor::from_vec((0..d).map(|k| k as f32 - 3.0).collect::<Vec<_>>(), [d]).unwrap()).unwrap();
    // A loss that weighs every element differently, so dx is not trivially 0.
    let w = g.constant(Tensor::from_vec((0..n).map(|i| ((i * 13 % 17) as f32 - 8.0) / 5.0).collect::<Vec<_>>(), [b, t, d]).unwrap()).unwrap();
    let eps = 1e-3;
    let (y, mean, var) = g.layer_norm(&x, &gamma, &beta, eps).unwrap();
    // The same from primitive ops.
    let m = g.reduce_mean(&x, &[-1], true).unwrap();
    let centered = g.sub(&x, &m).unwrap();
    let v = g.reduce_mean(g.square(&centered).unwrap(), &[-1], true).unwrap();
    let inv = g.rsqrt((&v + eps).unwrap()).unwrap();
    let y2 = g.add(g.mul(g.mul(&centered, &inv).unwrap(), &gamma).unwrap(), &beta).unwrap();
    let loss = g.reduce_sum(g.mul(&y, &w).unwrap(), &[], false).unwrap();
    let loss2 = g.reduce_sum(g.mul(&y2, &w).unwrap(), &[], false).unwrap();
    let grads: Vec<Output> = g.gradients(&[&loss], &[&x, &gamma, &beta]).unwrap().into_iter().map(Option::unwrap).collect();
    let grads2: Vec<Output> = g.gradients(&[&loss2], &[&x, &gamma, &beta]).unwrap().into_iter().map(Option::unwrap).collect();
    // Only the one fused node differentiates y.
    assert_eq!(grads[0].op(), "LayerNormGrad");
    let r = run(&g, &[&y, &y2, &mean, &m, &var, &v, &grads[0], &grads2[0], &grads[1], &grads2[1], &grads[2], &grads2[2]]);
    for (k, what) in ["y", "mean", "variance", "dx", "dgamma", "dbeta"].iter().enumerate() {
        close(what, &r[2 * k], &r[2 * k + 1]);
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_node() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [2, 3]).unwrap();
    let three = g.placeholder("three", DType::F32, [3]).unwrap();
    let two = g.placeholder("two", DType::F32, [2]).unwrap();
    let e = g.layer_norm(&x, &two, &three, 1e-3).unwrap_err().to_string();
    assert!(e.contains("LayerNorm") && e.contains("input 1 must be [features] = [3]"), "{e}");
    let e = g.layer_norm(&x, &three, &three, f64::NAN).unwrap_err().to_string();
    assert!(e.contains("epsilon") && e.contains("not negative"), "{e}");
    let scalar = g.placeholder("s", DType::F32, []).unwrap();
    let e = g.layer_norm(&scalar, &three, &three, 1e-3).unwrap_err().to_string();
    assert!(e.contains("rank >= 1"), "{e}");
    let ints = g.placeholder("i", DType::I32, [2, 3]).unwrap();
    assert!(g.layer_norm(&ints, &three, &three, 1e-3).is_err());
}

#[test]
fn an_empty_row_is_an_error_at_run_time_not_a_division_by_zero() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, vec![None, Some(3)]).unwrap();
    let three = g.constant(Tensor::from_vec(vec![1f32; 3], [3]).unwrap()).unwrap();
    let (y, _, _) = g.layer_norm(&x, &three, &three, 1e-3).unwrap();
    let s = Session::new(&g).unwrap();
    let empty = Tensor::from_vec(Vec::<f32>::new(), [0, 3]).unwrap();
    let e = s.run(&[(&x, &empty)], &[&y], &[]).unwrap_err().to_string();
    assert!(e.contains("LayerNorm") && e.contains("no elements to normalize"), "{e}");
}
