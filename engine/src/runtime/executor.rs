//! The executor: runs the part of a graph that some fetches and targets need.
//!
//! Contract. [`Prepared::new`] does all graph analysis once per (feeds,
//! fetches, targets) signature: pruning to the needed nodes, kernel lookup,
//! constant decoding, variable resolution, and the initial pending-input
//! count of every node. [`Prepared::run`] is the per-step part: it keeps only
//! per-step state (pending counts, output slots, remaining uses) and
//! schedules TensorFlow style: a node becomes ready when its pending count
//! reaches zero; cheap ready nodes run inline on the thread that readied
//! them, one expensive node continues inline and the others are spawned on
//! the session's rayon pool. Output tensors are dropped as soon as their
//! last consumer has run, so variables can be updated in place.
//!
//! In a multi-device step each partition runs its own `Prepared` with a
//! [`StepComm`]. Recv nodes then wait without a thread: the executor asks
//! the rendezvous for every Recv up front (`recv_async`), and the calling
//! thread, once its ready work is done, waits for arrivals (until the
//! step's receive timeout) and runs each Recv with the arrived wire tensor
//! as its input. A failing node aborts the step's rendezvous, which wakes
//! every other device's waits with the error.

use crate::graph::{Attrs, NodeInfo};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, Node, NodeClass, NodeId};
use crate::tensor::TensorType;
use crate::ops::sendrecv::{StepComm, TransferSpec};
use crate::runtime::fusion;
use crate::framework::{QueueSpec, Resource};
use crate::ops::{self, KernelCtx, KernelFn};
use crate::tensor::DeviceType;
use crate::runtime::multi_device::LocalDevice;
use crate::framework::VarSlot;
use crate::tensor::Tensor;
use crate::framework::stats::{NodeStats, StepStats};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod frames;

/// Where a node input comes from in a step.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// An output slot of an executed node.
    Slot(usize),
    /// The i-th feed.
    Feed(usize),
    /// The wire tensor that arrived for the i-th Recv node.
    Wire(usize),
}

struct ExecNode {
    name: String,
    op: String,
    class: NodeClass,
    attrs: Attrs,
    kernel: KernelFn,
    outputs: Vec<TensorType>,
    inputs: Vec<Source>,
    consumers: Vec<usize>,
    first_slot: usize,
    cheap: bool,
    resources: Vec<Resource>,
    constant: Option<Tensor>,
    transfer: Option<TransferSpec>,
}

/// Everything about one run signature that does not change between steps.
pub(crate) struct Prepared {
    nodes: Vec<ExecNode>,
    pending: Vec<usize>,
    roots: Vec<usize>,
    num_slots: usize,
    uses: Vec<usize>,
    fetches: Vec<Source>,
    /// Exec indices of the Recv nodes (they start when their tensor arrives).
    recvs: Vec<usize>,
    /// Variables (and optimizer slots) the step's update ops write.
    writes: Vec<Arc<VarSlot>>,
    /// Declared type and node name of each feed, for validation.
    pub(crate) feed_types: Vec<(String, TensorType)>,
    /// The step's static work is below [`INLINE_STEP_FLOPS`] and
    /// [`INLINE_STEP_BYTES`]: it runs on the calling thread whatever the pool.
    small: bool,
    /// Frames and iterations, for graphs with control flow (None: the plain path).
    frames: Option<frames::FramePlan>,
    /// Storage of the tensors this step released, for the outputs of the
    /// next steps' kernels that overwrite theirs.
    buffers: crate::framework::BufferPool,
}

/// A step with less arithmetic than this (and less traffic than
/// [`INLINE_STEP_BYTES`]) runs on the calling thread even when the session
/// has a pool: handing its nodes to pool workers costs a wake-up each (tens of
/// microseconds), about what the whole step takes on one core (the batch-1
/// MLP, 1.3 MFLOP, runs in ~40 µs). Kernels give the same bits at any thread
/// count, so the choice never changes results.
const INLINE_STEP_FLOPS: f64 = 4e6;
/// Bytes that the non-cheap kernels of an inline step may read and write.
const INLINE_STEP_BYTES: f64 = 8e6;

/// Static work of one execution of `node` (flops, bytes), when every input
/// and output shape is fully known.
fn static_cost(all: &[Node], node: &Node, cheap: bool) -> Option<(f64, f64)> {
    let concrete = |t: &TensorType| t.shape.to_shape().map(|s| (t.dtype, s));
    let inputs: Vec<_> = node.inputs.iter().map(|&(s, i)| concrete(&all[s].outputs[i])).collect::<Option<_>>()?;
    let outputs: Vec<_> = node.outputs.iter().map(concrete).collect::<Option<_>>()?;
    let cost = ops::op_cost(&node.op, &node.attrs, &inputs, &outputs).ok()?;
    Some((cost.flops, if cheap { 0.0 } else { cost.bytes }))
}

/// Session state the preparation needs: variable and RNG slots by name.
pub(crate) trait Resources {
    fn var(&self, name: &str, ty: &TensorType) -> Resource;
    fn rng(&self, name: &str) -> Resource;
    /// The queue called `name`, made on first use; `node` (a queue op)
    /// names the mismatch when the queue exists with another spec.
    fn queue(&self, node: &str, name: &str, spec: &QueueSpec) -> Result<Resource>;
}

/// "node:output" and declared type of every feed, checking that each names
/// an existing output.
pub(crate) fn feed_types(nodes: &[Node], feeds: &[(NodeId, usize)]) -> Result<Vec<(String, TensorType)>> {
    feeds
        .iter()
        .map(|&(n, i)| {
            let node = nodes.get(n).ok_or_else(|| EngineError::UnknownNode(format!("#{n}")))?;
            let t = node.outputs.get(i).ok_or_else(|| EngineError::BadOutputIndex {
                node: node.name.clone(),
                op: node.op.clone(),
                index: i,
                outputs: node.outputs.len(),
            })?;
            Ok((format!("{}:{}", node.name, i), t.clone()))
        })
        .collect()
}

/// The nodes that `fetches` and `targets` need: a walk back along data and
/// control edges that stops at fed edges (`feed_index` keys).
pub(crate) fn needed_nodes(
    nodes: &[Node],
    feed_index: &HashMap<(NodeId, usize), usize>,
    fetches: &[(NodeId, usize)],
    targets: &[NodeId],
) -> Result<Vec<bool>> {
    let unknown = |n: NodeId| EngineError::UnknownNode(format!("#{n}"));
    let mut needed = vec![false; nodes.len()];
    let mut stack: Vec<NodeId> = Vec::with_capacity(targets.len() + fetches.len());
    // The StackPush nodes and their stacks, listed at the first StackPop.
    let mut pushes: Option<Vec<(NodeId, &crate::graph::AttrValue)>> = None;
    for &t in targets {
        nodes.get(t).ok_or_else(|| unknown(t))?;
        stack.push(t);
    }
    for &(n, i) in fetches {
        let node = nodes.get(n).ok_or_else(|| unknown(n))?;
        if i >= node.outputs.len() {
            return Err(EngineError::BadOutputIndex { node: node.name.clone(), op: node.op.clone(), index: i, outputs: node.outputs.len() });
        }
        if !feed_index.contains_key(&(n, i)) {
            stack.push(n);
        }
    }
    while let Some(n) = stack.pop() {
        if needed[n] {
            continue;
        }
        needed[n] = true;
        let node = &nodes[n];
        for &(src, idx) in &node.inputs {
            if !feed_index.contains_key(&(src, idx)) {
                stack.push(src);
            }
        }
        stack.extend(node.control_inputs.iter().copied());
        // A loop gradient's StackPop reads what the forward loop's
        // StackPush nodes saved: they run when it does.
        if node.class() == NodeClass::StackPop
            && let Some(s) = node.attrs.get("stack")
        {
            let pushes = pushes.get_or_insert_with(|| {
                nodes.iter().enumerate().filter(|(_, m)| m.class() == NodeClass::StackPush).filter_map(|(m, n)| Some((m, n.attrs.get("stack")?))).collect::<Vec<_>>()
            });
            stack.extend(pushes.iter().filter(|(_, ps)| *ps == s).map(|&(m, _)| m));
        }
    }
    Ok(needed)
}

/// The kernel of `node` on `device` for its element type, or the error
/// naming the node, op, device and type no kernel takes.
fn node_kernel(reg: &ops::Registry, all: &[Node], node: &Node, device: DeviceType) -> Result<KernelFn> {
    let in_types: Vec<TensorType> = node.inputs.iter().map(|&(s, i)| all[s].outputs[i].clone()).collect();
    let dtype = ops::kernel_dtype(&node.outputs, &in_types);
    reg.kernel(&node.op, device, dtype).ok_or_else(|| EngineError::NoKernel {
        node: node.name.clone(),
        op: node.op.clone(),
        device: device.name().into(),
        dtype: dtype.map(|d| d.to_string()).unwrap_or_default(),
    })
}

/// The resources `node` reads or writes: its variable (a Variable), the
/// variable and slots it updates (`var`, `slots`), its random stream (a
/// stateful op with a seed), its queue.
fn node_resources(all: &[Node], by_name: &HashMap<String, NodeId>, node: &Node, info: &NodeInfo<'_>, stateful: bool, res: &dyn Resources) -> Result<Vec<Resource>> {
    let mut resources = Vec::new();
    if node.class() == NodeClass::Variable {
        resources.push(res.var(&node.name, &node.outputs[0]));
    } else if let Some(crate::graph::AttrValue::Str(v)) = node.attrs.get("var") {
        for name in std::iter::once(v.as_str()).chain(info.strs_or_empty("slots")?.iter().map(|s| s.as_str())) {
            let vid = *by_name.get(name).ok_or_else(|| EngineError::UnknownNode(name.to_string()))?;
            resources.push(res.var(name, &all[vid].outputs[0]));
        }
    }
    if stateful && node.attrs.contains_key("seed") {
        resources.push(res.rng(&node.name));
    }
    if let Some(crate::graph::AttrValue::Str(q)) = node.attrs.get("queue") {
        resources.push(res.queue(&node.name, q, &crate::ops::queue::spec_of(info)?)?);
    }
    Ok(resources)
}

impl Prepared {
    pub(crate) fn new(
        graph: &Graph,
        feeds: &[(NodeId, usize)],
        fetches: &[(NodeId, usize)],
        targets: &[NodeId],
        res: &dyn Resources,
        device: DeviceType,
    ) -> Result<Prepared> {
        let d = graph.lock();
        let reg = ops::registry();
        let feed_index: HashMap<(NodeId, usize), usize> = feeds.iter().enumerate().map(|(i, &f)| (f, i)).collect();
        let feed_types = feed_types(&d.nodes, feeds)?;

        let mut needed = needed_nodes(&d.nodes, &feed_index, fetches, targets)?;
        let fused = fusion::fuse_step(&d.nodes, &mut needed, fetches, |n, i| feed_index.contains_key(&(n, i)), device);
        let all: &[Node] = fused.as_deref().unwrap_or(&d.nodes);

        // Node ids are a topological order: map needed ids to exec indices.
        let ids: Vec<NodeId> = (0..all.len()).filter(|&i| needed[i]).collect();
        let mut exec_of = vec![usize::MAX; all.len()];
        let mut first_slot = 0;
        let mut nodes = Vec::with_capacity(ids.len());
        let mut work = Some((0.0, 0.0));
        for (e, &id) in ids.iter().enumerate() {
            exec_of[id] = e;
            let node = &all[id];
            if node.class() == NodeClass::Placeholder {
                let t = &node.outputs[0];
                return Err(EngineError::MissingFeed { node: node.name.clone(), shape: t.shape.to_string(), dtype: t.dtype.to_string() });
            }
            let def = reg.op(&node.op).ok_or_else(|| EngineError::UnknownOp { node: node.name.clone(), op: node.op.clone() })?;
            let kernel = node_kernel(reg, all, node, device)?;
            let info = NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs };
            let resources = node_resources(all, &d.by_name, node, &info, def.stateful, res)?;
            let class = node.class();
            let constant = if class == NodeClass::Const { Some(info.tensor("value")?.to_tensor().map_err(|e| e.at_node(&node.name, &node.op))?) } else { None };
            let transfer = if matches!(class, NodeClass::Send | NodeClass::Recv) { Some(TransferSpec::of(&info)?) } else { None };
            work = work.and_then(|(f, b)| static_cost(all, node, def.cheap).map(|(nf, nb)| (f + nf, b + nb)));
            nodes.push(ExecNode {
                name: node.name.clone(),
                op: node.op.clone(),
                class,
                attrs: node.attrs.clone(),
                kernel,
                outputs: node.outputs.clone(),
                inputs: Vec::new(),
                consumers: Vec::new(),
                first_slot,
                cheap: def.cheap,
                resources,
                constant,
                transfer,
            });
            first_slot += node.outputs.len();
        }
        let num_slots = first_slot;
        let mut uses = vec![0usize; num_slots];
        let mut pending = vec![0usize; nodes.len()];
        let mut recvs = Vec::new();
        let control_flow = nodes.iter().any(|n| n.class.is_control_flow());
        let mut cf_preds: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new(); if control_flow { nodes.len() } else { 0 }];
        for (e, &id) in ids.iter().enumerate() {
            let node = &all[id];
            let mut preds: Vec<usize> = Vec::new();
            let mut inputs = Vec::with_capacity(node.inputs.len());
            if node.class() == NodeClass::Recv {
                // Not a root: it starts when its tensor arrives.
                inputs.push(Source::Wire(recvs.len()));
                pending[e] = 1;
                recvs.push(e);
                nodes[e].inputs = inputs;
                if control_flow {
                    // Inside a loop frame, a Recv waits for its control loop.
                    for &c in &node.control_inputs {
                        cf_preds[e].push((exec_of[c], usize::MAX, usize::MAX));
                    }
                }
                continue;
            }
            for (k, &(src, idx)) in node.inputs.iter().enumerate() {
                if let Some(&f) = feed_index.get(&(src, idx)) {
                    inputs.push(Source::Feed(f));
                } else {
                    let p = exec_of[src];
                    let slot = nodes[p].first_slot + idx;
                    uses[slot] += 1;
                    inputs.push(Source::Slot(slot));
                    preds.push(p);
                    if control_flow {
                        cf_preds[e].push((p, idx, k));
                    }
                }
            }
            for &c in &node.control_inputs {
                preds.push(exec_of[c]);
                if control_flow {
                    cf_preds[e].push((exec_of[c], usize::MAX, usize::MAX));
                }
            }
            preds.sort_unstable();
            preds.dedup();
            pending[e] = preds.len();
            for p in preds {
                nodes[p].consumers.push(e);
            }
            nodes[e].inputs = inputs;
        }
        let mut fetch_src = Vec::with_capacity(fetches.len());
        for &(n, i) in fetches {
            if let Some(&f) = feed_index.get(&(n, i)) {
                fetch_src.push(Source::Feed(f));
            } else {
                let slot = nodes[exec_of[n]].first_slot + i;
                uses[slot] += 1;
                fetch_src.push(Source::Slot(slot));
            }
        }
        let roots = (0..nodes.len()).filter(|&e| pending[e] == 0).collect();
        let mut writes: Vec<Arc<VarSlot>> = Vec::new();
        for n in nodes.iter().filter(|n| n.class != NodeClass::Variable) {
            for r in &n.resources {
                if let Resource::Var(v) = r
                    && !writes.iter().any(|w| Arc::ptr_eq(w, v))
                {
                    writes.push(v.clone());
                }
            }
        }
        let small = work.is_some_and(|(f, b)| f < INLINE_STEP_FLOPS && b < INLINE_STEP_BYTES);
        let frames = if control_flow {
            let owner = |s: usize| {
                let e = nodes.iter().rposition(|n| n.first_slot <= s).unwrap_or(0);
                (e, s - nodes[e].first_slot)
            };
            Some(frames::FramePlan::new(&nodes, &cf_preds, &fetch_src, owner)?)
        } else {
            None
        };
        Ok(Prepared { nodes, pending, roots, num_slots, uses, fetches: fetch_src, recvs, writes, feed_types, small, frames, buffers: Default::default() })
    }

    /// (node name, transfer) of every Send node of the step.
    pub(crate) fn sends(&self) -> impl Iterator<Item = (&str, &TransferSpec)> {
        self.nodes.iter().filter(|n| n.class == NodeClass::Send).filter_map(|n| n.transfer.as_ref().map(|t| (n.name.as_str(), t)))
    }

    /// (node name, transfer) of every Recv node of the step.
    pub(crate) fn recvs(&self) -> impl Iterator<Item = (&str, &TransferSpec)> {
        self.recvs.iter().filter_map(|&e| self.nodes[e].transfer.as_ref().map(|t| (self.nodes[e].name.as_str(), t)))
    }

    /// The variables (and optimizer slots) this step's update ops write.
    pub(crate) fn writes(&self) -> &[Arc<VarSlot>] {
        &self.writes
    }

    /// Number of nodes a step executes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Runs one step on `device` (its pool, when it has one and `threads` is
    /// more than one; its label in the statistics; its memory for what its
    /// kernels make). `comm` connects the step to the other devices' partitions.
    pub(crate) fn run(
        &self,
        feeds: &[Tensor],
        threads: usize,
        device: &LocalDevice,
        trace: bool,
        comm: Option<&StepComm>,
    ) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        if let Some(f) = &self.frames {
            return self.run_frames(f, feeds, threads, trace, comm, device);
        }
        if let (Some(&e), None) = (self.recvs.first(), comm) {
            let n = &self.nodes[e];
            return Err(EngineError::Kernel {
                node: n.name.clone(),
                op: n.op.clone(),
                detail: "Recv runs only in a multi-device step (the partitioner inserts it)".into(),
            });
        }
        // A small step runs on this thread, its kernels unsplit.
        let threads = if self.small { 1 } else { threads };
        self.buffers.new_step();
        let inbox = Arc::new(Inbox::default());
        let step = Step {
            prep: self,
            feeds,
            threads,
            pending: self.pending.iter().map(|&p| AtomicUsize::new(p)).collect(),
            uses: self.uses.iter().map(|&u| AtomicUsize::new(u)).collect(),
            slots: (0..self.num_slots).map(|_| Mutex::new(None)).collect(),
            wires: (0..self.recvs.len()).map(|_| Mutex::new(None)).collect(),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            stats: if trace { Some(Mutex::new(Vec::with_capacity(self.nodes.len()))) } else { None },
            start: comm.map_or_else(Instant::now, |c| c.start),
            comm,
            device,
            inbox: comm.map(|_| &*inbox),
            taken: AtomicUsize::new(0),
            arrived: (0..self.recvs.len()).map(|_| AtomicBool::new(false)).collect(),
        };
        if let Some(c) = comm {
            for (k, &e) in self.recvs.iter().enumerate() {
                let key = self.nodes[e].transfer.as_ref().map(|t| t.key.for_step(c.step_id));
                let Some(key) = key else { continue };
                let ib = inbox.clone();
                c.rdv.recv_async(key, Box::new(move |r| ib.push(k, r)));
            }
        }
        match device.backend.pool() {
            Some(pool) if threads > 1 => pool.in_place_scope(|s| {
                for &r in &self.roots {
                    let step = &step;
                    s.spawn(move |s| step.process(r, Some(s)));
                }
                step.drive(&inbox, Some(s));
            }),
            _ => {
                for &r in &self.roots {
                    step.process(r, None);
                }
                step.drive(&inbox, None);
            }
        }
        if let Some(e) = step.error.lock().take() {
            return Err(e);
        }
        let mut out = Vec::with_capacity(self.fetches.len());
        for src in &self.fetches {
            out.push(match *src {
                Source::Feed(f) => feeds[f].clone(),
                Source::Slot(s) => step.slots[s]
                    .lock()
                    .clone()
                    .ok_or_else(|| EngineError::Cycle(self.slot_owner(s)))?,
                Source::Wire(k) => return Err(EngineError::Cycle(self.nodes[self.recvs[k]].name.clone())),
            });
        }
        let stats = step.stats.map(|m| StepStats {
            nodes: m.into_inner(),
            total_us: step.start.elapsed().as_secs_f64() * 1e6,
            transfers: Vec::new(),
            peak_live_tensors: 0,
        });
        Ok((out, stats))
    }

    fn slot_owner(&self, s: usize) -> String {
        self.nodes.iter().rev().find(|n| n.first_slot <= s).map(|n| n.name.clone()).unwrap_or_default()
    }
}

/// Wire tensors (or abort errors) that arrived for Recv nodes, by Recv
/// index; the sender's thread pushes, the device's driver thread takes.
#[derive(Default)]
struct Inbox {
    items: Mutex<Vec<(usize, Result<Tensor>)>>,
    cond: Condvar,
    arrived: AtomicUsize,
    /// Drivers asleep on `cond` (changed and read only under `items`'s
    /// lock): a push wakes one only then, as a futex wake is a system call.
    sleepers: AtomicUsize,
}

/// How long a driver spins for an arrival before it sleeps, when the
/// other devices are in this process: a transfer that answers within this
/// costs no futex wake-up.
pub(crate) const RECV_SPIN: Duration = Duration::from_micros(30);

impl Inbox {
    fn push(&self, k: usize, r: Result<Tensor>) {
        let mut items = self.items.lock();
        items.push((k, r));
        self.arrived.fetch_add(1, Ordering::Release);
        let wake = self.sleepers.load(Ordering::Relaxed) > 0;
        drop(items);
        if wake {
            self.cond.notify_one();
        }
    }

    /// Waits until something arrived (spinning briefly first) or `deadline`
    /// passes (None: nothing arrived in time).
    fn wait(&self, taken: usize, deadline: Instant, spin: Duration) -> Option<Vec<(usize, Result<Tensor>)>> {
        let spin_until = Instant::now() + spin;
        while self.arrived.load(Ordering::Acquire) == taken && Instant::now() < spin_until {
            std::hint::spin_loop();
        }
        let mut items = self.items.lock();
        loop {
            if !items.is_empty() {
                return Some(std::mem::take(&mut *items));
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            self.cond.wait_for(&mut items, deadline - now);
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Per-step state.
struct Step<'a> {
    prep: &'a Prepared,
    feeds: &'a [Tensor],
    threads: usize,
    pending: Vec<AtomicUsize>,
    uses: Vec<AtomicUsize>,
    slots: Vec<Mutex<Option<Tensor>>>,
    wires: Vec<Mutex<Option<Tensor>>>,
    error: Mutex<Option<EngineError>>,
    failed: AtomicBool,
    stats: Option<Mutex<Vec<NodeStats>>>,
    start: Instant,
    comm: Option<&'a StepComm<'a>>,
    device: &'a LocalDevice,
    /// Arrivals for this device's Recv nodes (multi-device steps).
    inbox: Option<&'a Inbox>,
    /// Arrivals taken from the inbox so far, and which Recvs they were.
    taken: AtomicUsize,
    arrived: Vec<AtomicBool>,
}

impl<'a> Step<'a> {
    /// Records the step's first error on this device and, in a
    /// multi-device step, aborts the rendezvous so the other devices stop.
    fn fail(&self, err: EngineError, root_cause: bool) {
        self.failed.store(true, Ordering::Release);
        let err = match self.comm {
            Some(c) if root_cause => {
                // The step reports the error kept in `comm`; this device
                // only needs to know that it failed.
                let note = EngineError::Rendezvous { key: format!("step {}", c.step_id), detail: format!("aborted on {}: {err}", self.device.label) };
                c.fail(&self.device.label, err);
                note
            }
            _ => err,
        };
        let mut slot = self.error.lock();
        if slot.is_none() {
            *slot = Some(err);
        }
    }

    /// Waits for the Recv nodes' tensors and starts each Recv as its tensor
    /// arrives; returns when all arrived, the step failed, or the receive
    /// timeout passed (which fails the step naming the first missing key).
    fn drive<'s>(&'s self, inbox: &Inbox, scope: Option<&rayon::Scope<'s>>)
    where
        'a: 's,
    {
        let Some(comm) = self.comm else { return };
        let recvs = &self.prep.recvs;
        let deadline = Instant::now() + comm.recv_timeout;
        while self.taken.load(Ordering::Relaxed) < recvs.len() && !self.failed.load(Ordering::Acquire) {
            let Some(batch) = inbox.wait(self.taken.load(Ordering::Relaxed), deadline, comm.recv_spin) else {
                let k = self.arrived.iter().position(|a| !a.load(Ordering::Relaxed)).unwrap_or(0);
                let node = &self.prep.nodes[recvs[k]];
                let key = node.transfer.as_ref().map(|t| t.key.for_step(comm.step_id));
                let err = EngineError::Rendezvous {
                    key: key.as_ref().map_or_else(|| node.name.clone(), |k| k.to_string()),
                    detail: format!(
                        "Recv '{}' waited {:?} and no tensor arrived (the Send on {} did not run)",
                        node.name,
                        comm.recv_timeout,
                        key.map_or_else(String::new, |k| k.src_device.to_string())
                    ),
                };
                self.fail(err, true);
                return;
            };
            for (k, r) in batch {
                self.taken.fetch_add(1, Ordering::Relaxed);
                self.arrived[k].store(true, Ordering::Relaxed);
                match r {
                    Ok(t) => {
                        *self.wires[k].lock() = Some(t);
                        let e = recvs[k];
                        match scope {
                            Some(s) => s.spawn(move |s| self.process(e, Some(s))),
                            None => self.process(e, None),
                        }
                    }
                    Err(err) => {
                        self.fail(err, false);
                        return;
                    }
                }
            }
        }
    }

    /// Runs `first` and then, inline, whatever it makes ready that is cheap
    /// (plus one expensive node); spawns the other expensive ones.
    fn process<'s>(&'s self, first: usize, scope: Option<&rayon::Scope<'s>>)
    where
        'a: 's,
    {
        let mut stack = vec![first];
        while let Some(e) = stack.pop() {
            if self.failed.load(Ordering::Relaxed) {
                return;
            }
            if let Err(err) = self.execute(e) {
                self.fail(err, true);
                return;
            }
            let mut inline_expensive = None;
            let mut sends = 0;
            let pushed_from = stack.len();
            for &c in &self.prep.nodes[e].consumers {
                if self.pending[c].fetch_sub(1, Ordering::AcqRel) != 1 {
                    continue;
                }
                match scope {
                    Some(s) if !self.prep.nodes[c].cheap => {
                        if inline_expensive.is_none() {
                            inline_expensive = Some(c);
                        } else {
                            s.spawn(move |s| self.process(c, Some(s)));
                        }
                    }
                    _ => {
                        stack.push(c);
                        if self.is_send(c) {
                            sends += 1;
                        }
                    }
                }
            }
            if let Some(c) = inline_expensive {
                stack.push(c);
            }
            // On one thread, tensors that arrived meanwhile start their Recv
            // now rather than after all the ready work: the sender's device
            // is waiting on what they make ready.
            if scope.is_none() {
                self.take_arrivals(&mut stack);
            }
            // Sends run before the other ready nodes, arrivals included:
            // another device waits for them, and they cost little (a
            // hand-over or an encode).
            if sends > 0 {
                let (back, front): (Vec<usize>, Vec<usize>) = stack[pushed_from..].iter().partition(|&&c| self.is_send(c));
                stack.truncate(pushed_from);
                stack.extend(front);
                stack.extend(back);
            }
        }
    }

    fn is_send(&self, e: usize) -> bool {
        let n = &self.prep.nodes[e];
        n.transfer.is_some() && n.class == NodeClass::Send
    }

    /// Moves the arrivals waiting in the inbox onto `stack` (their Recv nodes
    /// next), without waiting.
    fn take_arrivals(&self, stack: &mut Vec<usize>) {
        let Some(inbox) = self.inbox else { return };
        if inbox.arrived.load(Ordering::Acquire) == self.taken.load(Ordering::Relaxed) {
            return;
        }
        let batch = std::mem::take(&mut *inbox.items.lock());
        for (k, r) in batch {
            self.taken.fetch_add(1, Ordering::Relaxed);
            self.arrived[k].store(true, Ordering::Relaxed);
            match r {
                Ok(t) => {
                    *self.wires[k].lock() = Some(t);
                    stack.push(self.prep.recvs[k]);
                }
                Err(err) => self.fail(err, false),
            }
        }
    }

    fn execute(&self, e: usize) -> Result<()> {
        let node = &self.prep.nodes[e];
        let t0 = self.stats.as_ref().map(|_| self.start.elapsed());
        let outputs = if let Some(c) = &node.constant {
            vec![c.clone()]
        } else {
            let mut inputs = Vec::with_capacity(node.inputs.len());
            // Inputs this node is the last reader of: it takes the tensors
            // themselves, so its kernel may write over their memory
            // (`KernelCtx::forward_input`), and gives them back after.
            let mut last_reads = 0u64;
            for (j, src) in node.inputs.iter().enumerate() {
                inputs.push(match *src {
                    Source::Feed(f) => self.feeds[f].clone(),
                    Source::Slot(s) => {
                        // Counted down under the slot's lock: every other
                        // reader has cloned before the last one takes.
                        let mut slot = self.slots[s].lock();
                        let last = self.uses[s].fetch_sub(1, Ordering::AcqRel) == 1;
                        if last && j < 64 {
                            last_reads |= 1 << j;
                        }
                        let t = if last { slot.take() } else { slot.clone() };
                        t.ok_or_else(|| EngineError::Kernel { node: node.name.clone(), op: node.op.clone(), detail: format!("input slot {s} is empty") })?
                    }
                    Source::Wire(k) => self.wires[k].lock().take().ok_or_else(|| {
                        EngineError::Kernel { node: node.name.clone(), op: node.op.clone(), detail: "no tensor arrived".into() }
                    })?,
                });
            }
            let mut ctx = KernelCtx {
                n: NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs },
                inputs,
                threads: self.threads,
                resources: &node.resources,
                comm: self.comm,
                transfer: node.transfer.as_ref(),
                stacks: None,
                buffers: Some(&self.prep.buffers),
                backend: &self.device.backend,
            };
            let out = (node.kernel)(&mut ctx).map_err(|e| e.at_node(&node.name, &node.op))?;
            for (j, t) in std::mem::take(&mut ctx.inputs).into_iter().enumerate() {
                if j < 64 && last_reads & (1 << j) != 0 {
                    self.prep.buffers.give(t);
                }
            }
            out
        };
        check_outputs(node, &outputs)?;
        let mut bytes = 0;
        for (i, t) in outputs.into_iter().enumerate() {
            bytes += t.size_in_bytes();
            let s = node.first_slot + i;
            if self.uses[s].load(Ordering::Acquire) > 0 {
                *self.slots[s].lock() = Some(t);
            } else {
                self.prep.buffers.give(t);
            }
        }
        if let (Some(stats), Some(t0)) = (&self.stats, t0) {
            let t1 = self.start.elapsed();
            stats.lock().push(NodeStats {
                node: node.name.clone(),
                op: node.op.clone(),
                start_us: t0.as_secs_f64() * 1e6,
                end_us: t1.as_secs_f64() * 1e6,
                thread: rayon::current_thread_index().map(|i| i + 1).unwrap_or(0),
                output_bytes: bytes,
                device: self.device.label.clone(),
            });
        }
        Ok(())
    }
}


/// A kernel's outputs against what shape inference declared for its node:
/// as many as declared, each of the declared dtype and a shape the declared
/// (possibly partial) one accepts.
fn check_outputs(node: &ExecNode, outputs: &[Tensor]) -> Result<()> {
    if outputs.len() != node.outputs.len() {
        return Err(EngineError::Kernel {
            node: node.name.clone(),
            op: node.op.clone(),
            detail: format!("kernel produced {} outputs, the op declares {}", outputs.len(), node.outputs.len()),
        });
    }
    for (i, (t, decl)) in outputs.iter().zip(&node.outputs).enumerate() {
        if t.dtype() != decl.dtype || !decl.shape.accepts(t.shape()) {
            return Err(EngineError::Kernel {
                node: node.name.clone(),
                op: node.op.clone(),
                detail: format!("output {i} is {}{} but was inferred as {decl}", t.dtype(), t.shape()),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::tensor::DType;
    use crate::tensor::Tensor;
    use crate::runtime::multi_device::tests::cpu_device;
    const CPU0: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

    /// For tests whose graphs hold no variables or random ops.
    pub(crate) struct NoResources;
    impl Resources for NoResources {
        fn var(&self, name: &str, _: &TensorType) -> Resource {
            panic!("no variable {name} in this test")
        }
        fn rng(&self, name: &str) -> Resource {
            panic!("no rng {name} in this test")
        }
        fn queue(&self, _: &str, name: &str, _: &QueueSpec) -> Result<Resource> {
            panic!("no queue {name} in this test")
        }
    }

    fn prepare(g: &Graph, feeds: &[&crate::graph::Output], fetch: &crate::graph::Output) -> Prepared {
        let feeds: Vec<_> = feeds.iter().map(|f| (f.node_id(), f.index())).collect();
        Prepared::new(g, &feeds, &[(fetch.node_id(), fetch.index())], &[], &NoResources, DeviceType::Cpu).unwrap()
    }

    /// x [rows, k] times a constant [k, n], plus a ReLU.
    fn layer(rows: Option<usize>, k: usize, n: usize) -> (Graph, crate::graph::Output, crate::graph::Output) {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, vec![rows, Some(k)]).unwrap();
        let w = g.constant(Tensor::from_vec(vec![0.5f32; k * n], [k, n]).unwrap()).unwrap();
        let y = g.relu(g.matmul(&x, &w).unwrap()).unwrap();
        (g, x, y)
    }

    #[test]
    fn only_steps_with_little_known_work_run_inline() {
        // Batch 1, 784x512: 0.8 MFLOP and 1.6 MB of weights.
        let (g, x, y) = layer(Some(1), 784, 512);
        assert!(prepare(&g, &[&x], &y).small);
        // Batch 64: 51 MFLOP.
        let (g, x, y) = layer(Some(64), 784, 512);
        assert!(!prepare(&g, &[&x], &y).small);
        // Batch 1 but 2048x2048 weights: 16.8 MB read.
        let (g, x, y) = layer(Some(1), 2048, 2048);
        assert!(!prepare(&g, &[&x], &y).small);
        // Unknown batch: the work is not known, so the pool is used.
        let (g, x, y) = layer(None, 784, 512);
        assert!(!prepare(&g, &[&x], &y).small);
    }

    /// A kernel writes over an input only where it is the input's last
    /// reader: `y` has two readers (whichever runs second may write over
    /// it, the first must see it whole), `a` one; the fed `x` and a fetched
    /// `y` are never written over. One thread and two, many runs, so the
    /// readers' order varies.
    #[test]
    fn kernels_write_over_an_input_only_where_they_are_its_last_reader() {
        let g = Graph::new();
        let n = 1 << 16;
        let x = g.placeholder("x", DType::F32, vec![Some(n)]).unwrap();
        let y = g.neg(&x).unwrap();
        let (a, b) = (g.exp(&y).unwrap(), g.square(&y).unwrap());
        let s = g.add(&a, &b).unwrap();
        let xs: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();
        let feed = Tensor::from_vec(xs.clone(), [n]).unwrap();
        let want: Vec<f32> = xs.iter().map(|&v| (-v).exp() + v * v).collect();
        let fetches = [(s.node_id(), 0), (y.node_id(), 0)];
        for fetch_y in [false, true] {
            let p = Prepared::new(&g, &[(x.node_id(), 0)], &fetches[..1 + fetch_y as usize], &[], &NoResources, DeviceType::Cpu).unwrap();
            for threads in [1, 2] {
                let dev = cpu_device(CPU0, threads);
                for _ in 0..20 {
                    let (out, _) = p.run(std::slice::from_ref(&feed), threads, &dev, false, None).unwrap();
                    assert_eq!(out[0].to_vec::<f32>().unwrap(), want, "fetch y: {fetch_y}, threads {threads}");
                    if fetch_y {
                        assert_eq!(out[1].to_vec::<f32>().unwrap(), xs.iter().map(|v| -v).collect::<Vec<_>>());
                    }
                    assert_eq!(feed.to_vec::<f32>().unwrap(), xs);
                }
            }
        }
    }

    /// Two layers whose products' outputs (64 x 512 and 64 x 256 f32) are
    /// large enough to be recycled: a run after another feed's run reuses
    /// that run's storage, full of its values, and must give the first
    /// run's bits again.
    #[test]
    fn recycled_output_buffers_never_carry_a_previous_steps_values() {
        let g = Graph::new();
        let x = g.placeholder("x", DType::F32, vec![Some(64), Some(128)]).unwrap();
        let w1 = g.constant(Tensor::from_vec((0..128 * 512).map(|i| ((i % 7) as f32 - 3.0) * 0.01).collect::<Vec<f32>>(), [128, 512]).unwrap()).unwrap();
        let w2 = g.constant(Tensor::from_vec((0..512 * 256).map(|i| ((i % 5) as f32 - 2.0) * 0.01).collect::<Vec<f32>>(), [512, 256]).unwrap()).unwrap();
        let y = g.matmul(&g.relu(g.matmul(&x, &w1).unwrap()).unwrap(), &w2).unwrap();
        let p = prepare(&g, &[&x], &y);
        let feed = |scale: f32| Tensor::from_vec((0..64 * 128).map(|i| ((i % 11) as f32 - 4.0) * scale).collect::<Vec<f32>>(), [64, 128]).unwrap();
        let run = |t: Tensor| p.run(&[t], 1, &cpu_device(CPU0, 1), false, None).unwrap().0[0].to_vec::<f32>().unwrap();
        let first = run(feed(1.0));
        assert_eq!(p.buffers.held(), 1, "the first product's output is kept, the Relu's is not");
        let other = run(feed(-3.0));
        assert_ne!(first, other);
        let again = run(feed(1.0));
        assert_eq!(first.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), again.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        // One product of each size takes one a step, so one of each is
        // kept; the Relu's output (made anew, not taken) is dropped.
        assert_eq!(p.buffers.held(), 1);
        // The reference: y = relu(x w1) w2 in f64.
        let (xf, w1f, w2f): (Vec<f64>, Vec<f64>, Vec<f64>) = (
            (0..64 * 128).map(|i| (i % 11) as f64 - 4.0).collect(),
            (0..128 * 512).map(|i| ((i % 7) as f64 - 3.0) * 0.01).collect(),
            (0..512 * 256).map(|i| ((i % 5) as f64 - 2.0) * 0.01).collect(),
        );
        for (r, col) in [(0, 0), (17, 101), (63, 255)] {
            let h: Vec<f64> = (0..512).map(|j| (0..128).map(|k| xf[r * 128 + k] * w1f[k * 512 + j]).sum::<f64>().max(0.0)).collect();
            let want: f64 = (0..512).map(|j| h[j] * w2f[j * 256 + col]).sum();
            assert!((first[r * 256 + col] as f64 - want).abs() < 1e-3 * want.abs().max(1.0), "y[{r}, {col}]");
        }
    }

    #[test]
    fn a_small_step_on_a_pooled_session_computes_the_same_layer() {
        let (g, x, y) = layer(Some(1), 784, 512);
        let p = prepare(&g, &[&x], &y);
        let feed = Tensor::from_vec((0..784).map(|i| (i % 13) as f32 - 6.0).collect::<Vec<f32>>(), [1, 784]).unwrap();
        let (one, _) = p.run(std::slice::from_ref(&feed), 1, &cpu_device(CPU0, 1), false, None).unwrap();
        let (two, _) = p.run(std::slice::from_ref(&feed), 2, &cpu_device(CPU0, 2), false, None).unwrap();
        assert_eq!(one[0].to_vec::<f32>().unwrap(), two[0].to_vec::<f32>().unwrap());
        // Every output is relu(sum_i x_i * 0.5).
        let want = ((0..784).map(|i| (i % 13) as f32 - 6.0).sum::<f32>() * 0.5).max(0.0);
        assert!(one[0].to_vec::<f32>().unwrap().iter().all(|&v| (v - want).abs() < 1e-3));
    }
}
