//! Tensors: a dtype, a shape and contiguous row-major storage shared by
//! reference count, so handing a tensor along a graph edge never copies it.
//!
//! Storage is an enum over devices (candle style): host memory, or a CUDA
//! device's (the real one behind the `cuda` feature, an uninhabited stand-in
//! otherwise), and every match names both. Reading elements on the host is
//! fallible: a device tensor must be copied over first ([`Tensor::to_host`]).

use crate::tensor::{CudaAllocator, CudaStorage, DType, DeviceType, Element};
use crate::error::{EngineError, Result};
use crate::tensor::Shape;
use half::{bf16, f16};
use std::sync::Arc;

/// Host memory of one tensor, one vector per dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum CpuStorage {
    F32(Vec<f32>),
    F64(Vec<f64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    I8(Vec<i8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    Bool(Vec<bool>),
}

macro_rules! each_storage {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            CpuStorage::F32($v) => $body,
            CpuStorage::F64($v) => $body,
            CpuStorage::F16($v) => $body,
            CpuStorage::BF16($v) => $body,
            CpuStorage::I8($v) => $body,
            CpuStorage::I32($v) => $body,
            CpuStorage::I64($v) => $body,
            CpuStorage::Bool($v) => $body,
        }
    };
}

impl CpuStorage {
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::I8(_) => DType::I8,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::I64(_) => DType::I64,
            CpuStorage::Bool(_) => DType::Bool,
        }
    }
    pub fn len(&self) -> usize {
        each_storage!(self, v => v.len())
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `n` elements equal to `v` (0 or false for zeros), or an error when
    /// the memory cannot be had: allocation is tried before it is made, so
    /// a huge request is an error and never aborts the process.
    fn filled(dtype: DType, n: usize, v: f64) -> Result<CpuStorage> {
        fn fill<T: Clone>(n: usize, v: T, dtype: DType) -> Result<Vec<T>> {
            let mut out = Vec::new();
            out.try_reserve_exact(n).map_err(|_| EngineError::Alloc {
                what: format!("a {dtype} tensor of {n} elements"),
                size: format!("{} bytes", n as u128 * dtype.size_in_bytes() as u128),
            })?;
            out.resize(n, v);
            Ok(out)
        }
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(fill(n, v as f32, dtype)?),
            DType::F64 => CpuStorage::F64(fill(n, v, dtype)?),
            DType::F16 => CpuStorage::F16(fill(n, f16::from_f64(v), dtype)?),
            DType::BF16 => CpuStorage::BF16(fill(n, bf16::from_f64(v), dtype)?),
            DType::I8 => CpuStorage::I8(fill(n, v as i8, dtype)?),
            DType::I32 => CpuStorage::I32(fill(n, v as i32, dtype)?),
            DType::I64 => CpuStorage::I64(fill(n, v as i64, dtype)?),
            DType::Bool => CpuStorage::Bool(fill(n, v != 0.0, dtype)?),
        })
    }
    fn to_f64_vec(&self) -> Vec<f64> {
        each_storage!(self, v => v.iter().map(|x| x.to_f64()).collect())
    }
    fn from_f64_iter(dtype: DType, v: impl Iterator<Item = f64>) -> CpuStorage {
        match dtype {
            DType::F32 => CpuStorage::F32(v.map(|x| x as f32).collect()),
            DType::F64 => CpuStorage::F64(v.collect()),
            DType::F16 => CpuStorage::F16(v.map(f16::from_f64).collect()),
            DType::BF16 => CpuStorage::BF16(v.map(bf16::from_f64).collect()),
            DType::I8 => CpuStorage::I8(v.map(|x| x as i8).collect()),
            DType::I32 => CpuStorage::I32(v.map(|x| x as i32).collect()),
            DType::I64 => CpuStorage::I64(v.map(|x| x as i64).collect()),
            DType::Bool => CpuStorage::Bool(v.map(|x| x != 0.0).collect()),
        }
    }
    /// Little-endian bytes (bool as 0/1), the layout of safetensors files.
    pub(crate) fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            CpuStorage::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::I8(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            CpuStorage::Bool(v) => v.iter().map(|&x| x as u8).collect(),
        }
    }
    /// Inverse of [`to_le_bytes`](Self::to_le_bytes); `None` when the byte
    /// count is not a multiple of the element size or a bool byte is not 0/1.
    pub(crate) fn from_le_bytes(dtype: DType, b: &[u8]) -> Option<CpuStorage> {
        let sz = dtype.size_in_bytes();
        if b.len() % sz != 0 {
            return None;
        }
        macro_rules! conv {
            ($t:ty, $n:expr) => {
                b.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or([0; $n]))).collect()
            };
        }
        Some(match dtype {
            DType::F32 => CpuStorage::F32(conv!(f32, 4)),
            DType::F64 => CpuStorage::F64(conv!(f64, 8)),
            DType::F16 => CpuStorage::F16(conv!(f16, 2)),
            DType::BF16 => CpuStorage::BF16(conv!(bf16, 2)),
            DType::I8 => CpuStorage::I8(conv!(i8, 1)),
            DType::I32 => CpuStorage::I32(conv!(i32, 4)),
            DType::I64 => CpuStorage::I64(conv!(i64, 8)),
            DType::Bool => {
                if b.iter().any(|&x| x > 1) {
                    return None;
                }
                CpuStorage::Bool(b.iter().map(|&x| x == 1).collect())
            }
        })
    }
}

/// Where a tensor's elements live.
#[derive(Debug)]
pub enum Storage {
    Cpu(CpuStorage),
    Cuda(CudaStorage),
}

impl Storage {
    pub fn dtype(&self) -> DType {
        match self {
            Storage::Cpu(s) => s.dtype(),
            Storage::Cuda(s) => s.dtype(),
        }
    }
    pub fn device_type(&self) -> DeviceType {
        match self {
            Storage::Cpu(_) => DeviceType::Cpu,
            Storage::Cuda(_) => DeviceType::Cuda,
        }
    }
    /// The host storage, or the error naming the device that holds it.
    fn host(&self) -> Result<&CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(s),
            Storage::Cuda(s) => Err(EngineError::NotOnHost { device: format!("GPU:{}", s.ordinal()), what: s.dtype().to_string() }),
        }
    }
}

impl PartialEq for Storage {
    /// Equal elements wherever they live (a device's are copied to compare).
    fn eq(&self, o: &Storage) -> bool {
        match (self, o) {
            (Storage::Cpu(a), Storage::Cpu(b)) => a == b,
            (a, b) => match (a.to_host_storage(), b.to_host_storage()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            },
        }
    }
}

impl Storage {
    fn to_host_storage(&self) -> Result<CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(s.clone()),
            Storage::Cuda(s) => s.to_host(),
        }
    }
}

/// An immutable n-dimensional array. Cloning shares the storage.
#[derive(Clone, Debug)]
pub struct Tensor {
    storage: Arc<Storage>,
    shape: Shape,
}

impl PartialEq for Tensor {
    /// Same dtype, shape and elements (bitwise for floats' storage equality
    /// semantics of `==`: NaN differs from NaN).
    fn eq(&self, o: &Tensor) -> bool {
        self.shape == o.shape && (Arc::ptr_eq(&self.storage, &o.storage) || self.storage == o.storage)
    }
}

impl Tensor {
    /// A tensor of `dtype` from its elements' little-endian bytes in
    /// row-major order (bool as 0/1), as ONNX's `raw_data` and
    /// safetensors hold them.
    pub fn from_le_bytes(dtype: DType, shape: impl Into<Shape>, bytes: &[u8]) -> Result<Tensor> {
        let shape = shape.into();
        let want = shape.num_elements().checked_mul(dtype.size_in_bytes());
        let storage = (want == Some(bytes.len())).then(|| CpuStorage::from_le_bytes(dtype, bytes)).flatten();
        let Some(storage) = storage else {
            return Err(EngineError::Tensor(format!(
                "{} bytes are not the {} bytes of {shape} {dtype} elements (bools 0 or 1)",
                bytes.len(),
                want.map_or("overflowing".into(), |w| w.to_string())
            )));
        };
        Ok(Tensor { storage: Arc::new(Storage::Cpu(storage)), shape })
    }

    /// A tensor from elements in row-major order.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        let Some(n) = shape.checked_num_elements() else {
            return Err(EngineError::Tensor(format!("shape {shape} has more elements than this machine can address")));
        };
        if data.len() != n {
            return Err(EngineError::Tensor(format!("{} elements do not fill shape {} ({} elements)", data.len(), shape, n)));
        }
        Ok(Tensor::from_storage(T::wrap(data), shape))
    }

    /// A tensor over `s`, checked: the storage must hold exactly the
    /// shape's element count (for storage decoded from files).
    pub(crate) fn from_vec_storage(s: CpuStorage, shape: Shape) -> Result<Tensor> {
        if shape.checked_num_elements() != Some(s.len()) {
            return Err(EngineError::Tensor(format!("{} elements do not fill shape {shape}", s.len())));
        }
        Ok(Tensor::from_storage(s, shape))
    }

    pub(crate) fn from_storage(s: CpuStorage, shape: Shape) -> Tensor {
        debug_assert_eq!(s.len(), shape.num_elements());
        Tensor { storage: Arc::new(Storage::Cpu(s)), shape }
    }

    /// The storage, when this tensor is its only owner (no clone or view
    /// shares it).
    pub(crate) fn into_cpu_storage(self) -> Option<CpuStorage> {
        Arc::try_unwrap(self.storage).ok().and_then(|s| match s {
            Storage::Cpu(c) => Some(c),
            Storage::Cuda(_) => None,
        })
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(v: T) -> Tensor {
        Tensor::from_storage(T::wrap(vec![v]), Shape::scalar())
    }

    /// All zeros (false); an error when the shape cannot be allocated.
    pub fn zeros(dtype: DType, shape: impl Into<Shape>) -> Result<Tensor> {
        Tensor::full(dtype, shape, 0.0)
    }

    /// Every element `v` converted to `dtype`; an error when the shape
    /// cannot be allocated (the error gives the size; the process survives).
    pub fn full(dtype: DType, shape: impl Into<Shape>, v: f64) -> Result<Tensor> {
        let shape = shape.into();
        let Some(n) = shape.checked_bytes(dtype).and(shape.checked_num_elements()) else {
            return Err(EngineError::Alloc {
                what: format!("a {dtype}{shape} tensor"),
                size: "more bytes than this machine can address".into(),
            });
        };
        Ok(Tensor::from_storage(CpuStorage::filled(dtype, n, v)?, shape))
    }

    /// Elements given as f64, converted to `dtype`.
    pub fn from_f64s(dtype: DType, data: &[f64], shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.checked_num_elements() != Some(data.len()) {
            return Err(EngineError::Tensor(format!(
                "{} elements do not fill shape {}",
                data.len(),
                shape
            )));
        }
        Ok(Tensor::from_storage(CpuStorage::from_f64_iter(dtype, data.iter().copied()), shape))
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    pub fn dims(&self) -> &[usize] {
        self.shape.dims()
    }
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }
    pub fn num_elements(&self) -> usize {
        self.shape.num_elements()
    }
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }
    /// The kind of memory the elements are in.
    pub fn device_type(&self) -> DeviceType {
        self.storage.device_type()
    }
    /// Bytes of element data.
    pub fn size_in_bytes(&self) -> usize {
        self.num_elements() * self.dtype().size_in_bytes()
    }

    /// The host storage; an error when the elements are in a device's memory.
    pub fn cpu(&self) -> Result<&CpuStorage> {
        self.storage.host()
    }

    /// This tensor on the host: itself when it is there (shared, no copy),
    /// else a copy of the device's memory once the work queued before it ends.
    pub fn to_host(&self) -> Result<Tensor> {
        match &*self.storage {
            Storage::Cpu(_) => Ok(self.clone()),
            Storage::Cuda(s) => Ok(Tensor::from_storage(s.to_host()?, self.shape.clone())),
        }
    }

    /// A copy in the memory of `alloc`'s device.
    pub fn to_cuda(&self, alloc: &Arc<CudaAllocator>) -> Result<Tensor> {
        let storage = CudaStorage::from_host(self.to_host()?.cpu()?, alloc)?;
        Ok(Tensor { storage: Arc::new(Storage::Cuda(storage)), shape: self.shape.clone() })
    }

    /// The elements as a slice; errors when `T` is not this tensor's dtype
    /// or the elements are not on the host.
    pub fn as_slice<T: Element>(&self) -> Result<&[T]> {
        T::slice(self.cpu()?).ok_or_else(|| {
            EngineError::Tensor(format!("tensor of dtype {} read as {}", self.dtype(), T::DTYPE))
        })
    }

    /// A copy of the elements.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.as_slice::<T>().map(|s| s.to_vec())
    }

    /// Every element converted to f64 (any dtype).
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.cpu()?.to_f64_vec())
    }

    /// The single element of a one-element tensor, as f64.
    pub fn scalar_f64(&self) -> Result<f64> {
        if self.num_elements() != 1 {
            return Err(EngineError::Tensor(format!("expected one element, shape is {}", self.shape)));
        }
        Ok(self.to_f64_vec()?[0])
    }

    /// The same storage seen with another shape of equal element count.
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if shape.num_elements() != self.num_elements() {
            return Err(EngineError::Tensor(format!("cannot reshape {} into {}", self.shape, shape)));
        }
        Ok(Tensor { storage: self.storage.clone(), shape })
    }

    /// Converts to another dtype (a copy; same dtype shares); host tensors only.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let s = match (self.cpu()?, dtype) {
            (CpuStorage::F32(v), DType::F64) => CpuStorage::F64(v.iter().map(|&x| x as f64).collect()),
            (CpuStorage::F64(v), DType::F32) => CpuStorage::F32(v.iter().map(|&x| x as f32).collect()),
            (CpuStorage::F32(v), DType::F16) => CpuStorage::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
            (CpuStorage::F32(v), DType::BF16) => CpuStorage::BF16(v.iter().map(|&x| bf16::from_f32(x)).collect()),
            (CpuStorage::F16(v), DType::F32) => CpuStorage::F32(v.iter().map(|x| x.to_f32()).collect()),
            (CpuStorage::BF16(v), DType::F32) => CpuStorage::F32(v.iter().map(|x| x.to_f32()).collect()),
            (s, d) => CpuStorage::from_f64_iter(d, s.to_f64_vec().into_iter()),
        };
        Ok(Tensor::from_storage(s, self.shape.clone()))
    }

    /// Mutable access to the elements when no other handle shares them
    /// (lets optimizer kernels update a variable in place).
    pub(crate) fn storage_mut(&mut self) -> Option<&mut CpuStorage> {
        match Arc::get_mut(&mut self.storage) {
            Some(Storage::Cpu(s)) => Some(s),
            Some(Storage::Cuda(_)) | None => None,
        }
    }

    /// Whether two tensors share one storage (used by tests of zero-copy).
    pub fn shares_storage_with(&self, o: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &o.storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_shares_storage_and_reshape_does_not_copy() {
        let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
        let u = t.clone();
        assert!(t.shares_storage_with(&u));
        let r = t.reshape([4]).unwrap();
        assert!(r.shares_storage_with(&t));
        assert_eq!(r.dims(), &[4]);
    }

    #[test]
    fn wrong_element_count_is_an_error() {
        let e = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [2, 2]).unwrap_err();
        assert_eq!(e.to_string(), "tensor: 3 elements do not fill shape [2, 2] (4 elements)");
    }

    #[test]
    fn casts_between_all_dtypes() {
        let t = Tensor::from_vec(vec![1.5f32, -2.0, 0.0], [3]).unwrap();
        for d in [DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::Bool] {
            let c = t.cast(d).unwrap();
            assert_eq!(c.dtype(), d);
        }
        assert_eq!(t.cast(DType::I32).unwrap().to_vec::<i32>().unwrap(), vec![1, -2, 0]);
        assert_eq!(t.cast(DType::Bool).unwrap().to_vec::<bool>().unwrap(), vec![true, true, false]);
        assert_eq!(t.cast(DType::F16).unwrap().cast(DType::F32).unwrap().to_vec::<f32>().unwrap(), vec![1.5, -2.0, 0.0]);
        assert!(t.as_slice::<f64>().is_err());
    }

    #[test]
    fn le_bytes_round_trip() {
        let t = Tensor::from_vec(vec![1i64, -7, 1 << 40], [3]).unwrap();
        let b = t.cpu().unwrap().to_le_bytes();
        assert_eq!(CpuStorage::from_le_bytes(DType::I64, &b).unwrap(), *t.cpu().unwrap());
        assert!(CpuStorage::from_le_bytes(DType::I64, &b[..5]).is_none());
    }
}
