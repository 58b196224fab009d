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

use crate::attr::{Attrs, NodeInfo};
use crate::error::{EngineError, Result};
use crate::graph::{Graph, NodeId, TensorType};
use crate::ops::{self, DeviceType, KernelCtx, KernelFn, Resource};
use crate::tensor::Tensor;
use crate::trace::{NodeStats, StepStats};
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

/// Where a node input comes from in a step.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// An output slot of an executed node.
    Slot(usize),
    /// The i-th feed.
    Feed(usize),
}

struct ExecNode {
    name: String,
    op: String,
    attrs: Attrs,
    kernel: KernelFn,
    outputs: Vec<TensorType>,
    inputs: Vec<Source>,
    consumers: Vec<usize>,
    first_slot: usize,
    cheap: bool,
    resources: Vec<Resource>,
    constant: Option<Tensor>,
}

/// Everything about one run signature that does not change between steps.
pub(crate) struct Prepared {
    nodes: Vec<ExecNode>,
    pending: Vec<usize>,
    roots: Vec<usize>,
    num_slots: usize,
    uses: Vec<usize>,
    fetches: Vec<Source>,
    /// Declared type and node name of each feed, for validation.
    pub(crate) feed_types: Vec<(String, TensorType)>,
}

/// Session state the preparation needs: variable and RNG slots by name.
pub(crate) trait Resources {
    fn var(&self, name: &str, ty: &TensorType) -> Resource;
    fn rng(&self, name: &str) -> Resource;
}

impl Prepared {
    pub(crate) fn new(
        graph: &Graph,
        feeds: &[(NodeId, usize)],
        fetches: &[(NodeId, usize)],
        targets: &[NodeId],
        res: &dyn Resources,
    ) -> Result<Prepared> {
        let d = graph.lock();
        let reg = ops::registry();
        let feed_index: HashMap<(NodeId, usize), usize> = feeds.iter().enumerate().map(|(i, &f)| (f, i)).collect();
        let mut feed_types = Vec::with_capacity(feeds.len());
        for &(n, i) in feeds {
            let node = d.nodes.get(n).ok_or_else(|| EngineError::UnknownNode(format!("#{n}")))?;
            let t = node.outputs.get(i).ok_or_else(|| EngineError::BadOutputIndex {
                node: node.name.clone(),
                op: node.op.clone(),
                index: i,
                outputs: node.outputs.len(),
            })?;
            feed_types.push((format!("{}:{}", node.name, i), t.clone()));
        }

        // Prune: walk back from fetches and targets, stopping at fed edges.
        let mut needed = vec![false; d.nodes.len()];
        let mut stack: Vec<NodeId> = targets.to_vec();
        for &(n, i) in fetches {
            let node = d.nodes.get(n).ok_or_else(|| EngineError::UnknownNode(format!("#{n}")))?;
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
            let node = &d.nodes[n];
            for &(src, idx) in &node.inputs {
                if !feed_index.contains_key(&(src, idx)) {
                    stack.push(src);
                }
            }
            stack.extend(node.control_inputs.iter().copied());
        }

        // Node ids are a topological order: map needed ids to exec indices.
        let ids: Vec<NodeId> = (0..d.nodes.len()).filter(|&i| needed[i]).collect();
        let mut exec_of = vec![usize::MAX; d.nodes.len()];
        let mut first_slot = 0;
        let mut nodes = Vec::with_capacity(ids.len());
        for (e, &id) in ids.iter().enumerate() {
            exec_of[id] = e;
            let node = &d.nodes[id];
            if node.op == "Placeholder" {
                let t = &node.outputs[0];
                return Err(EngineError::MissingFeed { node: node.name.clone(), shape: t.shape.to_string(), dtype: t.dtype.to_string() });
            }
            let def = reg.op(&node.op).ok_or_else(|| EngineError::UnknownOp { node: node.name.clone(), op: node.op.clone() })?;
            let kdef = reg.kernel(&node.op, DeviceType::Cpu);
            let in_types: Vec<TensorType> = node.inputs.iter().map(|&(s, i)| d.nodes[s].outputs[i].clone()).collect();
            let dtype = ops::kernel_dtype(&node.outputs, &in_types);
            let kernel = match (kdef, dtype) {
                (Some(k), Some(dt)) if !k.dtypes.is_empty() && !k.dtypes.contains(&dt) => {
                    return Err(EngineError::NoKernel { node: node.name.clone(), op: node.op.clone(), device: "CPU".into(), dtype: dt.to_string() });
                }
                (Some(k), _) => k.compute,
                (None, dt) => {
                    return Err(EngineError::NoKernel {
                        node: node.name.clone(),
                        op: node.op.clone(),
                        device: "CPU".into(),
                        dtype: dt.map(|d| d.to_string()).unwrap_or_default(),
                    });
                }
            };
            let info = NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs };
            let mut resources = Vec::new();
            if node.op == "Variable" {
                resources.push(res.var(&node.name, &node.outputs[0]));
            } else if let Some(crate::attr::AttrValue::Str(v)) = node.attrs.get("var") {
                for name in std::iter::once(v.as_str()).chain(info.strs_or_empty("slots")?.iter().map(|s| s.as_str())) {
                    let vid = *d.by_name.get(name).ok_or_else(|| EngineError::UnknownNode(name.to_string()))?;
                    resources.push(res.var(name, &d.nodes[vid].outputs[0]));
                }
            }
            if def.stateful && node.attrs.contains_key("seed") {
                resources.push(res.rng(&node.name));
            }
            let constant = if node.op == "Const" { Some(info.tensor("value")?.to_tensor()?) } else { None };
            nodes.push(ExecNode {
                name: node.name.clone(),
                op: node.op.clone(),
                attrs: node.attrs.clone(),
                kernel,
                outputs: node.outputs.clone(),
                inputs: Vec::new(),
                consumers: Vec::new(),
                first_slot,
                cheap: def.cheap,
                resources,
                constant,
            });
            first_slot += node.outputs.len();
        }
        let num_slots = first_slot;
        let mut uses = vec![0usize; num_slots];
        let mut pending = vec![0usize; nodes.len()];
        for (e, &id) in ids.iter().enumerate() {
            let node = &d.nodes[id];
            let mut preds: Vec<usize> = Vec::new();
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for &(src, idx) in &node.inputs {
                if let Some(&f) = feed_index.get(&(src, idx)) {
                    inputs.push(Source::Feed(f));
                } else {
                    let p = exec_of[src];
                    let slot = nodes[p].first_slot + idx;
                    uses[slot] += 1;
                    inputs.push(Source::Slot(slot));
                    preds.push(p);
                }
            }
            for &c in &node.control_inputs {
                preds.push(exec_of[c]);
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
        Ok(Prepared { nodes, pending, roots, num_slots, uses, fetches: fetch_src, feed_types })
    }

    /// Number of nodes a step executes.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Runs one step; `pool` is `None` for single-threaded execution.
    pub(crate) fn run(
        &self,
        feeds: &[Tensor],
        threads: usize,
        pool: Option<&rayon::ThreadPool>,
        trace: bool,
    ) -> Result<(Vec<Tensor>, Option<StepStats>)> {
        let step = Step {
            prep: self,
            feeds,
            threads,
            pending: self.pending.iter().map(|&p| AtomicUsize::new(p)).collect(),
            uses: self.uses.iter().map(|&u| AtomicUsize::new(u)).collect(),
            slots: (0..self.num_slots).map(|_| Mutex::new(None)).collect(),
            error: Mutex::new(None),
            failed: AtomicBool::new(false),
            stats: if trace { Some(Mutex::new(Vec::with_capacity(self.nodes.len()))) } else { None },
            start: Instant::now(),
        };
        match pool {
            Some(pool) if threads > 1 => pool.scope(|s| {
                for &r in &self.roots {
                    let step = &step;
                    s.spawn(move |s| step.process(r, Some(s)));
                }
            }),
            _ => {
                for &r in &self.roots {
                    step.process(r, None);
                }
            }
        }
        if let Some(e) = step.error.lock().unwrap_or_else(|e| e.into_inner()).take() {
            return Err(e);
        }
        let mut out = Vec::with_capacity(self.fetches.len());
        for src in &self.fetches {
            out.push(match *src {
                Source::Feed(f) => feeds[f].clone(),
                Source::Slot(s) => step.slots[s]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .ok_or_else(|| EngineError::Cycle(self.slot_owner(s)))?,
            });
        }
        let stats = step.stats.map(|m| StepStats {
            nodes: m.into_inner().unwrap_or_else(|e| e.into_inner()),
            total_us: step.start.elapsed().as_secs_f64() * 1e6,
        });
        Ok((out, stats))
    }

    fn slot_owner(&self, s: usize) -> String {
        self.nodes.iter().rev().find(|n| n.first_slot <= s).map(|n| n.name.clone()).unwrap_or_default()
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
    error: Mutex<Option<EngineError>>,
    failed: AtomicBool,
    stats: Option<Mutex<Vec<NodeStats>>>,
    start: Instant,
}

impl<'a> Step<'a> {
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
                self.failed.store(true, Ordering::Relaxed);
                let mut slot = self.error.lock().unwrap_or_else(|e| e.into_inner());
                if slot.is_none() {
                    *slot = Some(err);
                }
                return;
            }
            let mut inline_expensive = None;
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
                    _ => stack.push(c),
                }
            }
            if let Some(c) = inline_expensive {
                stack.push(c);
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
            for src in &node.inputs {
                inputs.push(match *src {
                    Source::Feed(f) => self.feeds[f].clone(),
                    Source::Slot(s) => self.slots[s].lock().unwrap_or_else(|e| e.into_inner()).clone().ok_or_else(|| {
                        EngineError::Kernel { node: node.name.clone(), op: node.op.clone(), detail: format!("input slot {s} is empty") }
                    })?,
                });
            }
            let mut ctx = KernelCtx {
                n: NodeInfo { name: &node.name, op: &node.op, attrs: &node.attrs },
                inputs,
                threads: self.threads,
                resources: &node.resources,
            };
            let out = (node.kernel)(&mut ctx)?;
            drop(ctx);
            // Release inputs whose last consumer this was.
            for src in &node.inputs {
                if let Source::Slot(s) = *src
                    && self.uses[s].fetch_sub(1, Ordering::AcqRel) == 1
                {
                    self.slots[s].lock().unwrap_or_else(|e| e.into_inner()).take();
                }
            }
            out
        };
        if outputs.len() != node.outputs.len() {
            return Err(EngineError::Kernel {
                node: node.name.clone(),
                op: node.op.clone(),
                detail: format!("kernel produced {} outputs, the op declares {}", outputs.len(), node.outputs.len()),
            });
        }
        let mut bytes = 0;
        for (i, t) in outputs.into_iter().enumerate() {
            let decl = &node.outputs[i];
            if t.dtype() != decl.dtype || !decl.shape.accepts(t.shape()) {
                return Err(EngineError::Kernel {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    detail: format!("output {i} is {}{} but was inferred as {decl}", t.dtype(), t.shape()),
                });
            }
            bytes += t.size_in_bytes();
            let s = node.first_slot + i;
            if self.uses[s].load(Ordering::Acquire) > 0 {
                *self.slots[s].lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
            }
        }
        if let (Some(stats), Some(t0)) = (&self.stats, t0) {
            let t1 = self.start.elapsed();
            stats.lock().unwrap_or_else(|e| e.into_inner()).push(NodeStats {
                node: node.name.clone(),
                op: node.op.clone(),
                start_us: t0.as_secs_f64() * 1e6,
                end_us: t1.as_secs_f64() * 1e6,
                thread: rayon::current_thread_index().map(|i| i + 1).unwrap_or(0),
                output_bytes: bytes,
            });
        }
        Ok(())
    }
}
