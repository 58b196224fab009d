//! Output buffers handed back from one step's released tensors to the next
//! kernels that write every element of theirs.
//!
//! Why: a kernel's output came from `vec![0; n]`, and the allocator, which
//! hands back memory a previous step freed, zeroes it first; a kernel that
//! then overwrites every element (a product, a convolution, a pool) paid a
//! write of the whole buffer for nothing: 3% of the CNN's one-thread training
//! step in memset, and a cold buffer besides. TensorFlow's allocators hand out
//! uninitialised memory; here a released tensor's storage, still holding its
//! old values, is kept for the next output of its dtype and length. Stale
//! values are initialised memory, so nothing unsound is read, and a kernel
//! that takes such a buffer must write every element (its contract says
//! "overwrites"), so results never depend on them.

use crate::tensor::{CpuStorage, DType, Element, Tensor};
use std::collections::HashMap;
use std::sync::Mutex;

/// Buffers smaller than this go back to the allocator: zeroing them costs
/// less than the lock.
const MIN_BYTES: usize = 64 << 10;

/// Buffers kept per (dtype, length): a step's live outputs of one size
/// rarely exceed it, and the bound keeps a size that kernels release but
/// never take (an elementwise op's output) from piling up.
const PER_SIZE: usize = 8;

/// Released storage by dtype and length, for kernels that overwrite their
/// output. One per prepared step, shared by the threads that run it.
#[derive(Default)]
pub(crate) struct BufferPool {
    free: Mutex<HashMap<(DType, usize), Vec<CpuStorage>>>,
}

impl BufferPool {
    /// A vector of `len` elements whose values are unspecified (zeros, or a
    /// released tensor's): the caller must write every element.
    pub fn take<T: Element>(&self, len: usize) -> Vec<T> {
        if len.saturating_mul(std::mem::size_of::<T>()) >= MIN_BYTES {
            let found = self.free.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&(T::DTYPE, len)).and_then(Vec::pop);
            if let Some(v) = found.and_then(T::unwrap_vec) {
                return v;
            }
        }
        vec![T::default(); len]
    }

    /// Keeps `t`'s storage for a later `take` when `t` was its only owner,
    /// is large enough and its size has room; drops it otherwise.
    pub fn give(&self, t: Tensor) {
        if t.size_in_bytes() < MIN_BYTES {
            return;
        }
        let Some(s) = t.into_cpu_storage() else { return };
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let list = free.entry((s.dtype(), s.len())).or_default();
        if list.len() < PER_SIZE {
            list.push(s);
        }
    }

    /// Buffers held, for tests.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_buffer_comes_back_for_the_same_dtype_and_length_only() {
        let pool = BufferPool::default();
        let n = MIN_BYTES / 4;
        let t = Tensor::from_vec(vec![7.0f32; n], [n]).unwrap();
        let ptr = t.as_slice::<f32>().unwrap().as_ptr();
        pool.give(t);
        assert_eq!(pool.held(), 1);
        // Another length or dtype gets a fresh, zeroed vector.
        assert_eq!(pool.take::<f32>(n + 1), vec![0.0; n + 1]);
        assert_eq!(pool.take::<i32>(n), vec![0; n]);
        assert_eq!(pool.held(), 1);
        // The same dtype and length get the released storage, values and all.
        let v = pool.take::<f32>(n);
        assert_eq!((v.as_ptr(), v[0], v.len()), (ptr, 7.0, n));
        assert_eq!(pool.held(), 0);
    }

    #[test]
    fn shared_small_and_surplus_buffers_are_not_kept() {
        let pool = BufferPool::default();
        let n = MIN_BYTES / 4;
        // Still owned elsewhere (a clone, as a fetched tensor or a view).
        let t = Tensor::from_vec(vec![1.0f32; n], [n]).unwrap();
        let other = t.clone();
        pool.give(t);
        // Below the size worth keeping.
        pool.give(Tensor::from_vec(vec![1.0f32; n - 1], [n - 1]).unwrap());
        assert_eq!(pool.held(), 0);
        assert_eq!(other.as_slice::<f32>().unwrap()[0], 1.0);
        for _ in 0..PER_SIZE + 3 {
            pool.give(Tensor::from_vec(vec![1.0f32; n], [n]).unwrap());
        }
        assert_eq!(pool.held(), PER_SIZE);
    }
}
