//! Layer 4, the dataflow graph: nodes, typed edges, attributes, the builder
//! API and the versioned JSON file format.
//!
//! Contract. A graph is append-only, so node ids are a topological order.
//! Every node's output types are inferred when it is built. The graph knows
//! ops only through the [`OpRegistry`] interface (TensorFlow's
//! `OpRegistryInterface`): arity and shape inference by op name. The one
//! registry in this crate lives in `ops`, which also provides `Graph::new`
//! (a graph bound to that registry), so this layer never imports `ops`.

mod attr;
#[allow(clippy::module_inception)]
mod graph;
pub(crate) mod json;

pub use attr::{AttrValue, Attrs, TensorValue};
pub(crate) use attr::{NodeInfo, norm_axis};
pub use graph::{Graph, IntoOutput, Node, NodeId, OpBuilder, Output};
pub(crate) use graph::NodeClass;
pub(crate) use graph::{CtxKind, GraphData, LoopInfo};

use crate::error::Result;
use crate::tensor::TensorType;

/// Shape inference's view of one node being built: its attributes, its
/// input types and the graph so far (for ops that read a constant input).
pub(crate) struct InferCtx<'a> {
    pub n: NodeInfo<'a>,
    pub inputs: &'a [TensorType],
    pub graph: &'a GraphData,
}

/// What building a node needs to know about its op.
pub(crate) trait OpRegistry: Send + Sync {
    /// Whether an op of this name is registered.
    fn has_op(&self, op: &str) -> bool;
    /// Checks the input count and infers the output types of a registered
    /// op (an unknown op is an error naming the node).
    fn infer(&self, op: &str, ctx: &InferCtx) -> Result<Vec<TensorType>>;
}
