//! In-graph data parallelism (synchronous replication, as in section 4.4 of
//! the TensorFlow paper): one graph holds N copies ("replicas") of a model's
//! forward and backward pass, one per device, that read the same variables
//! on a parameter device.
//!
//! Contract of [`data_parallel`]:
//! - the input batch `x` and labels `y` are split N ways along dimension 0 on
//!   the parameter device (so the batch must divide by N at run time; the
//!   Split kernel's error says so otherwise);
//! - replica i builds its forward pass and loss with the caller's closure on
//!   a graph handle that requests device i, and its gradients there too;
//! - the N gradients of each variable are summed on the parameter device and
//!   scaled by 1/N, then ONE optimizer update is applied there (a variable
//!   created on another device, e.g. sharded over parameter servers, has its
//!   average and update on its own device). With equal
//!   shards and a loss that is a mean over examples, this is exactly the
//!   full-batch gradient (up to float rounding).
//!
//! Variables are shared, not copied: the caller creates them BEFORE calling
//! [`data_parallel`] (on the parameter device, e.g. under
//! `g.device(&param_device.to_string())`) and the closure only reads them;
//! a closure that creates variables is an error, because each replica would
//! otherwise train its own copy.

use crate::framework::DeviceName;
use crate::tensor::DType;
use crate::error::{EngineError, Result};
use crate::graph::{Graph, Output};
use crate::train::optimizers::Optimizer;

/// What [`data_parallel`] built.
#[derive(Clone, Debug)]
pub struct Replicated {
    /// Mean of the replica losses, on the parameter device (the full-batch
    /// loss when the loss is a mean over examples).
    pub loss: Output,
    /// The one update of every variable; run it as a target.
    pub train_op: Output,
    /// Each replica's loss, in device order.
    pub replica_losses: Vec<Output>,
    /// The averaged gradient of each variable (same order as `vars`), on the
    /// parameter device.
    pub gradients: Vec<Output>,
    /// Each replica's own gradients (replica, then `vars` order): what the
    /// average reads, so that the update alone can be run on fed values.
    pub replica_gradients: Vec<Vec<Output>>,
}

/// The replica devices and variables both callers need.
fn check_args(devices: &[DeviceName], vars: &[&Output]) -> Result<()> {
    if devices.is_empty() {
        return Err(EngineError::Tensor("data_parallel needs at least one replica device".into()));
    }
    if vars.is_empty() {
        return Err(EngineError::Tensor("data_parallel needs at least one variable to train".into()));
    }
    for v in vars {
        if v.op() != "Variable" {
            return Err(EngineError::Attr {
                node: v.name(),
                op: v.op(),
                attr: "vars".into(),
                detail: "data_parallel trains outputs of Variable nodes only".into(),
            });
        }
    }
    Ok(())
}

/// Where data-parallel training runs: one replica of the model on each
/// device of `replicas`, the variables and their update on `params`.
#[derive(Clone, Copy, Debug)]
pub struct ReplicaDevices<'a> {
    pub replicas: &'a [DeviceName],
    pub params: &'a DeviceName,
}

/// Builds `on.replicas.len()` replicas of `model` (see the module comment).
/// `model(g, x_shard, y_shard)` returns the replica's scalar loss; `g` is a
/// handle requesting the replica's device and naming nodes `replica_<i>/...`.
pub fn data_parallel<F>(
    g: &Graph,
    on: ReplicaDevices,
    x: &Output,
    y: &Output,
    vars: &[&Output],
    optimizer: &Optimizer,
    model: F,
) -> Result<Replicated>
where
    F: Fn(&Graph, &Output, &Output) -> Result<Output>,
{
    check_args(on.replicas, vars)?;
    let n = on.replicas.len();
    let pg = g.device(&on.params.to_string());
    let input = pg.scope("replicas");
    let (xs, ys) = if n == 1 { (vec![x.clone()], vec![y.clone()]) } else { (input.split(x, n, 0)?, input.split(y, n, 0)?) };
    data_parallel_sharded(g, on, &xs, &ys, vars, optimizer, model)
}

/// [`data_parallel`] with the inputs already sharded: replica i reads
/// `xs[i]` and `ys[i]` wherever they are (between-graph replication feeds
/// each worker its own batch on its own device). Same gradient averaging
/// and update as [`data_parallel`], which splits one batch and calls this.
pub fn data_parallel_sharded<F>(
    g: &Graph,
    on: ReplicaDevices,
    xs: &[Output],
    ys: &[Output],
    vars: &[&Output],
    optimizer: &Optimizer,
    model: F,
) -> Result<Replicated>
where
    F: Fn(&Graph, &Output, &Output) -> Result<Output>,
{
    let ReplicaDevices { replicas: devices, params: param_device } = on;
    check_args(devices, vars)?;
    let n = devices.len();
    if xs.len() != n || ys.len() != n {
        return Err(EngineError::Tensor(format!(
            "data_parallel_sharded: {n} replica devices but {} input and {} label shards",
            xs.len(),
            ys.len()
        )));
    }
    let pg = g.device(&param_device.to_string());
    let vars_before = g.variables().len();
    let mut replica_losses = Vec::with_capacity(n);
    let mut replica_grads: Vec<Vec<Output>> = Vec::with_capacity(n);
    for (i, dev) in devices.iter().enumerate() {
        let rg = g.device(&dev.to_string()).scope(&format!("replica_{i}"));
        let loss = model(&rg, &xs[i], &ys[i])?;
        if g.variables().len() != vars_before {
            return Err(EngineError::Tensor(format!(
                "the model closure of replica {i} created variables ({}); create them before data_parallel so that the replicas share them",
                g.variables()[vars_before..].iter().map(|v| v.name()).collect::<Vec<_>>().join(", ")
            )));
        }
        if loss.shape().rank() != 0 || !loss.dtype().is_float() {
            return Err(EngineError::Shape {
                node: loss.name(),
                op: loss.op(),
                detail: format!("a replica's loss must be a float scalar, got {}", loss.tensor_type()),
            });
        }
        let grads = rg.gradients(&[&loss], vars)?;
        let mut gv = Vec::with_capacity(vars.len());
        for (v, gr) in vars.iter().zip(grads) {
            gv.push(gr.ok_or_else(|| EngineError::NoGradient {
                node: v.name(),
                op: format!("replica {i}'s loss '{}' does not depend on this variable", loss.name()),
            })?);
        }
        replica_losses.push(loss);
        replica_grads.push(gv);
    }

    // each variable's gradients are averaged where the variable lives (the
    // parameter device, or its own when variables are sharded)
    let mean = |avg: &Graph, list: Vec<Output>, dtype: DType| -> Result<Output> {
        let mut it = list.into_iter();
        let first = it.next().ok_or_else(|| EngineError::Tensor("no replica values to average".into()))?;
        let sum = it.try_fold(first, |acc, t| avg.add(&acc, &t))?;
        if n == 1 { Ok(sum) } else { avg.mul(&sum, avg.scalar(1.0 / n as f64, dtype)?) }
    };
    let mut gradients = Vec::with_capacity(vars.len());
    for (k, v) in vars.iter().enumerate() {
        gradients.push(mean(&pg.on_device_of(v).scope("average"), replica_grads.iter().map(|gv| gv[k].clone()).collect(), v.dtype())?);
    }
    let loss = mean(&pg.scope("average"), replica_losses.clone(), replica_losses[0].dtype())?;
    let pairs: Vec<(Output, Output)> = vars.iter().map(|v| (*v).clone()).zip(gradients.iter().cloned()).collect();
    let train_op = optimizer.apply_gradients(&pg, &pairs)?;
    Ok(Replicated { loss, train_op, replica_losses, gradients, replica_gradients: replica_grads })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::DeviceSet;
    use crate::runtime::session::{Session, SessionOptions};
    use crate::tensor::Tensor;

    fn cpu(i: u32) -> DeviceName {
        DeviceName::full("localhost", 0, 0, "CPU", i)
    }

    /// A 4-3-2 MLP's variables on the parameter device.
    fn params(g: &Graph) -> Vec<Output> {
        let p = g.device(&cpu(0).to_string());
        vec![
            p.variable("w1", p.random_uniform([4, 3], DType::F32, -1.0, 1.0, 3).unwrap()).unwrap(),
            p.variable("b1", p.random_uniform([3], DType::F32, -0.1, 0.1, 4).unwrap()).unwrap(),
            p.variable("w2", p.random_uniform([3, 2], DType::F32, -1.0, 1.0, 5).unwrap()).unwrap(),
        ]
    }

    fn loss_of(g: &Graph, v: &[Output], x: &Output, y: &Output) -> Result<Output> {
        let h = g.relu(g.bias_add(g.matmul(x, &v[0])?, &v[1])?)?;
        let logits = g.matmul(&h, &v[2])?;
        g.reduce_mean(g.sparse_softmax_cross_entropy_with_logits(&logits, y)?, &[], false)
    }

    fn session(g: &Graph, devices: usize) -> Session {
        Session::with_options(g, SessionOptions { threads: 1, devices: DeviceSet::local_cpus(devices), ..Default::default() }).unwrap()
    }

    fn batch() -> (Tensor, Tensor) {
        let xs: Vec<f32> = (0..24).map(|i| ((i * 7 % 11) as f32 - 5.0) / 4.0).collect();
        (Tensor::from_vec(xs, [6, 4]).unwrap(), Tensor::from_vec(vec![0i64, 1, 1, 0, 1, 0], [6]).unwrap())
    }

    fn close(a: &Tensor, b: &Tensor, tol: f32) {
        let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= tol, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn averaged_gradient_of_two_replicas_is_the_full_batch_gradient() {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [-1, 4]).unwrap();
        let y = g.placeholder("y", DType::I64, [-1]).unwrap();
        let v = params(&g);
        let refs: Vec<&Output> = v.iter().collect();
        let full = loss_of(&g, &v, &x, &y).unwrap();
        let full_grads: Vec<Output> = g.gradients(&[&full], &refs).unwrap().into_iter().map(|o| o.unwrap()).collect();
        let r = data_parallel(&g, ReplicaDevices { replicas: &[cpu(0), cpu(1)], params: &cpu(0) }, &x, &y, &refs, &Optimizer::Sgd { lr: 0.1 }, |rg, xs, ys| {
            loss_of(rg, &v, xs, ys)
        })
        .unwrap();
        assert_eq!(r.replica_losses.len(), 2);
        let s = session(&g, 2);
        s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
        let (bx, by) = batch();
        let mut fetch: Vec<&Output> = vec![&full, &r.loss];
        fetch.extend(full_grads.iter());
        fetch.extend(r.gradients.iter());
        let out = s.run(&[(&x, &bx), (&y, &by)], &fetch, &[]).unwrap();
        close(&out[0], &out[1], 1e-6);
        for k in 0..3 {
            close(&out[2 + k], &out[5 + k], 1e-6);
        }
        // Replica 1 really ran on device 1, reading the variables over Send/Recv.
        assert_eq!(s.placement().device_of(&g, &r.replica_losses[1].name()).unwrap(), &cpu(1));
        assert_eq!(s.placement().device_of(&g, "w1").unwrap(), &cpu(0));
        assert!(s.comm_stats().transfers >= 5, "{:?}", s.comm_stats());
        // A non-trivial gradient, so the comparison means something.
        assert!(out[2].to_vec::<f32>().unwrap().iter().any(|g| g.abs() > 1e-3));
    }

    #[test]
    fn replicas_are_named_and_request_their_devices() {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [-1, 4]).unwrap();
        let y = g.placeholder("y", DType::I64, [-1]).unwrap();
        let v = params(&g);
        let refs: Vec<&Output> = v.iter().collect();
        let r = data_parallel(&g, ReplicaDevices { replicas: &[cpu(0), cpu(1)], params: &cpu(0) }, &x, &y, &refs, &Optimizer::adam(0.01), |rg, xs, ys| loss_of(rg, &v, xs, ys))
            .unwrap();
        let nodes = g.nodes();
        let dev_of = |o: &Output| nodes[o.node_id()].device.clone();
        assert_eq!(dev_of(&r.replica_losses[1]), cpu(1).to_string());
        assert!(r.replica_losses[1].name().starts_with("replica_1/"));
        assert_eq!(dev_of(&r.loss), cpu(0).to_string());
        for gr in &r.gradients {
            assert_eq!(dev_of(gr), cpu(0).to_string());
        }
        // Every backward node of replica 1 asks for device 1.
        let back: Vec<_> = nodes.iter().filter(|n| n.name.starts_with("replica_1/gradients/")).collect();
        assert!(!back.is_empty());
        assert!(back.iter().all(|n| n.device == cpu(1).to_string()), "{:?}", back.iter().map(|n| (&n.name, &n.device)).collect::<Vec<_>>());
    }

    #[test]
    fn a_closure_that_creates_variables_is_refused() {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [-1, 4]).unwrap();
        let y = g.placeholder("y", DType::I64, [-1]).unwrap();
        let v = params(&g);
        let refs: Vec<&Output> = v.iter().collect();
        let err = data_parallel(&g, ReplicaDevices { replicas: &[cpu(0), cpu(1)], params: &cpu(0) }, &x, &y, &refs, &Optimizer::Sgd { lr: 0.1 }, |rg, xs, ys| {
            let extra = rg.variable("extra", rg.zeros(DType::F32, [2])?)?;
            let l = loss_of(rg, &v, xs, ys)?;
            rg.add(&l, rg.reduce_sum(&extra, &[], false)?)
        })
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "tensor: the model closure of replica 0 created variables (replica_0/extra); create them before data_parallel so that the replicas share them"
        );
    }

    #[test]
    fn a_batch_that_does_not_divide_among_the_replicas_is_an_error() {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, [-1, 4]).unwrap();
        let y = g.placeholder("y", DType::I64, [-1]).unwrap();
        let v = params(&g);
        let refs: Vec<&Output> = v.iter().collect();
        let r = data_parallel(&g, ReplicaDevices { replicas: &[cpu(0), cpu(1), cpu(2), cpu(3)], params: &cpu(0) }, &x, &y, &refs, &Optimizer::Sgd { lr: 0.1 }, |rg, xs, ys| {
            loss_of(rg, &v, xs, ys)
        })
        .unwrap();
        let s = session(&g, 4);
        s.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
        let (bx, by) = batch();
        let err = s.run(&[(&x, &bx), (&y, &by)], &[], &[&r.train_op]).unwrap_err().to_string();
        assert!(err.contains("replicas/Split") && err.contains("not divisible into 4 pieces"), "{err}");
    }
}
