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
use parking_lot::Mutex;

/// Buffers smaller than this go back to the allocator: zeroing them costs
/// less than the lock.
const MIN_BYTES: usize = 64 << 10;

/// Released storage by dtype and length, for kernels that overwrite their
/// output. One per prepared step, shared by the threads that run it.
///
/// A length keeps at most as many buffers as one step took of it (the most
/// seen in any step): sizes no kernel takes (an elementwise op's output)
/// are never kept, and the storage held stays under what a step uses.
#[derive(Default)]
pub(crate) struct BufferPool {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    free: HashMap<(DType, usize), Vec<CpuStorage>>,
    /// Takes per size in the current step.
    taken: HashMap<(DType, usize), usize>,
    /// The most takes per size in any step.
    demand: HashMap<(DType, usize), usize>,
}

impl BufferPool {
    /// A step begins: its takes are counted afresh.
    pub fn new_step(&self) {
        self.lock().taken.clear();
    }

    /// A vector of `len` elements whose values are unspecified (zeros, or a
    /// released tensor's): the caller must write every element.
    pub fn take<T: Element>(&self, len: usize) -> Vec<T> {
        if len.saturating_mul(std::mem::size_of::<T>()) >= MIN_BYTES {
            let key = (T::DTYPE, len);
            let found = {
                let mut inner = self.lock();
                let taken = inner.taken.entry(key).or_default();
                *taken += 1;
                let taken = *taken;
                let demand = inner.demand.entry(key).or_default();
                *demand = (*demand).max(taken);
                inner.free.get_mut(&key).and_then(Vec::pop)
            };
            if let Some(v) = found.and_then(T::unwrap_vec) {
                return v;
            }
        }
        vec![T::default(); len]
    }

    /// Keeps `t`'s storage for a later `take` when `t` was its only owner,
    /// is large enough and its size is short of its demand; drops it
    /// otherwise.
    pub fn give(&self, t: Tensor) {
        if t.size_in_bytes() < MIN_BYTES {
            return;
        }
        let Some(s) = t.into_cpu_storage() else { return };
        let key = (s.dtype(), s.len());
        let mut inner = self.lock();
        let demand = inner.demand.get(&key).copied().unwrap_or(0);
        let list = inner.free.entry(key).or_default();
        if list.len() < demand {
            list.push(s);
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Buffers held, for tests.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.lock().free.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_buffer_comes_back_for_the_same_dtype_and_length_only() {
        let pool = BufferPool::default();
        let n = MIN_BYTES / 4;
        // A step that took one buffer of this size (a fresh, zeroed one).
        assert_eq!(pool.take::<f32>(n), vec![0.0; n]);
        let t = Tensor::from_vec(vec![7.0f32; n], [n]).unwrap();
        let ptr = t.as_slice::<f32>().unwrap().as_ptr();
        pool.give(t);
        assert_eq!(pool.held(), 1);
        pool.new_step();
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
    fn shared_small_untaken_and_surplus_buffers_are_not_kept() {
        let pool = BufferPool::default();
        let n = MIN_BYTES / 4;
        let tensor = |len: usize| Tensor::from_vec(vec![1.0f32; len], [len]).unwrap();
        // No kernel has taken this size yet.
        pool.give(tensor(n));
        assert_eq!(pool.held(), 0);
        // A step takes three.
        for _ in 0..3 {
            pool.take::<f32>(n);
        }
        // Still owned elsewhere (a clone, as a fetched tensor or a view).
        let t = tensor(n);
        let other = t.clone();
        pool.give(t);
        // Below the size worth keeping.
        pool.take::<f32>(n - 1);
        pool.give(tensor(n - 1));
        assert_eq!(pool.held(), 0);
        assert_eq!(other.as_slice::<f32>().unwrap()[0], 1.0);
        // At most as many as a step took.
        for _ in 0..5 {
            pool.give(tensor(n));
        }
        assert_eq!(pool.held(), 3);
        // A later step that takes one does not lower the bound.
        pool.new_step();
        pool.take::<f32>(n);
        pool.give(tensor(n));
        pool.give(tensor(n));
        assert_eq!(pool.held(), 3);
    }
}
