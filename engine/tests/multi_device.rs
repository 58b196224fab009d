//! Running one graph over several CPU devices of one process: same numbers
//! as one device, quantized transfers with exact byte counts, failures that
//! abort every device and restore variables, errors instead of hangs,
//! colocated variables, and traces that name devices and transfers.

use flowlab_engine::{
    AttrValue, DType, DeviceSet, Graph, Optimizer, Output, PartitionOptions, Session, SessionOptions, Tensor,
};
use flowlab_hw::CommFormat;
use std::time::Duration;

const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";

fn opts(devices: usize, format: CommFormat) -> SessionOptions {
    SessionOptions {
        threads: 1,
        devices: DeviceSet::local_cpus(devices),
        partition: PartitionOptions::in_format(format),
        recv_timeout: Duration::from_secs(20),
        ..Default::default()
    }
}

struct Mlp {
    g: Graph,
    x: Output,
    y: Output,
    loss: Output,
    train: Output,
    init: Output,
}

/// A 6-8-3 MLP trained by SGD; with `split`, layer 0 asks for CPU:0 and
/// layer 1 (and the loss) for CPU:1.
fn mlp(split: bool) -> Mlp {
    let g = Graph::new();
    let dev = |d: &str| if split { g.device(d) } else { g.clone() };
    let x = g.placeholder("x", DType::F32, [4, 6]).unwrap();
    let y = g.placeholder("y", DType::I64, [4]).unwrap();
    let g0 = dev("/cpu:0");
    let w0 = g0.variable("w0", g0.random_uniform([6, 8], DType::F32, -0.5, 0.5, 1).unwrap()).unwrap();
    let b0 = g0.variable("b0", g0.zeros(DType::F32, [8]).unwrap()).unwrap();
    let h = g0.relu(g0.bias_add(g0.matmul(&x, &w0).unwrap(), &b0).unwrap()).unwrap();
    let g1 = dev("/cpu:1");
    let w1 = g1.variable("w1", g1.random_uniform([8, 3], DType::F32, -0.5, 0.5, 2).unwrap()).unwrap();
    let b1 = g1.variable("b1", g1.zeros(DType::F32, [3]).unwrap()).unwrap();
    let logits = g1.bias_add(g1.matmul(&h, &w1).unwrap(), &b1).unwrap();
    let loss = g1.reduce_mean(g1.sparse_softmax_cross_entropy_with_logits(&logits, &y).unwrap(), &[], false).unwrap();
    // Gradients and updates are built unconstrained: the updates follow
    // their variables (colocation), the gradient ops go to the first device.
    let vars = g.variables();
    let grads = g.gradients(&[&loss], &vars.iter().collect::<Vec<_>>()).unwrap();
    let pairs: Vec<(Output, Output)> = vars.iter().cloned().zip(grads.into_iter().map(|d| d.unwrap())).collect();
    let train = Optimizer::Sgd { lr: 0.3 }.apply_gradients(&g, &pairs).unwrap();
    let init = g.global_variables_initializer().unwrap();
    Mlp { g, x, y, loss, train, init }
}

fn batch() -> (Tensor, Tensor) {
    let xs: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 * 0.1 - 0.5).collect();
    (Tensor::from_vec(xs, [4, 6]).unwrap(), Tensor::from_vec(vec![0i64, 2, 1, 2], [4]).unwrap())
}

/// Losses of 4 SGD steps and the final variables.
fn train(m: &Mlp, o: SessionOptions) -> (Vec<f32>, Vec<(String, Tensor)>, Session) {
    let s = Session::with_options(&m.g, o).unwrap();
    s.run(&[], &[], &[&m.init]).unwrap();
    let (bx, by) = batch();
    let feeds = [(&m.x, &bx), (&m.y, &by)];
    let mut losses = Vec::new();
    for _ in 0..4 {
        losses.push(s.run(&feeds, &[&m.loss], &[&m.train]).unwrap()[0].to_vec::<f32>().unwrap()[0]);
    }
    let vars = s.variable_values().unwrap();
    (losses, vars, s)
}

#[test]
fn two_devices_train_exactly_like_one() {
    let (l1, v1, s1) = train(&mlp(false), opts(1, CommFormat::F32));
    let (l2, v2, s2) = train(&mlp(true), opts(2, CommFormat::F32));
    assert_eq!(l1, l2, "losses");
    assert!(l1[3] < l1[0], "SGD lowers the loss: {l1:?}");
    assert_eq!(v1, v2, "variables after 4 steps");
    assert_eq!(s1.comm_stats().transfers, 0, "one device: no transfers");
    let c = s2.comm_stats();
    assert!(c.transfers > 0);
    assert_eq!(c.bytes_sent, c.bytes_f32, "f32 travels as is");
}

#[test]
fn variables_and_their_readers_and_updaters_share_a_device() {
    let m = mlp(true);
    let s = Session::with_options(&m.g, opts(2, CommFormat::F32)).unwrap();
    let p = s.placement();
    for n in m.g.nodes() {
        let var = match n.attrs.get("var") {
            Some(AttrValue::Str(v)) => v.clone(),
            _ if n.op == "Variable" => n.name.clone(),
            _ => continue,
        };
        assert_eq!(p.device_of(&m.g, &n.name).unwrap(), p.device_of(&m.g, &var).unwrap(), "{} ({}) with {var}", n.name, n.op);
    }
    assert_eq!(p.device_of(&m.g, "w0").unwrap().to_string(), CPU0);
    assert_eq!(p.device_of(&m.g, "w1").unwrap().to_string(), CPU1);
}

/// x (n values on CPU:0) -> y = x * 1 on CPU:1, fetched there.
fn one_edge(n: usize) -> (Graph, Output, Vec<f32>) {
    let g = Graph::new();
    let v: Vec<f32> = (0..n).map(|i| (i as f32 - 40.0) * 0.173).collect();
    let x = g.device("/cpu:0").op("Identity").name("x").input(g.device("/cpu:0").constant(Tensor::from_vec(v.clone(), [n]).unwrap()).unwrap()).build().unwrap();
    let one = g.device("/cpu:1").scalar(1.0, DType::F32).unwrap();
    let y = g.device("/cpu:1").mul(&x, &one).unwrap();
    (g, y, v)
}

#[test]
fn quantized_transfers_count_bytes_exactly_and_stay_within_bounds() {
    let n = 100;
    for f in ["f32", "f16", "bf16", "int8", "int8:32"] {
        let format: CommFormat = f.parse().unwrap();
        let (g, y, v) = one_edge(n);
        let s = Session::with_options(&g, opts(2, format)).unwrap();
        let got = s.run(&[], &[&y], &[]).unwrap()[0].to_vec::<f32>().unwrap();
        let c = s.comm_stats();
        assert_eq!(c.transfers, 1, "{f}");
        assert_eq!(c.bytes_sent, format.bytes_for(n as u64), "{f}");
        assert_eq!(c.bytes_f32, 4 * n as u64, "{f}");
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        for (a, b) in v.iter().zip(&got) {
            assert!(f64::from((a - b).abs()) <= format.round_trip_bound(*a, max) * (1.0 + 1e-6), "{f}: {a} -> {b}");
        }
        if format == CommFormat::F32 {
            assert_eq!(got, v);
        } else {
            assert_ne!(got, v, "{f} is lossy on these values");
        }
        // Cumulative over steps.
        s.run(&[], &[&y], &[]).unwrap();
        assert_eq!(s.comm_stats().bytes_sent, 2 * format.bytes_for(n as u64), "{f}");
    }
    // A per-edge format overrides the graph's.
    let (g, y, _) = one_edge(n);
    let mut o = opts(2, CommFormat::F32);
    o.partition.edge_formats.insert("x:0".into(), CommFormat::Bf16);
    let s = Session::with_options(&g, o).unwrap();
    s.run(&[], &[&y], &[]).unwrap();
    assert_eq!(s.comm_stats().bytes_sent, 2 * n as u64);
}

#[test]
fn a_failing_kernel_on_one_device_fails_the_step_and_restores_variables() {
    let g = Graph::new();
    let g0 = g.device("/cpu:0");
    let g1 = g.device("/cpu:1");
    let w = g0.variable("w", g0.constant(Tensor::from_vec(vec![1f32, 2.0], [2]).unwrap()).unwrap()).unwrap();
    let bump = g0.assign_add(&w, g0.constant(Tensor::from_vec(vec![10f32, 10.0], [2]).unwrap()).unwrap()).unwrap();
    let idx = g1.placeholder("idx", DType::I64, [1]).unwrap();
    // The gather runs after the update (control edge across devices) and
    // fails for an out-of-range index.
    let table = g1.constant(Tensor::from_vec(vec![5f32, 6.0, 7.0], [3]).unwrap()).unwrap();
    let pick = g1.control_dependencies(&[&bump]).unwrap().gather(&table, &idx).unwrap();
    let init = g.global_variables_initializer().unwrap();
    let s = Session::with_options(&g, opts(2, CommFormat::F32)).unwrap();
    s.run(&[], &[], &[&init]).unwrap();
    let ok = Tensor::from_vec(vec![2i64], [1]).unwrap();
    assert_eq!(s.run(&[(&idx, &ok)], &[&pick], &[]).unwrap()[0].to_vec::<f32>().unwrap(), vec![7.0]);
    assert_eq!(s.variable_value("w").unwrap().to_vec::<f32>().unwrap(), vec![11.0, 12.0]);
    let bad = Tensor::from_vec(vec![9i64], [1]).unwrap();
    let e = s.run(&[(&idx, &bad)], &[&pick], &[]).unwrap_err().to_string();
    assert!(e.starts_with(&format!("node '{}' (Gather): index 9 out of range", pick.name())), "{e}");
    assert!(e.ends_with(&format!("(on device {CPU1})")), "{e}");
    assert_eq!(s.variable_value("w").unwrap().to_vec::<f32>().unwrap(), vec![11.0, 12.0], "the failed step's update is undone");
    // The session still works afterwards.
    s.run(&[(&idx, &ok)], &[&pick], &[]).unwrap();
    assert_eq!(s.variable_value("w").unwrap().to_vec::<f32>().unwrap(), vec![21.0, 22.0]);
}

#[test]
fn a_recv_without_its_send_is_an_error_not_a_hang() {
    let g = Graph::new();
    let r = g
        .device("/cpu:1")
        .op("Recv")
        .name("orphan")
        .attr("edge", AttrValue::Str("ghost:0".into()))
        .attr("send_device", AttrValue::Str(CPU0.into()))
        .attr("recv_device", AttrValue::Str(CPU1.into()))
        .attr("dtype", AttrValue::DType(DType::F32))
        .attr("shape", AttrValue::Shape(flowlab_engine::PartialShape::scalar()))
        .build()
        .unwrap();
    let mut o = opts(2, CommFormat::F32);
    o.recv_timeout = Duration::from_millis(50);
    let s = Session::with_options(&g, o).unwrap();
    let e = s.run(&[], &[&r], &[]).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "rendezvous 'ghost:0' from {CPU0} to {CPU1} (step 0): Recv 'orphan' on {CPU1} has no Send: no node of this step on {CPU0} sends 'ghost:0'"
        )
    );
}

#[test]
fn placement_errors_surface_at_session_creation_naming_the_node() {
    let g = Graph::new();
    g.device("/cpu:5").op("NoOp").name("far").build().unwrap();
    let e = Session::with_options(&g, opts(2, CommFormat::F32)).err().unwrap().to_string();
    assert_eq!(e, format!("cannot place node 'far': requested device '/device:CPU:5' matches no device of the set ({CPU0}, {CPU1})"));
    let g = Graph::new();
    let w = g.device("/cpu:0").variable("w", g.constant(Tensor::scalar(1f32)).unwrap()).unwrap();
    g.device("/cpu:1").assign_add(&w, g.constant(Tensor::scalar(1f32)).unwrap()).unwrap();
    let e = Session::with_options(&g, opts(2, CommFormat::F32)).err().unwrap().to_string();
    assert!(e.starts_with("cannot place node 'AssignAdd': it requests '/cpu:1' but node 'w'"), "{e}");
}

#[test]
fn traces_name_devices_and_transfers() {
    let m = mlp(true);
    let s = Session::with_options(&m.g, opts(2, CommFormat::Bf16)).unwrap();
    s.run(&[], &[], &[&m.init]).unwrap();
    let (bx, by) = batch();
    let (_, st) = s.run_traced(&[(&m.x, &bx), (&m.y, &by)], &[&m.loss], &[&m.train]).unwrap();
    let dev_of = |name: &str| st.nodes.iter().find(|n| n.node == name).map(|n| n.device.clone());
    assert_eq!(dev_of("w0").as_deref(), Some(CPU0));
    assert_eq!(dev_of("w1").as_deref(), Some(CPU1));
    assert!(!st.transfers.is_empty());
    for t in &st.transfers {
        assert!(t.end_us >= t.start_us, "{t:?}");
        assert_ne!(t.send_device, t.recv_device);
        assert!([CPU0, CPU1].contains(&t.send_device.as_str()), "{t:?}");
    }
    // h travels forward to CPU:1 in bf16: 4x8 values, 2 bytes each.
    let h = st.transfers.iter().find(|t| t.send_device == CPU0 && t.bytes == 64 && t.format == "bf16");
    assert!(h.is_some(), "{:?}", st.transfers);
    let json: serde_json::Value = serde_json::from_str(&st.to_chrome_trace()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let mut procs: Vec<&str> =
        events.iter().filter(|e| e["ph"] == "M" && e["name"] == "process_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    procs.sort();
    assert_eq!(procs, [CPU0, CPU1]);
    let spans = events.iter().filter(|e| e["cat"] == "transfer" && e["ph"] == "X").count();
    assert_eq!(spans, 2 * st.transfers.len(), "one span on each side");
    let flows = events.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f").count();
    assert_eq!(flows, 2 * st.transfers.len());
    for e in events.iter().filter(|e| e["ph"] == "X") {
        assert!(e["ts"].as_f64().is_some() && e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
    }
}

/// On one thread per device, a Send runs as soon as its tensor is ready,
/// before the other nodes that tensor made ready: the receiving device
/// starts while the sender still computes. Reference: node order from the
/// trace (a chain of six 512x512 products takes milliseconds; handing over
/// a tensor microseconds). Both orders of building the consumers.
#[test]
fn a_ready_send_runs_before_sibling_compute_on_one_thread() {
    for remote_first in [true, false] {
        let g = Graph::new();
        let g0 = g.device("/cpu:0");
        let g1 = g.device("/cpu:1");
        let x = g0.placeholder("x", DType::F32, [512, 512]).unwrap();
        let p = g0.op("Neg").input(&x).build().unwrap();
        let remote = |g1: &Graph| g1.reduce_sum(&p, &[], false).unwrap();
        let z = if remote_first { Some(remote(&g1)) } else { None };
        let mut y = g0.matmul(&p, &x).unwrap();
        for _ in 0..5 {
            y = g0.matmul(&y, &x).unwrap();
        }
        let z = z.unwrap_or_else(|| remote(&g1));
        let sess = Session::with_options(&g, opts(2, CommFormat::F32)).unwrap();
        let v = Tensor::from_vec(vec![0.001f32; 512 * 512], vec![512, 512]).unwrap();
        for _ in 0..3 {
            let (_, stats) = sess.run_traced(&[(&x, &v)], &[&z, &y], &[]).unwrap();
            let t = stats.transfers.iter().find(|t| t.edge.starts_with(&p.name())).expect("Neg's output crosses to CPU:1");
            let first_product = stats.nodes.iter().filter(|n| n.op == "MatMul").map(|n| n.start_us).fold(f64::INFINITY, f64::min);
            assert!(t.start_us <= first_product, "remote first: {remote_first}: Send started at {} us, after the first MatMul at {first_product} us", t.start_us);
            // The receiver's Sum finished long before CPU:0's chain did.
            let sum = stats.nodes.iter().find(|n| n.op == "Sum").unwrap();
            let last_product = stats.nodes.iter().filter(|n| n.op == "MatMul").map(|n| n.end_us).fold(0.0, f64::max);
            assert!(sum.end_us < last_product, "remote first: {remote_first}: Sum ended at {} us, the chain at {last_product} us", sum.end_us);
        }
    }
}
