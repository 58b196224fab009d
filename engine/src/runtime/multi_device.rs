//! Multi-device steps: one run signature, split over the session's devices.
//!
//! Contract. [`MultiPlan::new`] does, once per (feeds, fetches, targets)
//! signature: prune the graph to what the step needs (stopping at fed
//! edges), copy that part into a fresh graph whose fed outputs become
//! placeholders on the producer's device, partition it with Send/Recv pairs
//! ([`partition_with`]), and prepare one executor per partition with every
//! Send as a target. A Recv whose Send is not part of the step is an error
//! here, before anything runs. [`MultiPlan::run`] gives the step a fresh
//! rendezvous and step id, runs the partitions side by side (one OS thread
//! per partition, each with its device's pool), and returns the fetches from
//! the partitions that hold them. On any error the rendezvous is aborted,
//! the step returns the first error with its device, and the variables the
//! step writes are restored to their values before the step.

use crate::framework::LinkMap;
use crate::framework::link::{LinkDelivery, deliver};
use crate::framework::{Backend, DeviceName};
use crate::error::{EngineError, Result};
use crate::runtime::executor::{Prepared, RECV_SPIN, Resources};
use crate::graph::{Graph, NodeClass, NodeId};
use crate::tensor::{DeviceType, TensorType};
use crate::ops::sendrecv::{CommCounters, StepComm, TransferTrace};
use crate::runtime::partition::{PartitionOptions, partition_with};
use crate::runtime::placement::Placement;
use crate::framework::rendezvous::LocalRendezvous;
use crate::framework::VarSlot;
use crate::tensor::Tensor;
use crate::framework::stats::StepStats;
use std::collections::{HashMap, HashSet};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One local device: its name, kernel device type and backend (a
/// CPU's own worker pool, `None` for one thread: the partition then runs on
/// the step's thread for it; a GPU's stream and allocator).
pub(crate) struct LocalDevice {
    pub name: DeviceName,
    pub label: String,
    pub device_type: DeviceType,
    pub backend: Backend,
}

impl LocalDevice {
    pub(crate) fn new(name: &DeviceName, device_type: DeviceType, threads: usize) -> Result<LocalDevice> {
        let backend = Backend::open(name, device_type, threads)?;
        Ok(LocalDevice { name: name.clone(), label: name.to_string(), device_type, backend })
    }
}

/// Variables the step writes, with their values before it.
pub(crate) struct Snapshot(Vec<(Arc<VarSlot>, Option<Tensor>)>);

impl Snapshot {
    /// Keeps a handle on each value (no copy; the step's first in-place
    /// update of a kept value copies it instead).
    pub(crate) fn take(writes: &[Arc<VarSlot>]) -> Result<Snapshot> {
        Ok(Snapshot(writes.iter().map(|v| Ok((v.clone(), v.lock()?.clone()))).collect::<Result<_>>()?))
    }

    /// Puts every kept value back (whole, so a value a panic tore is
    /// whole again).
    pub(crate) fn restore(self) {
        for (v, old) in self.0 {
            v.set(old);
        }
    }
}

/// Where a fetch comes from.
enum FetchSrc {
    Feed(usize),
    /// (partition, index among that partition's fetches)
    Part(usize, usize),
}

struct PartPlan {
    /// Index into the session's devices.
    device: usize,
    prep: Prepared,
    /// Run-feed index of each of this partition's feeds.
    feeds: Vec<usize>,
}

/// A run signature prepared for several devices.
pub(crate) struct MultiPlan {
    parts: Vec<PartPlan>,
    fetches: Vec<FetchSrc>,
    writes: Vec<Arc<VarSlot>>,
    pub(crate) feed_types: Vec<(String, TensorType)>,
}

fn unknown(n: NodeId) -> EngineError {
    EngineError::UnknownNode(format!("#{n}"))
}

/// The nodes the step's graph copies: the needed ones, and the variables
/// (and optimizer slots) their update ops name, which come along
/// unexecuted unless needed so that the copies can resolve them by name.
fn with_named_variables(nodes: &[crate::graph::Node], needed: &[bool]) -> Vec<bool> {
    let by_name: HashMap<&str, NodeId> = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i)).collect();
    let mut copy = needed.to_vec();
    for n in nodes.iter().zip(needed).filter(|(_, nd)| **nd).map(|(n, _)| n) {
        let mut names: Vec<&str> = Vec::new();
        if let Some(crate::graph::AttrValue::Str(v)) = n.attrs.get("var") {
            names.push(v.as_str());
        }
        if let Some(crate::graph::AttrValue::Strs(s)) = n.attrs.get("slots") {
            names.extend(s.iter().map(String::as_str));
        }
        for v in names {
            if let Some(&id) = by_name.get(v) {
                copy[id] = true;
            }
        }
    }
    copy
}

/// The devices of one process a multi-device step runs on, the emulated
/// links between them (none: memory copies), and the counters their
/// transfers add to.
pub(crate) struct LocalFabric<'a> {
    pub devices: &'a [LocalDevice],
    pub links: &'a LinkMap,
    pub counters: &'a CommCounters,
}

impl MultiPlan {
    /// The plan of the steps that feed, fetch and run `targets` as given
    /// (`(feeds, fetches, targets)`).
    pub(crate) fn new(
        graph: &Graph,
        placement: &Placement,
        devices: &[LocalDevice],
        opts: &PartitionOptions,
        (feeds, fetches, targets): (&[(NodeId, usize)], &[(NodeId, usize)], &[NodeId]),
        res: &dyn Resources,
    ) -> Result<MultiPlan> {
        let nodes = graph.nodes();
        let feed_index: HashMap<(NodeId, usize), usize> = feeds.iter().enumerate().map(|(i, &f)| (f, i)).collect();
        let feed_types = crate::runtime::executor::feed_types(&nodes, feeds)?;

        let needed = crate::runtime::executor::needed_nodes(&nodes, &feed_index, fetches, targets)?;
        let copy = with_named_variables(&nodes, &needed);

        let device_of = |id: NodeId| -> Result<DeviceName> {
            let n = &nodes[id];
            let d = placement.device(id).ok_or_else(|| EngineError::Placement {
                node: n.name.clone(),
                detail: format!("the placement covers {} of the graph's {} nodes", placement.len(), nodes.len()),
            })?;
            if !devices.iter().any(|x| &x.name == d) {
                return Err(EngineError::Placement { node: n.name.clone(), detail: format!("placed on '{d}', which is not a device of the session") });
            }
            Ok(d.clone())
        };

        // The step's graph: copies of the needed nodes, fed outputs replaced
        // by placeholders on their producer's device.
        let g2 = Graph::new();
        let mut dev2: Vec<DeviceName> = Vec::new();
        let mut new_id: HashMap<NodeId, NodeId> = HashMap::new();
        let mut feed_node: HashMap<(NodeId, usize), String> = HashMap::new();
        let feed_name = |n: NodeId, k: usize| -> String {
            let node = &nodes[n];
            if node.class() == NodeClass::Placeholder && !copy[n] { node.name.clone() } else { format!("_feed/{}/{k}", node.name) }
        };
        let mut back_edges = Vec::new();
        for id in (0..nodes.len()).filter(|&i| copy[i]) {
            let node = &nodes[id];
            let mut b = g2.op(&node.op).name(&node.name);
            for &(src, k) in &node.inputs {
                if feed_index.contains_key(&(src, k)) {
                    let name = match feed_node.get(&(src, k)) {
                        Some(name) => name.clone(),
                        None => {
                            let name = feed_name(src, k);
                            let t = &nodes[src].outputs[k];
                            g2.op("Placeholder")
                                .name(&name)
                                .attr("dtype", crate::graph::AttrValue::DType(t.dtype))
                                .attr("shape", crate::graph::AttrValue::Shape(t.shape.clone()))
                                .build()?;
                            dev2.push(device_of(src)?);
                            feed_node.insert((src, k), name.clone());
                            name
                        }
                    };
                    b = b.input(g2.output_by_name(&name, 0)?);
                } else if src >= id {
                    // A loop's NextIteration -> Merge edge: added once both exist.
                    back_edges.push((id, src, k));
                } else {
                    let s = *new_id.get(&src).ok_or_else(|| unknown(src))?;
                    b = b.input(g2.out(s, k));
                }
            }
            for &c in &node.control_inputs {
                let s = *new_id.get(&c).ok_or_else(|| unknown(c))?;
                b = b.control_input(&g2.out(s, 0));
            }
            for (k, v) in &node.attrs {
                b = b.attr(k, v.clone());
            }
            new_id.insert(id, b.build()?.node_id());
            dev2.push(device_of(id)?);
        }
        for (m, src, k) in back_edges {
            let (m2, s2) = (*new_id.get(&m).ok_or_else(|| unknown(m))?, *new_id.get(&src).ok_or_else(|| unknown(src))?);
            g2.add_back_edge(m2, (s2, k));
        }
        let parts = partition_with(&g2, &Placement::from_devices(dev2), opts)?;

        // One executor per partition; every Send is a target.
        let mut plans = Vec::with_capacity(parts.len());
        let mut fetch_src: Vec<Option<FetchSrc>> = fetches
            .iter()
            .map(|f| feed_index.get(f).map(|&i| FetchSrc::Feed(i)))
            .collect();
        for (pi, part) in parts.iter().enumerate() {
            let device = devices.iter().position(|d| d.name == part.device).ok_or_else(|| EngineError::Placement {
                node: String::new(),
                detail: format!("partition for '{}', which is not a device of the session", part.device),
            })?;
            let has = |name: &str| part.graph.output_by_name(name, 0).ok().map(|o| o.node_id());
            let (mut pfeeds, mut pfeed_idx) = (Vec::new(), Vec::new());
            for (&(n, k), name) in &feed_node {
                if let Some(id) = has(name) {
                    pfeeds.push((id, 0));
                    pfeed_idx.push(feed_index[&(n, k)]);
                }
            }
            let mut pfetches = Vec::new();
            for (j, &(n, k)) in fetches.iter().enumerate() {
                if fetch_src[j].is_none()
                    && let Some(id) = has(&nodes[n].name)
                {
                    fetch_src[j] = Some(FetchSrc::Part(pi, pfetches.len()));
                    pfetches.push((id, k));
                }
            }
            let mut ptargets: Vec<NodeId> = targets.iter().filter_map(|&t| has(&nodes[t].name)).collect();
            for s in &part.sends {
                ptargets.push(has(&s.send_node).ok_or_else(|| EngineError::UnknownNode(s.send_node.clone()))?);
            }
            let prep = Prepared::new(&part.graph, &pfeeds, &pfetches, &ptargets, res, devices[device].device_type)?;
            plans.push(PartPlan { device, prep, feeds: pfeed_idx });
        }
        let fetches = fetch_src
            .into_iter()
            .zip(fetches)
            .map(|(s, &(n, _))| s.ok_or_else(|| EngineError::UnknownNode(nodes[n].name.clone())))
            .collect::<Result<Vec<_>>>()?;
        check_sends(&plans, devices)?;
        let mut writes: Vec<Arc<VarSlot>> = Vec::new();
        for p in &plans {
            for w in p.prep.writes() {
                if !writes.iter().any(|x| Arc::ptr_eq(x, w)) {
                    writes.push(w.clone());
                }
            }
        }
        Ok(MultiPlan { parts: plans, fetches, writes, feed_types })
    }

    /// Nodes the step executes over all devices (Send and Recv included).
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(|p| p.prep.len()).sum()
    }

    /// Runs one step as step `step_id`.
    pub(crate) fn run(
        &self,
        feeds: &[Tensor],
        fabric: &LocalFabric,
        threads: usize,
        trace: bool,
        step_id: u64,
        recv_timeout: Duration,
    ) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        let LocalFabric { devices, links, counters } = *fabric;
        let rdv = LocalRendezvous::new();
        let (delivery, delivery_rx) = if links.is_empty() {
            (None, None)
        } else {
            let (d, rx) = LinkDelivery::new(links);
            (Some(d), Some(rx))
        };
        let comm = StepComm {
            rdv: &rdv,
            step_id,
            recv_timeout,
            // the other devices are threads of this process: a tensor often
            // comes within the spin, and then costs no futex wake-up
            recv_spin: RECV_SPIN,
            counters,
            start: Instant::now(),
            trace: trace.then(|| Mutex::new(TransferTrace::default())),
            first_error: Mutex::new(None),
            links: delivery.as_ref(),
        };
        let snapshot = Snapshot::take(&self.writes)?;
        let run_part = |p: &PartPlan| {
            let f: Vec<Tensor> = p.feeds.iter().map(|&i| feeds[i].clone()).collect();
            let d = &devices[p.device];
            p.prep.run(&f, threads, d, trace, Some(&comm))
        };
        let results: Vec<Result<(Vec<Tensor>, Option<StepStats>)>> = std::thread::scope(|s| {
            if let Some(rx) = delivery_rx {
                let rdv = &rdv;
                s.spawn(move || deliver(rx, rdv));
            }
            let mut handles = Vec::with_capacity(self.parts.len());
            for (i, p) in self.parts.iter().enumerate().skip(1) {
                let run_part = &run_part;
                let h = std::thread::Builder::new().name(format!("flowlab-step-{}", devices[p.device].label)).spawn_scoped(s, move || run_part(p));
                handles.push((i, h));
            }
            let mut out = Vec::with_capacity(self.parts.len());
            out.push(self.parts.first().map_or_else(|| Ok((Vec::new(), None)), |p| run_part(p)));
            for (i, h) in handles {
                let r = match h {
                    Ok(h) => h.join().unwrap_or_else(|_| {
                        Err(EngineError::Device(format!("{}: the step's thread panicked", devices[self.parts[i].device].label)))
                    }),
                    Err(e) => Err(EngineError::Device(format!("{}: cannot start the step's thread: {e}", devices[self.parts[i].device].label))),
                };
                out.push(r);
            }
            // Every Recv of the step has its tensor: the deliveries are done.
            if let Some(d) = &delivery {
                d.stop();
            }
            out
        });
        let first = comm.first_error.lock().take();
        if let Some(e) = first {
            snapshot.restore();
            return Err(e);
        }
        let mut outs = Vec::with_capacity(results.len());
        let mut stats = StepStats::default();
        for r in results {
            match r {
                Ok((v, s)) => {
                    outs.push(v);
                    if let Some(s) = s {
                        stats.nodes.extend(s.nodes);
                    }
                }
                Err(e) => {
                    snapshot.restore();
                    return Err(e);
                }
            }
        }
        drop(snapshot);
        let mut values = Vec::with_capacity(self.fetches.len());
        for f in &self.fetches {
            values.push(match *f {
                FetchSrc::Feed(i) => feeds[i].clone(),
                FetchSrc::Part(p, j) => outs[p][j].clone(),
            });
        }
        let stats = trace.then(|| {
            stats.total_us = comm.start.elapsed().as_secs_f64() * 1e6;
            stats.nodes.sort_by(|a, b| a.end_us.total_cmp(&b.end_us));
            if let Some(t) = comm.trace {
                stats.transfers = t.into_inner().done;
            }
            stats
        });
        Ok((values, stats))
    }
}

/// Every Recv of the step must have its Send in the step: otherwise it
/// would wait until the timeout.
fn check_sends(parts: &[PartPlan], devices: &[LocalDevice]) -> Result<()> {
    let mut sends: HashSet<(String, String, String)> = HashSet::new();
    for p in parts {
        for (_, t) in p.prep.sends() {
            sends.insert((t.key.edge.clone(), t.key.src_device.to_string(), t.key.dst_device.to_string()));
        }
    }
    for p in parts {
        for (name, t) in p.prep.recvs() {
            let k = (t.key.edge.clone(), t.key.src_device.to_string(), t.key.dst_device.to_string());
            if !sends.contains(&k) {
                return Err(EngineError::Rendezvous {
                    key: t.key.to_string(),
                    detail: format!(
                        "Recv '{name}' on {} has no Send: no node of this step on {} sends '{}'{}",
                        devices[p.device].label,
                        k.1,
                        k.0,
                        if devices.iter().any(|d| d.label == k.1) { "" } else { " (that device is not in the session)" }
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::graph::AttrValue;
    use crate::tensor::DType;
    use crate::runtime::executor::tests::NoResources;
    use crate::tensor::PartialShape;
    use crate::framework::stats::CommStats;

    const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";
    const CPU1: &str = "/job:localhost/replica:0/task:0/device:CPU:1";

    /// A CPU device of `threads` threads named `name`.
    pub(crate) fn cpu_device(name: &str, threads: usize) -> LocalDevice {
        LocalDevice::new(&DeviceName::parse(name).unwrap(), DeviceType::Cpu, threads).unwrap()
    }

    fn recv_graph() -> (Graph, NodeId) {
        let g = Graph::new();
        let r = g
            .op("Recv")
            .name("orphan")
            .attr("edge", AttrValue::Str("ghost:0".into()))
            .attr("send_device", AttrValue::Str(CPU0.into()))
            .attr("recv_device", AttrValue::Str(CPU1.into()))
            .attr("dtype", AttrValue::DType(DType::F32))
            .attr("shape", AttrValue::Shape(PartialShape::scalar()))
            .build()
            .unwrap();
        (g, r.node_id())
    }

    fn comm<'a>(rdv: &'a LocalRendezvous, counters: &'a CommCounters, timeout: Duration) -> StepComm<'a> {
        StepComm {
            rdv,
            step_id: 5,
            recv_timeout: timeout,
            recv_spin: RECV_SPIN,
            counters,
            start: Instant::now(),
            trace: None,
            first_error: Mutex::new(None),
            links: None,
        }
    }

    #[test]
    fn a_recv_that_waits_past_the_timeout_fails_the_step_naming_its_key() {
        let (g, r) = recv_graph();
        let prep = Prepared::new(&g, &[], &[(r, 0)], &[], &NoResources, DeviceType::Cpu).unwrap();
        let (rdv, counters) = (LocalRendezvous::new(), CommCounters::default());
        let c = comm(&rdv, &counters, Duration::from_millis(30));
        assert!(prep.run(&[], 1, &cpu_device(CPU1, 1), false, Some(&c)).is_err());
        let e = c.first_error.lock().take().unwrap().to_string();
        assert_eq!(
            e,
            format!(
                "rendezvous 'ghost:0' from {CPU0} to {CPU1} (step 5): Recv 'orphan' waited 30ms and no tensor arrived \
                 (the Send on {CPU0} did not run) (on device {CPU1})"
            )
        );
    }

    #[test]
    fn an_abort_wakes_a_waiting_device_at_once() {
        let (g, r) = recv_graph();
        let prep = Prepared::new(&g, &[], &[(r, 0)], &[], &NoResources, DeviceType::Cpu).unwrap();
        let (rdv, counters) = (LocalRendezvous::new(), CommCounters::default());
        let c = comm(&rdv, &counters, Duration::from_secs(60));
        let t0 = Instant::now();
        let e = std::thread::scope(|s| {
            let h = s.spawn(|| prep.run(&[], 1, &cpu_device(CPU1, 1), false, Some(&c)));
            std::thread::sleep(Duration::from_millis(20));
            c.fail(CPU0, EngineError::Kernel { node: "div".into(), op: "Div".into(), detail: "boom".into() });
            h.join().unwrap().unwrap_err().to_string()
        });
        assert!(t0.elapsed() < Duration::from_secs(30), "woken by the abort, not the timeout");
        assert!(e.ends_with(&format!("aborted: node 'div' (Div): boom (on device {CPU0})")), "{e}");
        let first = c.first_error.lock().take().unwrap().to_string();
        assert_eq!(first, format!("node 'div' (Div): boom (on device {CPU0})"));
    }

    #[test]
    fn a_send_and_its_recv_on_two_threads_deliver_the_tensor_and_count_bytes() {
        let g = Graph::new();
        let x = g.constant(Tensor::from_vec(vec![1f32, 2.0, 3.0, 4.0], [4]).unwrap()).unwrap();
        let send = g
            .op("Send")
            .name("s")
            .input(&x)
            .attr("edge", AttrValue::Str("ghost:0".into()))
            .attr("send_device", AttrValue::Str(CPU0.into()))
            .attr("recv_device", AttrValue::Str(CPU1.into()))
            .attr("comm_format", AttrValue::Str("bf16".into()))
            .build()
            .unwrap();
        let sender = Prepared::new(&g, &[], &[], &[send.node_id()], &NoResources, DeviceType::Cpu).unwrap();
        let g2 = Graph::new();
        let r = g2
            .op("Recv")
            .name("r")
            .attr("edge", AttrValue::Str("ghost:0".into()))
            .attr("send_device", AttrValue::Str(CPU0.into()))
            .attr("recv_device", AttrValue::Str(CPU1.into()))
            .attr("comm_format", AttrValue::Str("bf16".into()))
            .attr("dtype", AttrValue::DType(DType::F32))
            .attr("shape", AttrValue::Shape(PartialShape::new(vec![None])))
            .build()
            .unwrap();
        let receiver = Prepared::new(&g2, &[], &[(r.node_id(), 0)], &[], &NoResources, DeviceType::Cpu).unwrap();
        let (rdv, counters) = (LocalRendezvous::new(), CommCounters::default());
        let mut c = comm(&rdv, &counters, Duration::from_secs(20));
        c.trace = Some(Mutex::new(TransferTrace::default()));
        let got = std::thread::scope(|s| {
            let h = s.spawn(|| receiver.run(&[], 1, &cpu_device(CPU1, 1), true, Some(&c)));
            sender.run(&[], 1, &cpu_device(CPU0, 1), false, Some(&c)).unwrap();
            h.join().unwrap().unwrap()
        });
        assert_eq!(got.0[0].to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0], "small integers survive bf16");
        assert_eq!(got.0[0].dims(), &[4], "the unknown dimension is filled in");
        assert_eq!(counters.snapshot(), CommStats { transfers: 1, bytes_sent: 8, bytes_f32: 16 });
        let done = c.trace.take().unwrap().into_inner().done;
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].edge.as_str(), done[0].format.as_str(), done[0].bytes), ("ghost:0", "bf16", 8));
        assert_eq!((done[0].send_device.as_str(), done[0].recv_device.as_str()), (CPU0, CPU1));
    }
}
