//! The import itself: ONNX values by name, each held as a folded constant
//! ([`Lit`]), a weight not yet turned into a variable, or engine outputs in
//! ONNX layout and / or NHWC; and the walk over the file's nodes.

use super::lit::Lit;
use super::proto::{GraphProto, NodeProto, TensorProto, attribute_proto::AttributeType, tensor_shape_proto::dimension, type_proto};
use super::{ImportOptions, ModelInput, OnnxModel, ops, tensor};
use crate::ModelError;
use flowlab_engine::{DType, Graph, Output, Tensor};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One ONNX value as the import holds it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Val {
    pub lit: Option<Lit>,
    /// A float initializer, until something reads it as a tensor.
    pub weight: Option<Tensor>,
    /// The value in ONNX's layout.
    pub onnx: Option<Output>,
    /// A rank-4 NCHW value as NHWC (`onnx` transposed by [0, 2, 3, 1]).
    pub nhwc: Option<Output>,
    /// The ONNX-layout shape.
    pub shape: Vec<usize>,
    pub dtype: Option<DType>,
}

pub(crate) struct Importer {
    pub g: Graph,
    vals: HashMap<String, Val>,
    /// How many node inputs read each value (a weight read by one
    /// convolution is laid out for it once, at import).
    readers: HashMap<String, usize>,
    /// Trainable variables (the file's weights) and, apart, the running
    /// statistics no optimizer updates.
    variables: Vec<Output>,
    states: Vec<Output>,
    pub training: bool,
    pub updates: Vec<Output>,
}

/// The node being converted, with its attributes.
pub(crate) struct Node<'n> {
    pub p: &'n NodeProto,
    pub name: String,
    pub op: &'n str,
    file: &'n str,
}

impl<'n> Node<'n> {
    pub fn err(&self, detail: impl Into<String>) -> ModelError {
        ModelError::OnnxNode { file: self.file.to_string(), node: self.name.clone(), op: self.op.to_string(), detail: detail.into() }
    }
    /// Input `i`'s value name; absent or empty (ONNX's "not given") is `None`.
    pub fn input(&self, i: usize) -> Option<&'n str> {
        self.p.input.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }
    pub fn need(&self, i: usize) -> Result<&'n str, String> {
        self.input(i).ok_or_else(|| format!("input {i} is required"))
    }
    pub fn output(&self, i: usize) -> Option<&'n str> {
        self.p.output.get(i).map(String::as_str).filter(|s| !s.is_empty())
    }
    fn attr(&self, key: &str) -> Option<&'n super::proto::AttributeProto> {
        self.p.attribute.iter().find(|a| a.name() == key)
    }
    pub fn int(&self, key: &str, default: i64) -> i64 {
        self.attr(key).and_then(|a| a.i).unwrap_or(default)
    }
    pub fn float(&self, key: &str, default: f32) -> f32 {
        self.attr(key).and_then(|a| a.f).unwrap_or(default)
    }
    pub fn ints(&self, key: &str) -> Option<&'n [i64]> {
        self.attr(key).filter(|a| a.r#type() == AttributeType::Ints || !a.ints.is_empty()).map(|a| a.ints.as_slice())
    }
    pub fn string(&self, key: &str) -> Option<String> {
        self.attr(key).and_then(|a| a.s.as_ref()).map(|s| String::from_utf8_lossy(s).into_owned())
    }
    pub fn strings(&self, key: &str) -> Vec<String> {
        self.attr(key).map(|a| a.strings.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()).unwrap_or_default()
    }
    pub fn tensor(&self, key: &str) -> Option<&'n TensorProto> {
        self.attr(key).and_then(|a| a.t.as_ref())
    }
    /// Refuses an attribute the importer does not model when it is set to
    /// anything but its default.
    pub fn only_default(&self, key: &str, default: i64) -> Result<(), String> {
        match self.attr(key).and_then(|a| a.i) {
            Some(v) if v != default => Err(format!("attribute {key} = {v} is not imported (only {default})")),
            _ => Ok(()),
        }
    }
}

/// Engine node names from ONNX ones: PyTorch's start with '/' and may hold
/// ':', which the engine uses for output indices.
pub(crate) fn clean(name: &str) -> String {
    let s: String = name.trim_start_matches('/').chars().map(|c| if c == ':' { '_' } else { c }).collect();
    if s.is_empty() { "node".into() } else { s }
}

impl Importer {
    pub fn run(graph: &GraphProto, opset: i64, dir: &Path, file: &str, opts: &ImportOptions) -> Result<OnnxModel, ModelError> {
        let err = |detail: String| ModelError::Onnx { file: file.to_string(), detail };
        let mut imp = Importer {
            g: Graph::new(),
            vals: HashMap::new(),
            readers: HashMap::new(),
            variables: Vec::new(),
            states: Vec::new(),
            training: opts.training,
            updates: Vec::new(),
        };
        for n in &graph.node {
            for i in n.input.iter().filter(|i| !i.is_empty()) {
                *imp.readers.entry(i.clone()).or_default() += 1;
            }
        }
        for t in &graph.initializer {
            let value = tensor::to_tensor(t, dir).map_err(|e| err(format!("initializer '{}': {e}", t.name())))?;
            let mut v = Val { shape: value.shape().dims().to_vec(), dtype: Some(value.dtype()), ..Default::default() };
            if matches!(value.dtype(), DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
                v.weight = Some(value);
            } else {
                v.lit = Some(Lit::from_tensor(&value).map_err(|e| err(format!("initializer '{}': {e}", t.name())))?);
            }
            imp.vals.insert(t.name().to_string(), v);
        }
        let mut inputs = Vec::new();
        let fed: Vec<_> = graph.input.iter().filter(|vi| !imp.vals.contains_key(vi.name())).collect();
        for vi in fed {
            let (dtype, shape) = input_type(vi, opts).map_err(|e| err(format!("input '{}': {e}", vi.name())))?;
            let ph = imp.g.placeholder(&clean(vi.name()), dtype, flowlab_engine::Shape::new(shape.clone())).map_err(|e| err(format!("input '{}': {e}", vi.name())))?;
            imp.vals.insert(vi.name().to_string(), Val { onnx: Some(ph.clone()), shape, dtype: Some(dtype), ..Default::default() });
            inputs.push(ModelInput { name: vi.name().to_string(), placeholder: ph });
        }
        let mut op_counts = BTreeMap::new();
        for (i, p) in graph.node.iter().enumerate() {
            let name = p.name.clone().filter(|n| !n.is_empty()).or_else(|| p.output.first().cloned()).unwrap_or_else(|| format!("node {i}"));
            let node = Node { p, name, op: p.op_type(), file };
            *op_counts.entry(node.op.to_string()).or_insert(0) += 1;
            for input in p.input.iter().filter(|s| !s.is_empty()) {
                if !imp.vals.contains_key(input) {
                    return Err(node.err(format!("input '{input}' is neither a graph input, an initializer nor an earlier node's output")));
                }
            }
            ops::convert(&mut imp, &node)?;
            for (k, o) in p.output.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
                if !imp.vals.contains_key(o) && imp.readers.get(o).is_some_and(|&r| r > 0) {
                    return Err(node.err(format!("output {k} ('{o}') is read by another node but not imported")));
                }
            }
        }
        let mut outputs = Vec::new();
        for vi in &graph.output {
            let o = imp.out(vi.name()).map_err(|e| err(format!("output '{}': {e}", vi.name())))?;
            outputs.push((vi.name().to_string(), o));
        }
        let elements = |vs: &[Output]| vs.iter().map(|v| v.shape().num_elements().unwrap_or(0) as u64).sum::<u64>();
        Ok(OnnxModel {
            graph: imp.g,
            inputs,
            outputs,
            params: elements(&imp.variables),
            non_trainable_params: elements(&imp.states),
            variables: imp.variables,
            updates: imp.updates,
            opset,
            op_counts,
        })
    }

    pub fn val(&self, name: &str) -> Result<&Val, String> {
        self.vals.get(name).ok_or_else(|| format!("value '{name}' is not defined"))
    }
    pub fn shape(&self, name: &str) -> Result<Vec<usize>, String> {
        Ok(self.val(name)?.shape.clone())
    }
    pub fn dtype(&self, name: &str) -> Result<DType, String> {
        self.val(name)?.dtype.ok_or_else(|| format!("value '{name}' has no known element type"))
    }
    pub fn lit(&self, name: &str) -> Option<&Lit> {
        self.vals.get(name).and_then(|v| v.lit.as_ref())
    }
    pub fn weight(&self, name: &str) -> Option<&Tensor> {
        self.vals.get(name).and_then(|v| v.weight.as_ref())
    }
    /// Whether the value is carried as NHWC (and not yet in ONNX layout).
    pub fn is_nhwc(&self, name: &str) -> bool {
        self.vals.get(name).is_some_and(|v| v.nhwc.is_some() && v.onnx.is_none())
    }
    pub fn readers(&self, name: &str) -> usize {
        self.readers.get(name).copied().unwrap_or(0)
    }

    /// A trainable variable holding `t` (the file's weights).
    pub fn variable(&mut self, name: &str, t: Tensor) -> Result<Output, String> {
        let v = self.new_variable(name, t)?;
        self.variables.push(v.clone());
        Ok(v)
    }

    /// A variable holding `t` that no optimizer trains (running statistics).
    pub fn state(&mut self, name: &str, t: Tensor) -> Result<Output, String> {
        let v = self.new_variable(name, t)?;
        self.states.push(v.clone());
        Ok(v)
    }

    fn new_variable(&self, name: &str, t: Tensor) -> Result<Output, String> {
        let init = self.g.constant(t).map_err(|e| e.to_string())?;
        self.g.variable(&clean(name), &init).map_err(|e| e.to_string())
    }

    /// The value in ONNX layout, made an engine output if it is not one.
    pub fn out(&mut self, name: &str) -> Result<Output, String> {
        let v = self.val(name)?.clone();
        if let Some(o) = v.onnx {
            return Ok(o);
        }
        let o = if let Some(l) = &v.lit {
            self.g.constant(l.to_tensor()?).map_err(|e| e.to_string())?
        } else if let Some(t) = v.weight {
            self.variable(name, t)?
        } else if let Some(x) = &v.nhwc {
            self.g.transpose(x, &[0, 3, 1, 2]).map_err(|e| e.to_string())?
        } else {
            return Err(format!("value '{name}' holds nothing"));
        };
        if let Some(slot) = self.vals.get_mut(name) {
            slot.onnx = Some(o.clone());
            slot.weight = None;
        }
        Ok(o)
    }

    /// A rank-4 NCHW value as NHWC.
    pub fn nhwc(&mut self, name: &str) -> Result<Output, String> {
        let v = self.val(name)?.clone();
        if let Some(x) = v.nhwc {
            return Ok(x);
        }
        if v.shape.len() != 4 {
            return Err(format!("value '{name}' of shape {:?} is not an NCHW image", v.shape));
        }
        let x = match (&v.lit, &v.weight) {
            (Some(l), _) => self.g.constant(l.transpose(&[0, 2, 3, 1]).to_tensor()?).map_err(|e| e.to_string())?,
            _ => {
                let o = self.out(name)?;
                self.g.transpose(&o, &[0, 2, 3, 1]).map_err(|e| e.to_string())?
            }
        };
        if let Some(slot) = self.vals.get_mut(name) {
            slot.nhwc = Some(x.clone());
        }
        Ok(x)
    }

    pub fn set_out(&mut self, name: &str, o: Output) {
        let shape = o.shape().dims().iter().map(|d| d.unwrap_or(0)).collect();
        let dtype = Some(o.dtype());
        self.vals.insert(name.to_string(), Val { onnx: Some(o), shape, dtype, ..Default::default() });
    }
    /// An NHWC output standing for the NCHW value `name`.
    pub fn set_nhwc(&mut self, name: &str, x: Output) {
        let d: Vec<usize> = x.shape().dims().iter().map(|d| d.unwrap_or(0)).collect();
        let shape = if d.len() == 4 { vec![d[0], d[3], d[1], d[2]] } else { d };
        let dtype = Some(x.dtype());
        self.vals.insert(name.to_string(), Val { nhwc: Some(x), shape, dtype, ..Default::default() });
    }
    pub fn set_lit(&mut self, name: &str, l: Lit) {
        let (shape, dtype) = (l.shape.clone(), Some(l.dtype));
        self.vals.insert(name.to_string(), Val { lit: Some(l), shape, dtype, ..Default::default() });
    }
    /// `to` names the same value as `from`. An unread weight stays a
    /// weight of its own: PyTorch's exporter writes parameters of equal
    /// value (every freshly initialized layer's) as Identity of one
    /// initializer, and they train apart as in the source model.
    pub fn alias(&mut self, to: &str, from: &str) -> Result<(), String> {
        let v = self.val(from)?.clone();
        self.vals.insert(to.to_string(), v);
        Ok(())
    }
}

/// An input's element type and shape, symbolic dimensions bound.
fn input_type(vi: &super::proto::ValueInfoProto, opts: &ImportOptions) -> Result<(DType, Vec<usize>), String> {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.as_ref()) else {
        return Err("is not a tensor".into());
    };
    let dtype = tensor::dtype_of(t.elem_type())?;
    let dims = t.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or_default();
    let mut batch_used = false;
    let mut shape = Vec::with_capacity(dims.len());
    for (i, d) in dims.iter().enumerate() {
        let v = match &d.value {
            Some(dimension::Value::DimValue(v)) if *v > 0 => *v as usize,
            Some(dimension::Value::DimParam(p)) if opts.dims.contains_key(p) => opts.dims[p],
            other => {
                let what = match other {
                    Some(dimension::Value::DimParam(p)) => format!("'{p}'"),
                    Some(dimension::Value::DimValue(v)) => format!("{v}"),
                    None => "unnamed".into(),
                };
                match opts.batch {
                    Some(b) if !batch_used && i == 0 => {
                        batch_used = true;
                        b
                    }
                    _ => return Err(format!("dimension {i} ({what}) is symbolic: bind it (--batch B for the first, --dim NAME=N for a named one)")),
                }
            }
        };
        shape.push(v);
    }
    // every later product of its dimensions then fits too
    if flowlab_engine::Shape::new(shape.clone()).checked_bytes(dtype).is_none_or(|b| b > isize::MAX as usize) {
        return Err(format!("shape {shape:?} is larger than this machine can address"));
    }
    Ok((dtype, shape))
}
