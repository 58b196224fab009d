//! FusedBatchNorm's forward pass against a hand-worked case and against the
//! same normalization built from primitive ops (mean, centred square,
//! rsqrt: the engine's other kernels); bad inputs against their errors.

use flowlab_engine::{DType, Graph, Session, Tensor};

fn run(g: &Graph, outs: &[&flowlab_engine::Output]) -> Vec<Vec<f32>> {
    let s = Session::new(g).unwrap();
    s.run(&[], outs, &[]).unwrap().iter().map(|t| t.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn a_hand_worked_batch_normalizes_per_channel() {
    // Channel 0 holds 1 and 3 (mean 2, variance 1), channel 1 holds 2 and 6
    // (mean 4, variance 4): with epsilon 0 both become -1 and +1, then
    // scaled by (2, 0.5) and shifted by (10, -1).
    let g = Graph::new();
    let x = g.constant(Tensor::from_vec(vec![1f32, 2.0, 3.0, 6.0], [2, 2]).unwrap()).unwrap();
    let scale = g.constant(Tensor::from_vec(vec![2f32, 0.5], [2]).unwrap()).unwrap();
    let offset = g.constant(Tensor::from_vec(vec![10f32, -1.0], [2]).unwrap()).unwrap();
    let (y, mean, var) = g.fused_batch_norm(&x, &scale, &offset, 0.0).unwrap();
    let r = run(&g, &[&y, &mean, &var]);
    assert_eq!(r[0], vec![8.0, -1.5, 12.0, -0.5]);
    assert_eq!(r[1], vec![2.0, 4.0]);
    assert_eq!(r[2], vec![1.0, 4.0]);
}

#[test]
fn it_equals_the_normalization_built_from_primitive_ops() {
    let g = Graph::new();
    let n = 4 * 5 * 5 * 8;
    let xs: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0 + (i % 8) as f32).collect();
    let x = g.constant(Tensor::from_vec(xs, [4, 5, 5, 8]).unwrap()).unwrap();
    let scale = g.constant(Tensor::from_vec((0..8).map(|k| 0.5 + k as f32 / 4.0).collect::<Vec<_>>(), [8]).unwrap()).unwrap();
    let offset = g.constant(Tensor::from_vec((0..8).map(|k| k as f32 - 3.0).collect::<Vec<_>>(), [8]).unwrap()).unwrap();
    let eps = 1e-3;
    let (y, mean, var) = g.fused_batch_norm(&x, &scale, &offset, eps).unwrap();
    // The same from primitive ops.
    let m = g.reduce_mean(&x, &[0, 1, 2], true).unwrap();
    let centered = g.sub(&x, &m).unwrap();
    let v = g.reduce_mean(g.square(&centered).unwrap(), &[0, 1, 2], true).unwrap();
    let inv = g.rsqrt((&v + eps).unwrap()).unwrap();
    let y2 = g.add(g.mul(g.mul(&centered, &inv).unwrap(), &scale).unwrap(), &offset).unwrap();
    let r = run(&g, &[&y, &y2, &mean, &m, &var, &v]);
    for (a, b) in r[0].iter().zip(&r[1]) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "y {a} vs {b}");
    }
    for (a, b) in r[2].iter().zip(&r[3]).chain(r[4].iter().zip(&r[5])) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "statistic {a} vs {b}");
    }
}

#[test]
fn bad_inputs_are_errors_naming_the_node() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [2, 3]).unwrap();
    let three = g.placeholder("three", DType::F32, [3]).unwrap();
    let two = g.placeholder("two", DType::F32, [2]).unwrap();
    let e = g.fused_batch_norm(&x, &two, &three, 1e-3).unwrap_err().to_string();
    assert!(e.contains("FusedBatchNorm") && e.contains("input 1 must be [channels] = [3]"), "{e}");
    let e = g.fused_batch_norm(&x, &three, &three, -1.0).unwrap_err().to_string();
    assert!(e.contains("epsilon") && e.contains("not negative"), "{e}");
    let e = g.fused_batch_norm(&three, &three, &three, 1e-3).unwrap_err().to_string();
    assert!(e.contains("rank >= 2"), "{e}");
}
