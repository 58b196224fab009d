//! Optimizers as graph ops: each `minimize` appends the gradient graph and
//! one fused apply op per variable (ApplyGradientDescent, ApplyMomentum,
//! ApplyAdam — as TensorFlow's training ops), grouped into one train op.
//! Slot variables (momentum accumulators, Adam moments) are ordinary
//! variables named `<var>/<optimizer>/<slot>`, so checkpoints include them.

use crate::error::{EngineError, Result};
use crate::graph::{Graph, Output};
use crate::tensor::Shape;

/// A gradient-based optimizer.
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    /// `w -= lr · g`.
    Sgd { lr: f64 },
    /// `a = momentum · a + g; w -= lr · a`.
    Momentum { lr: f64, momentum: f64 },
    /// Adam (Kingma & Ba), TensorFlow's formulation with bias-corrected rate.
    Adam { lr: f64, beta1: f64, beta2: f64, epsilon: f64 },
}

impl Optimizer {
    /// Adam with the usual defaults (beta1 0.9, beta2 0.999, epsilon 1e-8).
    pub fn adam(lr: f64) -> Optimizer {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 }
    }

    fn name(&self) -> &'static str {
        match self {
            Optimizer::Sgd { .. } => "SGD",
            Optimizer::Momentum { .. } => "Momentum",
            Optimizer::Adam { .. } => "Adam",
        }
    }

    /// Appends the update of `vars` (outputs of Variable nodes) that lowers
    /// `loss`; returns the train op to run as a target.
    pub fn minimize(&self, loss: &Output, vars: &[&Output]) -> Result<Output> {
        let g = loss.graph().clone();
        let grads = g.gradients(&[loss], vars)?;
        let mut pairs = Vec::new();
        for (v, gr) in vars.iter().zip(grads) {
            match gr {
                Some(gr) => pairs.push(((*v).clone(), gr)),
                None => {
                    return Err(EngineError::NoGradient { node: v.name(), op: format!("loss '{}' does not depend on this variable", loss.name()) });
                }
            }
        }
        self.apply_gradients(&g, &pairs)
    }

    /// Appends the update for given (variable, gradient) pairs.
    pub fn apply_gradients(&self, g: &Graph, pairs: &[(Output, Output)]) -> Result<Output> {
        self.build_update(g, pairs, false)
    }

    /// Like [`apply_gradients`](Self::apply_gradients), except that the
    /// slots and the step counter an earlier `apply_gradients_shared` of
    /// this optimizer made for these variables are reused, not duplicated:
    /// several update ops (one per asynchronous worker) then share one
    /// optimizer state, as TensorFlow's between-graph replicas share the
    /// slot variables on the parameter server.
    pub fn apply_gradients_shared(&self, g: &Graph, pairs: &[(Output, Output)]) -> Result<Output> {
        self.build_update(g, pairs, true)
    }

    /// Each variable's slots, step counter and update op are built on the
    /// device the variable requests (`g`'s own when it requests none), as
    /// TensorFlow colocates them: with variables sharded over several
    /// parameter servers each update runs where its variable lives. Adam
    /// keeps one step counter per (device, dtype); all count the same steps,
    /// so the arithmetic is that of one counter.
    fn build_update(&self, g: &Graph, pairs: &[(Output, Output)], shared: bool) -> Result<Output> {
        let slot = |g: &Graph, v: &Output, opt: &str, what: &str| -> Result<Output> {
            if shared && let Ok(o) = g.output_by_name(&format!("{}/{opt}/{what}", v.name()), 0) && o.op() == "Variable" {
                return Ok(o);
            }
            slot(g, v, opt, what)
        };
        let mut updates = Vec::new();
        match *self {
            Optimizer::Sgd { lr } => {
                for (v, gr) in pairs {
                    let s = g.on_device_of(v).scope(self.name());
                    let lr = s.scalar(lr, v.dtype())?;
                    updates.push(s.apply_gradient_descent(v, &lr, gr)?);
                }
            }
            Optimizer::Momentum { lr, momentum } => {
                for (v, gr) in pairs {
                    let gv = g.on_device_of(v);
                    let s = gv.scope(self.name());
                    let acc = slot(&gv, v, self.name(), "accum")?;
                    let lr = s.scalar(lr, v.dtype())?;
                    let m = s.scalar(momentum, v.dtype())?;
                    updates.push(s.apply_momentum(v, &acc, &lr, gr, &m)?);
                }
            }
            Optimizer::Adam { lr, beta1, beta2, epsilon } => {
                // One step counter per (device, dtype): t += 1 before the
                // updates; the bias corrections use beta^t. The first
                // device's counter has the one-device name, the k-th
                // another device's gets `_k`.
                let mut devices: Vec<String> = Vec::new();
                let mut steps: Vec<(String, crate::tensor::DType, Output)> = Vec::new();
                for (v, gr) in pairs {
                    let gv = g.on_device_of(v);
                    let s = gv.scope(self.name());
                    let dev = gv.lock().nodes.get(v.node_id()).map(|n| n.device.clone()).unwrap_or_default();
                    let k = match devices.iter().position(|d| *d == dev) {
                        Some(k) => k,
                        None => {
                            devices.push(dev.clone());
                            devices.len() - 1
                        }
                    };
                    let dt = v.dtype();
                    let t = match steps.iter().find(|(d, t, _)| *d == dev && *t == dt) {
                        Some((_, _, t)) => t.clone(),
                        None => {
                            let base = if k == 0 { format!("{}/shared_step_{}", self.name(), dt) } else { format!("{}/shared_step_{}_{k}", self.name(), dt) };
                            let var = match g.output_by_name(&base, 0) {
                                Ok(v) if shared && v.op() == "Variable" => v,
                                _ => {
                                    let name = if shared { base } else { unique_name(g, &format!("{}/step_{}", self.name(), dt)) };
                                    gv.variable(&name, gv.zeros(dt, Shape::scalar())?)?
                                }
                            };
                            let one = s.scalar(1.0, dt)?;
                            let t = s.assign_add(&var, &one)?;
                            steps.push((dev, dt, t.clone()));
                            t
                        }
                    };
                    let m = slot(&gv, v, self.name(), "m")?;
                    let vv = slot(&gv, v, self.name(), "v")?;
                    let (lr, b1, b2, eps) = (s.scalar(lr, dt)?, s.scalar(beta1, dt)?, s.scalar(beta2, dt)?, s.scalar(epsilon, dt)?);
                    let b1p = s.pow(&b1, &t)?;
                    let b2p = s.pow(&b2, &t)?;
                    updates.push(s.apply_adam(v, &m, &vv, [&lr, &b1, &b2, &eps, &b1p, &b2p], gr)?);
                }
            }
        }
        let refs: Vec<&Output> = updates.iter().collect();
        g.group(&unique_train_name(g, self.name()), &refs)
    }
}

fn unique_train_name(g: &Graph, opt: &str) -> String {
    unique_name(g, &format!("{opt}/train"))
}

/// `base`, or `base_1`, `base_2`, ... whichever is free.
fn unique_name(g: &Graph, base: &str) -> String {
    let mut name = base.to_string();
    let mut i = 1;
    while g.output_by_name(&name, 0).is_ok() {
        name = format!("{base}_{i}");
        i += 1;
    }
    name
}

/// A zero-initialized variable shaped like `v`.
fn slot(g: &Graph, v: &Output, opt: &str, what: &str) -> Result<Output> {
    let t = v.tensor_type();
    let shape = t.shape.to_shape().ok_or_else(|| EngineError::Shape {
        node: v.name(),
        op: "Variable".into(),
        detail: format!("optimizer slots need a fully known shape, got {}", t.shape),
    })?;
    let zero = g.zeros(t.dtype, shape)?;
    g.variable(&format!("{}/{opt}/{what}", v.name()), zero)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::session::Session;
    use crate::tensor::Tensor;

    /// Variables on two devices: each one's slots, step counter and update
    /// on its own device, and the values those of the one-device update.
    #[test]
    fn updates_follow_their_variables_devices() {
        use crate::framework::DeviceSet;
        use crate::runtime::session::SessionOptions;
        let run = |split: bool| {
            let g = Graph::new();
            let d1 = if split { "/job:localhost/replica:0/task:0/device:CPU:1" } else { "/job:localhost/replica:0/task:0/device:CPU:0" };
            let a = g.device("/job:localhost/replica:0/task:0/device:CPU:0");
            let b = g.device(d1);
            let va = a.variable("a", a.constant(Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap()).unwrap()).unwrap();
            let vb = b.variable("b", b.constant(Tensor::from_vec(vec![-3.0f32], vec![1]).unwrap()).unwrap()).unwrap();
            let ga = a.constant(Tensor::from_vec(vec![0.5f32, -1.0], vec![2]).unwrap()).unwrap();
            let gb = a.constant(Tensor::from_vec(vec![0.25f32], vec![1]).unwrap()).unwrap();
            let up = Optimizer::adam(0.1).apply_gradients(&a, &[(va, ga), (vb, gb)]).unwrap();
            let dev = |n: &str| g.node(g.output_by_name(n, 0).unwrap().node_id()).unwrap().device;
            assert_eq!(dev("b/Adam/m"), d1);
            assert_eq!(dev("b/Adam/v"), d1);
            // one counter per device: the second one's gets `_1`
            assert_eq!(g.variables().len(), if split { 8 } else { 7 });
            if split {
                assert_eq!(dev("Adam/step_f32_1"), d1);
            }
            let opts = SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), ..Default::default() };
            let sess = Session::with_options(&g, opts).unwrap();
            sess.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
            for _ in 0..3 {
                sess.run(&[], &[], &[&up]).unwrap();
            }
            ["a", "b"].map(|n| sess.variable_value(n).unwrap().to_vec::<f32>().unwrap())
        };
        assert_eq!(run(true), run(false));
    }

    /// Two Adam updates of one variable from two gradients (two
    /// asynchronous workers) share its slots and step counter.
    #[test]
    fn shared_updates_share_one_optimizer_state() {
        let g = Graph::new();
        let v = g.variable("v", g.constant(Tensor::from_vec(vec![1.0f32, 2.0], vec![2]).unwrap()).unwrap()).unwrap();
        let opt = Optimizer::adam(0.1);
        let grad = |k: f32| g.constant(Tensor::from_vec(vec![0.5f32 + k, -1.0], vec![2]).unwrap()).unwrap();
        let ups: Vec<Output> = (0..2).map(|k| opt.apply_gradients_shared(&g, &[(v.clone(), grad(k as f32))]).unwrap()).collect();
        // v, its m and v slots, one step counter
        assert_eq!(g.variables().len(), 4);
        let sess = Session::new(&g).unwrap();
        sess.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
        sess.run(&[], &[], &[&ups[0]]).unwrap();
        sess.run(&[], &[], &[&ups[1]]).unwrap();
        assert_eq!(sess.variable_value("Adam/shared_step_f32").unwrap().scalar_f64().unwrap(), 2.0);
        // the unshared form refuses a second state for the same variable
        let e = opt.apply_gradients(&g, &[(v.clone(), grad(3.0))]).unwrap_err();
        assert!(matches!(e, EngineError::DuplicateName(ref n) if n == "v/Adam/m"), "{e:?}");
    }

    /// A variable `w` = [1, -2] that `opt` updates from the gradient fed
    /// to a placeholder, in an initialized session.
    struct OneVariable {
        sess: Session,
        grad: Output,
        up: Output,
    }

    impl OneVariable {
        fn new(opt: &Optimizer) -> OneVariable {
            let g = Graph::new();
            let w = g.variable("w", g.constant(Tensor::from_vec(vec![1.0f32, -2.0], vec![2]).unwrap()).unwrap()).unwrap();
            let grad = g.placeholder("grad", crate::tensor::DType::F32, [2i64]).unwrap();
            let up = opt.apply_gradients(&g, &[(w, grad.clone())]).unwrap();
            let sess = Session::new(&g).unwrap();
            sess.run(&[], &[], &[&g.global_variables_initializer().unwrap()]).unwrap();
            OneVariable { sess, grad, up }
        }

        /// One update from the gradient `g`.
        fn step(&self, g: [f32; 2]) {
            let g = Tensor::from_vec(g.to_vec(), vec![2]).unwrap();
            self.sess.run(&[(&self.grad, &g)], &[], &[&self.up]).unwrap();
        }

        /// The value of variable `name` (`w` or a slot).
        fn value(&self, name: &str) -> Vec<f32> {
            self.sess.variable_value(name).unwrap().to_vec::<f32>().unwrap()
        }
    }

    /// An update in place that panics halfway leaves its variable torn (here
    /// one of two elements written, as a kernel bug would): the next update,
    /// `variable_value` and a checkpoint each fail with `TornVariable` naming
    /// it, instead of training on or saving half an update, until the whole
    /// value is set again; then training goes on from the value set.
    #[test]
    fn a_variable_torn_by_a_panicking_update_is_an_error_until_set_again() {
        let var = OneVariable::new(&Optimizer::Sgd { lr: 0.5 });
        let slot = var.sess.var_slot("w").unwrap();
        let panicked = std::thread::spawn(move || {
            let mut value = slot.lock().unwrap();
            let t = value.as_mut().unwrap();
            let first = t.as_slice::<f32>().unwrap()[0];
            *t = Tensor::from_vec(vec![first + 100.0, -2.0], vec![2]).unwrap();
            panic!("a kernel bug halfway through the update");
        })
        .join();
        assert!(panicked.is_err());
        let torn = |r: Result<()>| matches!(r, Err(EngineError::TornVariable(n)) if n == "w");
        assert!(torn(var.sess.variable_value("w").map(|_| ())));
        let g = Tensor::from_vec(vec![1.0f32, 1.0], vec![2]).unwrap();
        assert!(torn(var.sess.run(&[(&var.grad, &g)], &[], &[&var.up]).map(|_| ())));
        let dir = tempfile::tempdir().unwrap();
        assert!(torn(crate::train::checkpoint::save(&var.sess, &dir.path().join("w.ckpt")).map(|_| ())));
        assert!(!dir.path().join("w.ckpt").exists(), "a torn variable is never saved");
        var.sess.set_variable("w", Tensor::from_vec(vec![3.0f32, 4.0], vec![2]).unwrap()).unwrap();
        var.step([1.0, 2.0]);
        assert_eq!(var.value("w"), vec![2.5, 3.0]);
    }

    /// A gradient that stops (a unit that no longer fires) leaves Adam's
    /// moments and a momentum accumulator decaying geometrically. Against
    /// an f64 run of the textbook updates: the f32 variables follow it, no
    /// slot or variable ever holds a subnormal (x86 takes microcode assists
    /// on them: the step of a wide MLP grew 5x), and a slot whose f64 value
    /// has left f32's normal range is zero, as TensorFlow's flush-to-zero
    /// threads make it.
    #[test]
    fn decaying_optimizer_slots_never_turn_subnormal() {
        let steps = 2000;
        for opt in [Optimizer::adam(0.01), Optimizer::Momentum { lr: 0.01, momentum: 0.9 }] {
            let v = OneVariable::new(&opt);
            // the f64 reference: w, first slot, second slot (Adam's v)
            let mut r = [[1.0f64, -2.0], [0.0; 2], [0.0; 2]];
            let slots: Vec<&str> = match opt {
                Optimizer::Adam { .. } => vec!["w/Adam/m", "w/Adam/v"],
                _ => vec!["w/Momentum/accum"],
            };
            let mut zeroed = 0;
            for t in 1..=steps {
                let gv = if t == 1 { [0.5, -3.0] } else { [0.0, 0.0] };
                v.step(if t == 1 { [0.5, -3.0] } else { [0.0, 0.0] });
                for i in 0..2 {
                    match opt {
                        Optimizer::Adam { lr, beta1, beta2, epsilon } => {
                            r[1][i] = beta1 * r[1][i] + (1.0 - beta1) * gv[i];
                            r[2][i] = beta2 * r[2][i] + (1.0 - beta2) * gv[i] * gv[i];
                            let lr_t = lr * (1.0 - beta2.powi(t)).sqrt() / (1.0 - beta1.powi(t));
                            r[0][i] -= lr_t * r[1][i] / (r[2][i].sqrt() + epsilon);
                        }
                        Optimizer::Momentum { lr, momentum } => {
                            r[1][i] = momentum * r[1][i] + gv[i];
                            r[0][i] -= lr * r[1][i];
                        }
                        Optimizer::Sgd { .. } => unreachable!(),
                    }
                }
                let wv = v.value("w");
                for i in 0..2 {
                    assert!((wv[i] as f64 - r[0][i]).abs() <= 1e-5 * r[0][i].abs(), "{opt:?} step {t}: w[{i}] = {} against {}", wv[i], r[0][i]);
                }
                for (k, name) in slots.iter().enumerate() {
                    let sv = v.value(name);
                    for i in 0..2 {
                        assert!(!sv[i].is_subnormal() && !wv[i].is_subnormal(), "{opt:?} step {t}: {name}[{i}] = {:e}", sv[i]);
                        if r[k + 1][i].abs() < f32::MIN_POSITIVE as f64 {
                            assert_eq!(sv[i], 0.0, "{opt:?} step {t}: {name}[{i}] against {:e}", r[k + 1][i]);
                            zeroed += 1;
                        }
                    }
                }
            }
            // the first slot leaves the normal range within the run (0.9^t)
            assert!(zeroed > 0, "{opt:?}: no slot decayed below f32's normal range in {steps} steps");
        }
    }

    /// With epsilon 0 and moments that both decay to zero (beta2 = 0.9, so
    /// the second moment leaves the normal range with the first), a step
    /// whose moments are zero leaves the variable as it is, where 0 / 0
    /// would make it NaN.
    #[test]
    fn adam_without_epsilon_stays_finite_once_its_moments_are_zero() {
        let var = OneVariable::new(&Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.9, epsilon: 0.0 });
        var.step([0.5, -3.0]);
        let after_first = var.value("w");
        for _ in 0..1500 {
            var.step([0.0, 0.0]);
        }
        let (m, v) = (var.value("w/Adam/m"), var.value("w/Adam/v"));
        assert_eq!((m, v), (vec![0.0; 2], vec![0.0; 2]), "both moments leave f32's normal range within 1,500 steps of 0.9");
        let w = var.value("w");
        assert!(w.iter().all(|x| x.is_finite()), "{w:?}");
        // later steps only move w by m / sqrt(v) ~ (0.9 / sqrt(0.9))^t: less than the first
        for i in 0..2 {
            assert!((w[i] - after_first[i]).abs() < 0.2, "w[{i}] = {} after {}", w[i], after_first[i]);
        }
    }

    /// Asynchronous workers run updates of one shared variable at once. An
    /// update must change the variable and both moments together: a first
    /// moment from two gradients beside a second moment from one gives
    /// steps of m / epsilon. The test holds the second moment's lock, lets
    /// the update reach the first moment (holding that lock too, then
    /// letting it go), and checks that whenever it can read the first
    /// moment and the variable while it holds the second unchanged, neither
    /// has changed. Then the update goes on and makes the textbook step
    /// (f64, one update from zero moments).
    #[test]
    fn an_adam_update_publishes_its_variable_and_both_moments_together() {
        let var = OneVariable::new(&Optimizer::adam(0.1));
        let (w0, m0, v0) = (var.value("w"), var.value("w/Adam/m"), var.value("w/Adam/v"));
        let slot = |n: &str| var.sess.var_slot(n).unwrap();
        let (v_slot, m_slot, w_slot) = (slot("w/Adam/v"), slot("w/Adam/m"), slot("w"));
        let pause = || std::thread::sleep(std::time::Duration::from_millis(50));
        // with v held, m and w (where the update does not hold them) are as before
        let unchanged = || {
            for (got, before, name) in [(&m_slot, &m0, "m"), (&w_slot, &w0, "w")] {
                if let Some(t) = got.try_lock() {
                    assert_eq!(&t.as_ref().unwrap().to_vec::<f32>().unwrap(), before, "{name} changed while v had not");
                }
            }
        };
        std::thread::scope(|s| {
            let mut held_v = Some(v_slot.lock().unwrap());
            let step = s.spawn(|| var.step([0.5, 0.0]));
            pause();
            unchanged();
            // take m too (unless the update already holds it), let v go, take it back
            let held_m = m_slot.try_lock();
            drop(held_v.take());
            pause();
            held_v = v_slot.try_lock();
            drop(held_m);
            pause();
            // (the update may have finished before v was taken back)
            if held_v.as_ref().is_some_and(|v| v.as_ref().unwrap().to_vec::<f32>().unwrap() == v0) {
                unchanged();
            }
            drop(held_v);
            step.join().unwrap();
        });
        let (lr, b1, b2, eps, g) = (0.1f64, 0.9f64, 0.999f64, 1e-8f64, [0.5f64, 0.0]);
        let lr_t = lr * (1.0 - b2).sqrt() / (1.0 - b1);
        for i in 0..2 {
            let (m, v) = ((1.0 - b1) * g[i], (1.0 - b2) * g[i] * g[i]);
            let w = w0[i] as f64 - lr_t * m / (v.sqrt() + eps);
            assert!((var.value("w")[i] as f64 - w).abs() < 1e-6, "w[{i}] {:?} vs {w}", var.value("w"));
            // f32's 1 - beta2 is 1.3e-5 off in relative terms
            let (gm, gv) = (var.value("w/Adam/m")[i] as f64, var.value("w/Adam/v")[i] as f64);
            assert!((gm - m).abs() <= 1e-6 * m.abs() && (gv - v).abs() <= 1e-4 * v, "m {gm} vs {m}, v {gv} vs {v}");
        }
    }
}
