//! Replays one step of a placed graph on a virtual cluster.
//!
//! Contract. Each device runs its ready ops one at a time on one compute
//! stream, the earliest-ready first (ties by node id). When an op finishes,
//! each output needed on another device becomes ONE transfer per destination
//! device (as the engine's partitioner makes one Send/Recv pair per tensor
//! per device); a cross-device control edge becomes a scalar transfer. A
//! transfer over a `pair` link waits for a free copy engine of its source
//! device (at least one) and takes `latency + bytes / bandwidth` of the
//! pair's link, for the bytes of its communication format. A transfer over
//! a `port` link (PCIe, NVLink into a switch, a NIC) waits its latency, then
//! shares its sender's port out and its receiver's port in with every
//! transfer crossing them at once, at max-min fair rates (`ports.rs`).
//! Events are processed in time order, ties in scheduling order, so a run
//! is exactly repeatable.
//!
//! [`GraphSimulator`] holds everything that does not depend on the placement
//! (op times per device, wire bytes per tensor), so placers can score many
//! placements of one graph cheaply.

use super::cluster::VirtualCluster;
use super::cost::{DeviceCoster, Priced};
use super::report::{DeviceReport, GraphSimReport, LinkReport};
use super::sim_graph::{SimGraph, StepSpec};
use crate::error::SimError;
use crate::time::SimTime;
use flowlab_engine::{DType, Graph, PartitionOptions, Placement, wire_format};
use flowlab_hw::{Profile, TransferCompute};
use std::collections::BTreeMap;
use std::cmp::Reverse;
use std::collections::{HashMap, HashSet};
use parking_lot::Mutex;
use std::sync::Arc;

/// What the simulator needs besides the graph and the cluster.
#[derive(Debug, Clone, Default)]
pub struct SimOptions {
    /// Communication formats, as the engine's partitioner takes them.
    pub partition: PartitionOptions,
    /// Measured op times or efficiencies; ops it lacks use the roofline.
    pub profile: Option<Profile>,
    /// The step to simulate (feeds, fetches, targets): only the nodes it
    /// runs are replayed. `None` replays every node of the graph.
    pub step: Option<StepSpec>,
    /// Device time of the Send and Recv kernels per wire format, charged to
    /// devices without copy engines (CPUs run their transfers on their own
    /// thread: a Send encodes before the link takes the bytes, a Recv
    /// decodes before the consumers can start). Empty: transfers cost the
    /// devices nothing.
    pub transfer_compute: BTreeMap<String, TransferCompute>,
    /// Speed of each kernel on devices that run their own transfers (the
    /// engine's CPUs, which share one host's cores) while `k` of them
    /// compute at once, as a fraction of its speed alone: entry `k - 1`.
    /// Kernels share the host as processes share a processor: a change in
    /// the number computing stretches or shortens every running kernel.
    /// Empty: devices never slow each other.
    pub host_contention: Vec<f64>,
}

/// A graph prepared for simulation on one cluster.
pub struct GraphSimulator {
    graph: SimGraph,
    cluster: VirtualCluster,
    ndev: usize,
    /// Op time in picoseconds, `times[node * ndev + device]`.
    times: Vec<u64>,
    /// Bytes on the wire per slot (format applied).
    wire_bytes: Vec<u64>,
    /// Bytes of a control transfer (a scalar f32 in the graph's format).
    control_bytes: u64,
    /// Per ordered device pair: latency in ps and ps per byte.
    latency_ps: Vec<f64>,
    ps_per_byte: Vec<f64>,
    copy_engines: Vec<usize>,
    /// Per ordered pair over a `port` link: the sender's port out and the
    /// receiver's port in, indices into `port_cap`.
    pair_ports: Vec<Option<(u32, u32)>>,
    /// Bytes per picosecond of each port.
    port_cap: Vec<f64>,
    warnings: Vec<String>,
    /// Nodes a shape-keyed profile did not price (empty without one).
    fallback_nodes: Vec<String>,
    /// Nodes priced from their profiled shapes, scaled (see `cost.rs`).
    scaled_nodes: Vec<String>,
    /// Per slot: device time of its Send and of its Recv (ps) on devices
    /// that run their own transfers; per device, whether it does.
    send_ps: Vec<u64>,
    recv_ps: Vec<u64>,
    control_send_ps: u64,
    control_recv_ps: u64,
    self_driven: Vec<bool>,
    /// `SimOptions::host_contention`, checked: finite, in (0, 1].
    contention: Vec<f64>,
    /// Per node and device, its kernel's speed while one other device of
    /// the host computes (the profile's contended time where measured,
    /// else `contention[1]`, else 1), `[node * ndev + device]`.
    shares: Vec<f64>,
    /// Whether any kernel slows down beside another (processor sharing on).
    contended: bool,
    /// What the step's fusions depend on, where it has any (see
    /// [`PlacedFusions`]).
    fusions: Option<PlacedFusions>,
}

/// The engine fuses each device's part of a step on its own: a chain
/// (Conv2D, BiasAdd, Relu, a max pool) is one node only where all of it
/// runs on one device, and a pool hands its gradient a workspace only on
/// the gradient's device; on two, the gradient reads the pool's input and
/// output instead (1.6 MB crossing for the CNN's second pool at batch 32,
/// where the workspace is 0.1 MB). The simulated step is fused once, as if
/// on one device, for placers to place its nodes; the nodes folded into a
/// fused one follow it when a placement is expanded, so of the placements
/// placers make only those that split a pool from its gradient run another
/// step. Those are replayed on the step the engine runs for them, prepared
/// once per set of split pairs. A placement of the whole graph that is not
/// such an expansion (it may split any chain) is replayed on the engine's
/// step for it.
struct PlacedFusions {
    /// (pool, gradient) node indices.
    pairs: Vec<(u32, u32)>,
    graph: Graph,
    step: StepSpec,
    fuse_for: flowlab_engine::DeviceType,
    opts: SimOptions,
    /// Per set of split pairs: the step the engine runs, and for each of
    /// its nodes the node of this step whose device it takes.
    steps: Mutex<HashMap<Vec<bool>, PreparedSplit>>,
}

/// The step the engine runs for a set of split pairs, and for each of its
/// nodes the node of the simulated step whose device it takes.
type PreparedSplit = (Arc<GraphSimulator>, Arc<Vec<Option<u32>>>);

/// A step the engine runs for a placement, and its nodes' devices.
type SplitStep = (Arc<GraphSimulator>, Vec<u16>);

impl PlacedFusions {
    /// A simulator of the step the engine runs for `placement`.
    fn engine_step(&self, placement: &Placement, cluster: &VirtualCluster) -> Result<GraphSimulator, SimError> {
        let g = SimGraph::for_placed_step(&self.graph, &self.step, Some(self.fuse_for), Some(placement))?;
        GraphSimulator::from_sim_graph(g, cluster, &self.opts)
    }
}

#[derive(Clone, Copy, Debug)]
enum Event {
    /// A node finished (ids below the node count), or a Recv kernel of
    /// transfer `id - nodes` finished on a device that runs its own.
    OpDone(u32),
    TransferDone(u32),
    /// Transfer `id` over a `port` link has waited its latency and starts
    /// moving bytes through its ports.
    PortJoin(u32),
    /// The earliest end among transfers on ports, if `generation` is still
    /// the ports' (a transfer joining or leaving changes every rate).
    PortWake { generation: u32 },
    /// Transfers joined or left the ports at this instant: new rates, and
    /// a wake-up at the earliest end (once per instant, after its joins).
    PortRates,
    /// A device finished the Send kernels that followed its last op.
    DeviceFree(u16),
    /// The kernel running on a device under host contention finished, if
    /// `generation` is still the device's (a change in the number of
    /// computing devices reschedules every running kernel).
    Kernel { device: u16, generation: u32 },
}

/// One transfer of a simulated step.
#[derive(Clone, Copy, Debug)]
struct Transfer {
    /// Slot for data, node for control.
    what: u32,
    control: bool,
    src: u16,
    dst: u16,
    bytes: u64,
}

/// Per-step state and results (internal; see [`GraphSimReport`]).
pub(crate) struct Trace {
    pub step: SimTime,
    /// When each op's kernel started and ended (ps); 0 for ops not run.
    pub start: Vec<u64>,
    pub finish: Vec<u64>,
    pub busy_ps: Vec<u64>,
    pub peak_mem: Vec<u64>,
    pub ops_per_device: Vec<usize>,
    transfers: Vec<Transfer>,
    pred: Vec<u32>,
    dev_pred: Vec<u32>,
}

const NONE: u32 = u32::MAX;

mod replay;

/// The engine device type whose fused kernels a step on `cluster` runs:
/// the CPU's on a cluster of CPUs, the CUDA backend's on one of GPUs (it
/// has no fused kernels yet, so a GPU step stays unfused, as the PyTorch
/// runs it is checked against); none on TPUs or a mixed cluster, where a
/// placement could split a chain the engine would fuse only on one side.
fn fusing_device(cluster: &VirtualCluster) -> Option<flowlab_engine::DeviceType> {
    let mut kinds = cluster.devices().iter().map(|d| d.spec.kind.as_str());
    let first = kinds.next()?;
    if !kinds.all(|k| k == first) {
        return None;
    }
    match first {
        "cpu" => Some(flowlab_engine::DeviceType::Cpu),
        "gpu" => Some(flowlab_engine::DeviceType::Cuda),
        _ => None,
    }
}

/// The most picoseconds a step may need at worst: a quarter of `u64`'s
/// range (4.6e6 s), so that no sum of event times in the replay can wrap.
const CLOCK_RANGE_PS: f64 = (1u64 << 62) as f64;

impl GraphSimulator {
    /// Prepares `graph` for `cluster` (node costs per device, wire sizes).
    pub fn new(graph: &Graph, cluster: &VirtualCluster, opts: &SimOptions) -> Result<GraphSimulator, SimError> {
        let Some(step) = &opts.step else {
            return GraphSimulator::from_sim_graph(SimGraph::new(graph)?, cluster, opts);
        };
        let fuse_for = fusing_device(cluster);
        let mut sim = GraphSimulator::from_sim_graph(SimGraph::for_step(graph, step, fuse_for)?, cluster, opts)?;
        // (the engine's fused ops are its underscored ones)
        if let Some(fuse_for) = fuse_for
            && sim.graph.ops.iter().any(|op| op.starts_with('_'))
        {
            let pairs = sim.graph.workspace_pairs();
            sim.fusions = Some(PlacedFusions {
                pairs,
                graph: graph.clone(),
                step: step.clone(),
                fuse_for,
                opts: opts.clone(),
                steps: Mutex::new(HashMap::new()),
            });
        }
        Ok(sim)
    }

    /// The step the engine runs for `dev` and the devices of its nodes,
    /// where `dev` splits a pool from its gradient (see [`PlacedFusions`]);
    /// `None` where this simulator's step is that step.
    fn split_step(&self, dev: &[u16]) -> Result<Option<SplitStep>, SimError> {
        let Some(f) = &self.fusions else { return Ok(None) };
        if dev.len() != self.graph.len() {
            return Ok(None);
        }
        let split: Vec<bool> = f.pairs.iter().map(|&(p, g)| dev[p as usize] != dev[g as usize]).collect();
        if !split.contains(&true) {
            return Ok(None);
        }
        let cached = f.steps.lock().get(&split).cloned();
        let (sim, from) = match cached {
            Some(step) => step,
            None => {
                let sim = f.engine_step(&self.placement_of(dev), &self.cluster)?;
                // Each of its nodes takes the device of the node of this
                // step that its full-graph node follows (as `placement_of`
                // and `device_indices` would give it, without the names).
                let (Some(mine), Some(its)) = (&self.graph.step, &sim.graph.step) else { return Ok(None) };
                let from: Vec<Option<u32>> = its.full_id.iter().map(|&id| mine.follow.get(id as usize).copied().flatten()).collect();
                let step = (Arc::new(sim), Arc::new(from));
                f.steps.lock().insert(split, step.clone());
                step
            }
        };
        let dev = from.iter().map(|b| b.map_or(0, |b| dev[b as usize])).collect();
        Ok(Some((sim, dev)))
    }

    /// The step the engine runs for `placement` of the whole graph, where
    /// it is not an expansion of one device per node of this step (see
    /// [`PlacedFusions`]; an expansion that splits a pool from its gradient
    /// is `split_step`'s).
    fn placed_step(&self, placement: &Placement) -> Result<Option<GraphSimulator>, SimError> {
        let Some(f) = &self.fusions else { return Ok(None) };
        if placement.devices().len() != self.graph.full_len() || self.placement_of(&self.device_indices(placement)?) == *placement {
            return Ok(None);
        }
        Ok(Some(f.engine_step(placement, &self.cluster)?))
    }

    pub fn from_sim_graph(graph: SimGraph, cluster: &VirtualCluster, opts: &SimOptions) -> Result<GraphSimulator, SimError> {
        let ndev = cluster.len();
        if ndev == 0 {
            return Err(SimError::param("devices", "the cluster has no devices"));
        }
        let (times, shares, priced) = price_nodes(&graph, cluster, opts)?;
        if let Some((k, e)) = opts.host_contention.iter().enumerate().find(|(_, e)| !(e.is_finite() && **e > 0.0 && **e <= 1.0)) {
            return Err(SimError::param(
                "host_contention",
                format!("the speed with {} devices computing must be in (0, 1], got {e}", k + 1),
            ));
        }
        let mut warnings = graph.warnings.clone();
        let (fallback_nodes, scaled_nodes) = profile_warnings(&graph, opts.profile.as_ref(), &priced, &mut warnings);
        let wire = WireCosts::of(&graph, opts);
        let tc = &opts.transfer_compute;
        let self_driven = cluster.devices().iter().map(|d| d.spec.copy_engines == 0 && !tc.is_empty()).collect();
        let mut latency_ps = vec![0.0; ndev * ndev];
        let mut ps_per_byte = vec![0.0; ndev * ndev];
        for a in 0..ndev {
            for b in 0..ndev {
                let l = cluster.link(a, b);
                latency_ps[a * ndev + b] = l.latency_seconds() * SimTime::PS_PER_SECOND;
                ps_per_byte[a * ndev + b] = SimTime::PS_PER_SECOND / l.bytes_per_second();
            }
        }
        let copy_engines = cluster.devices().iter().map(|d| (d.spec.copy_engines as usize).max(1)).collect();
        let (pair_ports, port_cap) = shared_ports(cluster);
        let sim = GraphSimulator {
            graph,
            cluster: cluster.clone(),
            ndev,
            times,
            wire_bytes: wire.bytes,
            control_bytes: wire.control_bytes,
            latency_ps,
            ps_per_byte,
            copy_engines,
            pair_ports,
            port_cap,
            warnings,
            fallback_nodes,
            scaled_nodes,
            send_ps: wire.send_ps,
            recv_ps: wire.recv_ps,
            control_send_ps: wire.control_send_ps,
            control_recv_ps: wire.control_recv_ps,
            self_driven,
            contended: !opts.host_contention.is_empty() || shares.iter().any(|&s| s < 1.0),
            contention: opts.host_contention.clone(),
            shares,
            fusions: None,
        };
        sim.check_clock_range()?;
        Ok(sim)
    }

    /// Refuses a step whose ops and transfers could outrun the replay's
    /// clock, naming the slowest op: every op run one after the other at
    /// the slowest speed contention gives it, and every tensor sent to
    /// every other device over the slowest link, bound every event time,
    /// and beyond `u64` they would wrap (a profile pricing MatMul at 1e9 s
    /// gave a 232 us step).
    fn check_clock_range(&self) -> Result<(), SimError> {
        let (graph, ndev) = (&self.graph, self.ndev);
        let slowest_speed = self.shares.iter().chain(&self.contention).copied().fold(1.0f64, f64::min);
        let mut ops = 0.0;
        let mut slowest = (0.0, 0);
        for i in (0..graph.len()).filter(|&i| graph.runs[i]) {
            // (`u64::MAX`: a device that cannot run it, where the replay refuses it)
            let runnable = self.times[i * ndev..(i + 1) * ndev].iter().copied().filter(|&t| t != u64::MAX);
            let Some(t) = runnable.max() else {
                return Err(SimError::Graph {
                    node: graph.names[i].clone(),
                    detail: format!("no device of the cluster can run its {} (the roofline has no rate for it on any of them)", graph.ops[i]),
                });
            };
            let t = t as f64;
            ops += t;
            if t > slowest.0 {
                slowest = (t, i);
            }
        }
        let max_latency = self.latency_ps.iter().copied().fold(0.0, f64::max);
        let max_ps_per_byte = self.ps_per_byte.iter().copied().fold(0.0, f64::max);
        let sends = ndev.saturating_sub(1).max(1) as f64;
        let transfers: f64 = (0..self.wire_bytes.len())
            .map(|s| sends * (max_latency + self.wire_bytes[s] as f64 * max_ps_per_byte + self.send_ps[s] as f64 + self.recv_ps[s] as f64))
            .sum();
        let worst = ops / slowest_speed + transfers;
        if worst < CLOCK_RANGE_PS {
            return Ok(());
        }
        let (t, i) = slowest;
        Err(SimError::Graph {
            node: graph.names[i].clone(),
            detail: format!(
                "the slowest op ({}, {:.3e} s) and the step's other ops and transfers add up to {:.3e} s at worst, beyond the {:.1e} s of simulated time the graph simulator's clock holds",
                graph.ops[i],
                t / SimTime::PS_PER_SECOND,
                worst / SimTime::PS_PER_SECOND,
                CLOCK_RANGE_PS / SimTime::PS_PER_SECOND
            ),
        })
    }

    pub fn graph(&self) -> &SimGraph {
        &self.graph
    }

    pub fn cluster(&self) -> &VirtualCluster {
        &self.cluster
    }

    /// Nodes that a profile with shape keys had no measurement for (they
    /// were priced by op name or by the roofline); empty without such a
    /// profile.
    pub fn fallback_nodes(&self) -> &[String] {
        &self.fallback_nodes
    }

    /// Nodes the profile measured at other shapes only: their times are
    /// the measured ones scaled by the cost model (extrapolated).
    pub fn scaled_nodes(&self) -> &[String] {
        &self.scaled_nodes
    }

    /// Warnings from preparing the graph and its costs.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Copy engines of device `d` (at least one).
    pub(crate) fn copy_engines(&self, d: usize) -> usize {
        self.copy_engines[d]
    }

    /// The ports (out of `a`, into `b`) a transfer from `a` to `b` shares,
    /// when their link is a `port` link.
    pub(crate) fn ports_of(&self, a: usize, b: usize) -> Option<(usize, usize)> {
        self.pair_ports[a * self.ndev + b].map(|(o, i)| (o as usize, i as usize))
    }

    /// A transfer's latency and its time on the wire at full rate, in
    /// picoseconds, as the replay counts them on `port` links.
    pub(crate) fn transfer_parts_ps(&self, a: usize, b: usize, bytes: u64) -> (u64, u64) {
        let k = a * self.ndev + b;
        (
            SimTime::from_secs_f64_ceil(self.latency_ps[k] / SimTime::PS_PER_SECOND).0,
            SimTime::from_secs_f64_ceil(bytes as f64 * self.ps_per_byte[k] / SimTime::PS_PER_SECOND).0,
        )
    }

    /// Number of ports in the cluster.
    pub(crate) fn port_count(&self) -> usize {
        self.port_cap.len()
    }

    /// Every node as priced on device `d`: (name, op, class, flops, bytes,
    /// seconds). For holding one predictor against another op by op (the
    /// validation kind's diagnosis tests).
    pub fn priced_nodes(&self, d: usize) -> Vec<(String, String, String, f64, f64, f64)> {
        let g = &self.graph;
        (0..g.len()).map(|i| (g.names[i].clone(), g.ops[i].clone(), g.costs[i].class.to_string(), g.costs[i].flops, g.costs[i].bytes, self.op_ps(i, d) as f64 * 1e-12)).collect()
    }

    /// Time of node `i` on device `d`, in picoseconds.
    #[inline]
    pub(crate) fn op_ps(&self, i: usize, d: usize) -> u64 {
        self.times[i * self.ndev + d]
    }

    /// Time to send `bytes` from device `a` to device `b` (0 on one device).
    #[inline]
    pub(crate) fn transfer_ps(&self, a: usize, b: usize, bytes: u64) -> u64 {
        if a == b {
            return 0;
        }
        let k = a * self.ndev + b;
        SimTime::from_secs_f64_ceil((self.latency_ps[k] + bytes as f64 * self.ps_per_byte[k]) / SimTime::PS_PER_SECOND).0
    }

    /// Bytes on the wire for slot `s`.
    #[inline]
    pub(crate) fn slot_wire_bytes(&self, s: usize) -> u64 {
        self.wire_bytes[s]
    }

    pub(crate) fn control_bytes(&self) -> u64 {
        self.control_bytes
    }

    /// Device indices of a placement (of the full graph, also when the
    /// simulator runs a pruned step); errors name the node whose device is
    /// missing or outside the cluster.
    pub fn device_indices(&self, placement: &Placement) -> Result<Vec<u16>, SimError> {
        let n = self.graph.len();
        let full = self.graph.full_len();
        if placement.len() < full {
            let node = if self.graph.step.is_none() { self.graph.names.get(placement.len()).cloned().unwrap_or_default() } else { String::new() };
            return Err(SimError::Placement {
                node,
                detail: format!("the placement covers {} of the graph's {} nodes", placement.len(), full),
            });
        }
        let index: HashMap<&flowlab_engine::DeviceName, u16> =
            self.cluster.devices().iter().enumerate().map(|(i, d)| (&d.name, i as u16)).collect();
        let devices = placement.devices();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let d = &devices[self.graph.full_id(i)];
            match index.get(d) {
                Some(&k) => out.push(k),
                None => {
                    return Err(SimError::Placement {
                        node: self.graph.names[i].clone(),
                        detail: format!("it is placed on '{d}', which is not a device of the simulated set ({})", self.cluster.list()),
                    });
                }
            }
        }
        Ok(out)
    }

    /// A placement of the full graph from device indices of the simulated
    /// nodes; nodes a pruned step left out follow their colocation partner
    /// or nearest consumer (see [`SimGraph::for_step`]).
    pub fn placement_of(&self, dev: &[u16]) -> Placement {
        let name = |d: u16| self.cluster.devices()[d as usize].name.clone();
        match &self.graph.step {
            None => Placement::from_devices(dev.iter().map(|&d| name(d)).collect()),
            Some(map) => Placement::from_devices(map.follow.iter().map(|f| name(f.map_or(0, |k| dev[k as usize]))).collect()),
        }
    }

    /// Simulates one step of `placement` and reports it.
    pub fn simulate(&self, placement: &Placement) -> Result<GraphSimReport, SimError> {
        if let Some(sim) = self.placed_step(placement)? {
            return sim.simulate(placement);
        }
        let dev = self.device_indices(placement)?;
        self.simulate_indices(&dev)
    }

    /// Like [`GraphSimulator::simulate`], with one device index per node.
    pub fn simulate_indices(&self, dev: &[u16]) -> Result<GraphSimReport, SimError> {
        if let Some((sim, dev)) = self.split_step(dev)? {
            return sim.simulate_indices(&dev);
        }
        let t = self.run(dev)?;
        Ok(self.report(dev, &t))
    }

    /// When each simulated op of `placement` runs: (node, device index,
    /// start, end) in seconds from the step's start, in order of start.
    /// Held against the engine's step stats, it shows where a prediction
    /// and a real step part ways.
    pub fn schedule(&self, placement: &Placement) -> Result<Vec<(String, usize, f64, f64)>, SimError> {
        if let Some(sim) = self.placed_step(placement)? {
            return sim.schedule(placement);
        }
        let dev = self.device_indices(placement)?;
        if let Some((sim, _)) = self.split_step(&dev)? {
            return sim.schedule(placement);
        }
        let t = self.run(&dev)?;
        let mut out: Vec<_> = (0..self.graph.len())
            .map(|i| (self.graph.names[i].clone(), dev[i] as usize, SimTime(t.start[i]).as_secs_f64(), SimTime(t.finish[i]).as_secs_f64()))
            .collect();
        out.sort_by(|a, b| a.2.total_cmp(&b.2).then(a.3.total_cmp(&b.3)));
        Ok(out)
    }

    /// Step time and whether memory fits, without building a report (what
    /// placers call in their inner loops).
    pub(crate) fn step_time(&self, dev: &[u16]) -> Result<(SimTime, bool), SimError> {
        if let Some((sim, dev)) = self.split_step(dev)? {
            return sim.step_time(&dev);
        }
        let t = self.run(dev)?;
        let fits = t.peak_mem.iter().zip(self.cluster.devices()).all(|(&p, d)| p as f64 <= d.capacity_bytes);
        Ok((t.step, fits))
    }

    /// The event-driven replay (see the module contract and [`replay`]).
    pub(crate) fn run(&self, dev: &[u16]) -> Result<Trace, SimError> {
        replay::Replay::new(self, dev)?.run()
    }

    /// Builds the report of a finished run.
    pub(crate) fn report(&self, dev: &[u16], t: &Trace) -> GraphSimReport {
        let g = &self.graph;
        let step = t.step.as_secs_f64();
        let mut over = Vec::new();
        let mut by_class: Vec<BTreeMap<String, u64>> = vec![BTreeMap::new(); self.ndev];
        for (i, &d) in dev.iter().enumerate().take(g.len()) {
            *by_class[d as usize].entry(g.costs[i].class.to_string()).or_insert(0) += self.op_ps(i, d as usize);
        }
        let devices: Vec<DeviceReport> = self
            .cluster
            .devices()
            .iter()
            .enumerate()
            .map(|(d, vd)| {
                let busy = SimTime(t.busy_ps[d]).as_secs_f64();
                let over_capacity = t.peak_mem[d] as f64 > vd.capacity_bytes;
                if over_capacity {
                    over.push(format!(
                        "{} ({}) needs {} bytes at peak but holds {:.0}",
                        vd.name, vd.spec.name, t.peak_mem[d], vd.capacity_bytes
                    ));
                }
                DeviceReport {
                    name: vd.name.to_string(),
                    spec: vd.spec.name.clone(),
                    ops: t.ops_per_device[d],
                    busy_seconds: busy,
                    op_seconds_by_class: by_class[d].iter().map(|(k, &ps)| (k.clone(), SimTime(ps).as_secs_f64())).collect(),
                    utilization: if step > 0.0 { busy / step } else { 0.0 },
                    peak_memory_bytes: t.peak_mem[d],
                    capacity_bytes: vd.capacity_bytes,
                    over_capacity,
                }
            })
            .collect();
        let mut per_link: Vec<(u64, usize)> = vec![(0, 0); self.ndev * self.ndev];
        let mut transfer_bytes = 0;
        for tr in &t.transfers {
            let e = &mut per_link[tr.src as usize * self.ndev + tr.dst as usize];
            e.0 += tr.bytes;
            e.1 += 1;
            transfer_bytes += tr.bytes;
        }
        let links = per_link
            .iter()
            .enumerate()
            .filter(|(_, (_, c))| *c > 0)
            .map(|(k, &(bytes, transfers))| {
                let (a, b) = (k / self.ndev, k % self.ndev);
                LinkReport {
                    src: self.cluster.devices()[a].name.to_string(),
                    dst: self.cluster.devices()[b].name.to_string(),
                    link: self.cluster.link(a, b).name.clone(),
                    bytes,
                    transfers,
                }
            })
            .collect();
        // Critical path: back from the last op through whatever held each
        // op back: the device (previous op there) or its last input.
        let mut path = Vec::new();
        let last = (0..g.len()).max_by_key(|&i| (t.finish[i], Reverse(i)));
        let mut cur = last.map_or(NONE, |i| i as u32);
        while cur != NONE && path.len() <= g.len() {
            path.push(g.names[cur as usize].clone());
            let c = cur as usize;
            cur = if t.dev_pred[c] != NONE { t.dev_pred[c] } else { t.pred[c] };
        }
        path.reverse();
        GraphSimReport {
            step_seconds: step,
            step_ps: t.step.0,
            devices,
            critical_path: path,
            links,
            ops: g.len(),
            transfers: t.transfers.len(),
            transfer_bytes,
            over_memory: !over.is_empty(),
            memory_error: if over.is_empty() { None } else { Some(format!("over memory capacity: {}", over.join("; "))) },
            warnings: self.warnings.clone(),
        }
    }
}

/// Each node's time on each device (picoseconds; `u64::MAX` where the
/// device cannot run it), its speed beside a second computing device, and
/// whether a profile's shape key priced it nowhere. One coster per
/// distinct device spec: devices of one spec share times.
#[allow(clippy::type_complexity)]
fn price_nodes(graph: &SimGraph, cluster: &VirtualCluster, opts: &SimOptions) -> Result<(Vec<u64>, Vec<f64>, Vec<Priced>), SimError> {
    let (n, ndev) = (graph.len(), cluster.len());
    let mut spec_index: Vec<usize> = Vec::with_capacity(ndev);
    let mut distinct: Vec<&flowlab_hw::DeviceSpec> = Vec::new();
    for d in cluster.devices() {
        match distinct.iter().position(|s| **s == d.spec) {
            Some(k) => spec_index.push(k),
            None => {
                spec_index.push(distinct.len());
                distinct.push(&d.spec);
            }
        }
    }
    let profile = opts.profile.as_ref();
    let mut per_spec = vec![vec![0u64; n]; distinct.len()];
    let pair_share = opts.host_contention.get(1).copied().unwrap_or(1.0);
    let mut share_spec = vec![vec![pair_share; n]; distinct.len()];
    // Per node, the least measured pricing any device spec gave it.
    let mut priced = vec![Priced::Measured; n];
    for (k, spec) in distinct.iter().enumerate() {
        let mut coster = DeviceCoster::new(spec, profile);
        for i in 0..n {
            if !graph.runs[i] {
                continue;
            }
            let (s, how, share) = coster.seconds(&graph.names[i], &graph.ops[i], &graph.keys[i], &graph.costs[i]);
            // infinite: the device cannot run the op (float work on TPU
            // v1), kept as `u64::MAX` for the placers to avoid and refused
            // by the replay; finite beyond the clock: refused
            if s.is_finite() && s * SimTime::PS_PER_SECOND >= CLOCK_RANGE_PS {
                return Err(SimError::Graph {
                    node: graph.names[i].clone(),
                    detail: format!(
                        "its {} is priced at {s:.3e} s on {}, beyond the {:.1e} s of simulated time the graph simulator's clock holds",
                        graph.ops[i],
                        spec.name,
                        CLOCK_RANGE_PS / SimTime::PS_PER_SECOND
                    ),
                });
            }
            priced[i] = priced[i].max(how);
            per_spec[k][i] = SimTime::from_secs_f64(s).0;
            if let Some(sh) = share {
                share_spec[k][i] = sh;
            }
        }
    }
    let mut times = vec![0u64; n * ndev];
    let mut shares = vec![1.0; n * ndev];
    for i in 0..n {
        for d in 0..ndev {
            times[i * ndev + d] = per_spec[spec_index[d]][i];
            shares[i * ndev + d] = share_spec[spec_index[d]][i];
        }
    }
    Ok((times, shares, priced))
}

/// What the profile left unpriced or priced by extrapolation, as warnings:
/// with shape keys, the nodes no key priced and the nodes scaled from their
/// profiled shapes (both returned, by name); without, each op it has no
/// entry for.
fn profile_warnings(graph: &SimGraph, profile: Option<&Profile>, priced: &[Priced], warnings: &mut Vec<String>) -> (Vec<String>, Vec<String>) {
    let n = graph.len();
    let keyed_profile = profile.is_some_and(|p| !p.shapes.is_empty());
    let named = |how: Priced| -> Vec<String> {
        if !keyed_profile {
            return Vec::new();
        }
        (0..n).filter(|&i| graph.runs[i] && priced[i] == how).map(|i| graph.names[i].clone()).collect()
    };
    let (fallback_nodes, scaled_nodes) = (named(Priced::Modelled), named(Priced::Scaled));
    if let Some(p) = profile
        && !scaled_nodes.is_empty()
    {
        let from = match (&p.model, p.batch) {
            (Some(m), Some(b)) => format!(" ({m} at batch {b})"),
            _ => String::new(),
        };
        warnings.push(format!(
            "{} of {} nodes are priced from their measured time at the profile's shapes{from}, scaled by the cost model's ratio: extrapolated, not measured",
            scaled_nodes.len(),
            graph.runs.iter().filter(|&&r| r).count(),
        ));
    }
    if keyed_profile && !fallback_nodes.is_empty() {
        let mut by_op: BTreeMap<&str, usize> = BTreeMap::new();
        for i in (0..n).filter(|&i| graph.runs[i] && priced[i] == Priced::Modelled) {
            *by_op.entry(graph.ops[i].as_str()).or_default() += 1;
        }
        let list: Vec<String> = by_op.iter().map(|(op, c)| format!("{op} x{c}")).collect();
        warnings.push(format!(
            "{} of {} nodes have no measured shape in the profile and use the op-name or roofline cost: {}",
            fallback_nodes.len(),
            graph.runs.iter().filter(|&&r| r).count(),
            list.join(", ")
        ));
    }
    if let Some(p) = profile
        && !keyed_profile
    {
        let mut seen = HashSet::new();
        for i in 0..n {
            let op = graph.ops[i].as_str();
            if !p.ops.contains_key(op) && seen.insert(op) {
                warnings.push(format!("the profile has no measurement for op '{op}' (e.g. node '{}'): using the roofline", graph.names[i]));
            }
        }
    }
    (fallback_nodes, scaled_nodes)
}

/// Bytes on the wire and Send/Recv kernel times per slot, in the slot's
/// wire format, and the same for a control token.
struct WireCosts {
    bytes: Vec<u64>,
    control_bytes: u64,
    send_ps: Vec<u64>,
    recv_ps: Vec<u64>,
    control_send_ps: u64,
    control_recv_ps: u64,
}

impl WireCosts {
    fn of(graph: &SimGraph, opts: &SimOptions) -> WireCosts {
        let po = &opts.partition;
        let slots = graph.slot_elems.len();
        // The format each slot travels in: its edge's, else the step's.
        let requested: Vec<flowlab_hw::CommFormat> = (0..slots)
            .map(|s| {
                if po.edge_formats.is_empty() {
                    return po.format;
                }
                let node = graph.slot_node[s] as usize;
                let edge = format!("{}:{}", graph.names[node], s - graph.slot_base[node] as usize);
                po.edge_formats.get(&edge).copied().unwrap_or(po.format)
            })
            .collect();
        let bytes = (0..slots)
            .map(|s| {
                let (dtype, elems) = (graph.slot_dtype[s], graph.slot_elems[s]);
                if dtype == DType::F32 { wire_format(dtype, requested[s]).bytes_for(elems) } else { elems * dtype.size_in_bytes() as u64 }
            })
            .collect();
        let tc = &opts.transfer_compute;
        let kernel_ps = |format: flowlab_hw::CommFormat, elems: u64| -> (u64, u64) {
            let name = match format {
                flowlab_hw::CommFormat::Int8 { .. } => "int8".to_string(),
                f => f.to_string(),
            };
            tc.get(&name).map_or((0, 0), |c| {
                let e = elems as f64;
                (
                    SimTime::from_secs_f64((c.send_us * 1e3 + e * c.send_ns_per_element) * 1e-9).0,
                    SimTime::from_secs_f64((c.recv_us * 1e3 + e * c.recv_ns_per_element) * 1e-9).0,
                )
            })
        };
        let mut send_ps = vec![0u64; slots];
        let mut recv_ps = vec![0u64; slots];
        if !tc.is_empty() {
            for s in 0..slots {
                let f = if graph.slot_dtype[s] == DType::F32 { requested[s] } else { flowlab_hw::CommFormat::F32 };
                (send_ps[s], recv_ps[s]) = kernel_ps(f, graph.slot_elems[s]);
            }
        }
        let (control_send_ps, control_recv_ps) = kernel_ps(po.format, 1);
        WireCosts { bytes, control_bytes: wire_format(DType::F32, po.format).bytes_for(1), send_ps, recv_ps, control_send_ps, control_recv_ps }
    }
}

/// The ports of every `port` link (one per device, direction and link
/// name) with their capacities in bytes per picosecond, and each ordered
/// device pair's (out, in) ports where its link is such a link.
#[allow(clippy::type_complexity)]
fn shared_ports(cluster: &VirtualCluster) -> (Vec<Option<(u32, u32)>>, Vec<f64>) {
    let ndev = cluster.len();
    let mut pair_ports = vec![None; ndev * ndev];
    let mut port_cap: Vec<f64> = Vec::new();
    let mut port_index: HashMap<(usize, bool, String), u32> = HashMap::new();
    let mut port = |d: usize, out: bool, l: &flowlab_hw::LinkSpec| -> u32 {
        *port_index.entry((d, out, l.name.clone())).or_insert_with(|| {
            port_cap.push(l.bytes_per_second() / SimTime::PS_PER_SECOND);
            (port_cap.len() - 1) as u32
        })
    };
    for a in 0..ndev {
        for b in (0..ndev).filter(|&b| b != a) {
            let l = cluster.link(a, b);
            if l.sharing == flowlab_hw::LinkSharing::Port {
                pair_ports[a * ndev + b] = Some((port(a, true, l), port(b, false, l)));
            }
        }
    }
    (pair_ports, port_cap)
}
