//! Sessions: run parts of a graph with persistent variables.
//!
//! `Session::run(feeds, fetches, targets)` prepares an executor for each new
//! signature once and caches it, so a training loop's thousandth step does
//! no graph analysis. Variables live in the session (by node name) and keep
//! their values across runs.
//!
//! Devices. The session places the whole graph once, at creation
//! ([`SessionOptions::placement`] or [`DefaultPlacer`] over
//! [`SessionOptions::devices`]), so variables never move. With one device a
//! step runs today's single executor: no partitioning, no transfers. With
//! several, each run signature is pruned, partitioned and prepared once per
//! device (see `multi_device`), and each device has its own pool of
//! `threads` workers.
//!
//! Failed steps. A multi-device step that fails (on any device) leaves the
//! variables it writes as they were before it: the session keeps a handle on
//! each written variable's value before the step (no copy) and puts it back
//! on error. The cost is that the step's first in-place update of such a
//! variable (optimizer kernels update unshared values in place) copies it
//! instead, one copy of each updated variable per step. Concurrent `run`
//! calls on one session that write the same variables are not isolated from
//! each other's restore. A single-device step keeps no snapshot (as
//! TensorFlow's DirectSession): its updates are the graph's last ops, and the
//! copy would cost every training step a pass over its variables.

use crate::error::{EngineError, Result};
use crate::runtime::executor::{Prepared, Resources};
use crate::runtime::multi_device::{LocalDevice, LocalFabric, MultiPlan};
use crate::ops::sendrecv::{CommCounters, StepComm, TransferTrace};
use crate::framework::rendezvous::Rendezvous;
use crate::graph::{Graph, NodeId, Output};
use crate::tensor::TensorType;
use crate::framework::{LinkMap, Queue, QueueSpec, Resource, VarSlot};
use crate::tensor::Tensor;
use crate::framework::stats::{PartitionTimeline, StepStats};
use crate::framework::{DeviceName, DeviceSet};
use crate::runtime::partition::PartitionOptions;
use crate::runtime::placement::{DefaultPlacer, Placement, Placer};
use crate::framework::stats::CommStats;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

/// A placement given in the options must cover the graph with devices of the set.
fn check_placement(graph: &Graph, p: &Placement, devices: &DeviceSet) -> Result<()> {
    let nodes = graph.nodes();
    if let Some(n) = nodes.get(p.len()) {
        return Err(EngineError::Placement {
            node: n.name.clone(),
            detail: format!("the given placement covers {} of the graph's {} nodes", p.len(), nodes.len()),
        });
    }
    for (n, d) in nodes.iter().zip(p.devices()) {
        if !devices.contains(d) {
            return Err(EngineError::Placement {
                node: n.name.clone(),
                detail: format!("placed on '{d}', which is not in the session's device set ({})", devices.list()),
            });
        }
    }
    Ok(())
}

/// The most worker threads a session gives one device: each is an OS
/// thread, and far more than a host's cores only adds switching (100,000
/// asked for stalled the process for minutes instead of failing).
pub const MAX_THREADS: usize = 256;

/// Session settings. Build with `..Default::default()` so new fields do
/// not break callers.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Worker threads PER DEVICE, for independent nodes and inside kernels;
    /// 1 runs a one-device step on the calling thread.
    pub threads: usize,
    /// The devices the graph runs on (default: one CPU).
    pub devices: DeviceSet,
    /// Node -> device; `None` places with [`DefaultPlacer`] over `devices`.
    pub placement: Option<Placement>,
    /// Communication formats of cross-device transfers (whole graph, per edge).
    pub partition: PartitionOptions,
    /// A Recv that waits longer than this fails the step, naming its key.
    pub recv_timeout: Duration,
    /// Emulated links between the devices (multi-device sessions): each
    /// Send/Recv transfer takes at least its link's latency plus bytes over
    /// bandwidth, queued per direction of a pair (see `framework::link`).
    pub links: LinkMap,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            devices: DeviceSet::local_cpus(1),
            placement: None,
            partition: PartitionOptions::default(),
            recv_timeout: Duration::from_secs(60),
            links: LinkMap::default(),
        }
    }
}

type RunKey = (Vec<(NodeId, usize)>, Vec<(NodeId, usize)>, Vec<NodeId>);

#[derive(Default)]
struct State {
    vars: HashMap<String, Arc<VarSlot>>,
    rngs: HashMap<String, Arc<Mutex<u64>>>,
    queues: HashMap<String, Arc<Queue>>,
    /// How long a queue op may block (the session's receive timeout).
    queue_timeout: Duration,
}

impl Resources for Mutex<State> {
    fn var(&self, name: &str, ty: &TensorType) -> Resource {
        let mut s = self.lock();
        let slot = s
            .vars
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(VarSlot::new(name, ty)));
        Resource::Var(slot.clone())
    }
    fn rng(&self, name: &str) -> Resource {
        let mut s = self.lock();
        Resource::Rng(s.rngs.entry(name.to_string()).or_default().clone())
    }
    fn queue(&self, node: &str, name: &str, spec: &QueueSpec) -> Result<Resource> {
        let mut s = self.lock();
        let timeout = s.queue_timeout;
        let q = s.queues.entry(name.to_string()).or_insert_with(|| Arc::new(Queue::new(name, spec.clone(), timeout)));
        if q.spec != *spec {
            return Err(EngineError::Attr {
                node: node.into(),
                op: "queue".into(),
                attr: "queue".into(),
                detail: format!("queue '{name}' exists as {:?}, this op expects {spec:?}", q.spec),
            });
        }
        Ok(Resource::Queue(q.clone()))
    }
}

/// One run signature, prepared.
enum Plan {
    /// One device: one executor over the pruned graph.
    Local(Prepared),
    /// Several devices: one executor per partition.
    Multi(MultiPlan),
}

impl Plan {
    fn feed_types(&self) -> &[(String, TensorType)] {
        match self {
            Plan::Local(p) => &p.feed_types,
            Plan::Multi(m) => &m.feed_types,
        }
    }
    fn len(&self) -> usize {
        match self {
            Plan::Local(p) => p.len(),
            Plan::Multi(m) => m.len(),
        }
    }
}

/// Runs a graph. Cheap to share between threads (`&self` everywhere).
pub struct Session {
    graph: Graph,
    threads: usize,
    devices: Vec<LocalDevice>,
    placement: Placement,
    /// Whether `placement` came from the options (then it is never extended).
    placement_given: bool,
    partition: PartitionOptions,
    recv_timeout: Duration,
    links: LinkMap,
    state: Mutex<State>,
    cache: Mutex<HashMap<RunKey, Arc<Plan>>>,
    counters: CommCounters,
    next_step: AtomicU64,
}

impl Session {
    /// A session with default options (one thread per core).
    pub fn new(graph: &Graph) -> Result<Session> {
        Session::with_options(graph, SessionOptions::default())
    }

    /// A session over `opts.devices`. Placement errors (a device request
    /// no device matches, colocation conflicts, missing kernels, a given
    /// placement naming devices outside the set) surface here, naming the node.
    pub fn with_options(graph: &Graph, opts: SessionOptions) -> Result<Session> {
        if opts.threads > MAX_THREADS {
            return Err(EngineError::Config { key: "threads".into(), detail: format!("at most {MAX_THREADS} per device, got {}", opts.threads) });
        }
        let threads = opts.threads.max(1);
        let placement_given = opts.placement.is_some();
        let placement = match opts.placement {
            Some(p) => {
                check_placement(graph, &p, &opts.devices)?;
                p
            }
            None => DefaultPlacer.place(graph, &opts.devices)?,
        };
        let devices = opts.devices.devices().iter().map(|(d, ty)| LocalDevice::new(d, *ty, threads)).collect::<Result<Vec<_>>>()?;
        Ok(Session {
            graph: graph.clone(),
            threads,
            devices,
            placement,
            placement_given,
            partition: opts.partition,
            recv_timeout: opts.recv_timeout,
            links: opts.links.clone(),
            state: Mutex::new(State { queue_timeout: opts.recv_timeout, ..State::default() }),
            cache: Mutex::new(HashMap::new()),
            counters: CommCounters::default(),
            next_step: AtomicU64::new(1),
        })
    }

    /// The device of every node, fixed when the session was created.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Transfers and bytes sent between devices since the session was created.
    pub fn comm_stats(&self) -> CommStats {
        self.counters.snapshot()
    }

    /// The session's devices, in the order of the device set.
    pub fn devices(&self) -> Vec<DeviceName> {
        self.devices.iter().map(|d| d.name.clone()).collect()
    }

    /// The placement covering nodes added to the graph after the session was
    /// created: the default placer's choice for them, provided it moves no
    /// node placed before.
    fn placement_now(&self) -> Result<std::borrow::Cow<'_, Placement>> {
        let n = self.graph.num_nodes();
        if self.placement.len() >= n {
            return Ok(std::borrow::Cow::Borrowed(&self.placement));
        }
        let nodes = self.graph.nodes();
        if self.placement_given {
            return Err(EngineError::Placement {
                node: nodes[self.placement.len()].name.clone(),
                detail: format!("the session's placement covers only the first {} nodes of the graph", self.placement.len()),
            });
        }
        let mut set = DeviceSet::new();
        for d in &self.devices {
            set.add(&d.label)?;
        }
        let p = DefaultPlacer.place(&self.graph, &set)?;
        for (i, (old, new)) in self.placement.devices().iter().zip(p.devices()).enumerate() {
            if old != new {
                return Err(EngineError::Placement {
                    node: nodes[i].name.clone(),
                    detail: format!(
                        "nodes added since the session was created would move it from {old} to {new} (variables stay where they were placed; create a new session)"
                    ),
                });
            }
        }
        Ok(std::borrow::Cow::Owned(p))
    }

    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Feeds `feeds`, runs what `fetches` and `targets` need, returns the
    /// fetched values in order.
    pub fn run(&self, feeds: &[(&Output, &Tensor)], fetches: &[&Output], targets: &[&Output]) -> Result<Vec<Tensor>> {
        self.run_inner(feeds, fetches, targets, false).map(|(v, _)| v)
    }

    /// Like [`run`](Self::run), also returning per-node step statistics.
    pub fn run_traced(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
    ) -> Result<(Vec<Tensor>, StepStats)> {
        let (v, s) = self.run_inner(feeds, fetches, targets, true)?;
        Ok((v, s.unwrap_or_default()))
    }

    /// [`run`](Self::run) with outputs named "node" or "node:index".
    pub fn run_named(&self, feeds: &[(&str, &Tensor)], fetches: &[&str], targets: &[&str]) -> Result<Vec<Tensor>> {
        let resolve = |s: &str| -> Result<Output> {
            let (name, idx) = match s.rsplit_once(':') {
                Some((n, i)) if i.parse::<usize>().is_ok() => (n, i.parse::<usize>().unwrap_or(0)),
                _ => (s, 0),
            };
            self.graph.output_by_name(name, idx)
        };
        let f: Vec<(Output, &Tensor)> = feeds.iter().map(|(n, t)| Ok((resolve(n)?, *t))).collect::<Result<_>>()?;
        let fe: Vec<Output> = fetches.iter().map(|n| resolve(n)).collect::<Result<_>>()?;
        let ta: Vec<Output> = targets.iter().map(|n| resolve(n)).collect::<Result<_>>()?;
        let fr: Vec<(&Output, &Tensor)> = f.iter().map(|(o, t)| (o, *t)).collect();
        self.run(&fr, &fe.iter().collect::<Vec<_>>(), &ta.iter().collect::<Vec<_>>())
    }

    fn check_graph(&self, o: &Output, role: &str) -> Result<()> {
        if !o.graph.same_graph(&self.graph) {
            return Err(EngineError::ForeignGraph { node: format!("<{role}>"), input: format!("#{}:{}", o.node, o.index) });
        }
        Ok(())
    }

    fn run_inner(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
        trace: bool,
    ) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        let (plan, values) = self.plan_with_feeds(feeds, fetches, targets)?;
        match &*plan {
            Plan::Local(p) => {
                // No snapshot here: keeping the old values would turn every
                // in-place optimizer update into a copy (2.7 MB per step for
                // the 784-512-512-10 MLP), and TensorFlow's single-device
                // session does not roll back either.
                let d = &self.devices[0];
                p.run(&values, self.threads, d, trace, None)
            }
            Plan::Multi(m) => {
                let step = self.next_step.fetch_add(1, Ordering::Relaxed);
                let fabric = LocalFabric { devices: &self.devices, links: &self.links, counters: &self.counters };
                m.run(&values, &fabric, self.threads, trace, step, self.recv_timeout)
            }
        }
    }

    /// Runs one step of a partition: a graph the partitioner cut, whose
    /// Send and Recv nodes move tensors through `rdv` under `step_id`
    /// (the distributed runtime's task rendezvous, which reaches the other
    /// tasks). The session must have exactly one device: a task runs its
    /// own partition, the other partitions run in other processes. Send
    /// nodes run only when `targets` name them (the caller knows which
    /// transfers the step needs); a Recv waits at most the session's
    /// `recv_timeout`. A failure aborts `rdv` (the caller scopes it to the
    /// step) and returns the first error.
    pub fn run_partition(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
        rdv: &dyn Rendezvous,
        step_id: u64,
    ) -> Result<Vec<Tensor>> {
        self.partition_step(feeds, fetches, targets, rdv, step_id, false).map(|(v, _)| v)
    }

    /// [`Session::run_partition`], traced: also returns the partition's
    /// nodes and the ends of its transfers, timed from the step's start,
    /// with the wall clock of that start (TensorFlow's `RunGraph` with
    /// `record_timeline`).
    pub fn run_partition_traced(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
        rdv: &dyn Rendezvous,
        step_id: u64,
    ) -> Result<(Vec<Tensor>, PartitionTimeline)> {
        let (v, t) = self.partition_step(feeds, fetches, targets, rdv, step_id, true)?;
        Ok((v, t.unwrap_or_default()))
    }

    fn partition_step(
        &self,
        feeds: &[(&Output, &Tensor)],
        fetches: &[&Output],
        targets: &[&Output],
        rdv: &dyn Rendezvous,
        step_id: u64,
        trace: bool,
    ) -> Result<(Vec<Tensor>, Option<PartitionTimeline>)> {
        if self.devices.len() != 1 {
            return Err(EngineError::Device(format!(
                "run_partition needs a session of one device (a task's own), this one has {}",
                self.devices.len()
            )));
        }
        let (plan, values) = self.plan_with_feeds(feeds, fetches, targets)?;
        let Plan::Local(p) = &*plan else {
            return Err(EngineError::Device("run_partition: a one-device session prepared a multi-device plan".into()));
        };
        let comm = StepComm {
            rdv,
            step_id,
            recv_timeout: self.recv_timeout,
            // every Recv of a partition is answered by another process over
            // RPC, slower than any spin (a loopback round trip is 50-100 us
            // on the development host): spinning for it only burns a core
            // the host's other task processes need (4% of the 784 MLP's
            // CPU per update at 2 and 4 workers on 2 cores)
            recv_spin: Duration::ZERO,
            counters: &self.counters,
            start: std::time::Instant::now(),
            trace: trace.then(|| Mutex::new(TransferTrace::default())),
            first_error: Mutex::new(None),
            links: None,
        };
        let start_unix_us = crate::framework::stats::unix_us_at(comm.start);
        let d = &self.devices[0];
        let r = p.run(&values, self.threads, d, trace, Some(&comm));
        if let Some(e) = comm.first_error.lock().take() {
            return Err(e);
        }
        let (values, stats) = r?;
        let timeline = match (stats, comm.trace) {
            (Some(mut stats), Some(t)) => {
                let mut t = t.into_inner();
                stats.nodes.sort_by(|a, b| a.end_us.total_cmp(&b.end_us));
                stats.transfers = std::mem::take(&mut t.done);
                Some(PartitionTimeline {
                    step_id,
                    device: d.label.clone(),
                    start_unix_us,
                    sent: t.unmatched_sends(&d.label),
                    received: std::mem::take(&mut t.received),
                    stats,
                })
            }
            _ => None,
        };
        Ok((values, timeline))
    }

    /// The (cached) plan of a step and its feed values, each feed checked
    /// against the type the plan expects.
    fn plan_with_feeds(&self, feeds: &[(&Output, &Tensor)], fetches: &[&Output], targets: &[&Output]) -> Result<(Arc<Plan>, Vec<Tensor>)> {
        for (o, _) in feeds {
            self.check_graph(o, "feed")?;
        }
        for o in fetches {
            self.check_graph(o, "fetch")?;
        }
        for o in targets {
            self.check_graph(o, "target")?;
        }
        let key: RunKey = (
            feeds.iter().map(|(o, _)| (o.node, o.index)).collect(),
            fetches.iter().map(|o| (o.node, o.index)).collect(),
            targets.iter().map(|o| o.node).collect(),
        );
        let plan = self.prepared(key)?;
        let mut values = Vec::with_capacity(feeds.len());
        for ((_, t), (name, ty)) in feeds.iter().zip(plan.feed_types()) {
            if t.dtype() != ty.dtype || !ty.shape.accepts(t.shape()) {
                return Err(EngineError::FeedMismatch {
                    node: name.clone(),
                    expected: ty.to_string(),
                    got: format!("{}{}", t.dtype(), t.shape()),
                });
            }
            values.push((*t).clone());
        }
        Ok((plan, values))
    }

    fn prepared(&self, key: RunKey) -> Result<Arc<Plan>> {
        if let Some(p) = self.cache.lock().get(&key) {
            return Ok(p.clone());
        }
        let plan = if self.devices.len() == 1 {
            Plan::Local(Prepared::new(&self.graph, &key.0, &key.1, &key.2, &self.state, self.devices[0].device_type)?)
        } else {
            let placement = self.placement_now()?;
            Plan::Multi(MultiPlan::new(&self.graph, &placement, &self.devices, &self.partition, (&key.0, &key.1, &key.2), &self.state)?)
        };
        let p = Arc::new(plan);
        self.cache.lock().insert(key, p.clone());
        Ok(p)
    }

    /// Number of cached run signatures (each prepared once).
    pub fn num_prepared(&self) -> usize {
        self.cache.lock().len()
    }

    /// Nodes the step for this signature executes (after pruning).
    pub fn num_nodes_run(&self, feeds: &[&Output], fetches: &[&Output], targets: &[&Output]) -> Result<usize> {
        let key: RunKey = (
            feeds.iter().map(|o| (o.node, o.index)).collect(),
            fetches.iter().map(|o| (o.node, o.index)).collect(),
            targets.iter().map(|o| o.node).collect(),
        );
        Ok(self.prepared(key)?.len())
    }

    /// The current value of the variable named `name`: `Uninitialized`
    /// before it is initialized (or when this `Session` has never touched it),
    /// `TornVariable` after an update of it panicked halfway.
    pub fn variable_value(&self, name: &str) -> Result<Tensor> {
        let slot = self.state.lock().vars.get(name).cloned();
        let value = match slot {
            Some(v) => v.lock()?.clone(),
            None => None,
        };
        value.ok_or_else(|| EngineError::Uninitialized(name.to_string()))
    }

    /// The slot of the variable named `name`, for tests that hold its lock.
    #[cfg(test)]
    pub(crate) fn var_slot(&self, name: &str) -> Option<Arc<VarSlot>> {
        self.state.lock().vars.get(name).cloned()
    }

    /// Sets the variable named `name` (a Variable node of this graph).
    pub fn set_variable(&self, name: &str, value: Tensor) -> Result<()> {
        let v = self.graph.output_by_name(name, 0)?;
        let node = v.op();
        if node != "Variable" {
            return Err(EngineError::Attr { node: name.into(), op: node, attr: "var".into(), detail: "not a Variable node".into() });
        }
        let ty = v.tensor_type();
        if value.dtype() != ty.dtype || !ty.shape.accepts(value.shape()) {
            return Err(EngineError::FeedMismatch {
                node: name.into(),
                expected: ty.to_string(),
                got: format!("{}{}", value.dtype(), value.shape()),
            });
        }
        match self.state.var(name, &ty) {
            Resource::Var(slot) => slot.set(Some(value)),
            Resource::Rng(_) | Resource::Queue(_) => {}
        }
        Ok(())
    }

    /// Every initialized variable of the graph with its value, in creation
    /// order; an error if one of them is torn (see [`Session::variable_value`]).
    pub fn variable_values(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::new();
        for v in self.graph.variables() {
            let n = v.name();
            match self.variable_value(&n) {
                Ok(t) => out.push((n, t)),
                Err(EngineError::Uninitialized(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Run counters of the seeded random ops, by node name (checkpointed so
    /// that a restored session draws the same numbers next).
    pub fn rng_counters(&self) -> Vec<(String, u64)> {
        let s = self.state.lock();
        let mut v: Vec<(String, u64)> = s.rngs.iter().map(|(k, c)| (k.clone(), *c.lock())).collect();
        v.sort();
        v
    }

    /// Sets the run counter of a random op.
    pub fn set_rng_counter(&self, name: &str, value: u64) {
        if let Resource::Rng(r) = self.state.rng(name) {
            *r.lock() = value;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::rendezvous::LocalRendezvous;
    use crate::runtime::partition::partition;

    /// `[1, 2, 3]` on one task's device, doubled on another's: the two
    /// partitions run in two one-device sessions joined by one rendezvous,
    /// as two task processes are.
    #[test]
    fn two_partitions_in_two_sessions_meet_through_a_given_rendezvous() {
        let (a, b) = ("/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0");
        let g = Graph::new();
        let c = g.device(a).constant(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], vec![3]).unwrap()).unwrap();
        let y = g.device(b).add(&c, &c).unwrap();
        let mut set = DeviceSet::new();
        set.add(a).unwrap();
        set.add(b).unwrap();
        let parts = partition(&g, &DefaultPlacer.place(&g, &set).unwrap()).unwrap();
        let session = |p: &crate::runtime::partition::Partition, timeout: Duration| {
            let mut one = DeviceSet::new();
            one.add(&p.device.to_string()).unwrap();
            Session::with_options(&p.graph, SessionOptions { threads: 1, devices: one, recv_timeout: timeout, ..Default::default() }).unwrap()
        };
        let (pa, pb) = (&parts[0], &parts[1]);
        let (sa, sb) = (session(pa, Duration::from_secs(10)), session(pb, Duration::from_millis(50)));
        let send = pa.graph.output_by_name(&pa.sends[0].send_node, 0).unwrap();
        let yb = pb.graph.output_by_name(&y.name(), 0).unwrap();
        let rdv = LocalRendezvous::new();
        std::thread::scope(|s| {
            s.spawn(|| sa.run_partition(&[], &[], &[&send], &rdv, 7).unwrap());
            let out = sb.run_partition(&[], &[&yb], &[], &rdv, 7).unwrap();
            assert_eq!(out[0].to_vec::<f32>().unwrap(), [2.0, 4.0, 6.0]);
        });
        // step 8's Send never ran: the Recv gives up naming the key
        let e = sb.run_partition(&[], &[&yb], &[], &rdv, 8).unwrap_err().to_string();
        assert!(e.contains(&format!("'{}:0' from {a} to {b} (step 8)", c.name())), "{e}");
        // a session of several devices is refused
        let two = Session::with_options(&g, SessionOptions { devices: set, ..Default::default() }).unwrap();
        let e = two.run_partition(&[], &[&y], &[], &rdv, 9).unwrap_err().to_string();
        assert!(e.contains("one device") && e.contains("has 2"), "{e}");
    }
}
