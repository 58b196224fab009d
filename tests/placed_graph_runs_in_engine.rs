//! A placement chosen by the simulator's heuristics runs unchanged in the
//! real engine, and gives the numbers a single-device run gives (f32
//! transfers change nothing): the bridge the validation experiments rely on.

use flowlab_engine::{DType, DeviceSet, Session, SessionOptions, Tensor};
use flowlab_sim::graph::VirtualCluster;
use flowlab_sim::placement::{PlacerOptions, place_timed};
use flowlab_sim::zoo::{self, ModelGraph};

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
