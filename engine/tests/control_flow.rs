//! Dynamic control flow: `cond` and `while_loop` on the primitives Switch,
//! Merge, Enter, Exit and NextIteration, checked against closed forms and
//! against the same computation unrolled without control flow; overlapping
//! iterations, constant memory, errors naming the node, and gradients by
//! central finite differences.

use flowlab_engine::{DType, Graph, Output, PartialShape, Session, Tensor, WhileOptions};

fn scalar(s: &Session, feeds: &[(&Output, &Tensor)], y: &Output) -> f64 {
    s.run(feeds, &[y], &[]).unwrap()[0].scalar_f64().unwrap()
}

#[test]
fn cond_runs_only_the_taken_branch() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F64, PartialShape::scalar()).unwrap();
    let zero = g.scalar(0.0, DType::F64).unwrap();
    let p = g.greater(&x, &zero).unwrap();
    let out = g
        .cond(
            &p,
            |b| Ok(vec![b.mul(&x, b.scalar(2.0, DType::F64)?)?]),
            |b| Ok(vec![b.sub(&x, b.scalar(10.0, DType::F64)?)?]),
        )
        .unwrap();
    let s = Session::new(&g).unwrap();
    assert_eq!(scalar(&s, &[(&x, &Tensor::scalar(3.0f64))], &out[0]), 6.0);
    assert_eq!(scalar(&s, &[(&x, &Tensor::scalar(-1.0f64))], &out[0]), -11.0);
    // The untaken branch's ops do not run.
    let (_, stats) = s.run_traced(&[(&x, &Tensor::scalar(3.0f64))], &[&out[0]], &[]).unwrap();
    assert!(stats.nodes.iter().any(|n| n.op == "Mul"));
    assert!(!stats.nodes.iter().any(|n| n.op == "Sub"), "{:?}", stats.nodes.iter().map(|n| &n.node).collect::<Vec<_>>());
}

/// sum_{i=1..n} i by a loop, against n(n+1)/2.
fn triangle(g: &Graph, n: &Output, opts: WhileOptions) -> Vec<Output> {
    let i0 = g.scalar(0.0, DType::F64).unwrap();
    let s0 = g.scalar(0.0, DType::F64).unwrap();
    g.while_loop_with(
        |b, v| b.less(&v[0], n),
        |b, v| {
            let i = b.add(&v[0], b.scalar(1.0, DType::F64)?)?;
            Ok(vec![i.clone(), b.add(&v[1], &i)?])
        },
        &[&i0, &s0],
        opts,
    )
    .unwrap()
}

#[test]
fn a_while_loop_sums_to_the_closed_form() {
    let g = Graph::new();
    let n = g.placeholder("n", DType::F64, PartialShape::scalar()).unwrap();
    let out = triangle(&g, &n, WhileOptions::default());
    let s = Session::new(&g).unwrap();
    for k in [0.0, 1.0, 7.0, 100.0] {
        assert_eq!(scalar(&s, &[(&n, &Tensor::scalar(k))], &out[1]), k * (k + 1.0) / 2.0, "n = {k}");
        assert_eq!(scalar(&s, &[(&n, &Tensor::scalar(k))], &out[0]), k);
    }
}

#[test]
fn a_loop_with_a_captured_matrix_matches_the_unrolled_product() {
    let g = Graph::new();
    let w = g.constant(Tensor::from_vec(vec![0.5f64, -0.25, 0.75, 1.0], [2, 2]).unwrap()).unwrap();
    let x0 = g.constant(Tensor::from_vec(vec![1.0f64, 2.0], [1, 2]).unwrap()).unwrap();
    let c0 = g.scalar(0.0, DType::F64).unwrap();
    let out = g
        .while_loop(
            |b, v| b.less(&v[0], b.scalar(5.0, DType::F64)?),
            |b, v| Ok(vec![b.add(&v[0], b.scalar(1.0, DType::F64)?)?, b.tanh(b.matmul(&v[1], &w)?)?]),
            &[&c0, &x0],
        )
        .unwrap();
    let mut y = x0.clone();
    for _ in 0..5 {
        y = g.tanh(g.matmul(&y, &w).unwrap()).unwrap();
    }
    let s = Session::new(&g).unwrap();
    let r = s.run(&[], &[&out[1], &y], &[]).unwrap();
    assert_eq!(r[0].to_vec::<f64>().unwrap(), r[1].to_vec::<f64>().unwrap());
}

#[test]
fn a_cond_inside_a_loop_and_a_loop_inside_an_untaken_branch() {
    // x <- x > 10 ? x / 2 : 3x + 1, eight times from 7, against a plain Rust loop.
    let g = Graph::new();
    let x0 = g.scalar(7.0, DType::F64).unwrap();
    let k0 = g.scalar(0.0, DType::F64).unwrap();
    let out = g
        .while_loop(
            |b, v| b.less(&v[1], b.scalar(8.0, DType::F64)?),
            |b, v| {
                let big = b.greater(&v[0], b.scalar(10.0, DType::F64)?)?;
                let next = b.cond(
                    &big,
                    |t| Ok(vec![t.mul(&v[0], t.scalar(0.5, DType::F64)?)?]),
                    |e| Ok(vec![e.add(e.mul(&v[0], e.scalar(3.0, DType::F64)?)?, e.scalar(1.0, DType::F64)?)?]),
                )?;
                Ok(vec![next[0].clone(), b.add(&v[1], b.scalar(1.0, DType::F64)?)?])
            },
            &[&x0, &k0],
        )
        .unwrap();
    let mut want = 7.0f64;
    for _ in 0..8 {
        want = if want > 10.0 { want * 0.5 } else { 3.0 * want + 1.0 };
    }
    let s = Session::new(&g).unwrap();
    assert_eq!(scalar(&s, &[], &out[0]), want);

    // A loop in the branch that does not run is dead; the other branch's value comes out.
    let p = g.placeholder("p", DType::Bool, PartialShape::scalar()).unwrap();
    let n = g.scalar(4.0, DType::F64).unwrap();
    let r = g.cond(&p, |t| Ok(vec![triangle(t, &n, WhileOptions::default())[1].clone()]), |e| Ok(vec![e.scalar(-1.0, DType::F64)?])).unwrap();
    assert_eq!(scalar(&s, &[(&p, &Tensor::scalar(true))], &r[0]), 10.0);
    assert_eq!(scalar(&s, &[(&p, &Tensor::scalar(false))], &r[0]), -1.0);
}

#[test]
fn iterations_overlap_up_to_parallel_iterations() {
    // Loop variable 0 is a cheap counter; variable 1 goes through a chain
    // of 200 ops per iteration. With overlap, the counter of later
    // iterations runs before iteration 0's chain ends.
    let build = |parallel: usize| {
        let g = Graph::new();
        let i0 = g.scalar(0.0, DType::F64).unwrap();
        let x0 = g.scalar(1.0, DType::F64).unwrap();
        let out = g
            .while_loop_with(
                |b, v| b.less(&v[0], b.scalar(20.0, DType::F64)?),
                |b, v| {
                    let i = b.op("Add").name("counter_add").input(&v[0]).input(b.scalar(1.0, DType::F64)).build()?;
                    let mut x = v[1].clone();
                    for _ in 0..200 {
                        x = b.identity(&x)?;
                    }
                    let x = b.op("Identity").name("chain_end").input(&x).build()?;
                    Ok(vec![i, x])
                },
                &[&i0, &x0],
                WhileOptions { parallel_iterations: parallel, ..Default::default() },
            )
            .unwrap();
        let s = Session::new(&g).unwrap();
        let (r, stats) = s.run_traced(&[], &[&out[0], &out[1]], &[]).unwrap();
        assert_eq!(r[0].scalar_f64().unwrap(), 20.0);
        let first_end = stats.nodes.iter().position(|n| n.node.ends_with("chain_end")).unwrap();
        stats.nodes[..first_end].iter().filter(|n| n.node.ends_with("counter_add")).count()
    };
    // The counter ran ahead by the window (parallel - 1 iterations beyond the first).
    assert_eq!(build(10), 10);
    assert_eq!(build(4), 4);
    assert_eq!(build(1), 1);
}

#[test]
fn a_loop_survives_a_graph_json_round_trip() {
    let g = Graph::new();
    let n = g.placeholder("n", DType::F64, PartialShape::scalar()).unwrap();
    let out = triangle(&g, &n, WhileOptions::default());
    let g2 = Graph::from_json(g.to_json().as_bytes(), "loop.json").unwrap();
    let s = Session::new(&g2).unwrap();
    let r = s.run_named(&[("n", &Tensor::scalar(9.0f64))], &[&format!("{}:0", out[1].name())], &[]).unwrap();
    assert_eq!(r[0].scalar_f64().unwrap(), 45.0);
    // A Merge naming a later node that is not a NextIteration is refused, naming it.
    let text = g.to_json().replacen("\"NextIteration\"", "\"Identity\"", 1);
    let e = Graph::from_json(text.as_bytes(), "bad.json").unwrap_err().to_string();
    assert!(e.contains("merge") && e.contains("not a NextIteration"), "{e}");
}

#[test]
fn a_hand_made_loop_whose_exit_fires_every_iteration_is_an_error() {
    let g = Graph::new();
    let n = g.placeholder("n", DType::F64, PartialShape::scalar()).unwrap();
    let out = triangle(&g, &n, WhileOptions::default());
    let y = g.identity(&out[1]).unwrap();
    // Rewire the Exit of the sum to read the Merge (live in every iteration)
    // instead of the Switch's false output.
    let exit = g.node(out[1].node_id()).unwrap();
    let switch = g.node(exit.inputs[0].0).unwrap();
    let merge = g.node(switch.inputs[0].0).unwrap();
    let text = g.to_json().replace(&format!("\"{}:0\"", switch.name), &format!("\"{}:0\"", merge.name));
    let g2 = Graph::from_json(text.as_bytes(), "broken.json").unwrap();
    let s = Session::new(&g2).unwrap();
    let e = s.run_named(&[("n", &Tensor::scalar(3.0f64))], &[&y.name()], &[]).unwrap_err().to_string();
    assert!(e.contains("second value") && e.contains(&y.name()), "{e}");
}

#[test]
fn a_loop_of_ten_thousand_iterations_runs_in_constant_memory() {
    let g = Graph::new();
    let n = g.placeholder("n", DType::F64, PartialShape::scalar()).unwrap();
    let out = triangle(&g, &n, WhileOptions::default());
    let s = Session::new(&g).unwrap();
    let peak = |k: f64| {
        let (r, stats) = s.run_traced(&[(&n, &Tensor::scalar(k))], &[&out[1]], &[]).unwrap();
        assert_eq!(r[0].scalar_f64().unwrap(), k * (k + 1.0) / 2.0);
        stats.peak_live_tensors
    };
    let (small, large) = (peak(100.0), peak(10_000.0));
    assert!(small > 0);
    assert_eq!(small, large, "peak live tensors: {small} at 100 iterations, {large} at 10,000");
}

#[test]
fn a_condition_that_is_not_a_scalar_bool_names_its_node() {
    let g = Graph::new();
    let x0 = g.constant(Tensor::from_vec(vec![1.0f64, 2.0], [2]).unwrap()).unwrap();
    let e = g
        .while_loop(|b, v| b.op("Greater").name("bad_cond").input(&v[0]).input(b.scalar(0.0, DType::F64)).build(), |_, v| Ok(vec![v[0].clone()]), &[&x0])
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad_cond") && e.contains("scalar bool"), "{e}");
}

#[test]
fn a_loop_variable_that_changes_shape_needs_a_shape_invariant() {
    let g = Graph::new();
    let x0 = g.constant(Tensor::from_vec(vec![1.0f64], [1]).unwrap()).unwrap();
    let c0 = g.scalar(0.0, DType::F64).unwrap();
    let body = |b: &Graph, v: &[Output]| -> flowlab_engine::Result<Vec<Output>> {
        let grown = b.concat(&[&v[1], &v[1]], 0)?;
        Ok(vec![b.add(&v[0], b.scalar(1.0, DType::F64)?)?, grown])
    };
    let cond = |b: &Graph, v: &[Output]| b.less(&v[0], b.scalar(3.0, DType::F64)?);
    let e = g.while_loop(cond, body, &[&c0, &x0]).unwrap_err().to_string();
    assert!(e.contains("shape invariant") && e.contains("loop variable 1"), "{e}");
    let out = g
        .while_loop_with(cond, body, &[&c0, &x0], WhileOptions { shape_invariants: Some(vec![PartialShape::scalar(), PartialShape::new(vec![None])]), ..Default::default() })
        .unwrap();
    let s = Session::new(&g).unwrap();
    assert_eq!(s.run(&[], &[&out[1]], &[]).unwrap()[0].dims(), &[8]);
}

// ---- gradients against central finite differences ------------------------

/// Deterministic values in [-0.9, 0.9] away from 0.
fn values(n: usize, salt: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let h = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(salt.wrapping_mul(0xBF58_476D_1CE4_E5B9));
            let u = ((h >> 11) as f64) / ((1u64 << 53) as f64);
            let v = 1.6 * u - 0.8;
            if v.abs() < 0.1 { v + 0.2f64.copysign(v) } else { v }
        })
        .collect()
}

/// Builds a scalar loss of f64 placeholders of `shapes`; checks its symbolic
/// gradient against (L(x+h) - L(x-h)) / 2h for every input element.
fn check_fd(shapes: &[&[usize]], inputs: Option<Vec<Vec<f64>>>, build: impl Fn(&Graph, &[Output]) -> flowlab_engine::Result<Output>) {
    let g = Graph::new();
    let xs: Vec<Output> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| g.placeholder(&format!("x{i}"), DType::F64, PartialShape::new(s.iter().map(|&d| Some(d)).collect())).unwrap())
        .collect();
    let y = build(&g, &xs).unwrap();
    let refs: Vec<&Output> = xs.iter().collect();
    let grads = g.gradients(&[&y], &refs).unwrap();
    let s = Session::new(&g).unwrap();
    let data: Vec<Vec<f64>> = inputs.unwrap_or_else(|| shapes.iter().enumerate().map(|(i, sh)| values(sh.iter().product(), i as u64 + 3)).collect());
    let tensors = |d: &[Vec<f64>]| -> Vec<Tensor> { d.iter().zip(shapes).map(|(v, sh)| Tensor::from_vec(v.clone(), sh.to_vec()).unwrap()).collect() };
    let loss = |d: &[Vec<f64>]| {
        let t = tensors(d);
        let feeds: Vec<(&Output, &Tensor)> = xs.iter().zip(&t).collect();
        scalar(&s, &feeds, &y)
    };
    let t = tensors(&data);
    let feeds: Vec<(&Output, &Tensor)> = xs.iter().zip(&t).collect();
    for (i, gr) in grads.iter().enumerate() {
        let gr = gr.as_ref().unwrap_or_else(|| panic!("no gradient for input {i}"));
        let sym = s.run(&feeds, &[gr], &[]).unwrap()[0].to_vec::<f64>().unwrap();
        for j in 0..data[i].len() {
            let h = 1e-5;
            let mut p = data.clone();
            p[i][j] += h;
            let mut m = data.clone();
            m[i][j] -= h;
            let fd = (loss(&p) - loss(&m)) / (2.0 * h);
            assert!((fd - sym[j]).abs() <= 1e-6 * (1.0 + fd.abs()), "input {i} element {j}: finite difference {fd}, gradient {}", sym[j]);
        }
    }
}

#[test]
fn cond_gradients_match_finite_differences_on_both_branches() {
    // x: [3], w: scalar captured by both branches; the predicate is data dependent.
    let build = |g: &Graph, v: &[Output]| {
        let (x, w) = (&v[0], &v[1]);
        let p = g.greater(g.reduce_sum(x, &[0], false)?, g.scalar(0.0, DType::F64)?)?;
        let r = g.cond(&p, |t| Ok(vec![t.mul(t.tanh(x)?, w)?]), |e| Ok(vec![e.mul(e.mul(x, w)?, w)?]))?;
        g.reduce_sum(g.mul(&r[0], &r[0])?, &[0], false)
    };
    check_fd(&[&[3], &[]], Some(vec![vec![0.5, -0.2, 0.4], vec![0.7]]), build);
    check_fd(&[&[3], &[]], Some(vec![vec![-0.5, -0.2, 0.4], vec![0.7]]), build);
}

#[test]
fn while_loop_gradients_match_finite_differences() {
    // h <- tanh(h W + b), five times; loss = sum(h^2). Gradients for h0, W and b.
    check_fd(&[&[1, 3], &[3, 3], &[1, 3]], None, |g, v| {
        let c0 = g.scalar(0.0, DType::F64)?;
        let out = g.while_loop(
            |b, s| b.less(&s[0], b.scalar(5.0, DType::F64)?),
            |b, s| Ok(vec![b.add(&s[0], b.scalar(1.0, DType::F64)?)?, b.tanh(b.add(b.matmul(&s[1], &v[1])?, &v[2])?)?]),
            &[&c0, &v[0]],
        )?;
        g.reduce_sum(g.mul(&out[1], &out[1])?, &[0, 1], false)
    });
}

#[test]
fn a_loop_reading_a_captured_sequence_by_an_integer_index_has_gradients() {
    // A dynamic RNN: h <- tanh(h W + xs[t]), t an i64 loop variable indexing
    // the captured inputs xs [4, 1, 3]; gradients for h0, W and every step's input.
    check_fd(&[&[1, 3], &[3, 3], &[4, 1, 3]], None, |g, v| {
        let t0 = g.scalar(0.0, DType::I64)?;
        let out = g.while_loop(
            |b, s| b.less(&s[0], b.scalar(4.0, DType::I64)?),
            |b, s| {
                let x = b.gather(&v[2], &s[0])?;
                Ok(vec![b.add(&s[0], b.scalar(1.0, DType::I64)?)?, b.tanh(b.add(b.matmul(&s[1], &v[1])?, &x)?)?])
            },
            &[&t0, &v[0]],
        )?;
        g.reduce_sum(g.mul(&out[1], &out[1])?, &[0, 1], false)
    });
}

#[test]
fn a_loop_gradient_through_a_cond_in_the_body() {
    // x <- x > 0 ? x * w : x * x, four times.
    check_fd(&[&[], &[]], Some(vec![vec![0.9], vec![-0.8]]), |g, v| {
        let c0 = g.scalar(0.0, DType::F64)?;
        let out = g.while_loop(
            |b, s| b.less(&s[0], b.scalar(4.0, DType::F64)?),
            |b, s| {
                let p = b.greater(&s[1], b.scalar(0.0, DType::F64)?)?;
                let r = b.cond(&p, |t| Ok(vec![t.mul(&s[1], &v[1])?]), |e| Ok(vec![e.mul(&s[1], &s[1])?]))?;
                Ok(vec![b.add(&s[0], b.scalar(1.0, DType::F64)?)?, r[0].clone()])
            },
            &[&c0, &v[0]],
        )?;
        Ok(out[1].clone())
    });
}

#[test]
fn a_loop_keeps_its_variables_only_when_the_gradient_is_fetched() {
    let g = Graph::new();
    let n = g.placeholder("n", DType::F64, PartialShape::scalar()).unwrap();
    let x0 = g.placeholder("x0", DType::F64, PartialShape::scalar()).unwrap();
    let c0 = g.scalar(0.0, DType::F64).unwrap();
    let out = g
        .while_loop(
            |b, s| b.less(&s[0], &n),
            |b, s| Ok(vec![b.add(&s[0], b.scalar(1.0, DType::F64)?)?, b.mul(&s[1], b.scalar(1.0001, DType::F64)?)?]),
            &[&c0, &x0],
        )
        .unwrap();
    let dx = g.gradients(&[&out[1]], &[&x0]).unwrap()[0].clone().unwrap();
    let s = Session::new(&g).unwrap();
    let run = |k: f64, fetch: &Output| {
        let (r, st) = s.run_traced(&[(&n, &Tensor::scalar(k)), (&x0, &Tensor::scalar(2.0f64))], &[fetch], &[]).unwrap();
        (r[0].scalar_f64().unwrap(), st.peak_live_tensors)
    };
    // d/dx0 of x0 * 1.0001^n is 1.0001^n.
    let (d, _) = run(10_000.0, &dx);
    assert!((d - 1.0001f64.powi(10_000)).abs() < 1e-9 * d, "{d}");
    let (_, plain_small) = run(100.0, &out[1]);
    let (_, plain_large) = run(10_000.0, &out[1]);
    assert_eq!(plain_small, plain_large);
}

// ---- across devices ---------------------------------------------------------

#[test]
fn a_loop_whose_body_is_split_over_two_devices_matches_one_device() {
    use flowlab_engine::{DeviceSet, SessionOptions};
    use std::time::Duration;
    // h <- tanh(tanh(h W0) W1): with `split`, W0's half of the body asks for
    // CPU:0 and W1's for CPU:1; the loop itself (and its predicate) CPU:0.
    let build = |split: bool| {
        let g = Graph::new();
        let dev = |d: &str| if split { g.device(d) } else { g.clone() };
        let n = g.placeholder("n", DType::F32, PartialShape::scalar()).unwrap();
        let w0 = g.constant(Tensor::from_vec(vec![0.5f32, -0.3, 0.8, 0.2, 0.1, -0.7, 0.4, 0.9, -0.2], [3, 3]).unwrap()).unwrap();
        let w1 = dev("/cpu:1").constant(Tensor::from_vec(vec![-0.6f32, 0.3, 0.5, 0.7, -0.1, 0.2, 0.3, 0.8, -0.4], [3, 3]).unwrap()).unwrap();
        let h0 = g.constant(Tensor::from_vec(vec![1.0f32, -0.5, 0.25], [1, 3]).unwrap()).unwrap();
        let i0 = g.scalar(0.0, DType::F32).unwrap();
        let out = dev("/cpu:0")
            .while_loop(
                // The predicate is computed on CPU:1 too: its value goes to CPU:0 each iteration.
                |b, v| if split { b.device("/cpu:1").less(&v[0], &n) } else { b.less(&v[0], &n) },
                |b, v| {
                    let bdev = |d: &str| if split { b.device(d) } else { b.clone() };
                    let a = bdev("/cpu:0").tanh(bdev("/cpu:0").matmul(&v[1], &w0)?)?;
                    let b1 = bdev("/cpu:1");
                    let h = b1.tanh(b1.matmul(&a, &w1)?)?;
                    Ok(vec![b.add(&v[0], b.scalar(1.0, DType::F32)?)?, h])
                },
                &[&i0, &h0],
            )
            .unwrap();
        let loss = g.reduce_sum(g.mul(&out[1], &out[1]).unwrap(), &[0, 1], false).unwrap();
        let d = g.gradients(&[&loss], &[&h0]).unwrap()[0].clone().unwrap();
        (g, n, out[1].clone(), d)
    };
    let (g1, n1, y1, d1) = build(false);
    let (g2, n2, y2, d2) = build(true);
    let one = Session::new(&g1).unwrap();
    let two = Session::with_options(&g2, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), recv_timeout: Duration::from_secs(20), ..Default::default() }).unwrap();
    for k in [0.0f32, 1.0, 7.0] {
        let a = one.run(&[(&n1, &Tensor::scalar(k))], &[&y1], &[]).unwrap();
        let (b, stats) = two.run_traced(&[(&n2, &Tensor::scalar(k))], &[&y2], &[]).unwrap();
        assert_eq!(a[0].to_vec::<f32>().unwrap(), b[0].to_vec::<f32>().unwrap(), "n = {k}");
        // The second half ran on CPU:1 once per iteration.
        let on1 = stats.nodes.iter().filter(|s| s.op == "Tanh" && s.device.ends_with("CPU:1")).count();
        assert_eq!(on1, k as usize, "n = {k}");
        let preds = stats.nodes.iter().filter(|s| s.op == "Less" && s.device.ends_with("CPU:1")).count();
        assert_eq!(preds, k as usize + 1, "n = {k}");
        // The gradient loop runs across the devices too.
        let da = one.run(&[(&n1, &Tensor::scalar(k))], &[&d1], &[]).unwrap();
        let db = two.run(&[(&n2, &Tensor::scalar(k))], &[&d2], &[]).unwrap();
        assert_eq!(da[0].to_vec::<f32>().unwrap(), db[0].to_vec::<f32>().unwrap(), "gradient, n = {k}");
    }
    assert!(two.comm_stats().transfers > 0);
}

#[test]
fn a_cond_whose_branches_are_on_two_devices_runs_only_the_taken_one() {
    use flowlab_engine::{DeviceSet, SessionOptions};
    use std::time::Duration;
    // x -> (sum(x) > 0 ? tanh(x W) on CPU:1 : x * 3 on CPU:0), then a sum on CPU:0.
    let build = |split: bool| {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [1, 2]).unwrap();
        let w = g.constant(Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 0.25], [2, 2]).unwrap()).unwrap();
        let p = g.greater(g.reduce_sum(&x, &[0, 1], false).unwrap(), g.scalar(0.0, DType::F32).unwrap()).unwrap();
        let r = g
            .cond(
                &p,
                |t| {
                    let t1 = if split { t.device("/cpu:1") } else { t.clone() };
                    Ok(vec![t1.tanh(t1.matmul(&x, &w)?)?])
                },
                |e| Ok(vec![e.mul(&x, e.scalar(3.0, DType::F32)?)?]),
            )
            .unwrap();
        let y = g.reduce_sum(&r[0], &[0, 1], false).unwrap();
        (g, x, y)
    };
    let (g1, x1, y1) = build(false);
    let (g2, x2, y2) = build(true);
    let one = Session::new(&g1).unwrap();
    let two = Session::with_options(&g2, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), recv_timeout: Duration::from_secs(5), ..Default::default() }).unwrap();
    for (v, taken_on_1) in [([0.3f32, 0.4], true), ([-0.3f32, 0.1], false)] {
        let t = Tensor::from_vec(v.to_vec(), [1, 2]).unwrap();
        let a = one.run(&[(&x1, &t)], &[&y1], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        let (b, stats) = two.run_traced(&[(&x2, &t)], &[&y2], &[]).unwrap();
        assert_eq!(a, b[0].to_vec::<f32>().unwrap(), "x = {v:?}");
        let tanh_on_1 = stats.nodes.iter().filter(|s| s.op == "Tanh" && s.device.ends_with("CPU:1")).count();
        assert_eq!(tanh_on_1, taken_on_1 as usize, "x = {v:?}");
    }
}

#[test]
fn a_nested_loop_split_over_devices_is_refused_naming_the_loop() {
    use flowlab_engine::{DeviceSet, SessionOptions};
    // An inner loop whose body puts one op on CPU:1 while the rest stays on CPU:0.
    let build = |split: bool| {
        let g = Graph::new();
        let x0 = g.scalar(1.0, DType::F64).unwrap();
        let i0 = g.scalar(0.0, DType::F64).unwrap();
        let out = g
            .while_loop(
                |b, v| b.less(&v[1], b.scalar(3.0, DType::F64)?),
                |b, v| {
                    let j0 = b.scalar(0.0, DType::F64)?;
                    let inner = b.while_loop(
                        |c, w| c.less(&w[1], c.scalar(2.0, DType::F64)?),
                        |c, w| {
                            Ok(vec![
                                (if split { c.device("/cpu:1") } else { c.clone() })
                                    .add(&w[0], c.scalar(1.0, DType::F64)?)?,
                                c.add(&w[1], c.scalar(1.0, DType::F64)?)?,
                            ])
                        },
                        &[&v[0], &j0],
                    )?;
                    Ok(vec![
                        inner[0].clone(),
                        b.add(&v[1], b.scalar(1.0, DType::F64)?)?,
                    ])
                },
                &[&x0, &i0],
            )
            .unwrap();
        (g, out)
    };
    // On one device the nested loop runs: 1 + 3 x 2.
    let (g, out) = build(false);
    let one = Session::new(&g).unwrap();
    assert_eq!(scalar(&one, &[], &out[0]), 7.0);
    let (g, out) = build(true);
    let e = match Session::with_options(
        &g,
        SessionOptions {
            devices: DeviceSet::local_cpus(2),
            ..Default::default()
        },
    ) {
        Ok(s) => s.run(&[], &[&out[0]], &[]).map(|_| ()).unwrap_err(),
        Err(e) => e,
    }
    .to_string();
    assert!(
        e.contains("is nested in another loop and split over devices"),
        "{e}"
    );
    assert!(e.contains("only outermost loops may be split"), "{e}");
}
