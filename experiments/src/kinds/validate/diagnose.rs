//! `flowlab diagnose`: where a validation point's time goes, printed for a
//! person to read (nothing is asserted). Each diagnosis measures this host
//! the way `kind: validate` does (the same step runner, host figures and
//! profile) and lays the measurement beside the simulator's prediction:
//! - [`two_sessions`]: do two one-device `Session`s of one process, stepping
//!   at once, slow each other's kernels (the cost a split step pays on a
//!   shared host)?
//! - [`roofline_by_class`]: where the roofline's one-device step differs
//!   from the measured kernels' (the profile's), by op class and op;
//! - [`split_step`]: one two-device placement's step, measured and
//!   simulated, node by node.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

use flowlab_engine::{EmulatedLink, LinkMap, Output, PartitionOptions, Placement};
use flowlab_models::zoo::ModelGraph;
use flowlab_hw::{CommFormat, LinkSpec};
use flowlab_sim::graph::{GraphSimulator, SimOptions, VirtualCluster};
use flowlab_sim::placement::{PlacerOptions, place_timed};

use super::host;
use crate::error::ExperimentError;
use crate::measure::{self, ProfileRequest, StepRunner, ZooSizes};

/// What failed, as the diagnosis's error.
fn failed(what: &str) -> impl Fn(String) -> ExperimentError + '_ {
    move |message| ExperimentError::Measurement { what: what.to_string(), message }
}

fn text(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Median kernel time per op over `steps` traced steps of `r`, in us.
fn kernels_by_op(r: &StepRunner, steps: usize) -> Result<HashMap<String, f64>, String> {
    let mut per_op: HashMap<String, Vec<f64>> = HashMap::new();
    for _ in 0..steps {
        let st = r.step(true)?.ok_or("a traced step gave no statistics")?;
        let mut sum: HashMap<String, f64> = HashMap::new();
        for n in &st.nodes {
            *sum.entry(n.op.clone()).or_default() += n.end_us - n.start_us;
        }
        for (k, v) in sum {
            per_op.entry(k).or_default().push(v);
        }
    }
    Ok(per_op.into_iter().map(|(k, v)| (k, measure::spread(&v).0)).collect())
}

/// A step runner of `model` (built by [`measure::with_initializer`], which
/// gave `init`), warmed up by three steps.
fn warm_runner(model: &ModelGraph, init: &Output, opts: flowlab_engine::SessionOptions) -> Result<StepRunner, String> {
    let r = StepRunner::new(model.clone(), init, opts)?;
    for _ in 0..3 {
        r.step(false)?;
    }
    Ok(r)
}

/// Kernel times per op of one `Session` stepping alone, then while a second
/// `Session` of the same model steps on another thread of this process.
pub fn two_sessions(model: &str, batch: usize) -> Result<String, ExperimentError> {
    let run = || -> Result<String, String> {
        let (graph, init) = measure::with_initializer(model, &ZooSizes::default(), batch)?;
        let one = || measure::cpu_options(1, 1, None, LinkMap::default());
        let (a, b) = (warm_runner(&graph, &init, one())?, warm_runner(&graph, &init, one())?);
        let alone = kernels_by_op(&a, 10)?;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let together = std::thread::scope(|s| {
            let other = s.spawn(|| -> Result<(), String> {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    b.step(false)?;
                }
                Ok(())
            });
            let k = kernels_by_op(&a, 10);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            other.join().map_err(|_| "the second session's thread panicked".to_string())??;
            k
        })?;
        let mut v: Vec<_> = alone.iter().map(|(op, t)| (op.clone(), *t, together.get(op).copied().unwrap_or(0.0))).collect();
        v.sort_by(|x, y| y.1.total_cmp(&x.1));
        let (ta, tt): (f64, f64) = v.iter().fold((0.0, 0.0), |(p, q), x| (p + x.1, q + x.2));
        let mut out = String::new();
        let _ = writeln!(out, "{model} b{batch}, kernels per step: alone {ta:.0} us, with a second session stepping on another thread {tt:.0} us ({:+.0}%)", (tt / ta - 1.0) * 100.0);
        for (op, a, t) in v.iter().take(10) {
            let _ = writeln!(out, "{op:>28}: alone {a:8.0} us, together {t:8.0} us ({:+.0}%)", (t / a - 1.0) * 100.0);
        }
        Ok(out)
    };
    run().map_err(failed("two sessions"))
}

/// (nodes, roofline s, profile s, flops, bytes) of one op of one class.
type OpPrices = (usize, f64, f64, f64, f64);

/// The roofline's and the profile's one-device step of the MLP (b128), the
/// CNN (b32) and a small Transformer (b16), by op class, with every op
/// whose two prices differ by more than 50 us.
pub fn roofline_by_class() -> Result<String, ExperimentError> {
    let run = || -> Result<String, String> {
        let host = host(1, "diagnosis")?;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "host: gemm {:?} GFLOP/s, copy {:.1} GB/s, cache {} MiB at {:.1} GB/s, dispatch {:.2} us, elementwise {:.2} GFLOP/s",
            host.gemm_gflops, host.memory_bandwidth_gb_s, host.cache_mib, host.cache_bandwidth_gb_s, host.dispatch_us, host.elementwise_gflops
        );
        let small_transformer = ZooSizes::parse("hidden=64,seq_len=32,vocab=1000,layers=2,heads=4,ff=256")?;
        let cases = [("mlp", 128, ZooSizes::default()), ("cnn", 32, ZooSizes::default()), ("transformer", 16, small_transformer)];
        let cluster = VirtualCluster::parse_for_host("1xcpu", &host).map_err(text)?;
        for (name, batch, sizes) in cases {
            let (model, _) = measure::with_initializer(name, &sizes, batch)?;
            let mut so = SimOptions { step: Some(model.step()), ..Default::default() };
            let rsim = GraphSimulator::new(&model.graph, &cluster, &so).map_err(text)?;
            let one = vec![0u16; rsim.graph().len()];
            let roof = rsim.simulate_indices(&one).map_err(text)?;
            let request = ProfileRequest { model: name.into(), sizes: sizes.clone(), batch, threads: 1, devices: 1, warmup: 3, steps: 10 };
            so.profile = Some(measure::profile_model(&request, |_| {})?);
            let sim = GraphSimulator::new(&model.graph, &cluster, &so).map_err(text)?;
            let pr = sim.simulate_indices(&one).map_err(text)?;
            let _ = writeln!(out, "{name} b{batch}: roofline {:.0} us, profile {:.0} us", roof.step_seconds * 1e6, pr.step_seconds * 1e6);
            let mut by_op: BTreeMap<(String, String), OpPrices> = BTreeMap::new();
            for (x, y) in rsim.priced_nodes(0).iter().zip(&sim.priced_nodes(0)) {
                let e = by_op.entry((x.2.clone(), x.1.clone())).or_default();
                *e = (e.0 + 1, e.1 + x.5, e.2 + y.5, e.3 + x.3, e.4 + x.4);
            }
            for ((class, op), (n, r, p, f, by)) in by_op.iter().filter(|(_, e)| (e.1 - e.2).abs() > 50e-6) {
                let _ = writeln!(
                    out,
                    "    {class:>12} {op:>28} x{n:<4} roofline {:8.0} us profile {:8.0} us  flops {f:.2e} bytes {by:.2e} -> {:.1} GB/s {:.1} GF/s",
                    r * 1e6,
                    p * 1e6,
                    by / p / 1e9,
                    f / p / 1e9
                );
            }
            for (class, p) in &pr.devices[0].op_seconds_by_class {
                let r = roof.devices[0].op_seconds_by_class.get(class).copied().unwrap_or(0.0);
                let _ = writeln!(out, "  {class:>14}: roofline {:8.0} us, profile {:8.0} us ({:+.0}%)", r * 1e6, p * 1e6, (r / p - 1.0) * 100.0);
            }
        }
        Ok(out)
    };
    run().map_err(failed("roofline by class"))
}

/// One two-device placement to look into (`flowlab diagnose split`).
#[derive(Debug, Clone)]
pub struct SplitStep {
    pub model: String,
    pub batch: usize,
    /// Any placer of `flowlab place`.
    pub placer: String,
    pub comm: CommFormat,
    /// The emulated link between the two devices.
    pub gbps: f64,
    pub latency_us: f64,
    /// Place with the measured profile (as a `predictor: profile` point
    /// does) instead of the roofline.
    pub place_with_profile: bool,
    /// Also print one measured step's long nodes and transfers beside the
    /// simulated schedule of the same placement.
    pub timeline: bool,
}

/// A placement's measured step: its median wall time, each node's median
/// kernel time and each device's median busy time, in us.
struct Measured {
    wall: f64,
    per_node: HashMap<String, f64>,
    busy: Vec<(String, f64)>,
}

/// Ten traced steps of `model` on two devices over the emulated link, all
/// on the first device when `placement` is None.
fn measure_split(s: &SplitStep, (model, init): (&ModelGraph, &Output), placement: Option<Placement>, out: &mut String) -> Result<Measured, String> {
    let links = LinkMap { all: Some(EmulatedLink::new(s.gbps, s.latency_us).map_err(text)?), ..Default::default() };
    let traced_timeline = s.timeline && placement.is_some();
    let mut o = measure::cpu_options(2, 1, placement, links);
    o.partition = PartitionOptions::in_format(s.comm);
    let r = warm_runner(model, init, o)?;
    let (mut per_node, mut walls, mut busy) = (HashMap::<String, Vec<f64>>::new(), Vec::new(), HashMap::<String, Vec<f64>>::new());
    for _ in 0..10 {
        let st = r.step(true)?.ok_or("a traced step gave no statistics")?;
        walls.push(st.nodes.iter().map(|n| n.end_us).fold(0.0, f64::max));
        let mut b: HashMap<String, f64> = HashMap::new();
        for n in &st.nodes {
            per_node.entry(n.node.clone()).or_default().push(n.end_us - n.start_us);
            *b.entry(n.device.clone()).or_default() += n.end_us - n.start_us;
        }
        for (d, v) in b {
            busy.entry(d).or_default().push(v);
        }
    }
    if traced_timeline {
        let st = r.step(true)?.ok_or("a traced step gave no statistics")?;
        let mut ev: Vec<_> = st.nodes.iter().filter(|x| x.end_us - x.start_us > 150.0 || x.op == "Send" || x.op == "Recv").collect();
        ev.sort_by(|a, b| a.start_us.total_cmp(&b.start_us));
        for x in ev {
            let pad = if x.device.ends_with('1') { "          " } else { "" };
            let _ = writeln!(out, "{pad}{:8.0} {:8.0} {:>6.0} {} ({})", x.start_us, x.end_us, x.end_us - x.start_us, x.node, x.op);
        }
        let last = |d: &str| d.chars().last().map(String::from).unwrap_or_default();
        for t in &st.transfers {
            let _ = writeln!(out, "xfer {} {} -> {} {} B {:.0} .. {:.0}", t.edge, last(&t.send_device), last(&t.recv_device), t.bytes, t.start_us, t.end_us);
        }
        let _ = writeln!(out, "step {:.0} us", st.total_us);
    }
    let med = |v: &[f64]| measure::spread(v).0;
    Ok(Measured {
        wall: med(&walls),
        per_node: per_node.into_iter().map(|(k, v)| (k, med(&v))).collect(),
        busy: busy.into_iter().map(|(k, v)| (k, med(&v))).collect(),
    })
}

/// Places `s.model` on two CPU devices with `s.placer`, measures that
/// placement's step and the one-device step, simulates both (roofline,
/// profile, profile with host contention), and lists the ops and nodes
/// whose kernels slow down most in the split step.
pub fn split_step(s: &SplitStep) -> Result<String, ExperimentError> {
    let run = || -> Result<String, String> {
        let mut out = String::new();
        let (model, init) = measure::with_initializer(&s.model, &ZooSizes::default(), s.batch)?;
        // a misspelt placer is refused before the host is measured
        flowlab_sim::placement::by_name(&s.placer, &PlacerOptions::new(VirtualCluster::parse("2xcpu").map_err(text)?)).map_err(text)?;
        let host = host(1, "diagnosis")?;
        let link = LinkSpec { name: "e".into(), bandwidth_gb_s: s.gbps / 8.0, latency_us: s.latency_us + host.emulated_overhead_us, sharing: flowlab_hw::LinkSharing::Pair };
        let cluster = VirtualCluster::parse_for_host("2xcpu", &host).map_err(text)?.with_link(link);
        let mut opts = PlacerOptions::new(cluster.clone());
        opts.sim.step = Some(model.step());
        opts.sim.transfer_compute = host.transfer_compute.clone();
        opts.sim.partition = PartitionOptions::in_format(s.comm);
        opts.budget = std::time::Duration::ZERO;
        opts.iterations = Some(300);
        let request = ProfileRequest { model: s.model.clone(), sizes: ZooSizes::default(), batch: s.batch, threads: 1, devices: 2, warmup: 3, steps: 10 };
        let prof = measure::profile_model(&request, |_| {})?;
        let mut place_opts = opts.clone();
        if s.place_with_profile {
            place_opts.sim.profile = Some(prof.clone());
            place_opts.sim.host_contention = host.host_contention(2);
        }
        let placement = place_timed(&s.placer, &model.graph, &place_opts).map_err(text)?.placement;
        let one = measure_split(s, (&model, &init), None, &mut out)?;
        let two = measure_split(s, (&model, &init), Some(placement.clone()), &mut out)?;
        let _ = writeln!(out, "one device: step {:.0} us, busy {:?}", one.wall, one.busy);
        let _ = writeln!(out, "two devices ({}): step {:.0} us, busy {:?}", s.placer, two.wall, two.busy);
        let rep = GraphSimulator::new(&model.graph, &cluster, &opts.sim).and_then(|sim| sim.simulate(&placement)).map_err(text)?;
        let _ = writeln!(out, "simulated (roofline): {:.0} us", rep.step_seconds * 1e6);
        let mut so = opts.sim.clone();
        so.profile = Some(prof);
        for contention in [vec![], host.host_contention(2)] {
            so.host_contention = contention.clone();
            simulated_split(&model.graph, &cluster, &so, &placement, s.timeline, &contention, &mut out).map_err(text)?;
        }
        slowest_in_split(&model.graph, &placement, &one, &two, &mut out);
        Ok(out)
    };
    run().map_err(failed("split step"))
}

/// The profile-priced simulation of `placement` (and of one device), with
/// its schedule's long nodes when `timeline`.
fn simulated_split(
    graph: &flowlab_engine::Graph,
    cluster: &VirtualCluster,
    so: &SimOptions,
    placement: &Placement,
    timeline: bool,
    contention: &[f64],
    out: &mut String,
) -> Result<(), flowlab_sim::SimError> {
    let sim = GraphSimulator::new(graph, cluster, so)?;
    let rep = sim.simulate(placement)?;
    let one = sim.simulate_indices(&vec![0u16; sim.graph().len()])?;
    if timeline {
        for (node, d, a, b) in sim.schedule(placement)?.into_iter().filter(|(_, _, a, b)| b - a > 150e-6) {
            let pad = if d == 1 { "          " } else { "" };
            let _ = writeln!(out, "sim {pad}{:8.0} {:8.0} {:>6.0} {node}", a * 1e6, b * 1e6, (b - a) * 1e6);
        }
    }
    let busy: Vec<f64> = rep.devices.iter().map(|d| (d.busy_seconds * 1e6).round()).collect();
    let _ = writeln!(
        out,
        "simulated (profile, contention {contention:?}): step {:.0} us, busy {busy:?}; all on one: {:.0} us",
        rep.step_seconds * 1e6,
        one.step_seconds * 1e6
    );
    Ok(())
}

/// The same nodes' kernel times alone and in the split step: the twelve ops
/// and fifteen nodes that slowed most, and what only the split step runs.
fn slowest_in_split(graph: &flowlab_engine::Graph, placement: &Placement, one: &Measured, two: &Measured, out: &mut String) {
    let op_of: HashMap<String, String> = graph.nodes().into_iter().map(|n| (n.name, n.op)).collect();
    let mut by_op: HashMap<String, (f64, f64)> = HashMap::new();
    for (node, t2) in &two.per_node {
        if let Some(t1) = one.per_node.get(node) {
            let e = by_op.entry(op_of.get(node).cloned().unwrap_or_default()).or_default();
            *e = (e.0 + t1, e.1 + t2);
        }
    }
    let mut v: Vec<_> = by_op.into_iter().collect();
    v.sort_by(|a, b| (b.1.1 - b.1.0).total_cmp(&(a.1.1 - a.1.0)));
    for (op, (a, b)) in v.iter().take(12) {
        let _ = writeln!(out, "{op:>28}: alone {a:8.0} us, in two-device step {b:8.0} us ({:+.0}%)", (b / a - 1.0) * 100.0);
    }
    let mut nodes: Vec<_> = two.per_node.iter().map(|(k, t2)| (k.clone(), one.per_node.get(k).copied(), *t2)).collect();
    nodes.sort_by(|a, b| (b.2 - b.1.unwrap_or(0.0)).total_cmp(&(a.2 - a.1.unwrap_or(0.0))));
    for (node, t1, t2) in nodes.iter().take(15) {
        let dev = placement.device_of(graph, node).map(|d| d.to_string()).unwrap_or_default();
        let _ = writeln!(out, "{node:>40} [{dev}]: alone {:8.0} us, in two-device step {t2:8.0} us", t1.unwrap_or(f64::NAN));
    }
    let only_split: Vec<_> = two.per_node.keys().filter(|k| !one.per_node.contains_key(*k)).collect();
    let t_only: f64 = only_split.iter().map(|k| two.per_node[*k]).sum();
    let _ = writeln!(out, "{} nodes only in the two-device step (Send/Recv...), {t_only:.0} us", only_split.len());
}
