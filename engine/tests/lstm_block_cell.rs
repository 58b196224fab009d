//! The fused LSTM cell against the same cell built from primitive ops
//! (concat, matmul, bias_add, split, sigmoid, tanh), as the model zoo built
//! it before the fused op existed: forward values and every gradient.

use flowlab_engine::{DType, EngineError, Graph, Output, Session, SessionOptions, Tensor};

fn data(n: usize, salt: u64) -> Vec<f64> {
    (0..n).map(|i| (((i as u64 + 1) * 2654435761 + salt * 97) % 1000) as f64 / 500.0 - 1.0).collect()
}

/// (h, cs) of one cell step from primitives, gate order i, ci, f, o.
fn primitive_cell(g: &Graph, x: &Output, cs: &Output, h: &Output, w: &Output, b: &Output, forget_bias: f64) -> (Output, Output) {
    let z = g.bias_add(g.matmul(g.concat(&[x, h], 1).unwrap(), w).unwrap(), b).unwrap();
    let s = g.split(&z, 4, 1).unwrap();
    let fb = g.constant(Tensor::from_f64s(x.dtype(), &[forget_bias], Vec::<usize>::new()).unwrap()).unwrap();
    let f = g.sigmoid(g.add(&s[2], &fb).unwrap()).unwrap();
    let c = g.add(g.mul(cs, &f).unwrap(), g.mul(g.sigmoid(&s[0]).unwrap(), g.tanh(&s[1]).unwrap()).unwrap()).unwrap();
    let h = g.mul(g.tanh(&c).unwrap(), g.sigmoid(&s[3]).unwrap()).unwrap();
    (h, c)
}

fn run_both(dtype: DType, threads: usize) -> (Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let (bt, xi, hd) = (5, 6, 8);
    let shapes = [vec![bt, xi], vec![bt, hd], vec![bt, hd], vec![xi + hd, 4 * hd], vec![4 * hd]];
    let g = Graph::new();
    let ins: Vec<Output> = shapes.iter().enumerate().map(|(k, s)| g.constant(Tensor::from_f64s(dtype, &data(s.iter().product(), k as u64), s.clone()).unwrap()).unwrap()).collect();
    // Three steps so that the state's gradient crosses two cells.
    let (mut h1, mut c1) = (ins[2].clone(), ins[1].clone());
    let (mut h2, mut c2) = (ins[2].clone(), ins[1].clone());
    for _ in 0..3 {
        let fused = g.lstm_block_cell(&ins[0], &c1, &h1, &ins[3], &ins[4], 0.7).unwrap();
        (h1, c1) = (fused.h, fused.cs);
        (h2, c2) = primitive_cell(&g, &ins[0], &c2, &h2, &ins[3], &ins[4], 0.7);
    }
    let loss = |h: &Output, c: &Output| g.add(g.reduce_sum(g.square(h).unwrap(), &[], false).unwrap(), g.reduce_sum(c, &[], false).unwrap()).unwrap();
    let (l1, l2) = (loss(&h1, &c1), loss(&h2, &c2));
    let refs: Vec<&Output> = ins.iter().collect();
    let g1: Vec<Output> = g.gradients(&[&l1], &refs).unwrap().into_iter().map(Option::unwrap).collect();
    let g2: Vec<Output> = g.gradients(&[&l2], &refs).unwrap().into_iter().map(Option::unwrap).collect();
    let s = Session::with_options(&g, SessionOptions { threads, ..Default::default() }).unwrap();
    let mut f1: Vec<&Output> = vec![&h1, &c1];
    f1.extend(g1.iter());
    let mut f2: Vec<&Output> = vec![&h2, &c2];
    f2.extend(g2.iter());
    let get = |f: &[&Output]| s.run(&[], f, &[]).unwrap().iter().map(|t| t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()).collect();
    (get(&f1), get(&f2))
}

#[test]
fn the_fused_cell_matches_the_cell_built_from_primitives() {
    for (dtype, tol) in [(DType::F64, 1e-12), (DType::F32, 2e-5)] {
        for threads in [1, 2] {
            let (fused, prim) = run_both(dtype, threads);
            for (k, (a, b)) in fused.iter().zip(&prim).enumerate() {
                assert_eq!(a.len(), b.len());
                for (j, (x, y)) in a.iter().zip(b).enumerate() {
                    assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{dtype} threads {threads}: fetch {k} element {j}: fused {x} vs primitive {y}");
                }
            }
        }
    }
}

#[test]
fn mismatched_shapes_are_refused_naming_the_node() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [2, 3]).unwrap();
    let cs = g.placeholder("cs", DType::F32, [2, 4]).unwrap();
    let h = g.placeholder("h", DType::F32, [2, 4]).unwrap();
    let w = g.placeholder("w", DType::F32, [6, 16]).unwrap(); // needs 3 + 4 = 7 rows
    let b = g.placeholder("b", DType::F32, [16]).unwrap();
    match g.lstm_block_cell(&x, &cs, &h, &w, &b, 0.0) {
        Err(EngineError::Shape { node, detail, .. }) => {
            assert!(node.contains("LSTMBlockCell"), "{node}");
            assert!(detail.contains("w [6, 16]") && detail.contains("[I+H,4H]"), "{detail}");
        }
        other => panic!("expected a shape error, got {other:?}"),
    }
}
