//! The CUDA storage of a build without the `cuda` feature (candle's
//! `dummy_cuda_backend`): the same names and signatures, no values. Its
//! types hold an uninhabited field, so every `match` on [`Storage`] names
//! the CUDA arm in every build and the compiler checks it, while no such
//! storage can exist; asking for a device is [`EngineError::NoCuda`].
//!
//! [`Storage`]: crate::tensor::Storage
//! [`EngineError::NoCuda`]: crate::error::EngineError::NoCuda

use crate::error::Result;
use crate::tensor::{CpuStorage, DType};
use std::sync::Arc;

/// No value of this type exists.
#[derive(Debug)]
pub enum Never {}

/// Device buffers of a device this build cannot open.
#[derive(Debug)]
pub struct CudaAllocator(Never);

impl CudaAllocator {
    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }
    pub fn cached_bytes(&self) -> usize {
        match self.0 {}
    }
}

/// One tensor's elements in the memory of a device this build cannot open.
#[derive(Debug)]
pub struct CudaStorage(Never);

impl CudaStorage {
    pub fn dtype(&self) -> DType {
        match self.0 {}
    }
    pub fn len(&self) -> usize {
        match self.0 {}
    }
    pub fn is_empty(&self) -> bool {
        match self.0 {}
    }
    pub fn ordinal(&self) -> usize {
        match self.0 {}
    }
    pub fn from_host(_: &CpuStorage, alloc: &Arc<CudaAllocator>) -> Result<CudaStorage> {
        match alloc.0 {}
    }
    pub fn to_host(&self) -> Result<CpuStorage> {
        match self.0 {}
    }
}
