//! Sessions end to end: the builder API, construction-time shape errors,
//! feed and fetch errors, caching of prepared steps, pruning, variables,
//! threads, traces, seeded randomness, optimizers and checkpoints.

use flowlab_engine::checkpoint;
use flowlab_engine::{DType, Graph, Optimizer, Output, Result, Session, SessionOptions, Tensor};

fn t2(v: Vec<f32>, r: usize, c: usize) -> Tensor {
    Tensor::from_vec(v, [r, c]).unwrap()
}

fn sess(g: &Graph, threads: usize) -> Session {
    Session::with_options(g, SessionOptions { threads, ..Default::default() }).unwrap()
}

#[test]
fn builder_reads_like_tf_and_computes_closed_form_values() -> Result<()> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1, 2])?;
    let w = g.constant(t2(vec![1.0, -1.0, 2.0, 0.5], 2, 2))?;
    let b = g.constant(Tensor::from_vec(vec![0.5f32, -4.0], [2])?)?;
    let h = g.relu(g.matmul(&x, &w)? + &b)?;
    assert_eq!(h.shape().to_string(), "[?, 2]");
    let s = sess(&g, 1);
    let xv = t2(vec![1.0, 2.0, -1.0, 0.0], 2, 2);
    let out = s.run(&[(&x, &xv)], &[&h], &[])?;
    // [1,2]·W = [5, 0] + b = [5.5, -4] -> relu [5.5, 0]; [-1,0]·W = [-1, 1] + b = [-0.5, -3] -> [0, 0]
    assert_eq!(out[0].to_vec::<f32>()?, vec![5.5, 0.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn shape_mismatch_is_reported_at_construction_with_node_and_shapes() {
    let g = Graph::new();
    let a = g.placeholder("a", DType::F32, [2, 3]).unwrap();
    let b = g.placeholder("b", DType::F32, [4, 5]).unwrap();
    let e = g.relu(g.matmul(&a, &b)).unwrap_err();
    assert_eq!(e.to_string(), "node 'MatMul' (MatMul): shape mismatch: inner dimensions differ: [2, 3] x [4, 5] (3 vs 4)");
    let e = (&a + &b).unwrap_err();
    assert_eq!(e.to_string(), "node 'Add' (Add): shape mismatch: cannot broadcast [2, 3] with [4, 5]");
    let i = g.placeholder("i", DType::I32, [2, 3]).unwrap();
    let e = (&a * &i).unwrap_err();
    assert_eq!(e.to_string(), "node 'Mul' (Mul): dtype mismatch: input 0 is f32 but input 1 is i32");
}

#[test]
fn bad_feeds_and_fetches_name_the_node() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1, 3]).unwrap();
    let y = g.reduce_sum(&x, &[], false).unwrap();
    let s = sess(&g, 1);
    let e = s.run(&[], &[&y], &[]).unwrap_err();
    assert_eq!(e.to_string(), "placeholder 'x' (shape [?, 3], f32) must be fed");
    let bad = t2(vec![0.0; 8], 2, 4);
    let e = s.run(&[(&x, &bad)], &[&y], &[]).unwrap_err();
    assert_eq!(e.to_string(), "feed for 'x:0': expected f32[?, 3], got f32[2, 4]");
    let wrong = Tensor::from_vec(vec![0i32; 6], [2, 3]).unwrap();
    let e = s.run(&[(&x, &wrong)], &[&y], &[]).unwrap_err();
    assert_eq!(e.to_string(), "feed for 'x:0': expected f32[?, 3], got i32[2, 3]");
    let e = s.run_named(&[], &["nope"], &[]).unwrap_err();
    assert_eq!(e.to_string(), "unknown node 'nope'");
    let e = s.run_named(&[], &["Sum:3"], &[]).unwrap_err();
    assert_eq!(e.to_string(), "node 'Sum' (Sum) has 1 outputs, output 3 was requested");
    let other = Graph::new();
    let z = other.scalar(1.0, DType::F32).unwrap();
    assert!(s.run(&[], &[&z], &[]).is_err());
}

#[test]
fn prepared_steps_are_cached_and_pruned() -> Result<()> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1])?;
    let a = g.square(&x)?;
    let unused = g.exp(&x)?;
    let total = g.reduce_sum(&a, &[], false)?;
    let s = sess(&g, 1);
    for i in 0..1000 {
        let v = Tensor::from_vec(vec![i as f32, 1.0], [2])?;
        let out = s.run(&[(&x, &v)], &[&total], &[])?;
        assert_eq!(out[0].scalar_f64()?, (i * i + 1) as f64);
    }
    assert_eq!(s.num_prepared(), 1);
    // Square and Sum only: the fed placeholder and the unused Exp are pruned.
    assert_eq!(s.num_nodes_run(&[&x], &[&total], &[])?, 2);
    let _ = unused;
    Ok(())
}

#[test]
fn passing_tensors_along_edges_does_not_copy() -> Result<()> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [3])?;
    let y = g.identity(g.reshape(g.identity(&x)?, &[1, 3])?)?;
    let s = sess(&g, 1);
    let v = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    let out = s.run(&[(&x, &v)], &[&y], &[])?;
    assert!(out[0].shares_storage_with(&v));
    assert_eq!(out[0].dims(), &[1, 3]);
    Ok(())
}

/// The ops whose cost moves no bytes (`op_cost`, the simulator's roofline)
/// are the ones whose kernels hand their input's buffer on: each run here
/// returns a tensor sharing the fed one's storage, and each one's cost has
/// 0 bytes, while a computing op (Neg) moves its input and output.
#[test]
fn views_move_no_bytes_in_their_cost_and_share_storage_when_run() -> Result<()> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [3])?;
    let like = g.placeholder("like", DType::F32, [3, 1])?;
    let var = g.variable("w", &x)?;
    let views: Vec<(&str, Output)> = vec![
        ("Reshape", g.reshape(&x, &[1, 3])?),
        ("ReshapeLike", g.op("ReshapeLike").input(&x).input(&like).build()?),
        ("ExpandDims", g.expand_dims(&x, 0)?),
        ("Squeeze", g.squeeze(g.reshape(&x, &[1, 3])?, &[0])?),
        ("Identity", g.identity(&x)?),
        ("StopGradient", g.stop_gradient(&x)?),
    ];
    let s = sess(&g, 1);
    let v = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3])?;
    let l = Tensor::from_vec(vec![0.0f32; 3], [3, 1])?;
    let init = g.assign(&var, &x)?;
    s.run(&[(&x, &v)], &[&init], &[])?;
    let read = s.run(&[], &[&var], &[])?.remove(0);
    assert!(read.shares_storage_with(&v), "a variable's read and Assign share the assigned tensor");
    let shape = |t: &Tensor| (DType::F32, flowlab_engine::Shape::new(t.dims().to_vec()));
    for (op, out) in &views {
        let got = s.run(&[(&x, &v), (&like, &l)], &[out], &[])?.remove(0);
        assert!(got.shares_storage_with(&v), "{op} copied its input");
        let ins = if *op == "ReshapeLike" { vec![shape(&v), shape(&l)] } else { vec![shape(&v)] };
        let cost = flowlab_engine::op_cost(op, &Default::default(), &ins, &[shape(&got)])?;
        assert_eq!(cost.bytes, 0.0, "{op}");
    }
    for op in ["Variable", "Assign"] {
        assert_eq!(flowlab_engine::op_cost(op, &Default::default(), &[shape(&v)], &[shape(&v)])?.bytes, 0.0, "{op}");
    }
    assert_eq!(flowlab_engine::op_cost("Neg", &Default::default(), &[shape(&v)], &[shape(&v)])?.bytes, 24.0);
    Ok(())
}

#[test]
fn variables_persist_across_runs_and_uninitialized_reads_fail() -> Result<()> {
    let g = Graph::new();
    let c = g.variable("counter", g.scalar(0.0, DType::F64)?)?;
    let inc = g.assign_add(&c, g.scalar(1.5, DType::F64)?)?;
    let s = sess(&g, 1);
    let e = s.run(&[], &[&c], &[]).unwrap_err();
    assert_eq!(e.to_string(), "variable 'counter' is read before it was initialized (run the initializer first)");
    s.run(&[], &[], &[&g.global_variables_initializer()?])?;
    for _ in 0..4 {
        s.run(&[], &[], &[&inc])?;
    }
    assert_eq!(s.run(&[], &[&c], &[])?[0].scalar_f64()?, 6.0);
    Ok(())
}

/// A small MLP training graph; returns (graph, x, y, loss, train, init).
fn mlp(opt: Optimizer) -> Result<(Graph, Output, Output, Output, Output, Output)> {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, [-1, 8])?;
    let y = g.placeholder("y", DType::I64, [-1])?;
    let w1 = g.variable("w1", g.random_normal([8, 16], DType::F32, 0.0, 0.3, 11)?)?;
    let b1 = g.variable("b1", g.zeros(DType::F32, [16])?)?;
    let w2 = g.variable("w2", g.truncated_normal([16, 4], DType::F32, 0.0, 0.3, 12)?)?;
    let h = g.tanh(g.bias_add(g.matmul(&x, &w1)?, &b1)?)?;
    let logits = g.matmul(&h, &w2)?;
    let loss = g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, &y)?, &[], false)?;
    let train = opt.minimize(&loss, &[&w1, &b1, &w2])?;
    let init = g.global_variables_initializer()?;
    Ok((g, x, y, loss, train, init))
}

fn batch(step: usize) -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..32 * 8).map(|i| (((i * 7 + step * 13) % 17) as f32 - 8.0) / 8.0).collect();
    let y: Vec<i64> = (0..32).map(|i| ((i + step) % 4) as i64).collect();
    (Tensor::from_vec(x, [32, 8]).unwrap(), Tensor::from_vec(y, [32]).unwrap())
}

fn train_steps(s: &Session, x: &Output, y: &Output, loss: &Output, train: &Output, steps: std::ops::Range<usize>) -> Vec<f32> {
    steps
        .map(|i| {
            let (bx, by) = batch(i);
            s.run(&[(x, &bx), (y, &by)], &[loss], &[train]).unwrap()[0].to_vec::<f32>().unwrap()[0]
        })
        .collect()
}

#[test]
fn two_threads_give_the_same_numbers_as_one() -> Result<()> {
    let (g, x, y, loss, train, init) = mlp(Optimizer::Momentum { lr: 0.1, momentum: 0.9 })?;
    let s1 = sess(&g, 1);
    let s2 = sess(&g, 2);
    s1.run(&[], &[], &[&init])?;
    s2.run(&[], &[], &[&init])?;
    let l1 = train_steps(&s1, &x, &y, &loss, &train, 0..20);
    let l2 = train_steps(&s2, &x, &y, &loss, &train, 0..20);
    assert_eq!(l1, l2);
    assert!(l1[19] < l1[0], "loss did not fall: {l1:?}");
    Ok(())
}

#[test]
fn optimizers_take_closed_form_steps() -> Result<()> {
    for (opt, expect) in [
        (Optimizer::Sgd { lr: 0.1 }, vec![0.8, 0.64]),
        // a1 = 2, w1 = 0.8; a2 = 0.9*2 + 1.6 = 3.4, w2 = 0.8 - 0.34
        (Optimizer::Momentum { lr: 0.1, momentum: 0.9 }, vec![0.8, 0.46]),
    ] {
        let g = Graph::new();
        let w = g.variable("w", g.scalar(1.0, DType::F64)?)?;
        let loss = g.square(&w)?;
        let train = opt.minimize(&loss, &[&w])?;
        let s = sess(&g, 1);
        s.run(&[], &[], &[&g.global_variables_initializer()?])?;
        for e in expect {
            s.run(&[], &[], &[&train])?;
            let v = s.variable_value("w").unwrap().scalar_f64()?;
            assert!((v - e).abs() < 1e-12, "{opt:?}: {v} vs {e}");
        }
        if let Optimizer::Momentum { .. } = opt {
            // The accumulator is updated in the same pass as the variable.
            let a = s.variable_value("w/Momentum/accum").unwrap().scalar_f64()?;
            assert!((a - 3.4).abs() < 1e-12, "accumulator {a}");
        }
    }
    // Adam's first step moves by lr (up to epsilon) whatever the gradient scale.
    let g = Graph::new();
    let w = g.variable("w", g.scalar(1.0, DType::F64)?)?;
    let loss = g.square(&w)?;
    let train = Optimizer::adam(0.1).minimize(&loss, &[&w])?;
    let s = sess(&g, 1);
    s.run(&[], &[], &[&g.global_variables_initializer()?])?;
    s.run(&[], &[], &[&train])?;
    let v = s.variable_value("w").unwrap().scalar_f64()?;
    assert!((v - 0.9).abs() < 1e-6, "adam step: {v}");
    Ok(())
}

#[test]
fn random_ops_are_seeded_and_advance_per_run() -> Result<()> {
    let g = Graph::new();
    let r = g.random_uniform([5], DType::F64, -1.0, 1.0, 42)?;
    let a = sess(&g, 1);
    let b = sess(&g, 2);
    let a1 = a.run(&[], &[&r], &[])?[0].to_vec::<f64>()?;
    let a2 = a.run(&[], &[&r], &[])?[0].to_vec::<f64>()?;
    let b1 = b.run(&[], &[&r], &[])?[0].to_vec::<f64>()?;
    assert_eq!(a1, b1);
    assert_ne!(a1, a2);
    assert!(a1.iter().all(|v| (-1.0..1.0).contains(v)));
    let n = g.truncated_normal([1000], DType::F64, 0.0, 1.0, 3)?;
    let v = a.run(&[], &[&n], &[])?[0].to_vec::<f64>()?;
    assert!(v.iter().all(|x| x.abs() <= 2.0));
    Ok(())
}

#[test]
fn step_stats_export_a_chrome_trace() -> Result<()> {
    let (g, x, y, loss, train, init) = mlp(Optimizer::Sgd { lr: 0.1 })?;
    let s = sess(&g, 2);
    s.run(&[], &[], &[&init])?;
    let (bx, by) = batch(0);
    let (_, stats) = s.run_traced(&[(&x, &bx), (&y, &by)], &[&loss], &[&train])?;
    assert!(stats.nodes.iter().any(|n| n.op == "MatMul" && n.output_bytes == 32 * 16 * 4));
    assert!(stats.nodes.iter().all(|n| n.end_us >= n.start_us));
    let json: serde_json::Value = serde_json::from_str(&stats.to_chrome_trace()).unwrap();
    let ev = json["traceEvents"].as_array().unwrap();
    assert_eq!(ev.len(), stats.nodes.len());
    assert!(ev.iter().all(|e| e["ph"] == "X" && e["dur"].as_f64().unwrap() >= 0.0));
    Ok(())
}

#[test]
fn long_chain_of_scalar_adds_runs() -> Result<()> {
    let g = Graph::new();
    let one = g.scalar(1.0, DType::F32)?;
    let mut x = g.scalar(0.0, DType::F32)?;
    for _ in 0..10_000 {
        x = (&x + &one)?;
    }
    let s = sess(&g, 2);
    assert_eq!(s.run(&[], &[&x], &[])?[0].scalar_f64()?, 10_000.0);
    Ok(())
}

#[test]
fn checkpoint_restore_continues_bit_identically() -> Result<()> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let (g, x, y, loss, train, init) = mlp(Optimizer::adam(0.01))?;
    let a = sess(&g, 1);
    a.run(&[], &[], &[&init])?;
    train_steps(&a, &x, &y, &loss, &train, 0..10);
    let m = checkpoint::save(&a, &path)?;
    assert!(m.variables.iter().any(|v| v.0 == "w1/Adam/m"));
    let cont = train_steps(&a, &x, &y, &loss, &train, 10..20);

    // A fresh session of a freshly built identical graph.
    let (g2, x2, y2, loss2, train2, _) = mlp(Optimizer::adam(0.01))?;
    let b = sess(&g2, 1);
    checkpoint::restore(&b, &path)?;
    let resumed = train_steps(&b, &x2, &y2, &loss2, &train2, 10..20);
    assert_eq!(cont, resumed);
    for (n, t) in a.variable_values()? {
        assert_eq!(t, b.variable_value(&n)?, "variable {n}");
    }
    Ok(())
}
