//! The dataflow graph and the builder API that reads like TensorFlow's Python
//! layer: `let h = g.relu(g.matmul(&x, &w)? + &b)?;`.
//!
//! A [`Graph`] is a cheap handle (clone it freely); nodes are appended only,
//! so node ids are a topological order and a prepared executor stays valid
//! while the graph grows. Every node's output types are inferred when it is
//! built, so a shape mismatch is reported at the line that built it.

use crate::graph::{AttrValue, Attrs, NodeInfo};
use crate::tensor::DType;
use crate::error::{EngineError, Result};
use crate::graph::{InferCtx, OpRegistry};
use crate::tensor::{PartialShape, TensorType};
use std::collections::HashMap;
use std::fmt;
use parking_lot::{Mutex, MutexGuard};
use std::sync::Arc;

/// Index of a node in its graph.
pub type NodeId = usize;

/// One node: an op applied to data inputs, after its control inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub name: String,
    pub op: String,
    pub attrs: Attrs,
    /// (producer node, output index) per data input.
    pub inputs: Vec<(NodeId, usize)>,
    /// Nodes that must finish before this one starts.
    pub control_inputs: Vec<NodeId>,
    /// Requested device ("" when unconstrained), e.g. "/job:worker/task:0/cpu:0".
    pub device: String,
    /// Inferred output types.
    pub outputs: Vec<TensorType>,
}

/// The ops that the executor, the partitioner and the graph reader treat
/// apart from the kernels they run: TensorFlow's `Node::IsSend()` and kin,
/// read from its `NodeClass`. The op names behind them are written here
/// only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeClass {
    Placeholder,
    Const,
    Variable,
    Send,
    Recv,
    StackPush,
    StackPop,
    Enter,
    Exit,
    Switch,
    Merge,
    NextIteration,
    LoopCond,
    /// Every other op: a kernel and nothing more.
    Other,
}

impl NodeClass {
    pub(crate) fn of(op: &str) -> NodeClass {
        match op {
            "Placeholder" => NodeClass::Placeholder,
            "Const" => NodeClass::Const,
            "Variable" => NodeClass::Variable,
            "Send" => NodeClass::Send,
            "Recv" => NodeClass::Recv,
            "StackPush" => NodeClass::StackPush,
            "StackPop" => NodeClass::StackPop,
            "Enter" => NodeClass::Enter,
            "Exit" => NodeClass::Exit,
            "Switch" => NodeClass::Switch,
            "Merge" => NodeClass::Merge,
            "NextIteration" => NodeClass::NextIteration,
            "LoopCond" => NodeClass::LoopCond,
            _ => NodeClass::Other,
        }
    }

    /// Routes values between frames and iterations, or keeps them for a
    /// loop's gradient: a graph with one runs on the control-flow executor.
    pub(crate) fn is_control_flow(self) -> bool {
        use NodeClass::*;
        matches!(self, Switch | Merge | Enter | Exit | NextIteration | StackPush | StackPop)
    }
}

impl Node {
    pub(crate) fn class(&self) -> NodeClass {
        NodeClass::of(&self.op)
    }
}

#[derive(Default)]
pub(crate) struct GraphData {
    pub nodes: Vec<Node>,
    pub by_name: HashMap<String, NodeId>,
    /// Assign nodes that give variables their initial values.
    pub initializers: Vec<NodeId>,
    /// Variable nodes, in creation order.
    pub variables: Vec<NodeId>,
    name_counts: HashMap<String, usize>,
    /// Control-flow contexts (a `cond` branch or a `while_loop` body) the
    /// builder opened, by index.
    pub ctxs: Vec<CtxData>,
    /// The context whose values a node's outputs are (absent: the root).
    pub ctx_of: HashMap<NodeId, usize>,
    /// The while loops built so far, by frame name (for their gradient).
    pub loops: HashMap<String, LoopInfo>,
}

/// What kind of control-flow context a builder handle adds nodes to.
#[derive(Clone, Debug)]
pub(crate) enum CtxKind {
    /// One branch of a `cond`: outer values enter through `Switch(x, pred)[branch]`.
    Cond { pred: (NodeId, usize), branch: usize },
    /// A while loop's frame: outer values enter through a constant `Enter`.
    Loop { frame: String, parallel: i64 },
}

/// One control-flow context of the builder (TensorFlow's CondContext /
/// WhileContext).
#[derive(Clone, Debug)]
pub(crate) struct CtxData {
    pub parent: Option<usize>,
    pub kind: CtxKind,
    /// Nodes without inputs built in the context get a control edge from
    /// the pivot, so they run (or are dead) with the context.
    pub pivot: Option<NodeId>,
    /// Outer tensor -> the tensor standing for it inside the context.
    pub captured: HashMap<(NodeId, usize), (NodeId, usize)>,
    /// (outer tensor, Enter node) of each captured loop invariant, in order.
    pub invariants: Vec<((NodeId, usize), NodeId)>,
}

/// The structure of one while loop, kept for its gradient.
#[derive(Clone, Debug)]
pub(crate) struct LoopInfo {
    pub ctx: usize,
    /// Per loop variable, the internal iteration counter first.
    pub enters: Vec<NodeId>,
    pub body_inputs: Vec<NodeId>,
    pub body_outputs: Vec<(NodeId, usize)>,
    pub exits: Vec<NodeId>,
    /// Node ids built by the body function: `[start, end)`.
    pub body_range: (NodeId, NodeId),
    /// Every node of the loop lies in `[first, last]`.
    pub first: NodeId,
    pub last: NodeId,
}

impl GraphData {
    fn unique_name(&mut self, base: &str) -> String {
        if !self.by_name.contains_key(base) {
            self.name_counts.entry(base.to_string()).or_insert(0);
            return base.to_string();
        }
        let c = self.name_counts.entry(base.to_string()).or_insert(0);
        loop {
            *c += 1;
            let n = format!("{base}_{c}");
            if !self.by_name.contains_key(&n) {
                return n;
            }
        }
    }
}

/// What a graph handle adds to every node it builds.
#[derive(Default, Clone)]
struct BuildScope {
    prefix: String,
    device: String,
    control: Vec<NodeId>,
    /// The control-flow context nodes are built in (None: the root).
    ctx: Option<usize>,
}

/// A handle on a dataflow graph. Clones share the graph; [`Graph::scope`],
/// [`Graph::device`] and [`Graph::control_dependencies`] return handles that
/// add a name prefix, a device or control inputs to the nodes they build.
#[derive(Clone)]
pub struct Graph {
    data: Arc<Mutex<GraphData>>,
    scope: Arc<BuildScope>,
    /// Arity and shape inference by op name (see `graph/mod.rs`).
    ops: &'static dyn OpRegistry,
}

impl fmt::Debug for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Graph({} nodes)", self.num_nodes())
    }
}

/// One output of one node: what an op consumes and a session fetches.
#[derive(Clone)]
pub struct Output {
    pub(crate) graph: Graph,
    pub(crate) node: NodeId,
    pub(crate) index: usize,
}

impl fmt::Debug for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name(), self.index)
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.name(), self.index)
    }
}

impl Output {
    /// The producing node's name.
    pub fn name(&self) -> String {
        self.graph.lock().nodes[self.node].name.clone()
    }
    /// The producing node's op.
    pub fn op(&self) -> String {
        self.graph.lock().nodes[self.node].op.clone()
    }
    pub fn node_id(&self) -> NodeId {
        self.node
    }
    pub fn index(&self) -> usize {
        self.index
    }
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    /// The static type; a node without outputs (NoOp) reports an empty f32.
    pub fn tensor_type(&self) -> TensorType {
        let d = self.graph.lock();
        d.nodes[self.node]
            .outputs
            .get(self.index)
            .cloned()
            .unwrap_or(TensorType { dtype: DType::F32, shape: PartialShape::scalar() })
    }
    pub fn dtype(&self) -> DType {
        self.tensor_type().dtype
    }
    pub fn shape(&self) -> PartialShape {
        self.tensor_type().shape
    }
}

/// Anything that can stand for an op input: an [`Output`], a reference to
/// one, or a `Result` of one (so errors reach the single `?` at the end).
pub trait IntoOutput {
    fn into_output(self) -> Result<Output>;
}
impl IntoOutput for Output {
    fn into_output(self) -> Result<Output> {
        Ok(self)
    }
}
impl IntoOutput for &Output {
    fn into_output(self) -> Result<Output> {
        Ok(self.clone())
    }
}
impl IntoOutput for Result<Output> {
    fn into_output(self) -> Result<Output> {
        self
    }
}

impl Graph {
    /// An empty graph whose nodes are checked against `ops`. `Graph::new`
    /// (in `ops`) binds the crate's op registry.
    pub(crate) fn with_registry(ops: &'static dyn OpRegistry) -> Graph {
        Graph { data: Arc::new(Mutex::new(GraphData::default())), scope: Arc::new(BuildScope::default()), ops }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, GraphData> {
        self.data.lock()
    }

    /// Whether two handles refer to the same graph.
    pub fn same_graph(&self, o: &Graph) -> bool {
        Arc::ptr_eq(&self.data, &o.data)
    }

    pub fn num_nodes(&self) -> usize {
        self.lock().nodes.len()
    }

    /// A copy of one node.
    pub fn node(&self, id: NodeId) -> Option<Node> {
        self.lock().nodes.get(id).cloned()
    }

    /// Copies of all nodes, in id (topological) order.
    pub fn nodes(&self) -> Vec<Node> {
        self.lock().nodes.clone()
    }

    /// The output `index` of the node called `name`.
    pub fn output_by_name(&self, name: &str, index: usize) -> Result<Output> {
        let d = self.lock();
        let id = *d.by_name.get(name).ok_or_else(|| EngineError::UnknownNode(name.to_string()))?;
        let n = &d.nodes[id];
        if index >= n.outputs.len() && !(index == 0 && n.outputs.is_empty()) {
            return Err(EngineError::BadOutputIndex {
                node: name.into(),
                op: n.op.clone(),
                index,
                outputs: n.outputs.len(),
            });
        }
        Ok(Output { graph: self.clone(), node: id, index })
    }

    /// A handle whose nodes are named `prefix/...` (nested scopes join with '/').
    /// This handle with `suffix` (a trailing scope, without its '/') taken
    /// off its name prefix; `None` when the prefix does not end with it.
    pub(crate) fn without_scope_suffix(&self, suffix: &str) -> Option<Graph> {
        let p = self.scope.prefix.strip_suffix('/')?.strip_suffix(suffix)?;
        let mut s = (*self.scope).clone();
        s.prefix = p.to_string();
        Some(Graph { data: self.data.clone(), scope: Arc::new(s), ops: self.ops })
    }

    /// The full name a node named `name` built through this handle gets.
    pub(crate) fn scoped_name(&self, name: &str) -> String {
        format!("{}{}", self.scope.prefix, name)
    }

    pub fn scope(&self, prefix: &str) -> Graph {
        let mut s = (*self.scope).clone();
        s.prefix = format!("{}{}/", s.prefix, prefix);
        Graph { data: self.data.clone(), scope: Arc::new(s), ops: self.ops }
    }

    /// A handle whose nodes request `device` (e.g. "/cpu:0").
    pub fn device(&self, device: &str) -> Graph {
        let mut s = (*self.scope).clone();
        s.device = device.to_string();
        Graph { data: self.data.clone(), scope: Arc::new(s), ops: self.ops }
    }

    /// A handle whose nodes request the device `o`'s node requests (this
    /// handle's own request when it has none): how an optimizer keeps a
    /// variable's slots and update, or a restore op, with the variable when
    /// variables are spread over several devices (TensorFlow's
    /// `colocate_with`, by device request).
    pub fn on_device_of(&self, o: &Output) -> Graph {
        let dev = self.lock().nodes.get(o.node).map(|n| n.device.clone()).unwrap_or_default();
        if dev.is_empty() || dev == self.scope.device { self.clone() } else { self.device(&dev) }
    }

    /// A handle whose nodes run only after `deps` have.
    pub fn control_dependencies(&self, deps: &[&Output]) -> Result<Graph> {
        let mut s = (*self.scope).clone();
        for d in deps {
            if !d.graph.same_graph(self) {
                return Err(EngineError::ForeignGraph { node: "<control dependency>".into(), input: d.to_string() });
            }
            if !s.control.contains(&d.node) {
                s.control.push(d.node);
            }
        }
        Ok(Graph { data: self.data.clone(), scope: Arc::new(s), ops: self.ops })
    }

    /// A general node builder, for ops without a convenience method.
    pub fn op(&self, op: &str) -> OpBuilder {
        OpBuilder {
            graph: self.clone(),
            op: op.to_string(),
            name: None,
            inputs: Vec::new(),
            control: Vec::new(),
            attrs: Attrs::new(),
            err: None,
        }
    }

    /// Appends a node after checking its op, arity and input types; returns its id.
    pub(crate) fn add_node(
        &self,
        op: &str,
        name: Option<&str>,
        inputs: Vec<Output>,
        control: Vec<NodeId>,
        attrs: Attrs,
    ) -> Result<NodeId> {
        let mut d = self.lock();
        let base = format!("{}{}", self.scope.prefix, name.unwrap_or(op));
        let node_name = if name.is_some() {
            if d.by_name.contains_key(&base) {
                return Err(EngineError::DuplicateName(base));
            }
            base
        } else {
            d.unique_name(&base)
        };
        let mut edges = Vec::with_capacity(inputs.len());
        for i in &inputs {
            if !i.graph.same_graph(self) {
                return Err(EngineError::ForeignGraph { node: node_name, input: format!("#{}:{}", i.node, i.index) });
            }
            edges.push((i.node, i.index));
        }
        let mut control_inputs = self.scope.control.clone();
        for c in control {
            if !control_inputs.contains(&c) {
                control_inputs.push(c);
            }
        }
        self.add_locked(&mut d, self.scope.ctx, true, op, node_name, edges, control_inputs, attrs)
    }

    /// Appends a node named `node_name` in context `ctx`; with `capture`,
    /// inputs from enclosing contexts enter through a Switch or Enter and an
    /// input-less node gets a control edge from the context's pivot.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add_locked(
        &self,
        d: &mut GraphData,
        ctx: Option<usize>,
        capture: bool,
        op: &str,
        node_name: String,
        mut edges: Vec<(NodeId, usize)>,
        mut control_inputs: Vec<NodeId>,
        attrs: Attrs,
    ) -> Result<NodeId> {
        if !self.ops.has_op(op) {
            return Err(EngineError::UnknownOp { node: node_name, op: op.to_string() });
        }
        // An op on a value of an inner context (a loop body's value combined
        // with an outer tensor through the outer handle) is built in the
        // innermost context of its inputs.
        let mut ctx = ctx;
        if capture {
            for &(n, _) in &edges {
                if let Some(ic) = d.ctx_of.get(&n).copied()
                    && Self::encloses(d, ctx, ic)
                {
                    ctx = Some(ic);
                }
            }
        }
        if let (Some(c), true) = (ctx, capture) {
            for e in edges.iter_mut() {
                *e = self.capture(d, c, *e)?;
            }
            if edges.is_empty()
                && !control_inputs.iter().any(|n| d.ctx_of.get(n) == Some(&c))
                && let Some(p) = d.ctxs[c].pivot
            {
                control_inputs.push(p);
            }
        }
        let mut in_types = Vec::with_capacity(edges.len());
        for &(node, index) in &edges {
            let n = d.nodes.get(node).ok_or_else(|| EngineError::UnknownNode(format!("#{node}")))?;
            let t = n.outputs.get(index).cloned().ok_or_else(|| EngineError::BadOutputIndex {
                node: n.name.clone(),
                op: n.op.clone(),
                index,
                outputs: n.outputs.len(),
            })?;
            in_types.push(t);
        }
        let info = NodeInfo { name: &node_name, op, attrs: &attrs };
        let outputs = self.ops.infer(op, &InferCtx { n: info, inputs: &in_types, graph: d })?;
        // Shapes come from attributes and files: refuse any output no
        // allocation could hold here, so no kernel ever sees a size that
        // overflows (and wraps) in its index arithmetic.
        if let Some((i, t)) = outputs.iter().enumerate().find(|(_, t)| t.shape.checked_known_bytes(t.dtype).is_none()) {
            return Err(EngineError::Shape {
                node: node_name,
                op: op.to_string(),
                detail: format!("output {i} of type {t} is larger than this machine can address"),
            });
        }
        let id = d.nodes.len();
        d.by_name.insert(node_name.clone(), id);
        d.nodes.push(Node {
            name: node_name,
            op: op.to_string(),
            attrs,
            inputs: edges,
            control_inputs,
            device: self.scope.device.clone(),
            outputs,
        });
        if let Some(c) = ctx {
            d.ctx_of.insert(id, c);
        }
        Ok(id)
    }

    /// Whether context `a` (None: the root) strictly encloses context `c`.
    fn encloses(d: &GraphData, a: Option<usize>, c: usize) -> bool {
        let mut p = d.ctxs[c].parent;
        loop {
            if p == a {
                return true;
            }
            match p {
                Some(q) => p = d.ctxs[q].parent,
                None => return false,
            }
        }
    }

    /// The tensor standing for `x` inside context `c`: `x` itself when it
    /// is already a value of `c` (or of a context inside it), else a Switch
    /// (cond branch) or constant Enter (loop) made once per tensor.
    pub(crate) fn capture(&self, d: &mut GraphData, c: usize, x: (NodeId, usize)) -> Result<(NodeId, usize)> {
        let xc = d.ctx_of.get(&x.0).copied();
        if xc == Some(c) || !Self::encloses(d, xc, c) {
            return Ok(x);
        }
        if let Some(&v) = d.ctxs[c].captured.get(&x) {
            return Ok(v);
        }
        let parent = d.ctxs[c].parent;
        let xp = match parent {
            Some(p) if xc != parent => self.capture(d, p, x)?,
            _ => x,
        };
        let base = format!("{}/capture", d.nodes[x.0].name);
        let v = match d.ctxs[c].kind.clone() {
            CtxKind::Cond { pred, branch } => {
                let name = d.unique_name(&format!("{base}_switch"));
                (self.add_locked(d, parent, false, "Switch", name, vec![xp, pred], Vec::new(), Attrs::new())?, branch)
            }
            CtxKind::Loop { frame, parallel } => {
                let name = d.unique_name(&format!("{base}_enter"));
                let mut a = Attrs::new();
                a.insert("frame_name".into(), AttrValue::Str(frame));
                a.insert("is_constant".into(), AttrValue::Bool(true));
                a.insert("parallel_iterations".into(), AttrValue::Int(parallel));
                let id = self.add_locked(d, parent, false, "Enter", name, vec![xp], Vec::new(), a)?;
                d.ctxs[c].invariants.push((x, id));
                (id, 0)
            }
        };
        d.ctx_of.insert(v.0, c);
        d.ctxs[c].captured.insert(x, v);
        Ok(v)
    }

    /// The control-flow context node `id` was built in, if any.
    pub(crate) fn ctx_of(&self, id: NodeId) -> Option<usize> {
        self.lock().ctx_of.get(&id).copied()
    }

    /// The context this handle builds in (None: the root).
    pub(crate) fn ctx(&self) -> Option<usize> {
        self.scope.ctx
    }

    /// A handle that builds in context `ctx`.
    pub(crate) fn in_ctx(&self, ctx: Option<usize>) -> Graph {
        let mut s = (*self.scope).clone();
        s.ctx = ctx;
        Graph { data: self.data.clone(), scope: Arc::new(s), ops: self.ops }
    }

    /// Appends a node in context `ctx` without capturing its inputs (the
    /// builders of the control-flow structure itself use this).
    pub(crate) fn add_raw(&self, ctx: Option<usize>, op: &str, base: &str, edges: Vec<(NodeId, usize)>, control: Vec<NodeId>, attrs: Attrs) -> Result<NodeId> {
        let mut d = self.lock();
        let name = d.unique_name(&format!("{}{}", self.scope.prefix, base));
        self.add_locked(&mut d, ctx, false, op, name, edges, control, attrs)
    }

    /// Opens a new control-flow context inside `parent`.
    pub(crate) fn new_ctx(&self, parent: Option<usize>, kind: CtxKind) -> usize {
        let mut d = self.lock();
        d.ctxs.push(CtxData { parent, kind, pivot: None, captured: HashMap::new(), invariants: Vec::new() });
        d.ctxs.len() - 1
    }

    /// The scope's name prefix ("" or "a/b/").
    pub(crate) fn prefix(&self) -> &str {
        &self.scope.prefix
    }

    /// Adds the back edge NextIteration -> Merge of a while loop (the one
    /// edge that points to an older node).
    pub(crate) fn add_back_edge(&self, merge: NodeId, next: (NodeId, usize)) {
        self.lock().nodes[merge].inputs.push(next);
    }

    /// Appends a node and returns its first output.
    pub(crate) fn build1(&self, op: &str, inputs: Vec<Output>, attrs: Attrs) -> Result<Output> {
        let id = self.add_node(op, None, inputs, Vec::new(), attrs)?;
        Ok(Output { graph: self.clone(), node: id, index: 0 })
    }

    pub(crate) fn out(&self, node: NodeId, index: usize) -> Output {
        Output { graph: self.clone(), node, index }
    }

    pub(crate) fn register_variable(&self, var: NodeId, init: NodeId) {
        let mut d = self.lock();
        d.variables.push(var);
        d.initializers.push(init);
    }

    /// The Variable nodes, in creation order.
    pub fn variables(&self) -> Vec<Output> {
        let ids = self.lock().variables.clone();
        ids.into_iter().map(|i| self.out(i, 0)).collect()
    }

    /// The initializer assignments of all variables built so far.
    pub fn initializers(&self) -> Vec<Output> {
        let ids = self.lock().initializers.clone();
        ids.into_iter().map(|i| self.out(i, 0)).collect()
    }
}

/// Builds one node of any registered op.
pub struct OpBuilder {
    graph: Graph,
    op: String,
    name: Option<String>,
    inputs: Vec<Output>,
    control: Vec<NodeId>,
    attrs: Attrs,
    err: Option<EngineError>,
}

impl OpBuilder {
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }
    pub fn input(mut self, x: impl IntoOutput) -> Self {
        match x.into_output() {
            Ok(o) => self.inputs.push(o),
            Err(e) => {
                if self.err.is_none() {
                    self.err = Some(e)
                }
            }
        }
        self
    }
    pub fn control_input(mut self, x: &Output) -> Self {
        self.control.push(x.node);
        self
    }
    pub fn attr(mut self, key: &str, v: AttrValue) -> Self {
        self.attrs.insert(key.to_string(), v);
        self
    }
    /// Builds the node; returns all its outputs (none for NoOp-like ops).
    pub fn build_all(self) -> Result<Vec<Output>> {
        if let Some(e) = self.err {
            return Err(e);
        }
        let id = self.graph.add_node(&self.op, self.name.as_deref(), self.inputs, self.control, self.attrs)?;
        let n = self.graph.lock().nodes[id].outputs.len();
        Ok((0..n).map(|i| self.graph.out(id, i)).collect())
    }
    /// Builds the node and returns its output 0 (the node handle for ops
    /// without outputs, usable as a run target or control input).
    pub fn build(self) -> Result<Output> {
        if let Some(e) = self.err {
            return Err(e);
        }
        let g = self.graph.clone();
        let id = g.add_node(&self.op, self.name.as_deref(), self.inputs, self.control, self.attrs)?;
        Ok(g.out(id, 0))
    }
}
