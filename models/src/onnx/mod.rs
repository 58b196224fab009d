//! ONNX models imported into the engine: a `.onnx` file (opsets 13 to 21,
//! external data beside it) becomes an engine [`Graph`] whose float
//! initializers are variables, so the same model runs forward, trains,
//! profiles, places and simulates like a zoo graph.
//!
//! Every tensor has static shape once imported: symbolic dimensions are
//! bound at import ([`ImportOptions`]; the first symbolic dimension of an
//! input is the batch), and whatever can be computed from shapes and
//! constants alone is computed here ([`lit`]). Images stay in ONNX's NCHW
//! at the model's edges but are carried as NHWC between the convolutions,
//! pools and elementwise ops that read them (the engine's layout, as
//! TensorFlow's), with a transpose only where an NCHW-shaped op needs one.
//!
//! An operator outside the importer's set is never skipped: the import
//! stops, naming each missing operator with the first node that uses it.

mod convert;
mod lit;
mod ops;
mod tensor;
mod train;

pub use train::{Loss, training};

#[allow(clippy::all, missing_docs)]
mod proto {
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

use crate::ModelError;
use flowlab_engine::{Graph, Output};
use std::collections::BTreeMap;
use std::path::Path;

/// The opsets of the default domain the importer takes (PyTorch 2.x
/// exports 17 and 18 by default; 21 is ONNX 1.16's).
pub const OPSETS: std::ops::RangeInclusive<i64> = 13..=21;

/// How symbolic dimensions are bound.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// The first symbolic dimension of each input (PyTorch's `batch`).
    pub batch: Option<usize>,
    /// Symbolic dimensions by name (`--dim seq=128`), before `batch`.
    pub dims: BTreeMap<String, usize>,
    /// Batch norm as a PyTorch module in `train()` mode runs it: each
    /// batch normalized with its own statistics, the running ones updated
    /// by the train op. Else (evaluation, the exported graph's own
    /// meaning) with the running statistics.
    pub training: bool,
}

/// One input of an imported model, fed as a placeholder.
#[derive(Clone, Debug)]
pub struct ModelInput {
    pub name: String,
    pub placeholder: Output,
}

/// An imported model: its forward graph and how to run it (run
/// `graph.global_variables_initializer()` once to load the file's weights,
/// after any optimizer is added).
#[derive(Clone, Debug)]
pub struct OnnxModel {
    pub graph: Graph,
    pub inputs: Vec<ModelInput>,
    /// The graph's outputs by their ONNX names, in the file's order.
    pub outputs: Vec<(String, Output)>,
    /// The float initializers that became trainable variables.
    pub variables: Vec<Output>,
    /// Elements of those variables.
    pub params: u64,
    /// Running batch-norm statistics (with `training`), updated by `updates`.
    pub non_trainable_params: u64,
    /// Ops a training step runs beside the optimizer (running statistics).
    pub updates: Vec<Output>,
    pub opset: i64,
    /// How many nodes of each ONNX operator the file holds.
    pub op_counts: BTreeMap<String, usize>,
}

/// Imports the model at `path` (external data files are looked up in its
/// folder).
pub fn import(path: &Path, opts: &ImportOptions) -> Result<OnnxModel, ModelError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| ModelError::Onnx { file: file.clone(), detail: format!("cannot read: {e}") })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    import_bytes(&bytes, dir, &file, opts)
}

/// Imports a model from its bytes; `source` names it in errors, `dir` is
/// where its external data lives. Any byte string gives a model or an
/// error, never a panic.
pub fn import_bytes(bytes: &[u8], dir: &Path, source: &str, opts: &ImportOptions) -> Result<OnnxModel, ModelError> {
    use prost::Message;
    let err = |detail: String| ModelError::Onnx { file: source.to_string(), detail };
    let model = proto::ModelProto::decode(bytes).map_err(|e| err(format!("not an ONNX model: {e}")))?;
    let Some(graph) = model.graph.as_ref() else {
        return Err(err("not an ONNX model: it holds no graph".into()));
    };
    let opset = model
        .opset_import
        .iter()
        .find(|o| matches!(o.domain(), "" | "ai.onnx"))
        .map(|o| o.version())
        .ok_or_else(|| err("no opset of the default ONNX domain is imported".into()))?;
    if !OPSETS.contains(&opset) {
        return Err(err(format!("opset {opset} is outside the importer's {}..={} (re-export with opset_version in that range)", OPSETS.start(), OPSETS.end())));
    }
    let missing = ops::unsupported(graph);
    if !missing.is_empty() {
        let list = missing.iter().map(|(op, node)| format!("{op} (node '{node}')")).collect::<Vec<_>>().join(", ");
        return Err(ModelError::OnnxUnsupported { file: source.to_string(), count: missing.len(), list });
    }
    convert::Importer::run(graph, opset, dir, source, opts)
}

#[cfg(test)]
mod tests {
    use super::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, AttributeProto};
    use super::proto::{attribute_proto::AttributeType, tensor_shape_proto::{Dimension, dimension}, type_proto};
    use super::{ImportOptions, import_bytes};
    use prost::Message;

    /// A one-node model over a float input `x` of `shape`.
    fn model(node: NodeProto, shape: &[i64]) -> Vec<u8> {
        let dims = shape.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
        let tensor = type_proto::Tensor { elem_type: Some(1), shape: Some(TensorShapeProto { dim: dims }) };
        let x = ValueInfoProto { name: Some("x".into()), r#type: Some(TypeProto { value: Some(type_proto::Value::TensorType(tensor)), ..Default::default() }), ..Default::default() };
        let y = ValueInfoProto { name: Some("y".into()), ..Default::default() };
        let graph = GraphProto { node: vec![node], input: vec![x], output: vec![y], initializer: Vec::<TensorProto>::new(), ..Default::default() };
        let opset = OperatorSetIdProto { domain: Some(String::new()), version: Some(18) };
        ModelProto { ir_version: Some(8), opset_import: vec![opset], graph: Some(graph), ..Default::default() }.encode_to_vec()
    }

    #[test]
    fn a_transpose_whose_perm_repeats_an_axis_is_refused_naming_the_node() {
        let perm = AttributeProto { name: Some("perm".into()), r#type: Some(AttributeType::Ints as i32), ints: vec![0, 0, 1], ..Default::default() };
        let node = NodeProto { op_type: Some("Transpose".into()), name: Some("t".into()), input: vec!["x".into()], output: vec!["y".into()], attribute: vec![perm], ..Default::default() };
        let e = import_bytes(&model(node, &[2, 3, 4]), std::path::Path::new("."), "m.onnx", &ImportOptions::default()).map(|_| ()).unwrap_err().to_string();
        assert_eq!(e, "m.onnx: node 't' (Transpose): perm [0, 0, 1] is not a permutation of 3 axes");
    }
}
