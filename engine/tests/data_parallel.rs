//! In-graph data parallelism: training steps of two replicas on two CPU
//! devices (variables on device 0, gradients averaged there) leave the
//! variables where full-batch training on one device leaves them.

use flowlab_engine::replicate::{ReplicaDevices, data_parallel};
use flowlab_engine::{DType, DeviceName, DeviceSet, Graph, Optimizer, Output, Result, Session, SessionOptions, Tensor};

fn cpu(i: u32) -> DeviceName {
    DeviceName::full("localhost", 0, 0, "CPU", i)
}

/// The 8-16-3 MLP's variables, created on `g`'s device with fixed seeds.
fn variables(g: &Graph) -> Result<Vec<Output>> {
    Ok(vec![
        g.variable("w1", g.random_uniform([8, 16], DType::F32, -0.5, 0.5, 11)?)?,
        g.variable("b1", g.random_uniform([16], DType::F32, -0.1, 0.1, 12)?)?,
        g.variable("w2", g.random_uniform([16, 3], DType::F32, -0.5, 0.5, 13)?)?,
        g.variable("b2", g.zeros(DType::F32, [3])?)?,
    ])
}

fn loss(g: &Graph, v: &[Output], x: &Output, y: &Output) -> Result<Output> {
    let h = g.relu(g.bias_add(g.matmul(x, &v[0])?, &v[1])?)?;
    let logits = g.bias_add(g.matmul(&h, &v[2])?, &v[3])?;
    g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, y)?, &[], false)
}

/// Batch `step` of 12 examples (deterministic, different per step).
fn batch(step: usize) -> (Tensor, Tensor) {
    let x: Vec<f32> = (0..12 * 8).map(|i| (((i * 37 + step * 101) % 23) as f32 - 11.0) / 7.0).collect();
    let y: Vec<i64> = (0..12).map(|i| ((i * 5 + step) % 3) as i64).collect();
    (Tensor::from_vec(x, [12, 8]).unwrap(), Tensor::from_vec(y, [12]).unwrap())
}

/// Variables after `steps` steps: single device (`replicas == 0`) or data parallel.
fn train(opt: &Optimizer, replicas: usize, steps: usize) -> Vec<(String, Vec<f32>)> {
    let g = Graph::new();
    let pg = g.device(&cpu(0).to_string());
    let x = pg.placeholder("x", DType::F32, [-1, 8]).unwrap();
    let y = pg.placeholder("y", DType::I64, [-1]).unwrap();
    let v = variables(&pg).unwrap();
    let refs: Vec<&Output> = v.iter().collect();
    let (train_op, devices) = if replicas == 0 {
        (opt.minimize(&loss(&g, &v, &x, &y).unwrap(), &refs).unwrap(), 1)
    } else {
        let devs: Vec<DeviceName> = (0..replicas as u32).map(cpu).collect();
        let r = data_parallel(&g, ReplicaDevices { replicas: &devs, params: &cpu(0) }, &x, &y, &refs, opt, |rg, xs, ys| loss(rg, &v, xs, ys)).unwrap();
        (r.train_op, replicas)
    };
    let init = g.global_variables_initializer().unwrap();
    let opts = SessionOptions { threads: 1, devices: DeviceSet::local_cpus(devices), ..Default::default() };
    let s = Session::with_options(&g, opts).unwrap();
    s.run(&[], &[], &[&init]).unwrap();
    for step in 0..steps {
        let (bx, by) = batch(step);
        s.run(&[(&x, &bx), (&y, &by)], &[], &[&train_op]).unwrap();
    }
    if replicas > 1 {
        assert!(s.comm_stats().transfers > 0, "replicas on {replicas} devices exchanged nothing");
    }
    ["w1", "b1", "w2", "b2"].iter().map(|n| (n.to_string(), s.variable_value(n).unwrap().to_vec::<f32>().unwrap())).collect()
}

fn assert_same(a: &[(String, Vec<f32>)], b: &[(String, Vec<f32>)], tol: f32) {
    for ((name, va), (_, vb)) in a.iter().zip(b) {
        let worst = va.iter().zip(vb).map(|(p, q)| (p - q).abs()).fold(0.0f32, f32::max);
        assert!(worst <= tol, "{name}: largest difference {worst} > {tol}");
    }
}

#[test]
fn one_sgd_step_on_two_replicas_equals_one_full_batch_step() {
    let opt = Optimizer::Sgd { lr: 0.5 };
    let init = train(&opt, 0, 0);
    let single = train(&opt, 0, 1);
    let two = train(&opt, 2, 1);
    assert_same(&single, &two, 1e-5);
    // The step moved every variable, so the comparison is not trivially true.
    for ((name, a), (_, b)) in init.iter().zip(&single) {
        assert!(a.iter().zip(b).any(|(p, q)| (p - q).abs() > 1e-4), "{name} did not move");
    }
}

#[test]
fn adam_steps_on_two_and_three_replicas_follow_the_single_device_run() {
    // Adam's first steps move each weight by about lr * sign(gradient): a
    // gradient that is zero up to float rounding (summed in another order
    // on two devices) would move by up to lr either way. An epsilon above
    // that rounding level keeps such weights still in both runs.
    let opt = Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, epsilon: 1e-4 };
    let single = train(&opt, 0, 3);
    assert_same(&single, &train(&opt, 2, 3), 1e-5);
    assert_same(&single, &train(&opt, 3, 3), 1e-5);
    let mom = Optimizer::Momentum { lr: 0.1, momentum: 0.9 };
    assert_same(&train(&mom, 0, 3), &train(&mom, 2, 3), 1e-5);
}
