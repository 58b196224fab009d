//! Element types of tensors and the trait that ties a Rust scalar type to one.

use crate::tensor::CpuStorage;
use half::{bf16, f16};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    F64,
    F16,
    BF16,
    I8,
    I32,
    I64,
    Bool,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::F16 | DType::BF16 => 2,
            DType::I8 | DType::Bool => 1,
        }
    }

    /// The precision a cost model rates arithmetic on this type at: the
    /// roofline has peaks for f16, bf16 and int8 and prices the rest (f64
    /// and the integer and bool types included) at f32's.
    pub fn compute_dtype(self) -> flowlab_hw::Dtype {
        match self {
            DType::F16 => flowlab_hw::Dtype::F16,
            DType::BF16 => flowlab_hw::Dtype::Bf16,
            DType::I8 => flowlab_hw::Dtype::Int8,
            _ => flowlab_hw::Dtype::F32,
        }
    }

    /// True for the floating-point types.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }

    /// The lower-case name used in files and messages.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I8 => "i8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust scalar type that a tensor can hold.
pub trait Element: Copy + Send + Sync + 'static + fmt::Debug + PartialOrd + Default {
    /// The dtype tag of this type.
    const DTYPE: DType;
    #[doc(hidden)]
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    #[doc(hidden)]
    fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]>;
    #[doc(hidden)]
    fn wrap(v: Vec<Self>) -> CpuStorage;
    #[doc(hidden)]
    fn unwrap_vec(s: CpuStorage) -> Option<Vec<Self>>;
    /// Lossy conversion to f64 (true is 1).
    fn to_f64(self) -> f64;
    /// Conversion from f64 (saturating for integers, nonzero is true).
    fn from_f64(v: f64) -> Self;
}

macro_rules! impl_element {
    ($t:ty, $variant:ident, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = DType::$variant;
            #[inline]
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline]
            fn slice_mut(s: &mut CpuStorage) -> Option<&mut [Self]> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline]
            fn wrap(v: Vec<Self>) -> CpuStorage {
                CpuStorage::$variant(v)
            }
            #[inline]
            fn unwrap_vec(s: CpuStorage) -> Option<Vec<Self>> {
                match s {
                    CpuStorage::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline]
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to;
                f(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(v)
            }
        }
    };
}

impl_element!(f32, F32, |x| x as f64, |v| v as f32);
impl_element!(f64, F64, |x| x, |v| v);
impl_element!(f16, F16, |x| x.to_f64(), f16::from_f64);
impl_element!(bf16, BF16, |x| x.to_f64(), bf16::from_f64);
impl_element!(i8, I8, |x| x as f64, |v| v as i8);
impl_element!(i32, I32, |x| x as f64, |v| v as i32);
impl_element!(i64, I64, |x| x as f64, |v| v as i64);
impl_element!(bool, Bool, |x| if x { 1.0 } else { 0.0 }, |v| v != 0.0);
