//! Device and link catalog, roofline costs, cycle-level systolic array and
//! communication number formats. Knows nothing of graphs: callers describe
//! work as flops and bytes (roofline) or as GEMM / convolution shapes
//! (systolic array).

mod catalog;
mod error;
mod format;
mod profile;
mod roofline;
pub mod simd;
pub mod systolic;

pub use catalog::{Catalog, DeviceSpec, FabricSpec, GemmRate, LinkSharing, LinkSpec, PeakTflops, SystolicSpec};
pub use error::HwError;
pub use format::{CommFormat, WireCensus};
pub use profile::{HOST_DEVICE, HOST_LINK, HostMeasurement, ProfiledGemm, ProfiledNode, ShapeMeasurement, TransferCompute};
pub use roofline::{Dtype, OpClass, OpCost, OpMeasurement, Profile};
