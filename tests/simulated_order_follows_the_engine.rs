//! The graph-level simulator replays the engine's executor on CPUs that run
//! their own transfers: each device runs, of its ready nodes, the one made
//! ready last, and a tensor that arrives while a kernel runs has its Recv
//! run as soon as that kernel ends. The reference is the engine itself: the
//! order in which its one thread per device ran the nodes of a real step.

use flowlab_engine::{DeviceSet, Graph, Output, Result, Session, SessionOptions, StepStats, Tensor};
use flowlab_hw::TransferCompute;
use flowlab_sim::graph::{GraphSimulator, SimOptions, VirtualCluster};

fn neg(g: &Graph, name: &str, x: &Output) -> Result<Output> {
    g.op("Neg").name(name).input(x).build()
}

fn filled(g: &Graph, dims: &[usize]) -> Result<Output> {
    let n: usize = dims.iter().product();
    let values: Vec<f32> = (0..n).map(|i| (i % 17) as f32 / 17.0).collect();
    g.constant(Tensor::from_vec(values, dims.to_vec())?)
}

/// The tests here time real steps whose order depends on which thread gets
/// a core first; run side by side (the harness's default) they take four
/// device threads on a 2-core CI machine, and under the whole suite's load
/// `a` once arrived before CPU:0 had started its product. One at a time.
static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

/// The order in which device `cpu` ran the nodes of `names`: in the engine
/// (one thread per device, one real step after a warm-up) and in the
/// simulator (same graph, same placement).
fn orders(g: &Graph, fetches: &[&Output], cpu: usize, names: &[&str]) -> (Vec<String>, Vec<String>, StepStats) {
    let _alone = ONE_AT_A_TIME.lock();
    let opts = SessionOptions { threads: 1, devices: DeviceSet::local_cpus(2), ..Default::default() };
    let sess = Session::with_options(g, opts).expect("two CPUs");
    sess.run(&[], fetches, &[]).expect("warm-up step");
    let (_, stats) = sess.run_traced(&[], fetches, &[]).expect("traced step");
    let device = format!("/job:localhost/replica:0/task:0/device:CPU:{cpu}");
    let mut ran: Vec<_> = stats.nodes.iter().filter(|n| n.device == device && names.contains(&n.node.as_str())).collect();
    ran.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
    let engine = ran.iter().map(|n| n.node.clone()).collect();

    let cluster = VirtualCluster::parse("2xcpu").expect("two CPUs");
    let transfer = TransferCompute { send_us: 2.0, send_ns_per_element: 0.1, recv_us: 2.0, recv_ns_per_element: 0.1 };
    let so = SimOptions { transfer_compute: [("f32".to_string(), transfer)].into_iter().collect(), ..Default::default() };
    let sim = GraphSimulator::new(g, &cluster, &so).expect("simulator");
    let schedule = sim.schedule(sess.placement()).expect("simulated step");
    let simulated = schedule.into_iter().filter(|(n, d, _, _)| *d == cpu && names.contains(&n.as_str())).map(|(n, ..)| n).collect();
    (engine, simulated, stats)
}

#[test]
fn a_recv_readies_its_consumers_together_and_the_last_readied_runs_first() -> Result<()> {
    // CPU:1 makes `a`; on CPU:0 its Recv readies c1 and c2 at once. The
    // engine pushes both, then runs c2 (readied last) and what c2
    // readies, and only then c1.
    let g = Graph::new();
    let a = filled(&g.device("/cpu:1"), &[256, 256])?;
    let d0 = g.device("/cpu:0");
    let c1 = neg(&d0, "c1", &a)?;
    let c2 = neg(&d0, "c2", &a)?;
    let after_c2 = neg(&d0, "after_c2", &c2)?;
    let after_c1 = neg(&d0, "after_c1", &c1)?;
    let names = ["c1", "c2", "after_c1", "after_c2"];
    let (engine, simulated, _) = orders(&g, &[&after_c1, &after_c2], 0, &names);
    assert_eq!(engine, ["c2", "after_c2", "c1", "after_c1"], "the engine's own order");
    assert_eq!(simulated, engine);
    Ok(())
}

#[test]
fn a_tensor_that_arrives_during_a_kernel_is_received_before_what_the_kernel_readies() -> Result<()> {
    // CPU:0 multiplies (milliseconds); `a`, which CPU:1 takes a fraction
    // of that to make, arrives meanwhile. When the product ends, the
    // engine sends it to CPU:1 first (the simulator charges a node's Sends
    // right after it), then takes the arrival, then the product's own
    // consumer. `a` needs a scalar that CPU:0 makes and sends before it may
    // start the product, so `a` cannot arrive before the product has started,
    // however the two device threads get the cores (with `a` made from
    // constants alone, a loaded 2-core machine once had it arrive first).
    let g = Graph::new();
    let d0 = g.device("/cpu:0");
    let w = filled(&d0, &[768, 768])?;
    let start_signal = d0.reduce_sum(&w, &[0, 1], false)?;
    let d1 = g.device("/cpu:1");
    let gated = d1.op("Add").name("gated").input(&filled(&d1, &[512, 512])?).input(&start_signal).build()?;
    let a = neg(&d1, "a", &gated)?;
    let product = d0.op("MatMul").name("product").input(&w).input(&w).control_input(&start_signal).build()?;
    let uses_product = neg(&d0, "uses_product", &product)?;
    let uses_a = neg(&d0, "uses_a", &a)?;
    let remote = neg(&d1, "uses_product_remotely", &product)?;
    let names = ["product", "uses_product", "uses_a"];
    let (engine, simulated, stats) = orders(&g, &[&uses_product, &uses_a, &remote], 0, &names);
    assert_eq!(engine, ["product", "uses_a", "uses_product"], "the engine's own order");
    assert_eq!(simulated, engine);
    let start = |op: &str| stats.nodes.iter().find(|n| n.op == op && n.device.ends_with("CPU:0")).map(|n| n.start_us).expect(op);
    assert!(start("Send") < start("Recv"), "CPU:0 sends the product before it receives `a`: {:?}", stats.nodes);
    Ok(())
}
