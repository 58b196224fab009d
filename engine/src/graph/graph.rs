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
use std::sync::{Arc, Mutex, MutexGuard};

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

#[derive(Default)]
pub(crate) struct GraphData {
    pub nodes: Vec<Node>,
    pub by_name: HashMap<String, NodeId>,
    /// Assign nodes that give variables their initial values.
    pub initializers: Vec<NodeId>,
    /// Variable nodes, in creation order.
    pub variables: Vec<NodeId>,
    name_counts: HashMap<String, usize>,
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
        self.data.lock().unwrap_or_else(|e| e.into_inner())
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
        if !self.ops.has_op(op) {
            return Err(EngineError::UnknownOp { node: node_name, op: op.to_string() });
        }
        let mut in_types = Vec::with_capacity(inputs.len());
        let mut edges = Vec::with_capacity(inputs.len());
        for i in &inputs {
            if !i.graph.same_graph(self) {
                return Err(EngineError::ForeignGraph { node: node_name, input: format!("#{}:{}", i.node, i.index) });
            }
            let n = &d.nodes[i.node];
            let t = n.outputs.get(i.index).cloned().ok_or_else(|| EngineError::BadOutputIndex {
                node: n.name.clone(),
                op: n.op.clone(),
                index: i.index,
                outputs: n.outputs.len(),
            })?;
            in_types.push(t);
            edges.push((i.node, i.index));
        }
        let info = NodeInfo { name: &node_name, op, attrs: &attrs };
        let outputs = self.ops.infer(op, &InferCtx { n: info, inputs: &in_types, graph: &d })?;
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
        let mut control_inputs = self.scope.control.clone();
        for c in control {
            if !control_inputs.contains(&c) {
                control_inputs.push(c);
            }
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
        Ok(id)
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
