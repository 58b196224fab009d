//! TensorFlow's placer rule that an optimizer's update ops pull their
//! variable, its initializer and its slot variables onto their device.

use flowlab_engine::{DType, DefaultPlacer, DeviceName, DeviceSet, Graph, Optimizer, Placement, Placer, Result, Shape, Tensor};

fn cpu(i: u32) -> DeviceName {
    DeviceName::full("localhost", 0, 0, "CPU", i)
}

fn place(g: &Graph, d: &DeviceSet) -> Result<Placement> {
    DefaultPlacer.place(g, d)
}

#[test]
fn variables_and_their_updates_share_a_device() {
    let g = Graph::new();
    let x = g.device("/cpu:1").placeholder("x", DType::F32, Shape::new(vec![2])).unwrap();
    let w = g.variable("w", g.constant(Tensor::from_vec(vec![1f32, 2.0], vec![2]).unwrap())).unwrap();
    let loss = g.reduce_sum(g.mul(&x, &w).unwrap(), &[0], false).unwrap();
    // The variable requests nothing; its momentum update (attr var = "w",
    // slots = ["w/Momentum/accum"...]) is built on CPU:2, and the
    // variable, its initializer and the slot follow the update there.
    let lg = loss.graph().device("/cpu:2");
    let grads = g.gradients(&[&loss], &[&w]).unwrap();
    let pair = (w.clone(), grads[0].clone().unwrap());
    let train = Optimizer::Momentum { lr: 0.1, momentum: 0.9 }.apply_gradients(&lg, &[pair]).unwrap();
    let p = place(&g, &DeviceSet::local_cpus(3)).unwrap();
    assert_eq!(p.device(w.node_id()), Some(&cpu(2)), "the variable follows its update");
    for init in g.initializers() {
        assert_eq!(p.device(init.node_id()), Some(&cpu(2)), "initializer {}", init.name());
    }
    assert_eq!(g.variables().len(), 2, "w and its momentum slot");
    for v in g.variables() {
        assert_eq!(p.device(v.node_id()), Some(&cpu(2)), "variable {}", v.name());
    }
    assert_eq!(p.device(train.node_id()), Some(&cpu(2)));
    assert_eq!(p.device(x.node_id()), Some(&cpu(1)));
    // The gradient ops were built unconstrained: first device.
    assert_eq!(p.device(loss.node_id()), Some(&cpu(0)));
}
