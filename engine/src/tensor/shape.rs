//! Concrete shapes (of tensors) and partial shapes (of graph edges, where a
//! dimension such as the batch may be unknown until run time).

use crate::tensor::DType;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The dimensions of a tensor, row-major.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Shape(Vec<usize>);

impl Shape {
    pub fn new(dims: Vec<usize>) -> Shape {
        Shape(dims)
    }
    /// The shape of a scalar: no dimensions.
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Product of the dimensions (1 for a scalar), saturating at
    /// `usize::MAX`: a shape that large has no tensor (every constructor
    /// rejects it), so a saturated count never matches a real buffer.
    pub fn num_elements(&self) -> usize {
        self.checked_num_elements().unwrap_or(usize::MAX)
    }
    /// Product of the dimensions, or `None` when it overflows `usize`.
    pub fn checked_num_elements(&self) -> Option<usize> {
        self.0.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }
    /// Bytes a tensor of this shape and `dtype` holds, or `None` when that
    /// overflows or exceeds what one allocation may be (`isize::MAX`).
    pub fn checked_bytes(&self, dtype: DType) -> Option<usize> {
        self.checked_num_elements()?.checked_mul(dtype.size_in_bytes()).filter(|&b| b <= isize::MAX as usize)
    }
    /// Row-major strides in elements.
    pub(crate) fn strides(&self) -> Vec<usize> {
        let mut s = vec![1; self.0.len()];
        for i in (0..self.0.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * self.0[i + 1];
        }
        s
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{d}")?;
        }
        write!(f, "]")
    }
}

impl From<Vec<usize>> for Shape {
    fn from(v: Vec<usize>) -> Shape {
        Shape(v)
    }
}
impl From<&[usize]> for Shape {
    fn from(v: &[usize]) -> Shape {
        Shape(v.to_vec())
    }
}
impl<const N: usize> From<[usize; N]> for Shape {
    fn from(v: [usize; N]) -> Shape {
        Shape(v.to_vec())
    }
}
impl From<&Shape> for Shape {
    fn from(v: &Shape) -> Shape {
        v.clone()
    }
}

/// A shape whose rank is known but some dimensions may not be (`None`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct PartialShape(Vec<Option<usize>>);

impl PartialShape {
    pub fn new(dims: Vec<Option<usize>>) -> PartialShape {
        PartialShape(dims)
    }
    pub fn scalar() -> PartialShape {
        PartialShape(Vec::new())
    }
    /// A rank-`r` shape with every dimension unknown.
    pub fn unknown_dims(r: usize) -> PartialShape {
        PartialShape(vec![None; r])
    }
    pub fn dims(&self) -> &[Option<usize>] {
        &self.0
    }
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// The concrete shape when every dimension is known.
    pub fn to_shape(&self) -> Option<Shape> {
        self.0.iter().copied().collect::<Option<Vec<usize>>>().map(Shape)
    }
    /// Product of the dimensions when all are known.
    pub fn num_elements(&self) -> Option<usize> {
        self.to_shape().and_then(|s| s.checked_num_elements())
    }
    /// Bytes of a `dtype` tensor of this shape counting only the known
    /// dimensions, or `None` when that already overflows or exceeds one
    /// allocation (`isize::MAX`): no tensor of such a type can exist.
    pub fn checked_known_bytes(&self, dtype: DType) -> Option<usize> {
        self.0
            .iter()
            .flatten()
            .try_fold(dtype.size_in_bytes(), |a, &d| a.checked_mul(d))
            .filter(|&b| b <= isize::MAX as usize)
    }
    /// Whether a concrete shape fits this one.
    pub fn accepts(&self, s: &Shape) -> bool {
        self.0.len() == s.rank() && self.0.iter().zip(s.dims()).all(|(a, b)| a.is_none_or(|a| a == *b))
    }
    /// Whether two partial shapes could describe the same tensor.
    pub fn compatible(&self, o: &PartialShape) -> bool {
        self.0.len() == o.0.len() && self.0.iter().zip(&o.0).all(|(a, b)| a.is_none() || b.is_none() || a == b)
    }
}

impl fmt::Display for PartialShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            match d {
                Some(d) => write!(f, "{d}")?,
                None => write!(f, "?")?,
            }
        }
        write!(f, "]")
    }
}

impl From<&Shape> for PartialShape {
    fn from(s: &Shape) -> PartialShape {
        PartialShape(s.dims().iter().map(|&d| Some(d)).collect())
    }
}
impl From<Shape> for PartialShape {
    fn from(s: Shape) -> PartialShape {
        PartialShape::from(&s)
    }
}
/// `-1` (any negative) marks an unknown dimension, as in TF's `[None, 64]`.
impl From<&[i64]> for PartialShape {
    fn from(v: &[i64]) -> PartialShape {
        PartialShape(v.iter().map(|&d| if d < 0 { None } else { Some(d as usize) }).collect())
    }
}
impl<const N: usize> From<[i64; N]> for PartialShape {
    fn from(v: [i64; N]) -> PartialShape {
        PartialShape::from(&v[..])
    }
}
impl From<Vec<Option<usize>>> for PartialShape {
    fn from(v: Vec<Option<usize>>) -> PartialShape {
        PartialShape(v)
    }
}

/// The static type of one edge: dtype and (partial) shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: PartialShape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: impl Into<PartialShape>) -> TensorType {
        TensorType { dtype, shape: shape.into() }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
