//! ONNX operators as engine ops, one family per file: elementwise math,
//! matrix products, convolution / pooling / normalization, shape and index
//! ops, and the LSTM. [`CONVERTERS`] is the one list of what is imported;
//! the pre-flight check reads it, so nothing is skipped silently.

mod elementwise;
mod matmul;
mod nn;
mod rnn;
mod shape;

use super::convert::{Importer, Node, clean};
use super::proto::GraphProto;
use flowlab_engine::Graph;

pub(crate) type Convert = fn(&mut Importer, &Node, &Graph) -> Result<(), String>;

/// Every operator of the default domain the importer takes.
const CONVERTERS: &[(&str, Convert)] = &[
    ("Abs", elementwise::unary),
    ("Add", elementwise::binary),
    ("Sub", elementwise::binary),
    ("Mul", elementwise::binary),
    ("Div", elementwise::binary),
    ("Pow", elementwise::binary),
    ("Max", elementwise::binary),
    ("Min", elementwise::binary),
    ("Mod", elementwise::binary),
    ("Equal", elementwise::binary),
    ("Less", elementwise::binary),
    ("Greater", elementwise::binary),
    ("Relu", elementwise::unary),
    ("Sigmoid", elementwise::unary),
    ("Tanh", elementwise::unary),
    ("Erf", elementwise::unary),
    ("Sqrt", elementwise::unary),
    ("Exp", elementwise::unary),
    ("Log", elementwise::unary),
    ("Neg", elementwise::unary),
    ("Reciprocal", elementwise::unary),
    ("Identity", elementwise::identity),
    ("Dropout", elementwise::identity),
    ("Cast", elementwise::cast),
    ("Where", elementwise::where_),
    ("Trilu", elementwise::trilu),
    ("Softmax", elementwise::softmax),
    ("Gemm", matmul::gemm),
    ("MatMul", matmul::matmul),
    ("Conv", nn::conv),
    ("MaxPool", nn::pool),
    ("AveragePool", nn::pool),
    ("GlobalAveragePool", nn::global_pool),
    ("GlobalMaxPool", nn::global_pool),
    ("BatchNormalization", nn::batch_norm),
    ("LayerNormalization", nn::layer_norm),
    ("ReduceMean", nn::reduce),
    ("ReduceSum", nn::reduce),
    ("ReduceMax", nn::reduce),
    ("Constant", shape::constant),
    ("ConstantOfShape", shape::constant_of_shape),
    ("Shape", shape::shape),
    ("Reshape", shape::reshape),
    ("Flatten", shape::flatten),
    ("Squeeze", shape::squeeze),
    ("Unsqueeze", shape::unsqueeze),
    ("Transpose", shape::transpose),
    ("Concat", shape::concat),
    ("Split", shape::split),
    ("Slice", shape::slice),
    ("Gather", shape::gather),
    ("Expand", shape::expand),
    ("Range", shape::range),
    ("LSTM", rnn::lstm),
    ("GRU", rnn::gru),
    ("RNN", rnn::rnn),
];

/// Operators of `graph` the importer lacks, each with the first node using
/// it, in the file's order; another domain's operators are named with it.
pub(crate) fn unsupported(graph: &GraphProto) -> Vec<(String, String)> {
    let mut missing: Vec<(String, String)> = Vec::new();
    for (i, n) in graph.node.iter().enumerate() {
        let op = match n.domain() {
            "" | "ai.onnx" => n.op_type().to_string(),
            d => format!("{d}.{}", n.op_type()),
        };
        let known = matches!(n.domain(), "" | "ai.onnx") && CONVERTERS.iter().any(|(o, _)| *o == op);
        if !known && !missing.iter().any(|(o, _)| *o == op) {
            let name = n.name.clone().filter(|s| !s.is_empty()).or_else(|| n.output.first().cloned()).unwrap_or_else(|| format!("node {i}"));
            missing.push((op, name));
        }
    }
    missing
}

pub(crate) fn convert(imp: &mut Importer, n: &Node) -> Result<(), crate::ModelError> {
    let Some((_, f)) = CONVERTERS.iter().find(|(o, _)| *o == n.op) else {
        return Err(n.err("operator not imported"));
    };
    let g = imp.g.scope(&clean(&n.name));
    f(imp, n, &g).map_err(|e| n.err(e))
}

/// Engine results as the importer's string errors.
pub(crate) trait Str<T> {
    fn s(self) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> Str<T> for Result<T, E> {
    fn s(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// An axis attribute or input counted from the end when negative.
pub(crate) fn axis(a: i64, rank: usize) -> Result<usize, String> {
    super::lit::norm_index(a, rank).ok_or_else(|| format!("axis {a} is outside rank {rank}"))
}

/// The integer values of a constant input (axes, shapes, pads).
pub(crate) fn const_ints(imp: &Importer, n: &Node, i: usize, what: &str) -> Result<Option<Vec<i64>>, String> {
    match n.input(i) {
        None => Ok(None),
        Some(name) => match imp.lit(name) {
            Some(l) => Ok(Some(l.as_ints())),
            None => Err(format!("{what} (input {i}, '{name}') must be a constant the importer can compute, not a value of the running graph")),
        },
    }
}

/// The shape's elements, as engine reshape dims.
pub(crate) fn dims_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}
