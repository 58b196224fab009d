//! Sessions: run parts of a graph with persistent variables.
//!
//! `Session::run(feeds, fetches, targets)` prepares an executor for each new
//! signature once and caches it, so a training loop's thousandth step does
//! no graph analysis. Variables live in the session (by node name) and keep
//! their values across runs.

use crate::error::{EngineError, Result};
use crate::executor::{Prepared, Resources};
use crate::graph::{Graph, NodeId, Output, TensorType};
use crate::ops::Resource;
use crate::tensor::Tensor;
use crate::trace::StepStats;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The value of one variable in one session.
pub(crate) struct VarSlot {
    pub name: String,
    pub ty: TensorType,
    value: Mutex<Option<Tensor>>,
}

impl VarSlot {
    pub fn lock(&self) -> MutexGuard<'_, Option<Tensor>> {
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// Worker threads for independent nodes and inside kernels; 1 runs every
    /// step on the calling thread.
    pub threads: usize,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions { threads: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) }
    }
}

type RunKey = (Vec<(NodeId, usize)>, Vec<(NodeId, usize)>, Vec<NodeId>);

#[derive(Default)]
struct State {
    vars: HashMap<String, Arc<VarSlot>>,
    rngs: HashMap<String, Arc<Mutex<u64>>>,
}

impl Resources for Mutex<State> {
    fn var(&self, name: &str, ty: &TensorType) -> Resource {
        let mut s = self.lock().unwrap_or_else(|e| e.into_inner());
        let slot = s
            .vars
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(VarSlot { name: name.to_string(), ty: ty.clone(), value: Mutex::new(None) }));
        Resource::Var(slot.clone())
    }
    fn rng(&self, name: &str) -> Resource {
        let mut s = self.lock().unwrap_or_else(|e| e.into_inner());
        Resource::Rng(s.rngs.entry(name.to_string()).or_default().clone())
    }
}

/// Runs a graph. Cheap to share between threads (`&self` everywhere).
pub struct Session {
    graph: Graph,
    threads: usize,
    pool: Option<rayon::ThreadPool>,
    state: Mutex<State>,
    cache: Mutex<HashMap<RunKey, Arc<Prepared>>>,
}

impl Session {
    /// A session with default options (one thread per core).
    pub fn new(graph: &Graph) -> Result<Session> {
        Session::with_options(graph, SessionOptions::default())
    }

    pub fn with_options(graph: &Graph, opts: SessionOptions) -> Result<Session> {
        let threads = opts.threads.max(1);
        let pool = if threads > 1 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .thread_name(|i| format!("flowlab-exec-{i}"))
                    .build()
                    .map_err(|e| EngineError::Device(format!("cpu thread pool: {e}")))?,
            )
        } else {
            None
        };
        Ok(Session { graph: graph.clone(), threads, pool, state: Mutex::new(State::default()), cache: Mutex::new(HashMap::new()) })
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
        let prepared = self.prepared(key)?;
        let mut values = Vec::with_capacity(feeds.len());
        for ((_, t), (name, ty)) in feeds.iter().zip(&prepared.feed_types) {
            if t.dtype() != ty.dtype || !ty.shape.accepts(t.shape()) {
                return Err(EngineError::FeedMismatch {
                    node: name.clone(),
                    expected: ty.to_string(),
                    got: format!("{}{}", t.dtype(), t.shape()),
                });
            }
            values.push((*t).clone());
        }
        prepared.run(&values, self.threads, self.pool.as_ref(), trace)
    }

    fn prepared(&self, key: RunKey) -> Result<Arc<Prepared>> {
        if let Some(p) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(p.clone());
        }
        let p = Arc::new(Prepared::new(&self.graph, &key.0, &key.1, &key.2, &self.state)?);
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(key, p.clone());
        Ok(p)
    }

    /// Number of cached run signatures (each prepared once).
    pub fn num_prepared(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
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

    /// The current value of the variable named `name` (None before it is
    /// initialized or when the session has never touched it).
    pub fn variable_value(&self, name: &str) -> Option<Tensor> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.vars.get(name).and_then(|v| v.lock().clone())
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
            Resource::Var(slot) => *slot.lock() = Some(value),
            Resource::Rng(_) => {}
        }
        Ok(())
    }

    /// Every initialized variable of the graph with its value, in creation order.
    pub fn variable_values(&self) -> Vec<(String, Tensor)> {
        self.graph.variables().iter().filter_map(|v| {
            let n = v.name();
            self.variable_value(&n).map(|t| (n, t))
        }).collect()
    }

    /// Run counters of the seeded random ops, by node name (checkpointed so
    /// that a restored session draws the same numbers next).
    pub fn rng_counters(&self) -> Vec<(String, u64)> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(String, u64)> = s.rngs.iter().map(|(k, c)| (k.clone(), *c.lock().unwrap_or_else(|e| e.into_inner()))).collect();
        v.sort();
        v
    }

    /// Sets the run counter of a random op.
    pub fn set_rng_counter(&self, name: &str, value: u64) {
        if let Resource::Rng(r) = self.state.rng(name) {
            *r.lock().unwrap_or_else(|e| e.into_inner()) = value;
        }
    }
}
