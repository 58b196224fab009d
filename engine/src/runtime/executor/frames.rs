//! The executor's path for graphs with dynamic control flow (TensorFlow's
//! `PropagatorState`: executor.cc / propagator_state.cc).
//!
//! Contract. Every node belongs statically to one *frame*: the root, or the
//! body of a while loop (entered through `Enter` with a `frame_name`). At run
//! time a frame has instances (one per execution of the loop) and each
//! instance has *iterations*; a node runs once per (frame instance,
//! iteration), with its own pending count and input slots. Values move
//! between them only through Enter (parent -> child, iteration 0; a
//! constant Enter into every iteration), NextIteration (iteration i ->
//! i + 1) and Exit (child -> parent). A node with a dead input (the
//! untaken output of a Switch) does not run and its outputs are dead;
//! Merge runs on its first live input, or dead when all its forward
//! inputs are dead. Iterations overlap: iteration i + 1 starts as soon as
//! its loop variables arrive, while i is still running, up to the loop's
//! `parallel_iterations`; later ones wait. An iteration's state is freed
//! once it and all earlier iterations are done, so a loop without a
//! gradient runs in memory independent of its trip count.
//!
//! This path runs nodes on the calling thread from one FIFO ready queue
//! (kernels still use the session's threads inside), so a step's results
//! do not depend on the thread count.

use super::{ExecNode, Source};
use crate::error::{EngineError, Result};
use crate::framework::stats::{NodeStats, StepStats};
use crate::graph::{NodeClass, NodeInfo};
use crate::ops::KernelCtx;
use crate::ops::control_flow::Stacks;
use crate::ops::sendrecv::StepComm;
use crate::tensor::Tensor;
use crate::runtime::multi_device::LocalDevice;
use std::collections::{HashMap, VecDeque};
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tensor that arrived for a waiting Recv: (node, frame instance, iteration, result).
type Arrival = (usize, usize, i64, Result<Tensor>);

#[derive(Default)]
struct RecvInbox {
    items: Mutex<Vec<Arrival>>,
    cond: Condvar,
}

impl RecvInbox {
    fn push(&self, e: usize, fi: usize, it: i64, r: Result<Tensor>) {
        self.items.lock().push((e, fi, it, r));
        self.cond.notify_one();
    }

    /// What arrived, waiting up to `timeout` for something (empty: nothing came).
    fn wait(&self, timeout: Duration) -> Vec<Arrival> {
        let deadline = Instant::now() + timeout;
        let mut items = self.items.lock();
        while items.is_empty() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            self.cond.wait_for(&mut items, deadline - now);
        }
        std::mem::take(&mut *items)
    }
}

const CONTROL: usize = usize::MAX;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Normal,
    Switch,
    Merge,
    /// Into static frame `frame`; a constant Enter feeds every iteration.
    Enter { frame: usize, constant: bool },
    Exit,
    NextIteration,
}

#[derive(Clone, Copy)]
struct OutEdge {
    /// Output index, or CONTROL.
    out: usize,
    dst: usize,
    /// Input index at `dst`, or CONTROL.
    slot: usize,
}

struct StaticFrame {
    /// The loop's `frame_name` ("" for the root).
    name: String,
    parent: usize,
    /// Number of nodes in the frame (their local indices are 0..len).
    len: usize,
    /// Total data inputs of those nodes (their slots' layout).
    inputs: usize,
    /// Enter nodes that feed the frame.
    enters: usize,
    parallel: usize,
    /// Exit nodes of the frame.
    exits: Vec<usize>,
    /// Initial pending count of each local node.
    pending: Vec<u32>,
}

/// The static analysis of a control-flow graph, made once per signature.
pub(super) struct FramePlan {
    frame_of: Vec<usize>,
    local: Vec<usize>,
    in_base: Vec<usize>,
    kind: Vec<Kind>,
    out_edges: Vec<Vec<OutEdge>>,
    /// Merge: data inputs that do not come over a back edge.
    forward_inputs: Vec<u32>,
    frames: Vec<StaticFrame>,
    /// Per node, the (fetch index, output index) it provides.
    fetch_of: Vec<Vec<(usize, usize)>>,
    /// Data inputs per node.
    width: Vec<usize>,
}

fn cf_err(node: &str, detail: impl Into<String>) -> EngineError {
    EngineError::ControlFlow { node: node.into(), detail: detail.into() }
}

impl FramePlan {
    /// `preds[e]` lists (producer, output or CONTROL, input slot or CONTROL)
    /// of node `e`'s edges from other executed nodes.
    pub(super) fn new(nodes: &[ExecNode], preds: &[Vec<(usize, usize, usize)>], fetches: &[Source], slot_node: impl Fn(usize) -> (usize, usize)) -> Result<FramePlan> {
        let n = nodes.len();
        let mut kind = vec![Kind::Normal; n];
        let mut frames = vec![StaticFrame { name: String::new(), parent: 0, len: 0, inputs: 0, enters: 0, parallel: usize::MAX, exits: Vec::new(), pending: Vec::new() }];
        let mut by_name: HashMap<(usize, String), usize> = HashMap::new();
        let mut frame_of = vec![0usize; n];
        let mut local = vec![0usize; n];
        let mut in_base = vec![0usize; n];
        let mut forward_inputs = vec![0u32; n];
        let mut out_edges: Vec<Vec<OutEdge>> = vec![Vec::new(); n];
        for e in 0..n {
            let node = &nodes[e];
            let info = NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs };
            // The frame of a node is where its (forward) inputs' values live.
            let mut frame = None;
            for &(p, out, _) in &preds[e] {
                if p >= e {
                    if node.class != NodeClass::Merge || out == CONTROL {
                        return Err(cf_err(&node.name, format!("its input from '{}' is a back edge, which only a Merge may have", nodes[p].name)));
                    }
                    continue;
                }
                let f = match kind[p] {
                    Kind::Enter { frame, .. } => frame,
                    Kind::Exit => frames[frame_of[p]].parent,
                    _ => frame_of[p],
                };
                match frame {
                    None => frame = Some(f),
                    Some(g) if g != f => {
                        return Err(cf_err(&node.name, format!("its inputs come from two frames (one through '{}'): a value of a loop body used outside it without Exit, or an outer value used inside without Enter", nodes[p].name)));
                    }
                    _ => {}
                }
            }
            let f = frame.unwrap_or(0);
            frame_of[e] = f;
            kind[e] = match node.class {
                NodeClass::Switch => Kind::Switch,
                NodeClass::Merge => Kind::Merge,
                NodeClass::Exit => {
                    if f == 0 {
                        return Err(cf_err(&node.name, "an Exit outside any loop frame"));
                    }
                    frames[f].exits.push(e);
                    Kind::Exit
                }
                NodeClass::NextIteration => {
                    if f == 0 {
                        // It would start iteration after iteration of the root, without end.
                        return Err(cf_err(&node.name, "a NextIteration outside any loop frame"));
                    }
                    Kind::NextIteration
                }
                NodeClass::Enter => {
                    let name = info.str("frame_name")?.to_string();
                    let parallel = info.int("parallel_iterations").unwrap_or(10).max(1) as usize;
                    let next = frames.len();
                    let child = *by_name.entry((f, name.clone())).or_insert(next);
                    if child == next {
                        frames.push(StaticFrame { name: name.clone(), parent: f, len: 0, inputs: 0, enters: 0, parallel, exits: Vec::new(), pending: Vec::new() });
                    }
                    frames[child].enters += 1;
                    Kind::Enter { frame: child, constant: info.bool_or("is_constant", false)? }
                }
                _ => Kind::Normal,
            };
            let fr = &mut frames[f];
            local[e] = fr.len;
            fr.len += 1;
            in_base[e] = fr.inputs;
            fr.inputs += node.inputs.len();
            let mut pending = 0u32;
            for &(p, out, slot) in &preds[e] {
                out_edges[p].push(OutEdge { out, dst: e, slot });
                if kind[e] == Kind::Merge {
                    if out == CONTROL {
                        pending += 1;
                    } else if p < e {
                        forward_inputs[e] += 1;
                    }
                } else {
                    pending += 1;
                }
            }
            fr.pending.push(pending);
        }
        let mut fetch_of = vec![Vec::new(); n];
        for (i, f) in fetches.iter().enumerate() {
            if let Source::Slot(s) = *f {
                let (e, out) = slot_node(s);
                let value_frame = match kind[e] {
                    Kind::Exit => frames[frame_of[e]].parent,
                    Kind::Enter { frame, .. } => frame,
                    _ => frame_of[e],
                };
                if value_frame != 0 {
                    return Err(cf_err(&nodes[e].name, "a value inside a loop body cannot be fetched; fetch the loop's outputs"));
                }
                fetch_of[e].push((i, out));
            }
        }
        let width = nodes.iter().map(|x| x.inputs.len()).collect();
        Ok(FramePlan { frame_of, local, in_base, kind, out_edges, forward_inputs, frames, fetch_of, width })
    }
}

/// A value in an input slot.
#[derive(Clone)]
enum Val {
    Live(Tensor),
    Dead,
    /// A live control signal.
    Signal,
}

struct Iter {
    pending: Vec<u32>,
    dead: Vec<u32>,
    /// Merge nodes that already ran in this iteration.
    fired: Vec<bool>,
    inputs: Vec<Option<Val>>,
    /// Queued nodes of this iteration.
    outstanding: usize,
    /// Child frame instances started from this iteration and not done.
    children: usize,
}

struct Frame {
    stat: usize,
    /// Names this instance the same way on every device ("" for the root):
    /// the parent's tag, the frame name and the parent iteration.
    tag: String,
    parent: Option<(usize, i64)>,
    iters: HashMap<i64, Iter>,
    /// The oldest iteration not yet freed.
    first: i64,
    /// The newest iteration created.
    last: i64,
    pending_enters: usize,
    /// (node, slot, value) of the constant Enters, given to every iteration.
    invariants: Vec<(usize, usize, Tensor)>,
    /// NextIteration values for iteration `last + 1`, held back by `parallel_iterations`.
    deferred: Vec<(usize, usize, Tensor)>,
    /// Exit nodes that produced a live value.
    live_exits: Vec<usize>,
}

struct State<'p> {
    plan: &'p FramePlan,
    frames: Vec<Option<Frame>>,
    free: Vec<usize>,
    children: HashMap<(usize, i64, usize), usize>,
    queue: VecDeque<(usize, usize, i64)>,
    /// A node that got a value for an input it already had.
    bad: Option<usize>,
    live: usize,
    peak: usize,
}

impl<'p> State<'p> {
    /// The root frame with its first iteration, every root node of the
    /// root frame queued (a Merge waits for an input even without pending
    /// ones).
    fn start(plan: &'p FramePlan, nodes: usize) -> State<'p> {
        let root = Frame {
            stat: 0,
            tag: String::new(),
            parent: None,
            iters: HashMap::new(),
            first: 0,
            last: 0,
            pending_enters: 0,
            invariants: Vec::new(),
            deferred: Vec::new(),
            live_exits: Vec::new(),
        };
        let mut st = State { plan, frames: vec![Some(root)], free: Vec::new(), children: HashMap::new(), queue: VecDeque::new(), bad: None, live: 0, peak: 0 };
        let it0 = st.new_iter(0);
        st.frame(0).iters.insert(0, it0);
        for e in 0..nodes {
            if plan.frame_of[e] == 0 && plan.kind[e] != Kind::Merge && plan.frames[0].pending[plan.local[e]] == 0 {
                st.queue.push_back((e, 0, 0));
            }
        }
        let roots = st.queue.len();
        if let Some(i) = st.frame(0).iters.get_mut(&0) {
            i.outstanding = roots;
        }
        st
    }

    fn new_iter(&self, stat: usize) -> Iter {
        let f = &self.plan.frames[stat];
        Iter {
            pending: f.pending.clone(),
            dead: vec![0; f.len],
            fired: vec![false; f.len],
            inputs: vec![None; f.inputs],
            outstanding: 0,
            children: 0,
        }
    }

    fn frame(&mut self, fi: usize) -> &mut Frame {
        self.frames[fi].as_mut().expect("live frame instance")
    }

    /// The child instance of static frame `stat` started from (fi, it).
    fn child(&mut self, fi: usize, it: i64, stat: usize) -> usize {
        if let Some(&c) = self.children.get(&(fi, it, stat)) {
            return c;
        }
        let iter0 = self.new_iter(stat);
        let plan = self.plan;
        let tag = format!("{}/{}@{it}", self.frame(fi).tag, plan.frames[stat].name);
        let frame = Frame {
            stat,
            tag,
            parent: Some((fi, it)),
            iters: HashMap::from([(0, iter0)]),
            first: 0,
            last: 0,
            pending_enters: self.plan.frames[stat].enters,
            invariants: Vec::new(),
            deferred: Vec::new(),
            live_exits: Vec::new(),
        };
        let c = match self.free.pop() {
            Some(c) => {
                self.frames[c] = Some(frame);
                c
            }
            None => {
                self.frames.push(Some(frame));
                self.frames.len() - 1
            }
        };
        self.children.insert((fi, it, stat), c);
        if let Some(i) = self.frame(fi).iters.get_mut(&it) {
            i.children += 1;
        }
        c
    }

    /// Delivers one value (or a control signal: `slot == CONTROL`, the
    /// value says only whether it is dead) to node `e` in (fi, it).
    fn deliver(&mut self, e: usize, slot: usize, v: Val, fi: usize, it: i64) {
        let plan = self.plan;
        let l = plan.local[e];
        let base = plan.in_base[e];
        let merge = plan.kind[e] == Kind::Merge;
        let mut live_added = 0;
        let Some(iter) = self.frames[fi].as_mut().and_then(|f| f.iters.get_mut(&it)) else { return };
        let dead = matches!(v, Val::Dead);
        // A Merge takes any number of data values (it keeps the first).
        let expecting = (merge && slot != CONTROL) || (iter.pending[l] > 0 && (slot == CONTROL || merge || iter.inputs[base + slot].is_none()));
        if !expecting {
            // A second value for one input in one iteration: an Exit or
            // NextIteration that fires where the graph's loop structure
            // does not allow it (a hand-made graph file).
            if self.bad.is_none() {
                self.bad = Some(e);
            }
            return;
        }
        if slot == CONTROL {
            iter.pending[l] -= 1;
            if dead && !merge {
                iter.dead[l] += 1;
            }
        } else if merge {
            if dead {
                iter.dead[l] += 1;
            } else if !iter.fired[l] && !iter.inputs[base..base + plan.width[e]].iter().any(|x| matches!(x, Some(Val::Live(_)))) {
                iter.inputs[base + slot] = Some(v);
                live_added = 1;
            }
        } else {
            iter.pending[l] -= 1;
            if dead {
                iter.dead[l] += 1;
            } else {
                live_added = 1;
            }
            iter.inputs[base + slot] = Some(v);
        }
        let live_added = if matches!(slot, CONTROL) { 0 } else { live_added };
        let ready = if merge {
            let has_live = live_added == 1 || iter.inputs[base..base + plan.width[e]].iter().any(|x| matches!(x, Some(Val::Live(_))));
            let ok = !iter.fired[l] && iter.pending[l] == 0 && (has_live || (plan.forward_inputs[e] > 0 && iter.dead[l] >= plan.forward_inputs[e]));
            if ok {
                iter.fired[l] = true;
            }
            ok
        } else {
            iter.pending[l] == 0
        };
        if ready {
            iter.outstanding += 1;
        }
        self.live += live_added;
        self.peak = self.peak.max(self.live);
        if ready {
            self.queue.push_back((e, fi, it));
        }
    }

    /// Makes iteration `it` of `fi` (the next one) and gives it the loop invariants.
    fn start_iter(&mut self, fi: usize, it: i64) {
        let stat = self.frame(fi).stat;
        let iter = self.new_iter(stat);
        let f = self.frame(fi);
        f.iters.insert(it, iter);
        f.last = it;
        let invs = f.invariants.clone();
        for (e, slot, t) in invs {
            self.deliver(e, slot, Val::Live(t), fi, it);
        }
    }

    /// Node `e` ran (or was skipped, `ran` false) in iteration `it` of frame
    /// `fi` with outputs `outs`: each consumer gets its value, dead where
    /// the node did not run. An Enter delivers into its child frame (an
    /// invariant to every iteration, and kept for those to come), an Exit to
    /// its parent, a NextIteration to the next iteration (started if the
    /// frame's parallelism allows, its values deferred otherwise).
    fn propagate(&mut self, e: usize, fi: usize, it: i64, outs: &[Option<Tensor>], ran: bool) {
        let val = |oe: &OutEdge| -> Val {
            if oe.out == CONTROL {
                if ran { Val::Signal } else { Val::Dead }
            } else {
                outs[oe.out].clone().map_or(Val::Dead, Val::Live)
            }
        };
        let plan = self.plan;
        let edges = &plan.out_edges[e];
        let kind = plan.kind[e];
        match kind {
            Kind::Enter { frame, constant } => {
                let c = self.child(fi, it, frame);
                self.frame(c).pending_enters -= 1;
                match (&outs[0], constant) {
                    (Some(t), true) => {
                        let mut its: Vec<i64> = self.frame(c).iters.keys().copied().collect();
                        its.sort_unstable();
                        for oe in edges {
                            if oe.slot != CONTROL {
                                self.frame(c).invariants.push((oe.dst, oe.slot, t.clone()));
                                self.live += 1;
                            }
                            for &i in &its {
                                self.deliver(oe.dst, oe.slot, val(oe), c, i);
                            }
                        }
                    }
                    _ => {
                        for oe in edges {
                            self.deliver(oe.dst, oe.slot, val(oe), c, 0);
                        }
                    }
                }
                self.cleanup(c);
            }
            Kind::Exit => {
                if ran {
                    let f = self.frame(fi);
                    f.live_exits.push(e);
                    if let Some((pf, pit)) = f.parent {
                        for oe in edges {
                            self.deliver(oe.dst, oe.slot, val(oe), pf, pit);
                        }
                    }
                }
            }
            Kind::NextIteration => {
                if ran {
                    let next = it + 1;
                    let f = self.frame(fi);
                    let exists = f.iters.contains_key(&next);
                    let room = next - f.first < plan.frames[f.stat].parallel as i64;
                    if !exists && room && f.last < next {
                        self.start_iter(fi, next);
                    }
                    if self.frame(fi).iters.contains_key(&next) {
                        for oe in edges {
                            self.deliver(oe.dst, oe.slot, val(oe), fi, next);
                        }
                    } else if let Some(t) = &outs[0] {
                        for oe in edges {
                            self.frame(fi).deferred.push((oe.dst, oe.slot, t.clone()));
                            self.live += 1;
                        }
                        self.peak = self.peak.max(self.live);
                    }
                }
            }
            _ => {
                for oe in edges {
                    self.deliver(oe.dst, oe.slot, val(oe), fi, it);
                }
            }
        }
    }

    /// Frees finished iterations of `fi` from the oldest on, starts held-back
    /// ones, and finishes the frame when nothing is left.
    fn cleanup(&mut self, fi: usize) {
        loop {
            let plan = self.plan;
            let f = self.frame(fi);
            let first = f.first;
            let done = match f.iters.get(&first) {
                Some(i) => i.outstanding == 0 && i.children == 0 && (first > 0 || f.pending_enters == 0),
                None => false,
            };
            if done {
                let it = f.iters.remove(&first).expect("iteration");
                let held: usize = it.inputs.iter().filter(|x| matches!(x, Some(Val::Live(_)))).count();
                f.first += 1;
                self.live -= held;
                let f = self.frame(fi);
                if !f.deferred.is_empty() && f.last + 1 - f.first < plan.frames[f.stat].parallel as i64 {
                    let next = f.last + 1;
                    let items = std::mem::take(&mut f.deferred);
                    self.live -= items.len();
                    self.start_iter(fi, next);
                    for (e, slot, t) in items {
                        self.deliver(e, slot, Val::Live(t), fi, next);
                    }
                }
                continue;
            }
            let f = self.frame(fi);
            if f.iters.is_empty() && f.deferred.is_empty() && f.pending_enters == 0 {
                self.finish_frame(fi);
            }
            return;
        }
    }

    /// A frame instance is done: Exits that never produced a value send dead
    /// values out (a loop inside an untaken branch), then it is freed.
    fn finish_frame(&mut self, fi: usize) {
        let Some(f) = self.frames[fi].take() else { return };
        self.live -= f.invariants.len();
        let Some((pf, pit)) = f.parent else { return };
        for &x in &self.plan.frames[f.stat].exits {
            if !f.live_exits.contains(&x) {
                for oe in self.plan.out_edges[x].clone() {
                    self.deliver(oe.dst, oe.slot, Val::Dead, pf, pit);
                }
            }
        }
        self.children.retain(|_, &mut c| c != fi);
        self.free.push(fi);
        if let Some(i) = self.frames[pf].as_mut().and_then(|p| p.iters.get_mut(&pit)) {
            i.children -= 1;
        }
        self.cleanup(pf);
    }
}


impl super::Prepared {
    /// One step of a graph with control flow (see the module comment). In
    /// a multi-device step a failure aborts the step's rendezvous, so the
    /// other devices stop waiting.
    pub(super) fn run_frames(&self, plan: &FramePlan, feeds: &[Tensor], threads: usize, trace: bool, comm: Option<&StepComm>, device: &LocalDevice) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        match (self.run_frames_inner(plan, feeds, threads, trace, comm, device), comm) {
            (Err(err), Some(c)) => {
                let note = EngineError::Rendezvous { key: format!("step {}", c.step_id), detail: format!("aborted on {}: {err}", device.label) };
                c.fail(&device.label, err);
                Err(note)
            }
            (r, _) => r,
        }
    }

    fn run_frames_inner(&self, plan: &FramePlan, feeds: &[Tensor], threads: usize, trace: bool, comm: Option<&StepComm>, device: &LocalDevice) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        if let (Some(&e), None) = (self.recvs.first(), comm) {
            return Err(cf_err(&self.nodes[e].name, "a Recv outside a multi-device step"));
        }
        let inbox: Arc<RecvInbox> = Arc::default();
        let mut arrived: HashMap<(usize, usize, i64), Result<Tensor>> = HashMap::new();
        let mut waiting = 0usize;
        let start = Instant::now();
        let stacks = Stacks::default();
        let mut st = State::start(plan, self.nodes.len());
        let mut fetched: Vec<Option<Val>> = self.fetches.iter().map(|f| if let Source::Feed(i) = *f { Some(Val::Live(feeds[i].clone())) } else { None }).collect();
        let mut stats = trace.then(Vec::new);
        loop {
        let Some((e, fi, it)) = st.queue.pop_front() else {
            if waiting == 0 {
                break;
            }
            // Nothing to run here: wait for a Recv's tensor.
            let Some(c) = comm else { break };
            for (k, f, i, r) in inbox.wait(c.recv_timeout) {
                waiting -= 1;
                arrived.insert((k, f, i), r);
                st.queue.push_back((k, f, i));
            }
            if st.queue.is_empty() {
                let name = arrived.keys().next().map_or("", |k| self.nodes[k.0].name.as_str()).to_string();
                let name = if name.is_empty() { self.recvs.first().map_or(String::new(), |&r| self.nodes[r].name.clone()) } else { name };
                return Err(EngineError::Rendezvous { key: name.clone(), detail: format!("Recv '{name}' waited {:?} and no tensor arrived", c.recv_timeout) });
            }
            continue;
        };
        {
            let node = &self.nodes[e];
            let suffix = match st.frames[fi].as_ref() {
                Some(f) if f.stat != 0 => format!("|{}#{it}", f.tag),
                _ => String::new(),
            };
            let spec = node.transfer.as_ref().map(|t| {
                let mut t = t.clone();
                t.key.edge.push_str(&suffix);
                t
            });
            let kind = plan.kind[e];
            let (l, base) = (plan.local[e], plan.in_base[e]);
            let t0 = start.elapsed();
            // Take the inputs out of the iteration's slots.
            let Some(iter) = st.frames[fi].as_mut().and_then(|f| f.iters.get_mut(&it)) else { continue };
            let dead = kind != Kind::Merge && iter.dead[l] > 0;
            let mut ins: Vec<Option<Tensor>> = Vec::with_capacity(node.inputs.len());
            let mut taken = 0;
            if node.class == NodeClass::Recv && !dead {
                match arrived.remove(&(e, fi, it)) {
                    Some(r) => ins.push(Some(r?)),
                    None => {
                        let (Some(c), Some(sp)) = (comm, spec.as_ref()) else { return Err(cf_err(&node.name, "a Recv outside a multi-device step")) };
                        let ib = inbox.clone();
                        c.rdv.recv_async(sp.key.for_step(c.step_id), Box::new(move |r| ib.push(e, fi, it, r)));
                        waiting += 1;
                        continue;
                    }
                }
            }
            for (k, src) in node.inputs.iter().enumerate() {
                ins.push(match *src {
                    Source::Feed(f) => Some(feeds[f].clone()),
                    Source::Wire(_) => continue,
                    _ => match iter.inputs[base + k].take() {
                        Some(Val::Live(t)) => {
                            taken += 1;
                            Some(t)
                        }
                        _ => None,
                    },
                });
            }
            st.live -= taken;
            let nout = node.outputs.len();
            let outs: Vec<Option<Tensor>> = match kind {
                Kind::Merge => match ins.iter().position(|x| x.is_some()) {
                    Some(i) => vec![ins[i].take(), Some(Tensor::scalar(i as i32))],
                    None => vec![None; nout],
                },
                _ if dead => vec![None; nout],
                Kind::Switch => {
                    let pred = ins[1].as_ref().map(|p| p.to_vec::<bool>()).transpose()?.and_then(|v| v.first().copied()).ok_or_else(|| cf_err(&node.name, "the predicate is not a scalar bool"))?;
                    let x = ins[0].take();
                    if pred { vec![None, x] } else { vec![x, None] }
                }
                Kind::Enter { .. } | Kind::Exit | Kind::NextIteration => vec![ins[0].take()],
                Kind::Normal => {
                    let out = if let Some(c) = &node.constant {
                        vec![c.clone()]
                    } else {
                        let inputs = ins.into_iter().map(|x| x.ok_or_else(|| cf_err(&node.name, "an input slot is empty"))).collect::<Result<Vec<_>>>()?;
                        let mut ctx = KernelCtx {
                            n: NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs },
                            inputs,
                            threads,
                            resources: &node.resources,
                            comm,
                            transfer: spec.as_ref(),
                            stacks: Some(&stacks),
                            buffers: None,
                            backend: &device.backend,
                        };
                        (node.kernel)(&mut ctx).map_err(|err| err.at_node(&node.name, &node.op))?
                    };
                    super::check_outputs(node, &out)?;
                    out.into_iter().map(Some).collect()
                }
            };
            let ran = !(dead || (kind == Kind::Merge && outs[0].is_none()));
            if let Some(s) = stats.as_mut().filter(|_| ran) {
                s.push(NodeStats {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    start_us: t0.as_secs_f64() * 1e6,
                    end_us: start.elapsed().as_secs_f64() * 1e6,
                    thread: 0,
                    output_bytes: outs.iter().flatten().map(|t| t.size_in_bytes()).sum(),
                    device: device.label.clone(),
                });
            }
            for &(fx, o) in &plan.fetch_of[e] {
                fetched[fx] = Some(outs[o].clone().map_or(Val::Dead, Val::Live));
            }
            st.propagate(e, fi, it, &outs, ran);
            if let Some(i) = st.frames[fi].as_mut().and_then(|f| f.iters.get_mut(&it)) {
                i.outstanding -= 1;
            }
            st.cleanup(fi);
            if let Some(b) = st.bad {
                return Err(cf_err(&self.nodes[b].name, format!("it got a second value for one input in one iteration (from '{}'): the graph's loop structure is broken", node.name)));
            }
        }
        }
        let out = self.fetched_values(fetched)?;
        let stats = stats.map(|nodes| StepStats { nodes, total_us: start.elapsed().as_secs_f64() * 1e6, transfers: Vec::new(), peak_live_tensors: st.peak });
        Ok((out, stats))
    }

    /// The fetched values, each live: a dead one lay in a cond branch that
    /// did not run, a missing one behind a loop that did not finish.
    fn fetched_values(&self, fetched: Vec<Option<Val>>) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(fetched.len());
        for (i, f) in fetched.into_iter().enumerate() {
            let name = match self.fetches[i] {
                Source::Slot(s) => self.slot_owner(s),
                _ => String::new(),
            };
            match f {
                Some(Val::Live(t)) => out.push(t),
                Some(_) => return Err(cf_err(&name, "the fetched value is dead: it lies in a cond branch that did not run")),
                None => return Err(cf_err(&name, "the fetched value was never computed (a loop it depends on did not finish)")),
            }
        }
        Ok(out)
    }
}
