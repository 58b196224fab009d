//! Closed-form checks of the graph-level simulator. Op times come from a
//! profile of measured seconds, so every expected step time is exact.

use super::*;
use flowlab_engine::{DType, Graph, Output, PartitionOptions, Placement, Shape};
use flowlab_hw::{CommFormat, LinkSharing, LinkSpec, OpMeasurement, Profile};

const MS: u64 = 1_000_000_000; // picoseconds

/// Ops priced by hand: Neg 1 ms, Add 2 ms, sources free.
pub(crate) fn profile() -> Profile {
    let mut p = Profile::default();
    for (op, s) in [("Neg", 1e-3), ("Add", 2e-3), ("Placeholder", 0.0), ("Const", 0.0), ("Variable", 0.0), ("Assign", 0.0)] {
        p.ops.insert(op.into(), OpMeasurement::Seconds(s));
    }
    p
}

/// `n` K40s joined by a 1 GB/s link with 10 us latency.
pub(crate) fn cluster(n: usize) -> VirtualCluster {
    let link = LinkSpec { name: "test-link".into(), bandwidth_gb_s: 1.0, latency_us: 10.0, sharing: LinkSharing::Pair };
    VirtualCluster::parse(&format!("{n}xk40")).unwrap().with_link(link)
}

pub(crate) fn opts() -> SimOptions {
    SimOptions { partition: PartitionOptions::default(), profile: Some(profile()), ..Default::default() }
}

pub(crate) fn neg(x: &Output) -> Output {
    x.graph().op("Neg").input(x).build().unwrap()
}

/// All nodes on device `d`, then `moves` applied.
fn place(g: &Graph, c: &VirtualCluster, d: usize, moves: &[(&Output, usize)]) -> Placement {
    let mut p = Placement::from_devices(vec![c.devices()[d].name.clone(); g.num_nodes()]);
    for (o, k) in moves {
        p.set(o.node_id(), c.devices()[*k].name.clone());
    }
    p
}

#[test]
fn a_chain_on_one_device_takes_the_sum_of_its_op_times() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let c = neg(&neg(&neg(&x)));
    let cl = cluster(2);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let r = sim.simulate(&place(&g, &cl, 1, &[])).unwrap();
    assert_eq!(r.step_ps, 3 * MS);
    assert_eq!(r.devices[1].ops, 4);
    assert_eq!(r.devices[0].ops, 0);
    assert!((r.devices[1].busy_seconds - 3e-3).abs() < 1e-15);
    assert!((r.devices[1].utilization - 1.0).abs() < 1e-12);
    assert_eq!(r.transfers, 0);
    assert_eq!(r.critical_path, vec!["x", "Neg", "Neg_1", "Neg_2"]);
    assert_eq!(c.name(), "Neg_2");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn ops_priced_beyond_the_clock_are_refused_and_long_ones_still_add_up() {
    // Neg priced by a profile: 1e9 s cannot be one op of a step (the
    // replay's picosecond clock holds 4.6e6 s at worst), eight of 1e6 s
    // cannot be one step, three of 1e6 s are one step of exactly 3e6 s.
    let chain = |negs: usize, seconds: f64| {
        let g = Graph::new();
        let mut x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
        for _ in 0..negs {
            x = neg(&x);
        }
        let mut o = opts();
        o.profile.as_mut().unwrap().ops.insert("Neg".into(), OpMeasurement::Seconds(seconds));
        let cl = cluster(1);
        GraphSimulator::new(&g, &cl, &o).and_then(|sim| sim.simulate(&place(&g, &cl, 0, &[])))
    };
    let e = chain(1, 1e9).unwrap_err().to_string();
    assert_eq!(e, "node 'Neg': its Neg is priced at 1.000e9 s on k40, beyond the 4.6e6 s of simulated time the graph simulator's clock holds");
    let e = chain(8, 1e6).unwrap_err().to_string();
    assert!(e.starts_with("node 'Neg': the slowest op (Neg, 1.000e6 s) and the step's other ops and transfers add up to 8.000e6 s at worst"), "{e}");
    assert_eq!(chain(3, 1e6).unwrap().step_ps, 3_000_000 * 1_000_000_000_000);
}

#[test]
fn independent_branches_on_two_devices_take_the_longer_one() {
    let g = Graph::new();
    let x0 = g.placeholder("x0", DType::F32, Shape::new(vec![10])).unwrap();
    let x1 = g.placeholder("x1", DType::F32, Shape::new(vec![10])).unwrap();
    let a = neg(&neg(&neg(&x0)));
    let b1 = neg(&x1);
    let b = neg(&b1);
    let cl = cluster(2);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let split = place(&g, &cl, 0, &[(&x1, 1), (&b1, 1), (&b, 1)]);
    let r = sim.simulate(&split).unwrap();
    assert_eq!(r.step_ps, 3 * MS, "max(3 ms, 2 ms)");
    assert_eq!((r.devices[0].ops, r.devices[1].ops), (4, 3));
    assert_eq!(r.transfers, 0);
    assert_eq!(*r.critical_path.last().unwrap(), a.name());
    let one = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    assert_eq!(one.step_ps, 5 * MS, "3 ms + 2 ms serialized");
}

#[test]
fn a_transfer_costs_latency_plus_bytes_over_bandwidth_and_bf16_halves_the_bytes() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let y = neg(&x);
    let z = neg(&x);
    let cl = cluster(2);
    let p = place(&g, &cl, 0, &[(&y, 1), (&z, 1)]);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    // One transfer of 4,000 bytes (one Recv per tensor per device, however
    // many consumers): 10 us + 4,000 B / 1 GB/s = 14 us, then two 1 ms ops.
    assert_eq!(r.transfers, 1);
    assert_eq!(r.transfer_bytes, 4000);
    assert_eq!(r.step_ps, 14_000_000 + 2 * MS);
    assert_eq!(r.links.len(), 1);
    assert_eq!((r.links[0].bytes, r.links[0].transfers), (4000, 1));
    assert_eq!(r.links[0].link, "test-link");
    assert_eq!(r.links[0].src, cl.devices()[0].name.to_string());
    let mut o = opts();
    o.partition.format = CommFormat::Bf16;
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!(r.transfer_bytes, 2000);
    assert_eq!(r.step_ps, 12_000_000 + 2 * MS);
    // A per-edge override beats the graph's format.
    o.partition.edge_formats.insert("x:0".into(), CommFormat::Int8 { block: None });
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!(r.transfer_bytes, 1004, "1,000 int8 values and one f32 scale");
}

/// `n` K40s on a 1 GB/s, 10 us link shared per device port.
fn port_cluster(n: usize) -> VirtualCluster {
    let link = LinkSpec { name: "test-port".into(), bandwidth_gb_s: 1.0, latency_us: 10.0, sharing: LinkSharing::Port };
    VirtualCluster::parse(&format!("{n}xk40")).unwrap().with_link(link)
}

/// Two 4 MB tensors x1, x2 (free sources) and a Neg of each, y1 and y2.
fn two_4mb_tensors_and_their_negs() -> (Graph, [Output; 4]) {
    let g = Graph::new();
    let x1 = g.placeholder("x1", DType::F32, Shape::new(vec![1_000_000])).unwrap();
    let x2 = g.placeholder("x2", DType::F32, Shape::new(vec![1_000_000])).unwrap();
    let (y1, y2) = (neg(&x1), neg(&x2));
    (g, [x1, x2, y1, y2])
}

#[test]
fn sends_from_one_device_share_its_port_where_pair_links_let_two_engines_run() {
    // Device 0 makes two 4 MB tensors at once; a Neg on device 1 reads one,
    // a Neg on device 2 the other.
    let (g, [x1, x2, y1, y2]) = two_4mb_tensors_and_their_negs();
    // Pair links, two copy engines: both cross at once, 10 us + 4 ms, then
    // the Negs (1 ms) run in parallel.
    let cl = cluster(3);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&place(&g, &cl, 0, &[(&y1, 1), (&y2, 2)])).unwrap();
    assert_eq!(r.step_ps, 10_000_000 + 4 * MS + MS);
    // One port out of device 0: each at half the rate, both end at
    // 10 us + 8 ms (the time of 8 MB through the port), then 1 ms.
    let cl = port_cluster(3);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&place(&g, &cl, 0, &[(&y1, 1), (&y2, 2)])).unwrap();
    assert_eq!(r.step_ps, 10_000_000 + 8 * MS + MS);
    // Two senders into one receiver share its port in: the same 8 ms.
    let p = place(&g, &cl, 2, &[(&x1, 0), (&x2, 1)]);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    assert_eq!(r.step_ps, 10_000_000 + 8 * MS + 2 * MS, "both Negs then run on device 2, one after the other");
    // Disjoint ports: 0 -> 1 and 2 -> 0 cross at full rate each.
    let p = place(&g, &cl, 0, &[(&y1, 1), (&x2, 2)]);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    assert_eq!(r.step_ps, 10_000_000 + 4 * MS + MS);
}

/// DGX-1's fabric against closed forms: a pair's NVLink bricks are its
/// own wire (2 x 25 or 25 GB/s, 0.7 us), pairs with none share each GPU's
/// PCIe 3 port (15.75 GB/s, 1 us).
#[test]
fn dgx1_pairs_send_over_their_own_bricks_and_the_rest_share_pcie() {
    let (g, [_, _, y1, y2]) = two_4mb_tensors_and_their_negs();
    let cl = VirtualCluster::parse("8xV100").unwrap().wired("dgx1").unwrap();
    let step = |a: usize, b: usize| GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&place(&g, &cl, 0, &[(&y1, a), (&y2, b)])).unwrap().step_ps;
    // 4 MB to GPU 1 (2 bricks: 80 us) and to GPU 2 (1 brick: 160 us) at
    // once on V100's two copy engines; then the Negs (1 ms) in parallel.
    assert_eq!(step(1, 2), 700_000 + 160_000_000 + MS);
    // GPUs 5 and 6 have no brick to GPU 0: both through its PCIe port out,
    // 8 MB / 15.75 GB/s after 1 us.
    let pcie = |bytes: f64| 1_000_000.0 + bytes / 15.75e9 * 1e12;
    assert!((step(5, 6) as f64 - (pcie(8e6) + MS as f64)).abs() < 2_000.0, "{}", step(5, 6));
    // One over bricks, one over PCIe: separate wires.
    assert!((step(1, 5) as f64 - (pcie(4e6) + MS as f64)).abs() < 2_000.0, "{}", step(1, 5));
    // A fabric for another number of devices, or an unknown name, is refused.
    let e = VirtualCluster::parse("4xV100").unwrap().wired("dgx1").unwrap_err().to_string();
    assert!(e.contains("fabric `dgx1` wires 8 devices, the cluster has 4"), "{e}");
    let e = VirtualCluster::parse("8xV100").unwrap().wired("dgx2").unwrap_err().to_string();
    assert!(e.contains("unknown link `dgx2`") && e.contains("dgx1"), "{e}");
}

#[test]
fn control_edges_across_devices_are_scalar_transfers() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![10])).unwrap();
    let a = neg(&x);
    let gated = g.control_dependencies(&[&a]).unwrap();
    let b = gated.op("Neg").input(&x).build().unwrap();
    let cl = cluster(2);
    let p = place(&g, &cl, 0, &[(&b, 1)]);
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    // x (40 B) and a's control signal (one f32) go to device 1; b waits for a.
    assert_eq!(r.transfers, 2);
    assert_eq!(r.transfer_bytes, 44);
    // Both transfers share one copy engine only if needed: K40 has two, so
    // the control transfer (10.004 us) leaves at 1 ms and b ends 1 ms later.
    assert_eq!(r.step_ps, MS + 10_004_000 + MS);
    assert_eq!(r.critical_path, vec!["x", "Neg", "Neg_1"]);
}

#[test]
fn peak_memory_follows_tensor_lifetimes_and_variables_stay() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let a = neg(&x);
    let b = neg(&a);
    g.op("Add").input(&a).input(&b).build().unwrap();
    let cl = cluster(1);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let r = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    // x 4 kB until a ends; a lives until Add ends; during Add: a, b and the
    // sum, 12 kB.
    assert_eq!(r.devices[0].peak_memory_bytes, 12_000);
    assert!(!r.over_memory);
    assert_eq!(r.step_ps, 4 * MS);

    // A variable (500 f32 = 2 kB) is resident for the whole step.
    let init = g.constant(flowlab_engine::Tensor::from_vec(vec![0f32; 500], vec![500]).unwrap()).unwrap();
    g.variable("w", init).unwrap();
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let r = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    assert_eq!(r.devices[0].peak_memory_bytes, 14_000);

    let mut small = cl.clone();
    small.set_capacity(0, 10_000.0).unwrap();
    let r = GraphSimulator::new(&g, &small, &opts()).unwrap().simulate(&place(&g, &small, 0, &[])).unwrap();
    assert!(r.over_memory);
    assert!(r.devices[0].over_capacity);
    assert_eq!(
        r.memory_error.as_deref(),
        Some("over memory capacity: /job:localhost/replica:0/task:0/device:GPU:0 (k40) needs 14000 bytes at peak but holds 10000")
    );
}

#[test]
fn a_profile_without_an_op_warns_and_falls_back_to_the_roofline() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let y = x.graph().op("Relu").input(&x).build().unwrap();
    let cl = cluster(1);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    assert_eq!(
        sim.warnings(),
        ["the profile has no measurement for op 'Relu' (e.g. node 'Relu'): using the roofline"]
    );
    let r = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    let k40 = &cl.devices()[0].spec;
    let cost = flowlab_engine::op_cost("Relu", &Default::default(), &[(DType::F32, Shape::new(vec![1000]))], &[(DType::F32, Shape::new(vec![1000]))]).unwrap();
    let want = k40.op_time_seconds(
        &flowlab_hw::OpCost { flops: cost.flops, bytes: cost.bytes, dtype: flowlab_hw::Dtype::F32, class: flowlab_hw::OpClass::Elementwise },
        None,
    );
    assert_eq!(r.step_ps, crate::SimTime::from_secs_f64(want).0);
    assert_eq!(r.warnings.len(), 1);
    let _ = y;
}

#[test]
fn matmul_on_a_tpu_runs_on_the_systolic_array() {
    use flowlab_hw::systolic::{ArrayConfig, Dataflow, Layer, simulate_layer};
    let g = Graph::new();
    let a = g.placeholder("a", DType::F32, Shape::new(vec![256, 512])).unwrap();
    let b = g.placeholder("b", DType::F32, Shape::new(vec![512, 128])).unwrap();
    g.matmul(&a, &b).unwrap();
    let cl = VirtualCluster::parse("tpu-v2").unwrap();
    let spec = cl.devices()[0].spec.clone();
    let sys = spec.systolic.clone().unwrap();
    let mut cfg = ArrayConfig::new(sys.rows, sys.cols, Dataflow::Ws).unwrap();
    cfg.clock_mhz = sys.clock_mhz;
    let rep = simulate_layer(&cfg, &Layer::gemm("m", 256, 128, 512).unwrap()).unwrap();
    let want = spec.launch_overhead_seconds() + rep.end_to_end_cycles as f64 / (sys.clock_mhz * 1e6);
    let mut o = SimOptions::default();
    let mut p = Profile::default();
    p.ops.insert("Placeholder".into(), OpMeasurement::Seconds(0.0));
    o.profile = Some(p);
    let sim = GraphSimulator::new(&g, &cl, &o).unwrap();
    let r = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    assert_eq!(r.step_ps, crate::SimTime::from_secs_f64(want).0);
}

#[test]
fn bad_placements_and_cycles_are_named() {
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![4])).unwrap();
    let y = neg(&x);
    let cl = cluster(1);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let mut p = place(&g, &cl, 0, &[]);
    p.set(y.node_id(), flowlab_engine::DeviceName::full("localhost", 0, 0, "GPU", 7));
    assert_eq!(
        sim.simulate(&p).unwrap_err().to_string(),
        "cannot place node 'Neg': it is placed on '/job:localhost/replica:0/task:0/device:GPU:7', \
         which is not a device of the simulated set (/job:localhost/replica:0/task:0/device:GPU:0)"
    );
    let short = Placement::from_devices(vec![cl.devices()[0].name.clone()]);
    assert_eq!(sim.simulate(&short).unwrap_err().to_string(), "cannot place node 'Neg': the placement covers 1 of the graph's 2 nodes");

    let z = neg(&y);
    let mut nodes = g.nodes();
    nodes[y.node_id()].inputs = vec![(z.node_id(), 0)];
    let e = SimGraph::from_nodes(nodes).unwrap_err().to_string();
    assert_eq!(e, "node 'Neg': the graph has a cycle through this node (2 of 3 nodes are on or after a cycle)");
}

#[test]
fn transfers_match_the_engines_partitioner() {
    // A diamond with a fan-out and a control edge, spread over three devices.
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![300])).unwrap();
    let a = neg(&x);
    let b = neg(&x);
    let c = neg(&a);
    let gated = g.control_dependencies(&[&b]).unwrap();
    let d = gated.op("Add").input(&a).input(&c).build().unwrap();
    let e = g.op("Add").input(&b).input(&d).build().unwrap();
    let cl = cluster(3);
    let mut o = opts();
    o.partition.format = CommFormat::Bf16;
    let p = place(&g, &cl, 0, &[(&b, 1), (&c, 2), (&d, 1), (&e, 2)]);
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    let parts = flowlab_engine::partition_with(&g, &p, &o.partition).unwrap();
    let recvs: Vec<_> = parts.iter().flat_map(|p| p.recvs.iter()).collect();
    assert_eq!(r.transfers, recvs.len());
    let bytes: u64 = recvs.iter().map(|t| t.format.bytes_for(t.shape.num_elements().unwrap() as u64)).sum();
    assert_eq!(r.transfer_bytes, bytes);
    assert_eq!(r.devices.iter().map(|d| d.ops).sum::<usize>(), g.num_nodes());
}

#[test]
fn a_pruned_step_replays_the_nodes_the_engine_runs() {
    // Reference: the engine's own prepared step for the same signature.
    let m = flowlab_models::zoo::build("mlp", 8).unwrap();
    let sess = flowlab_engine::Session::with_options(&m.graph, flowlab_engine::SessionOptions { threads: 1, ..Default::default() }).unwrap();
    let inputs: Vec<&Output> = m.inputs.iter().collect();
    let run = sess.num_nodes_run(&inputs, &[&m.loss], &[&m.train_op]).unwrap();
    let step = m.step();
    let c = cluster(2);
    let sim = GraphSimulator::new(&m.graph, &c, &SimOptions { step: Some(step), ..opts() }).unwrap();
    let g = sim.graph();
    // Variables only named by update ops (optimizer slots): no edge reads them.
    let unread = (0..g.len()).filter(|&i| g.is_variable[i] && g.slots(i).all(|s| g.slot_consumers.get(s).is_empty())).count();
    let fed = m.inputs.len();
    // The engine runs neither those nor fed placeholders; the simulator
    // keeps both (memory held through the step, sources of sends).
    assert!(unread >= 6, "{unread}: the momentum slots of 3 layers");
    assert_eq!(g.len() - unread - fed, run, "simulated nodes beyond unread variables and feeds");
    assert!(!(0..g.len()).any(|i| g.names[i].contains("init") || g.ops[i] == "TruncatedNormal"), "no initializer in the step");
    assert_eq!(g.full_len(), m.graph.num_nodes());
    // A placement of the pruned step expands to the full graph, and the
    // left-out initializers follow their variables.
    let dev: Vec<u16> = (0..g.len()).map(|i| (i % 2) as u16).collect();
    let full = sim.placement_of(&dev);
    assert_eq!(full.len(), m.graph.num_nodes());
    assert_eq!(sim.device_indices(&full).unwrap(), dev);
    for n in m.graph.nodes() {
        if n.op == "Assign"
            && let Some(flowlab_engine::AttrValue::Str(var)) = n.attrs.get("var")
        {
            let id = |name: &str| m.graph.nodes().iter().position(|x| x.name == name).unwrap();
            assert_eq!(full.device(id(&n.name)), full.device(id(var)), "initializer {} with {var}", n.name);
        }
    }
}

#[test]
fn a_shape_keyed_profile_prices_its_shapes_and_names_the_nodes_it_lacks() {
    // x[1000] -> Neg -> Neg -> Add(., x): the profile measured Neg on f32[1000]
    // at 3 ms of kernel; the Add has no key and falls back to the op-name
    // entry (2 ms, from `profile()`).
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let y = neg(&neg(&x));
    let _s = g.op("Add").input(&y).input(&x).build().unwrap();
    let mut p = profile();
    let key = super::profile_key(&g.nodes(), y.node_id(), "gpu");
    assert_eq!(key, "gpu Neg f32[1000] -> f32[1000]", "the key spells device kind, op and types");
    p.shapes.insert(key, flowlab_hw::ShapeMeasurement { op: "Neg".into(), seconds: 3e-3, p10: 3e-3, p90: 3e-3, samples: 4, contended_seconds: None });
    let cl = cluster(1);
    let o = SimOptions { profile: Some(p), ..opts() };
    let sim = GraphSimulator::new(&g, &cl, &o).unwrap();
    let r = sim.simulate(&place(&g, &cl, 0, &[])).unwrap();
    // K40 launch overhead 5 us on top of each measured kernel time.
    assert_eq!(r.step_ps, 2 * (3 * MS + 5_000_000) + 2 * MS);
    assert_eq!(sim.fallback_nodes(), ["x", "Add"], "the placeholder and the Add were not measured by shape");
    assert!(r.warnings.iter().any(|w| w.contains("2 of 4 nodes have no measured shape") && w.contains("Add x1")), "{:?}", r.warnings);
    // A key for another device kind does not apply.
    let mut cpu_only = profile();
    cpu_only.shapes.insert("cpu Neg f32[1000] -> f32[1000]".into(), flowlab_hw::ShapeMeasurement { op: "Neg".into(), seconds: 3e-3, p10: 3e-3, p90: 3e-3, samples: 4, contended_seconds: None });
    let sim = GraphSimulator::new(&g, &cl, &SimOptions { profile: Some(cpu_only), ..opts() }).unwrap();
    assert_eq!(sim.simulate(&place(&g, &cl, 0, &[])).unwrap().step_ps, 2 * MS + 2 * MS, "the op-name seconds (1 ms per Neg)");
}

/// The same graph at four times the shapes its profile measured: each Neg
/// is its measured 3 ms times the roofline's ratio between the shapes. A
/// Neg reads and writes 4 bytes per element, far below a K40's compute
/// for its one flop per element, and both sizes fit its L2, so the ratio
/// is the bytes', exactly 4: 12 ms plus the 5 us launch, by hand.
#[test]
fn a_profile_prices_other_shapes_of_its_graph_from_its_measurements_scaled() {
    let chain = |n: usize| {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, Shape::new(vec![n])).unwrap();
        let y = neg(&neg(&x));
        g.op("Add").input(&y).input(&x).build().unwrap();
        g
    };
    let (small, big) = (chain(1000), chain(4000));
    let mut p = Profile::default();
    for (op, s) in [("Add", 2e-3), ("Placeholder", 0.0)] {
        p.ops.insert(op.into(), OpMeasurement::Seconds(s));
    }
    let key = "gpu Neg f32[1000] -> f32[1000]".to_string();
    p.shapes.insert(key.clone(), flowlab_hw::ShapeMeasurement { op: "Neg".into(), seconds: 3e-3, p10: 3e-3, p90: 3e-3, samples: 4, contended_seconds: None });
    p.nodes = super::profiled_nodes(small.nodes(), "gpu").unwrap().into_iter().filter(|(_, n)| n.key == key).collect();
    assert_eq!(p.nodes.keys().collect::<Vec<_>>(), ["Neg", "Neg_1"]);
    let cl = cluster(1);
    let sim = GraphSimulator::new(&big, &cl, &SimOptions { profile: Some(p.clone()), ..opts() }).unwrap();
    let r = sim.simulate(&place(&big, &cl, 0, &[])).unwrap();
    assert_eq!(r.step_ps, 2 * (12 * MS + 5_000_000) + 2 * MS);
    assert_eq!(sim.scaled_nodes(), ["Neg", "Neg_1"]);
    assert_eq!(sim.fallback_nodes(), ["x", "Add"]);
    assert!(r.warnings.iter().any(|w| w.starts_with("2 of 4 nodes are priced from their measured time at the profile's shapes")), "{:?}", r.warnings);
    // At the profiled shapes the key applies as measured; a record whose
    // op is not the node's is not used.
    let sim = GraphSimulator::new(&small, &cl, &SimOptions { profile: Some(p.clone()), ..opts() }).unwrap();
    assert_eq!(sim.simulate(&place(&small, &cl, 0, &[])).unwrap().step_ps, 2 * (3 * MS + 5_000_000) + 2 * MS);
    assert!(sim.scaled_nodes().is_empty());
    let mut other_op = p;
    for n in other_op.nodes.values_mut() {
        n.key = key.replace("Neg", "Exp");
    }
    let sim = GraphSimulator::new(&big, &cl, &SimOptions { profile: Some(other_op), ..opts() }).unwrap();
    assert!(sim.scaled_nodes().is_empty());
    assert_eq!(sim.fallback_nodes(), ["x", "Neg", "Neg_1", "Add"]);
}

#[test]
fn cpus_run_their_own_send_and_recv_kernels() {
    // x -> Neg (CPU 0) -> Neg (CPU 1), 1,000 f32 over a 1 GB/s, 10 us link.
    // With Send = 10 us + 1 ns per element and Recv = 5 us on devices
    // without copy engines: 1 ms + 11 us (Send) + 14 us (link) + 5 us
    // (Recv) + 1 ms. Without transfer costs: 1 ms + 14 us + 1 ms.
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let a = neg(&x);
    let b = neg(&a);
    let link = LinkSpec { name: "test-link".into(), bandwidth_gb_s: 1.0, latency_us: 10.0, sharing: LinkSharing::Pair };
    let cl = VirtualCluster::parse("2xcpu").unwrap().with_link(link);
    assert_eq!(cl.devices()[0].spec.copy_engines, 0, "the catalog CPU has no copy engine");
    let p = place(&g, &cl, 0, &[(&b, 1)]);
    let plain = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    assert_eq!(plain.step_ps, 2 * MS + 14_000_000);
    let mut o = opts();
    o.transfer_compute.insert("f32".into(), flowlab_hw::TransferCompute { send_us: 10.0, send_ns_per_element: 1.0, recv_us: 5.0, recv_ns_per_element: 0.0 });
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!(r.step_ps, 2 * MS + 11_000_000 + 14_000_000 + 5_000_000);
    assert_eq!(r.devices[0].busy_seconds, 1e-3 + 11e-6, "the sender's Send kernel is device time");
    assert_eq!(r.devices[1].busy_seconds, 1e-3 + 5e-6, "so is the receiver's Recv");
    // An int8 edge has no entry: its kernels cost nothing.
    o.partition.format = CommFormat::Int8 { block: None };
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!(r.step_ps, 2 * MS + 10_000_000 + 1_004_000);
}

#[test]
fn on_cpus_that_run_their_transfers_the_node_readied_last_runs_first() {
    // The engine's one-thread executor is depth first: after `a`, its two
    // consumers are ready; the one readied last (`c`, built second) runs
    // first. Reference: the engine's stack order (see runtime/executor.rs).
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![10])).unwrap();
    let a = neg(&x);
    let b = neg(&a);
    let c = g.op("Add").input(&a).input(&a).build().unwrap();
    let cl = VirtualCluster::parse("1xcpu").unwrap();
    let p = place(&g, &cl, 0, &[]);
    let mut o = opts();
    o.transfer_compute.insert("f32".into(), flowlab_hw::TransferCompute::default());
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    // Add 2 ms then Neg 1 ms: the last op is b, after a (1 ms) and c.
    assert_eq!(r.step_ps, 4 * MS);
    assert_eq!(*r.critical_path.last().unwrap(), b.name());
    // Earliest-ready (no transfer costs given): b (lower id) first, c last.
    let r = GraphSimulator::new(&g, &cl, &opts()).unwrap().simulate(&p).unwrap();
    assert_eq!(*r.critical_path.last().unwrap(), c.name());
}

#[test]
fn cpus_of_one_host_slow_each_other_while_both_compute() {
    // Neg (1 ms alone) on CPU 0 and Add (2 ms alone) on CPU 1 start together
    // (each reads its own placeholder). Sharing the host at half speed each,
    // Neg has done its work at 2 ms; by then Add has done 1 ms of its 2 and
    // finishes the rest alone at full speed: 3 ms. Alone: max(1, 2) = 2 ms.
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![10])).unwrap();
    let y = g.placeholder("y", DType::F32, Shape::new(vec![10])).unwrap();
    let _a = neg(&x);
    let c = g.op("Add").input(&y).input(&y).build().unwrap();
    let cl = VirtualCluster::parse("2xcpu").unwrap();
    let p = place(&g, &cl, 0, &[(&y, 1), (&c, 1)]);
    let mut o = opts();
    o.transfer_compute.insert("f32".into(), flowlab_hw::TransferCompute::default());
    let alone = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!((alone.devices[0].busy_seconds, alone.devices[1].busy_seconds, alone.step_ps), (1e-3, 2e-3, 2 * MS));
    o.host_contention = vec![1.0, 0.5];
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&p).unwrap();
    assert_eq!(r.step_ps, 3 * MS);
    assert_eq!((r.devices[0].busy_seconds, r.devices[1].busy_seconds), (2e-3, 3e-3), "wall time each kernel ran");
    // Both on one device never overlap: contention changes nothing.
    let one = place(&g, &cl, 0, &[]);
    assert_eq!(GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&one).unwrap().step_ps, 3 * MS);
    // A speed outside (0, 1] is refused naming the option.
    o.host_contention = vec![1.0, 1.5];
    let e = GraphSimulator::new(&g, &cl, &o).err().unwrap().to_string();
    assert!(e.contains("host_contention") && e.contains("with 2 devices computing must be in (0, 1], got 1.5"), "{e}");
}

#[test]
fn a_profiled_kernel_runs_at_its_own_contended_speed_beside_another_device() {
    // Neg (a alone, no contended time: full speed beside others) on CPU 0,
    // Add (c alone, 2 ms + o measured as 4 ms + o beside a second device:
    // share s = c / (4 ms + o)) on CPU 1. While Neg runs, Add advances s·a;
    // then it finishes alone: step a + c - s·a.
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![10])).unwrap();
    let y = g.placeholder("y", DType::F32, Shape::new(vec![10])).unwrap();
    let n = neg(&x);
    let c = g.op("Add").input(&y).input(&y).build().unwrap();
    let cl = VirtualCluster::parse("2xcpu").unwrap();
    let o_s = cl.devices()[0].spec.launch_overhead_seconds();
    let mut p = profile();
    let m = |seconds: f64, contended: Option<f64>| flowlab_hw::ShapeMeasurement { op: String::new(), seconds, p10: seconds, p90: seconds, samples: 1, contended_seconds: contended };
    p.shapes.insert(super::profile_key(&g.nodes(), n.node_id(), "cpu"), m(1e-3, None));
    p.shapes.insert(super::profile_key(&g.nodes(), c.node_id(), "cpu"), m(2e-3, Some(4e-3)));
    let mut o = SimOptions { profile: Some(p), ..opts() };
    o.transfer_compute.insert("f32".into(), flowlab_hw::TransferCompute::default());
    let placement = place(&g, &cl, 0, &[(&y, 1), (&c, 1)]);
    let r = GraphSimulator::new(&g, &cl, &o).unwrap().simulate(&placement).unwrap();
    let (a, cc) = (1e-3 + o_s, 2e-3 + o_s);
    let s = cc / (4e-3 + o_s);
    let want = a + cc - s * a;
    assert!((r.step_seconds - want).abs() < 1e-11, "{} vs {want}", r.step_seconds);
    // Without the contended time both run at full speed: max(a, c).
    let mut plain = profile();
    plain.shapes.insert(super::profile_key(&g.nodes(), n.node_id(), "cpu"), m(1e-3, None));
    plain.shapes.insert(super::profile_key(&g.nodes(), c.node_id(), "cpu"), m(2e-3, None));
    let o2 = SimOptions { profile: Some(plain), transfer_compute: o.transfer_compute.clone(), ..opts() };
    let r = GraphSimulator::new(&g, &cl, &o2).unwrap().simulate(&placement).unwrap();
    assert!((r.step_seconds - cc).abs() < 1e-11, "{}", r.step_seconds);
}

#[test]
fn op_time_by_class_splits_each_devices_busy_time_by_what_its_ops_are() {
    // Neg (1 ms) and Add (2 ms) are elementwise; the placeholder is free.
    let g = Graph::new();
    let x = g.placeholder("x", DType::F32, Shape::new(vec![1000])).unwrap();
    let a = neg(&neg(&x));
    let s = g.op("Add").input(&a).input(&a).build().unwrap();
    let far = neg(&s);
    let cl = cluster(2);
    let sim = GraphSimulator::new(&g, &cl, &opts()).unwrap();
    let r = sim.simulate(&place(&g, &cl, 0, &[(&far, 1)])).unwrap();
    let ms = |d: usize, class: &str| r.devices[d].op_seconds_by_class.get(class).copied().unwrap_or(0.0) * 1e3;
    assert!((ms(0, "elementwise") - 4.0).abs() < 1e-9, "{:?}", r.devices[0].op_seconds_by_class);
    assert!((ms(1, "elementwise") - 1.0).abs() < 1e-9, "{:?}", r.devices[1].op_seconds_by_class);
    assert_eq!(ms(0, "conv") + ms(0, "matmul"), 0.0);
    for d in &r.devices {
        let sum: f64 = d.op_seconds_by_class.values().sum();
        assert!((sum - d.busy_seconds).abs() < 1e-12, "{}: {sum} vs busy {}", d.name, d.busy_seconds);
    }
}

#[test]
fn fusing_a_convolution_keeps_its_work_priced_as_a_convolution() {
    // The engine runs the CNN's conv -> bias -> relu -> pool chains on a CPU
    // as single `_FusedConv2DMaxPool` nodes. Fusion only saves passes over
    // memory, so the fused step's convolution time can only grow (it takes
    // the bias, relu and pool in) and the step can only shrink or stay. The
    // unfused step is the reference; before the convolutions' work was
    // declared with their op families, the pooled fusion was priced as
    // elementwise work: 82 ms instead of 6 ms on this host's measured rates.
    let m = flowlab_models::zoo::build("cnn", 32).unwrap();
    let cl = VirtualCluster::parse("1xcpu").unwrap();
    let step = m.step();
    let run = |fuse: Option<flowlab_engine::DeviceType>| {
        let g = SimGraph::for_step(&m.graph, &step, fuse).unwrap();
        let ops = g.ops.clone();
        let sim = GraphSimulator::from_sim_graph(g, &cl, &SimOptions::default()).unwrap();
        let r = sim.simulate_indices(&vec![0u16; sim.graph().len()]).unwrap();
        (ops, r)
    };
    let (plain_ops, plain) = run(None);
    let (fused_ops, fused) = run(Some(flowlab_engine::DeviceType::Cpu));
    assert!(!plain_ops.iter().any(|o| o.starts_with("_Fused")), "{plain_ops:?}");
    assert_eq!(fused_ops.iter().filter(|o| *o == "_FusedConv2DMaxPool").count(), 2, "{fused_ops:?}");
    let conv = |r: &GraphSimReport| r.devices[0].op_seconds_by_class.get("conv").copied().unwrap_or(0.0);
    assert!(conv(&fused) >= conv(&plain), "fused conv {} s < unfused {} s", conv(&fused), conv(&plain));
    assert!(fused.step_seconds <= plain.step_seconds, "fused step {} s > unfused {} s", fused.step_seconds, plain.step_seconds);
    assert!(fused.step_seconds >= 0.8 * plain.step_seconds, "fused step {} s < 0.8 x unfused {} s", fused.step_seconds, plain.step_seconds);
}

#[test]
fn a_split_pool_replays_the_same_step_from_node_indices_as_from_the_placement() {
    // Placers hand the simulator one device per node of its fused step;
    // where that splits a pool from its gradient, the step replayed is
    // prepared once per set of split pairs and given devices by node index.
    // It must be the step the engine runs for the expanded placement, built
    // here from that placement's names, for every set of split pairs (the
    // CNN has two) and devices of the rest.
    use rand::{Rng, SeedableRng};
    let m = flowlab_models::zoo::build("cnn", 8).unwrap();
    let cl = VirtualCluster::parse("2xcpu").unwrap();
    let sim = GraphSimulator::new(&m.graph, &cl, &SimOptions { step: Some(m.step()), ..Default::default() }).unwrap();
    let pairs = sim.graph().workspace_pairs();
    assert_eq!(pairs.len(), 2);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    let mut splits = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let dev: Vec<u16> = (0..sim.graph().len()).map(|_| rng.random_range(0..2)).collect();
        splits.insert(pairs.iter().map(|&(p, g)| dev[p as usize] != dev[g as usize]).collect::<Vec<_>>());
        let placement = sim.placement_of(&dev);
        let g = SimGraph::for_placed_step(&m.graph, &m.step(), Some(flowlab_engine::DeviceType::Cpu), Some(&placement)).unwrap();
        let engine_step = GraphSimulator::from_sim_graph(g, &cl, &SimOptions { step: Some(m.step()), ..Default::default() }).unwrap();
        let (a, b) = (sim.simulate_indices(&dev).unwrap(), engine_step.simulate(&placement).unwrap());
        assert_eq!((a.step_ps, a.transfers, a.transfer_bytes), (b.step_ps, b.transfers, b.transfer_bytes));
        assert_eq!(sim.step_time(&dev).unwrap().0 .0, a.step_ps);
    }
    assert_eq!(splits.len(), 4, "{splits:?}");
}
