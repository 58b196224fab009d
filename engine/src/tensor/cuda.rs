//! Device memory of the CUDA backend (cargo feature `cuda`): a tensor's
//! elements as little-endian bytes in one device buffer, the layout
//! [`CpuStorage::to_le_bytes`] writes, so every dtype crosses with one copy.
//!
//! Buffers come from a [`CudaAllocator`] per device and go back to it when
//! their tensor is dropped: `cuMemAlloc` synchronizes the device, which is
//! why TensorFlow has its BFC allocator and PyTorch its caching allocator.
//! A buffer is handed out again only to work queued on the same stream it
//! was last used on, so stream order keeps the reuse safe.

use crate::error::{EngineError, Result};
use crate::tensor::{CpuStorage, DType};
use cudarc::driver::{CudaSlice, CudaStream, DriverError};
use std::collections::HashMap;
use parking_lot::Mutex;
use std::sync::Arc;

fn driver_err(ordinal: usize, what: &'static str) -> impl FnOnce(DriverError) -> EngineError {
    move |e| EngineError::Cuda { device: format!("GPU:{ordinal}"), detail: format!("{what}: {e}") }
}

/// Device buffers by byte size, kept for reuse on one stream.
pub struct CudaAllocator {
    stream: Arc<CudaStream>,
    free: Mutex<HashMap<usize, Vec<CudaSlice<u8>>>>,
}

impl CudaAllocator {
    /// An allocator whose buffers serve work queued on `stream`.
    pub fn new(stream: Arc<CudaStream>) -> Arc<CudaAllocator> {
        Arc::new(CudaAllocator { stream, free: Mutex::new(HashMap::new()) })
    }

    /// The stream its buffers are used on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// Bytes held for reuse (not in any tensor).
    pub fn cached_bytes(&self) -> usize {
        self.lock().iter().map(|(bytes, bufs)| bytes * bufs.len()).sum()
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<usize, Vec<CudaSlice<u8>>>> {
        self.free.lock()
    }

    /// A buffer of `bytes` (at least one) whose contents are unspecified:
    /// the caller writes all of it before anything reads it.
    fn take(&self, bytes: usize) -> Result<CudaSlice<u8>> {
        let bytes = bytes.max(1);
        if let Some(buf) = self.lock().get_mut(&bytes).and_then(|v| v.pop()) {
            return Ok(buf);
        }
        // SAFETY: the memory is uninitialised; `take`'s callers overwrite
        // every byte (a host copy of exactly this size) before reading it.
        unsafe { self.stream.alloc::<u8>(bytes) }.map_err(driver_err(self.ordinal(), "allocating device memory"))
    }

    fn give(&self, buf: CudaSlice<u8>) {
        self.lock().entry(buf.len()).or_default().push(buf);
    }
}

/// One tensor's elements in device memory.
pub struct CudaStorage {
    buf: Option<CudaSlice<u8>>,
    dtype: DType,
    len: usize,
    alloc: Arc<CudaAllocator>,
}

impl CudaStorage {
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The device's ordinal.
    pub fn ordinal(&self) -> usize {
        self.alloc.ordinal()
    }

    /// A copy of host storage in the allocator's device memory.
    pub fn from_host(s: &CpuStorage, alloc: &Arc<CudaAllocator>) -> Result<CudaStorage> {
        let bytes = s.to_le_bytes();
        let mut buf = alloc.take(bytes.len())?;
        if !bytes.is_empty() {
            // From pageable memory the driver stages the bytes before the
            // call returns, so `bytes` may go when it does.
            alloc.stream.memcpy_htod(&bytes, &mut buf).map_err(driver_err(alloc.ordinal(), "copying to the device"))?;
        }
        Ok(CudaStorage { buf: Some(buf), dtype: s.dtype(), len: s.len(), alloc: alloc.clone() })
    }

    /// A host copy of the elements, after the work queued before it.
    pub fn to_host(&self) -> Result<CpuStorage> {
        let n = self.len * self.dtype.size_in_bytes();
        let mut bytes = vec![0u8; n.max(1)];
        let stream = &self.alloc.stream;
        if let Some(buf) = &self.buf {
            stream.memcpy_dtoh(buf, &mut bytes).map_err(driver_err(self.ordinal(), "copying to the host"))?;
        }
        stream.synchronize().map_err(driver_err(self.ordinal(), "waiting for the copy"))?;
        CpuStorage::from_le_bytes(self.dtype, &bytes[..n]).ok_or_else(|| EngineError::Cuda {
            device: format!("GPU:{}", self.ordinal()),
            detail: format!("device memory of a {} tensor holds bytes that are not its elements", self.dtype),
        })
    }
}

impl Drop for CudaStorage {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.alloc.give(buf);
        }
    }
}

impl std::fmt::Debug for CudaStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaStorage(GPU:{}, {} x {})", self.ordinal(), self.len, self.dtype)
    }
}
