//! Node attributes: the static parameters of an op (axes, strides, dtype, a
//! constant's value), typed so a graph file round-trips exactly.

use crate::tensor::DType;
use crate::error::{EngineError, Result};
use crate::tensor::{PartialShape, Shape};
use crate::tensor::{CpuStorage, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One attribute value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttrValue {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Ints(Vec<i64>),
    Strs(Vec<String>),
    DType(DType),
    Shape(PartialShape),
    Tensor(TensorValue),
    DTypes(Vec<DType>),
    Shapes(Vec<PartialShape>),
}

/// A tensor inside an attribute: its little-endian bytes, shared between
/// clones of the graph, and written to a graph file as hex so that every
/// bit survives a JSON round trip. Hex is only the file's form: held in
/// memory it would double a model's weights (an imported ResNet-50's
/// constants) and cost a formatting pass per tensor. The byte count is
/// checked against the shape where the Const node is built or loaded, so
/// a file's wrong count is named there.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorValue {
    pub dtype: DType,
    pub shape: Shape,
    bytes: std::sync::Arc<Vec<u8>>,
}

/// A [`TensorValue`] as a graph file holds it.
#[derive(Serialize, Deserialize)]
struct TensorValueFile {
    dtype: DType,
    shape: Shape,
    hex: String,
}

impl Serialize for TensorValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = String::with_capacity(self.bytes.len() * 2);
        for &b in self.bytes.iter() {
            hex.push(DIGITS[(b >> 4) as usize] as char);
            hex.push(DIGITS[(b & 15) as usize] as char);
        }
        TensorValueFile { dtype: self.dtype, shape: self.shape.clone(), hex }.serialize(s)
    }
}

impl<'de> Deserialize<'de> for TensorValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<TensorValue, D::Error> {
        let f = TensorValueFile::deserialize(d)?;
        let h = f.hex.as_bytes();
        if h.len() % 2 != 0 {
            return Err(serde::de::Error::custom("odd-length hex in tensor attribute"));
        }
        let nib = |c: u8| (c as char).to_digit(16).map(|d| d as u8).ok_or_else(|| serde::de::Error::custom(format!("bad hex digit '{}' in tensor attribute", c as char)));
        let mut bytes = Vec::with_capacity(h.len() / 2);
        for c in h.chunks_exact(2) {
            bytes.push(nib(c[0])? << 4 | nib(c[1])?);
        }
        Ok(TensorValue { dtype: f.dtype, shape: f.shape, bytes: std::sync::Arc::new(bytes) })
    }
}

impl TensorValue {
    /// The value of `t` (copied to the host first when it is on a device).
    pub fn from_tensor(t: &Tensor) -> Result<TensorValue> {
        let host = t.to_host()?;
        Ok(TensorValue { dtype: t.dtype(), shape: t.shape().clone(), bytes: std::sync::Arc::new(host.cpu()?.to_le_bytes()) })
    }

    /// Bytes of data held (checked against the shape by the Const op).
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    pub fn to_tensor(&self) -> Result<Tensor> {
        let s = CpuStorage::from_le_bytes(self.dtype, &self.bytes)
            .ok_or_else(|| EngineError::Tensor(format!("tensor attribute bytes do not decode as {}", self.dtype)))?;
        if s.len() != self.shape.num_elements() {
            return Err(EngineError::Tensor(format!(
                "tensor attribute has {} elements, shape {} needs {}",
                s.len(),
                self.shape,
                self.shape.num_elements()
            )));
        }
        Ok(Tensor::from_storage(s, self.shape.clone()))
    }
}

/// The attributes of one node, sorted by key.
pub type Attrs = BTreeMap<String, AttrValue>;

/// Read access to a node's attributes with errors that name the node.
#[derive(Clone, Copy)]
pub(crate) struct NodeInfo<'a> {
    pub name: &'a str,
    pub op: &'a str,
    pub attrs: &'a Attrs,
}

impl<'a> NodeInfo<'a> {
    pub fn attr_err(&self, key: &str, detail: impl Into<String>) -> EngineError {
        EngineError::Attr { node: self.name.into(), op: self.op.into(), attr: key.into(), detail: detail.into() }
    }
    pub fn shape_err(&self, detail: impl Into<String>) -> EngineError {
        EngineError::Shape { node: self.name.into(), op: self.op.into(), detail: detail.into() }
    }
    pub fn dtype_err(&self, detail: impl Into<String>) -> EngineError {
        EngineError::DType { node: self.name.into(), op: self.op.into(), detail: detail.into() }
    }
    pub fn kernel_err(&self, detail: impl Into<String>) -> EngineError {
        EngineError::Kernel { node: self.name.into(), op: self.op.into(), detail: detail.into() }
    }
    fn get(&self, key: &str) -> Result<&'a AttrValue> {
        self.attrs.get(key).ok_or_else(|| self.attr_err(key, "missing"))
    }
    pub fn int(&self, key: &str) -> Result<i64> {
        match self.get(key)? {
            AttrValue::Int(v) => Ok(*v),
            v => Err(self.attr_err(key, format!("expected an int, found {v:?}"))),
        }
    }
    pub fn float(&self, key: &str) -> Result<f64> {
        match self.get(key)? {
            AttrValue::Float(v) => Ok(*v),
            AttrValue::Int(v) => Ok(*v as f64),
            v => Err(self.attr_err(key, format!("expected a float, found {v:?}"))),
        }
    }
    pub fn bool_or(&self, key: &str, d: bool) -> Result<bool> {
        match self.attrs.get(key) {
            None => Ok(d),
            Some(AttrValue::Bool(v)) => Ok(*v),
            Some(v) => Err(self.attr_err(key, format!("expected a bool, found {v:?}"))),
        }
    }
    pub fn str(&self, key: &str) -> Result<&'a str> {
        match self.get(key)? {
            AttrValue::Str(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a string, found {v:?}"))),
        }
    }
    pub fn strs_or_empty(&self, key: &str) -> Result<&'a [String]> {
        match self.attrs.get(key) {
            None => Ok(&[]),
            Some(AttrValue::Strs(v)) => Ok(v),
            Some(v) => Err(self.attr_err(key, format!("expected a list of strings, found {v:?}"))),
        }
    }
    pub fn ints(&self, key: &str) -> Result<&'a [i64]> {
        match self.get(key)? {
            AttrValue::Ints(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a list of ints, found {v:?}"))),
        }
    }
    pub fn dtype(&self, key: &str) -> Result<DType> {
        match self.get(key)? {
            AttrValue::DType(v) => Ok(*v),
            v => Err(self.attr_err(key, format!("expected a dtype, found {v:?}"))),
        }
    }
    pub fn shape(&self, key: &str) -> Result<&'a PartialShape> {
        match self.get(key)? {
            AttrValue::Shape(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a shape, found {v:?}"))),
        }
    }
    pub fn dtypes(&self, key: &str) -> Result<&'a [DType]> {
        match self.get(key)? {
            AttrValue::DTypes(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a list of dtypes, found {v:?}"))),
        }
    }
    pub fn shapes(&self, key: &str) -> Result<&'a [PartialShape]> {
        match self.get(key)? {
            AttrValue::Shapes(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a list of shapes, found {v:?}"))),
        }
    }
    pub fn tensor(&self, key: &str) -> Result<&'a TensorValue> {
        match self.get(key)? {
            AttrValue::Tensor(v) => Ok(v),
            v => Err(self.attr_err(key, format!("expected a tensor, found {v:?}"))),
        }
    }
    /// An axis attribute normalised against `rank` (negative counts from the end).
    pub fn axis(&self, key: &str, rank: usize) -> Result<usize> {
        let a = self.int(key)?;
        norm_axis(a, rank).ok_or_else(|| self.attr_err(key, format!("axis {a} out of range for rank {rank}")))
    }
    /// A list of axes normalised against `rank`, sorted and unique.
    pub fn axes(&self, key: &str, rank: usize) -> Result<Vec<usize>> {
        let mut out = Vec::new();
        for &a in self.ints(key)? {
            let n = norm_axis(a, rank).ok_or_else(|| self.attr_err(key, format!("axis {a} out of range for rank {rank}")))?;
            if !out.contains(&n) {
                out.push(n);
            }
        }
        out.sort_unstable();
        Ok(out)
    }
}

pub(crate) fn norm_axis(a: i64, rank: usize) -> Option<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if (0..r).contains(&n) { Some(n as usize) } else { None }
}
