//! What a device computes with (tinygrad's backend: an allocator, a queue
//! and a compiler): where its tensors' memory comes from and the queue its
//! kernels run in order on.
//!
//! A CPU device runs kernels on its own rayon pool (none for one thread:
//! the step's thread runs them) and allocates from the host heap, where a
//! prepared step recycles released buffers ([`BufferPool`]). A CUDA device
//! (cargo feature `cuda`) has a context, one compute stream that its
//! kernels and allocations are ordered on, and a caching allocator
//! ([`CudaAllocator`]). A build without the feature can name a GPU, but
//! opening one is [`EngineError::NoCuda`].
//!
//! [`BufferPool`]: crate::framework::BufferPool
//! [`CudaAllocator`]: crate::tensor::CudaAllocator
//! [`EngineError::NoCuda`]: crate::error::EngineError::NoCuda

use crate::error::{EngineError, Result};
use crate::framework::DeviceName;
use crate::tensor::DeviceType;

#[cfg(feature = "cuda")]
pub use cuda::CudaDevice;
#[cfg(not(feature = "cuda"))]
pub use no_cuda::CudaDevice;

/// The compute side of one local device.
pub(crate) enum Backend {
    /// Host memory; kernels on this pool (`None`: on the step's thread).
    Host { pool: Option<rayon::ThreadPool> },
    Cuda(CudaDevice),
}

impl Backend {
    /// The backend of `name` with `threads` host threads for a CPU.
    pub(crate) fn open(name: &DeviceName, ty: DeviceType, threads: usize) -> Result<Backend> {
        let label = name.to_string();
        match ty {
            DeviceType::Cpu => {
                let pool = if threads > 1 {
                    let tag = format!("{}{}", name.device_type.as_deref().unwrap_or("dev").to_ascii_lowercase(), name.id.unwrap_or(0));
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .thread_name(move |i| format!("flowlab-{tag}-{i}"))
                        .build()
                        .map_err(|e| EngineError::Device(format!("{label}: thread pool: {e}")))?;
                    Some(pool)
                } else {
                    None
                };
                Ok(Backend::Host { pool })
            }
            DeviceType::Cuda => Ok(Backend::Cuda(CudaDevice::open(name.id.unwrap_or(0) as usize, &label)?)),
        }
    }

    /// The host pool kernels run on, for a CPU device that has one.
    pub(crate) fn pool(&self) -> Option<&rayon::ThreadPool> {
        match self {
            Backend::Host { pool } => pool.as_ref(),
            Backend::Cuda(_) => None,
        }
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use crate::error::{EngineError, Result};
    use crate::tensor::CudaAllocator;
    use cudarc::driver::{CudaContext, CudaStream};
    use std::sync::Arc;

    /// One GPU opened: its context, compute stream and caching allocator.
    pub struct CudaDevice {
        label: String,
        ctx: Arc<CudaContext>,
        alloc: Arc<CudaAllocator>,
    }

    impl CudaDevice {
        /// Opens GPU `ordinal` (`label` names it in errors): an error, not
        /// a crash, where libcuda is missing or the GPU does not exist.
        pub fn open(ordinal: usize, label: &str) -> Result<CudaDevice> {
            let err = |detail: String| EngineError::Cuda { device: label.to_string(), detail };
            // SAFETY: only probes for the shared library; nothing is called in it.
            if !unsafe { cudarc::driver::sys::is_culib_present() } {
                return Err(err("libcuda could not be loaded (no NVIDIA driver on this machine)".into()));
            }
            let ctx = CudaContext::new(ordinal).map_err(|e| err(format!("opening device {ordinal}: {e}")))?;
            let stream = ctx.new_stream().map_err(|e| err(format!("creating its compute stream: {e}")))?;
            Ok(CudaDevice { label: label.to_string(), ctx, alloc: CudaAllocator::new(stream) })
        }

        /// The allocator tensors on this device take their memory from.
        pub fn allocator(&self) -> &Arc<CudaAllocator> {
            &self.alloc
        }

        /// The stream its kernels run in order on.
        pub fn stream(&self) -> &Arc<CudaStream> {
            self.alloc.stream()
        }

        /// The GPU's name as the driver reports it.
        pub fn name(&self) -> Result<String> {
            self.ctx.name().map_err(|e| EngineError::Cuda { device: self.label.clone(), detail: e.to_string() })
        }

        /// Waits for everything queued on the device.
        pub fn synchronize(&self) -> Result<()> {
            self.stream().synchronize().map_err(|e| EngineError::Cuda { device: self.label.clone(), detail: e.to_string() })
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod no_cuda {
    use crate::error::{EngineError, Result};
    use crate::tensor::CudaAllocator;
    use std::convert::Infallible;
    use std::sync::Arc;

    /// A GPU of a build without the `cuda` feature: it cannot be opened.
    pub struct CudaDevice(Infallible);

    impl CudaDevice {
        /// Always [`EngineError::NoCuda`] naming `label`.
        pub fn open(_ordinal: usize, label: &str) -> Result<CudaDevice> {
            Err(EngineError::NoCuda(label.to_string()))
        }
        pub fn allocator(&self) -> &Arc<CudaAllocator> {
            match self.0 {}
        }
        pub fn name(&self) -> Result<String> {
            match self.0 {}
        }
        pub fn synchronize(&self) -> Result<()> {
            match self.0 {}
        }
    }
}
