//! Layer 2, tensors: element types, shapes, device kinds and dense tensors.
//!
//! Contract. Everything above builds on these values and nothing here knows
//! of graphs, ops or the runtime: this module imports only `crate::error` (and,
//! with the `cuda` feature, cudarc for device memory).
//! A [`Tensor`] is immutable once built and shares its storage by reference
//! count; [`Storage`] is one enum over device kinds ([`DeviceType`]), so a
//! device backend is one more variant, not a second tensor type.

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(not(feature = "cuda"))]
#[path = "cuda_dummy.rs"]
mod cuda;
mod device_type;
mod dtype;
mod shape;
#[allow(clippy::module_inception)]
mod tensor;

pub use cuda::{CudaAllocator, CudaStorage};
pub use device_type::DeviceType;
pub use dtype::{DType, Element};
pub use shape::{PartialShape, Shape, TensorType};
pub use tensor::{CpuStorage, Storage, Tensor};
