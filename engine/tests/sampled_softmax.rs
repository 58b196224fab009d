//! Sampled softmax: the log-uniform sampler against its closed-form
//! distribution, the loss against a plain computation from the same
//! samples, and its gradient against central finite differences.

use flowlab_engine::{DType, Graph, Output, Session, Tensor};

#[test]
fn the_sampler_draws_the_log_uniform_distribution() {
    let (s, v) = (20_000usize, 100usize);
    let g = Graph::new();
    let labels = g.constant(Tensor::from_vec(vec![0i64, 7, 99], [3]).unwrap()).unwrap();
    let out = g.log_uniform_candidate_sampler(&labels, s, v, DType::F64, 5).unwrap();
    let sess = Session::new(&g).unwrap();
    let r = sess.run(&[], &[&out[0], &out[1]], &[]).unwrap();
    let sampled = r[0].to_vec::<i64>().unwrap();
    let p = |c: usize| ((c as f64 + 2.0).ln() - (c as f64 + 1.0).ln()) / ((v as f64 + 1.0).ln());
    for c in 0..10 {
        let f = sampled.iter().filter(|&&x| x == c as i64).count() as f64 / s as f64;
        let sd = (p(c) * (1.0 - p(c)) / s as f64).sqrt();
        assert!((f - p(c)).abs() < 4.5 * sd, "class {c}: frequency {f}, P {}", p(c));
    }
    assert!(sampled.iter().all(|&x| (0..v as i64).contains(&x)));
    let te = r[1].to_vec::<f64>().unwrap();
    for (k, c) in [0usize, 7, 99].into_iter().enumerate() {
        assert!((te[k] - s as f64 * p(c)).abs() < 1e-9 * te[k]);
    }
    // A new run draws new samples.
    let again = sess.run(&[], &[&out[0]], &[]).unwrap()[0].to_vec::<i64>().unwrap();
    assert_ne!(sampled, again);
}

fn vals(n: usize, salt: f64) -> Vec<f64> {
    (0..n).map(|k| ((k as f64 + 1.0) * 0.731 + salt).sin() * 0.5).collect()
}

#[test]
fn the_loss_equals_a_plain_computation_from_the_same_samples() {
    let (b, d, v, s) = (4usize, 3usize, 50usize, 8usize);
    let g = Graph::new();
    let w = g.constant(Tensor::from_vec(vals(v * d, 0.1), [v, d]).unwrap()).unwrap();
    let bias = g.constant(Tensor::from_vec(vals(v, 0.7), [v]).unwrap()).unwrap();
    let x = g.constant(Tensor::from_vec(vals(b * d, 1.3), [b, d]).unwrap()).unwrap();
    let labels_v = vec![3i64, 0, 41, 3];
    let labels = g.constant(Tensor::from_vec(labels_v.clone(), [b]).unwrap()).unwrap();
    let smp = g.log_uniform_candidate_sampler(&labels, s, v, DType::F64, 9).unwrap();
    let loss = g.sampled_softmax_loss_with(&w, &bias, &labels, &x, [&smp[0], &smp[1], &smp[2]]).unwrap();
    let sess = Session::new(&g).unwrap();
    let r = sess.run(&[], &[&loss, &smp[0], &smp[1], &smp[2]], &[]).unwrap();
    let got = r[0].to_vec::<f64>().unwrap();
    let (sampled, te, se) = (r[1].to_vec::<i64>().unwrap(), r[2].to_vec::<f64>().unwrap(), r[3].to_vec::<f64>().unwrap());
    let (wv, bv, xv) = (vals(v * d, 0.1), vals(v, 0.7), vals(b * d, 1.3));
    let logit = |i: usize, c: usize| (0..d).map(|k| xv[i * d + k] * wv[c * d + k]).sum::<f64>() + bv[c];
    for i in 0..b {
        let mut l = vec![logit(i, labels_v[i] as usize) - te[i].ln()];
        l.extend(sampled.iter().zip(&se).map(|(&c, &e)| logit(i, c as usize) - e.ln()));
        let m = l.iter().cloned().fold(f64::MIN, f64::max);
        let want = -(l[0] - m) + l.iter().map(|z| (z - m).exp()).sum::<f64>().ln();
        assert!((got[i] - want).abs() < 1e-12, "example {i}: {} vs {want}", got[i]);
    }
}

#[test]
fn its_gradient_matches_finite_differences() {
    // Fixed samples (fed as constants), f64, gradients for inputs, weights and biases.
    let (b, d, v) = (3usize, 2usize, 6usize);
    let g = Graph::new();
    let w = g.placeholder("w", DType::F64, [v as i64, d as i64]).unwrap();
    let bias = g.placeholder("b", DType::F64, [v as i64]).unwrap();
    let x = g.placeholder("x", DType::F64, [b as i64, d as i64]).unwrap();
    let labels = g.constant(Tensor::from_vec(vec![1i64, 4, 1], [b]).unwrap()).unwrap();
    let sampled = g.constant(Tensor::from_vec(vec![0i64, 4, 5, 2], [4]).unwrap()).unwrap();
    let te = g.constant(Tensor::from_vec(vec![0.8f64, 0.3, 0.8], [b]).unwrap()).unwrap();
    let se = g.constant(Tensor::from_vec(vec![1.2f64, 0.3, 0.25, 0.5], [4]).unwrap()).unwrap();
    let per = g.sampled_softmax_loss_with(&w, &bias, &labels, &x, [&sampled, &te, &se]).unwrap();
    let loss = g.reduce_sum(&per, &[0], false).unwrap();
    let xs: [&Output; 3] = [&w, &bias, &x];
    let grads = g.gradients(&[&loss], &xs).unwrap();
    let sess = Session::new(&g).unwrap();
    let data = vec![vals(v * d, 0.2), vals(v, 0.9), vals(b * d, 2.1)];
    let shapes: [Vec<usize>; 3] = [vec![v, d], vec![v], vec![b, d]];
    let run = |dd: &[Vec<f64>], fetch: &Output| {
        let t: Vec<Tensor> = dd.iter().zip(&shapes).map(|(x, s)| Tensor::from_vec(x.clone(), s.clone()).unwrap()).collect();
        let feeds: Vec<(&Output, &Tensor)> = xs.iter().copied().zip(&t).collect();
        sess.run(&feeds, &[fetch], &[]).unwrap()[0].to_vec::<f64>().unwrap()
    };
    for i in 0..3 {
        let sym = run(&data, grads[i].as_ref().unwrap());
        for j in 0..data[i].len() {
            let h = 1e-6;
            let (mut p, mut m) = (data.clone(), data.clone());
            p[i][j] += h;
            m[i][j] -= h;
            let fd = (run(&p, &loss)[0] - run(&m, &loss)[0]) / (2.0 * h);
            assert!((fd - sym[j]).abs() < 1e-6, "input {i} element {j}: {fd} vs {}", sym[j]);
        }
    }
}
