//! `flowlab place --model inception_v3 --batch 32 --devices "4xK40" --placer m_etf`:
//! places a model's training graph with one of the simulator's placers,
//! simulates one step of it, and prints the step time, the time the placer
//! took and a per-device summary (`--json`: one JSON object).

use anyhow::{Context, bail};
use clap::Args;
use flowlab_engine::Graph;
use flowlab_hw::{CommFormat, Profile};
use flowlab_sim::graph::{GraphSimReport, GraphSimulator, StepSpec, VirtualCluster};
use flowlab_sim::placement::{MAP_PREFIX, PLACERS, PlacerOptions, place_timed};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct PlaceArgs {
    /// A zoo model (mlp, cnn, resnet50, inception_v3, lstm_lm, transformer, transformer_base, gnmt),
    /// an ONNX file (*.onnx: its training step, the loss on its first output) or a graph file
    /// written by the engine (*.json).
    #[arg(long)]
    model: String,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Devices, e.g. "4xK40", "2xV100,1xcpu", "8xH100" (catalog names).
    #[arg(long, default_value = "4xK40")]
    devices: String,
    /// One of: single_device, round_robin, default, tf_greedy, m_topo, m_etf, m_sct, local_search;
    /// or map:FILE, a hand-written device map (a YAML list of `{ nodes: GLOB, device: N }`, first
    /// match wins; `--write-map` writes one to start from).
    #[arg(long, default_value = "m_etf")]
    placer: String,
    /// Format of cross-device transfers: f32, f16, bf16, int8, int8:<block>.
    #[arg(long, default_value = "f32")]
    comm: String,
    /// Catalog link of the devices: a `port` link (PCIe, NVLink, Ethernet,
    /// InfiniBand) gives each device one port per direction shared by its
    /// transfers, a `pair` link each pair its own (`in-process`: the one a
    /// `--profile` of this host measured); or a catalog fabric, which wires
    /// its devices pair by pair (`dgx1`: 8 V100s, NVLink hybrid cube mesh).
    #[arg(long, default_value = flowlab_sim::graph::DEFAULT_LINK)]
    link: String,
    /// Measured op times or efficiencies (YAML or JSON; see `hw` docs).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// local_search: wall-clock budget in milliseconds.
    #[arg(long, default_value_t = 2000)]
    budget_ms: u64,
    /// local_search: the placer it starts from.
    #[arg(long, default_value = "m_etf")]
    start: String,
    /// local_search: seed of its random moves.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Write the placement as a device map (one rule per node) to FILE, to
    /// edit and give back as `--placer map:FILE`.
    #[arg(long, value_name = "FILE")]
    write_map: Option<PathBuf>,
}

/// The graph and, for zoo models and ONNX files, the training step to simulate (a graph
/// file has no declared step: every node is replayed).
fn load_graph(model: &str, batch: usize) -> anyhow::Result<(Graph, Option<StepSpec>, Option<u64>)> {
    let onnx = model.ends_with(".onnx");
    if !onnx && (model.ends_with(".json") || Path::new(model).is_file()) {
        return Ok((Graph::load_json(Path::new(model)).with_context(|| format!("reading graph file {model}"))?, None, None));
    }
    let m = flowlab_models::build_with(model, &flowlab_models::ZooOptions::new(batch)).context("--model/--batch")?;
    let step = m.step();
    Ok((m.graph, Some(step), Some(m.params)))
}

pub fn run(a: PlaceArgs) -> anyhow::Result<ExitCode> {
    if !PLACERS.contains(&a.placer.as_str()) && !a.placer.starts_with(MAP_PREFIX) {
        bail!("unknown placer `{}` (valid: {}, {MAP_PREFIX}FILE)", a.placer, PLACERS.join(", "));
    }
    let comm: CommFormat = a.comm.parse().with_context(|| format!("--comm {}", a.comm))?;
    let profile = a.profile.as_ref().map(Profile::from_file).transpose()?;
    // A profile measured by `flowlab profile` describes this host: `cpu`
    // is then the measured `cpu-host` device, and `--link in-process` the
    // measured hand-over between two of its devices.
    let host = profile.as_ref().and_then(|p| p.host.clone());
    let cluster = match &host {
        Some(h) => VirtualCluster::parse_for_host(&a.devices, h)?,
        None => VirtualCluster::parse(&a.devices)?,
    };
    let cluster = match (&host, a.link.as_str()) {
        (Some(h), flowlab_hw::HOST_LINK) => cluster.with_link(h.link_spec()),
        _ => cluster.wired(&a.link).with_context(|| format!("--link {}", a.link))?,
    };
    let built = Instant::now();
    let (graph, step, params) = load_graph(&a.model, a.batch)?;
    let build_seconds = built.elapsed().as_secs_f64();
    let mut opts = PlacerOptions::new(cluster.clone());
    opts.sim.partition.format = comm;
    opts.sim.step = step;
    if let Some(h) = &host {
        opts.sim.transfer_compute = h.transfer_compute.clone();
        opts.sim.host_contention = h.host_contention(cluster.len());
    }
    opts.sim.profile = profile;
    opts.budget = Duration::from_millis(a.budget_ms);
    opts.start = a.start.clone();
    opts.seed = a.seed;
    let outcome = place_timed(&a.placer, &graph, &opts)?;
    let sim = GraphSimulator::new(&graph, &cluster, &opts.sim)?;
    let t = Instant::now();
    let report = sim.simulate(&outcome.placement)?;
    let simulate_seconds = t.elapsed().as_secs_f64();
    if let Some(path) = &a.write_map {
        write_map(path, &graph, &cluster, &outcome.placement)?;
    }
    if a.json {
        let v = serde_json::json!({
            "model": a.model,
            "batch": a.batch,
            "params": params,
            "step_nodes": sim.graph().len(),
            "nodes": graph.num_nodes(),
            "devices": a.devices,
            "link": a.link,
            "comm": comm.to_string(),
            "placer": a.placer,
            "placement_seconds": outcome.seconds,
            "simulate_seconds": simulate_seconds,
            "build_seconds": build_seconds,
            "step_seconds": report.step_seconds,
            // the cost-based placers' fallback: whether the best single
            // device replaced the placer's own placement, and that
            // placement's simulated step
            "fallback": outcome.fallback.map(|f| f.used),
            "own_step_seconds": outcome.fallback.map(|f| f.own_step_seconds),
            "own_placement_fits": outcome.fallback.map(|f| f.own_fits),
            "one_device_step_seconds": outcome.fallback.and_then(|f| f.one_device_step_seconds),
            "report": report,
        });
        println!("{v}");
    } else {
        print_summary(&a, graph.num_nodes(), outcome.seconds, simulate_seconds, &report, outcome.fallback);
    }
    Ok(ExitCode::SUCCESS)
}

/// `placement` as a device map: a rule per node, its exact name (glob
/// characters escaped), in graph order.
fn write_map(path: &Path, graph: &Graph, cluster: &VirtualCluster, placement: &flowlab_engine::Placement) -> anyhow::Result<()> {
    use std::fmt::Write;
    let mut text = String::from("# A device map written by `flowlab place --write-map`: first matching rule wins.\n");
    for (id, node) in graph.nodes().iter().enumerate() {
        let Some(name) = placement.device(id) else { continue };
        let device = cluster.devices().iter().position(|d| &d.name == name).with_context(|| format!("node '{}' is placed on {name}, not a device of the cluster", node.name))?;
        let _ = writeln!(text, "- {{ nodes: {}, device: {device} }}", serde_json::Value::from(glob::Pattern::escape(&node.name)));
    }
    std::fs::write(path, text).with_context(|| format!("--write-map {}", path.display()))
}

fn print_summary(a: &PlaceArgs, nodes: usize, place_s: f64, sim_s: f64, r: &GraphSimReport, fallback: Option<flowlab_sim::placement::Fallback>) {
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    println!("{} (batch {}, {} nodes) on {} with {}, {} transfers over {}", a.model, a.batch, nodes, a.devices, a.placer, a.comm, a.link);
    println!("step time (simulated)  {:.3} ms", r.step_seconds * 1e3);
    if let Some(f) = fallback {
        let own = format!("{:.3} ms{}", f.own_step_seconds * 1e3, if f.own_fits { "" } else { ", over a device's memory" });
        if f.used {
            println!("fallback               the best single device replaced the placer's own placement ({own})");
        } else {
            println!("own placement kept     ({own}; one device {})", f.one_device_step_seconds.map_or("does not fit".to_string(), |s| format!("{:.3} ms", s * 1e3)));
        }
    }
    println!("placement time         {:.3} s", place_s);
    println!("simulation time        {:.3} ms", sim_s * 1e3);
    println!();
    println!("{:<44} {:>8} {:>6} {:>10} {:>6} {:>10} {:>10}", "device", "spec", "ops", "busy ms", "util", "peak GB", "cap GB");
    for d in &r.devices {
        println!(
            "{:<44} {:>8} {:>6} {:>10.3} {:>5.1}% {:>10.3} {:>10.3}{}",
            d.name,
            d.spec,
            d.ops,
            d.busy_seconds * 1e3,
            d.utilization * 100.0,
            d.peak_memory_bytes as f64 / 1e9,
            d.capacity_bytes / 1e9,
            if d.over_capacity { "  OVER" } else { "" }
        );
    }
    println!();
    println!("transfers {}  bytes {:.3} MB", r.transfers, r.transfer_bytes as f64 / 1e6);
    for l in &r.links {
        println!("  {} -> {}  {} transfers  {:.3} MB", l.src, l.dst, l.transfers, l.bytes as f64 / 1e6);
    }
    if let (Some(first), Some(last)) = (r.critical_path.first(), r.critical_path.last()) {
        println!("critical path: {} nodes, {first} .. {last}", r.critical_path.len());
    }
    if let Some(e) = &r.memory_error {
        println!("{e}");
    }
}
