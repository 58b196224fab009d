//! A placement chosen by the simulator's heuristics runs unchanged in the
//! real engine, and gives the numbers a single-device run gives (f32
//! transfers change nothing): the bridge the validation experiments rely on.

use flowlab_engine::{DType, DeviceSet, Session, SessionOptions, Tensor};
use flowlab_sim::graph::VirtualCluster;
use flowlab_sim::placement::{PlacerOptions, place_timed};
use flowlab_models::zoo::{self, ModelGraph};

const BATCH: usize = 16;

/// A fixed batch: inputs from a formula, labels cycling through 0..10.
fn feeds(m: &ModelGraph) -> Vec<Tensor> {
    let x = &m.inputs[0];
    let n: usize = x.shape().dims().iter().map(|d| d.expect("zoo inputs are fully shaped")).product();
    let values: Vec<f32> = (0..n).map(|i| ((i * 37) % 101) as f32 / 101.0 - 0.5).collect();
    let x = Tensor::from_vec(values, vec![BATCH, n / BATCH]).expect("input tensor");
    let labels = match m.inputs[1].dtype() {
        DType::I64 => Tensor::from_vec((0..BATCH).map(|i| (i % 10) as i64).collect::<Vec<_>>(), vec![BATCH]),
        DType::I32 => Tensor::from_vec((0..BATCH).map(|i| (i % 10) as i32).collect::<Vec<_>>(), vec![BATCH]),
        other => panic!("unexpected label dtype {other}"),
    }
    .expect("label tensor");
    vec![x, labels]
}

/// Losses of three training steps in `sess` (variables initialized first).
fn losses(m: &ModelGraph, sess: &Session, init: &flowlab_engine::Output) -> Vec<f32> {
    sess.run(&[], &[], &[init]).expect("initializers run");
    let values = feeds(m);
    let pairs: Vec<_> = m.inputs.iter().zip(&values).collect();
    (0..3)
        .map(|_| sess.run(&pairs, &[&m.loss], &[&m.train_op]).expect("a training step runs")[0].as_slice::<f32>().expect("f32 loss")[0])
        .collect()
}

#[test]
fn simulator_placements_run_in_the_engine_with_single_device_numbers() {
    let m = zoo::build("mlp", BATCH).expect("zoo mlp");
    let init = m.graph.global_variables_initializer().expect("initializer");
    let one = Session::with_options(&m.graph, SessionOptions { threads: 1, ..Default::default() }).expect("one device");
    let expected = losses(&m, &one, &init);
    assert!(expected[2] < expected[0], "the MLP learns: {expected:?}");

    let cluster = VirtualCluster::parse("2xcpu").expect("two CPUs");
    for placer in ["round_robin", "tf_greedy", "m_etf", "m_sct"] {
        let outcome = place_timed(placer, &m.graph, &PlacerOptions::new(cluster.clone())).expect(placer);
        let used: std::collections::BTreeSet<String> = outcome.placement.devices().iter().map(|d| d.to_string()).collect();
        let opts = SessionOptions {
            threads: 1,
            devices: DeviceSet::local_cpus(2),
            placement: Some(outcome.placement.clone()),
            ..Default::default()
        };
        let sess = Session::with_options(&m.graph, opts).unwrap_or_else(|e| panic!("{placer}: the engine accepts the placement: {e}"));
        assert_eq!(sess.placement(), &outcome.placement, "{placer}: the engine keeps the placement as given");
        assert_eq!(losses(&m, &sess, &init), expected, "{placer} on {used:?}");
        if used.len() > 1 {
            assert!(sess.comm_stats().transfers > 0, "{placer}: two devices exchange tensors");
        }
    }
}

/// The simulator replays the step the engine runs for each placement: the
/// same cross-device transfers and bytes, counted by the engine, also where
/// a placement puts a max pool and its gradient on two devices. The engine
/// fuses each device's part of a step on its own, so those two cannot share
/// a workspace: the gradient reads the pool's input and output (1.6 MB
/// for the second pool of a batch-32 CNN) where the one-device step sends
/// nothing or the 0.1 MB workspace. Likewise a chain (Conv2D, BiasAdd,
/// Relu, pool) runs as one node only on one device. Placements of the step
/// (as the validate kind makes them) and of the whole graph (initializers
/// included, which may split any chain); round robin splits pools here.
#[test]
fn simulated_transfers_are_the_engines_where_a_pool_and_its_gradient_are_apart() {
    use flowlab_sim::graph::{GraphSimulator, SimOptions};
    let m = zoo::build("cnn", BATCH).expect("zoo cnn");
    let init = m.graph.global_variables_initializer().expect("initializer");
    let cluster = VirtualCluster::parse("2xcpu").expect("two CPUs");
    let sim = GraphSimulator::new(&m.graph, &cluster, &SimOptions { step: Some(m.step()), ..Default::default() }).expect("simulator");
    let mut split = 0;
    for (placer, of_step) in ["round_robin", "tf_greedy", "m_etf", "m_sct"].into_iter().flat_map(|p| [(p, true), (p, false)]) {
        let mut placer_opts = PlacerOptions::new(cluster.clone());
        placer_opts.sim.step = of_step.then(|| m.step());
        let placement = place_timed(placer, &m.graph, &placer_opts).expect(placer).placement;
        let opts = SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), placement: Some(placement.clone()), ..Default::default() };
        let sess = Session::with_options(&m.graph, opts).expect("the engine accepts the placement");
        sess.run(&[], &[], &[&init]).expect("initializers run");
        let mut values = feeds(&m);
        let image: Vec<usize> = m.inputs[0].shape().dims().iter().map(|d| d.expect("zoo inputs are fully shaped")).collect();
        values[0] = Tensor::from_vec(values[0].as_slice::<f32>().expect("f32 input").to_vec(), image).expect("image batch");
        let pairs: Vec<_> = m.inputs.iter().zip(&values).collect();
        let (_, stats) = sess.run_traced(&pairs, &[&m.loss], &[&m.train_op]).expect("a training step runs");
        let engine = (stats.transfers.len(), stats.transfers.iter().map(|t| t.bytes).sum::<u64>());
        let r = sim.simulate(&placement).expect("the placement simulates");
        assert_eq!((r.transfers, r.transfer_bytes), engine, "{placer} (placing the step: {of_step}): simulated (transfers, bytes) against the engine's");
        // A pool's gradient that did not read a workspace: its pool was elsewhere.
        split += usize::from(stats.nodes.iter().any(|n| n.op == "MaxPoolGrad" || n.op == "_FusedMaxPoolGrad"));
    }
    assert!(split > 0, "no placement put a pool and its gradient on two devices");
}
