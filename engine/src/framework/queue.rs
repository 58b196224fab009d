//! Queues: bounded buffers of tuples of tensors that steps enqueue into and
//! dequeue from, as TensorFlow's FIFOQueue and RandomShuffleQueue (section
//! 3.1 of the paper: input pipelines that overlap reading with training).
//!
//! Contract. A queue belongs to a session and lives across steps. Enqueue
//! blocks while the queue is full, dequeue while it holds too few elements
//! (a shuffling queue keeps `min_after_dequeue` until closed). Closing
//! wakes every waiter: pending and later enqueues fail, dequeues drain what
//! is left and then fail with [`EngineError::QueueClosed`]. A wait longer
//! than the session's timeout is an error naming the queue, never a hang.

use crate::error::{EngineError, Result};
use crate::tensor::{DType, PartialShape, Tensor};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a queue holds and how it gives it back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct QueueSpec {
    pub capacity: usize,
    pub dtypes: Vec<DType>,
    pub shapes: Vec<PartialShape>,
    /// `Some((min_after_dequeue, seed))` for a RandomShuffleQueue.
    pub shuffle: Option<(usize, u64)>,
}

struct State {
    items: VecDeque<Vec<Tensor>>,
    closed: bool,
    rng: ChaCha8Rng,
}

/// One queue of one session.
pub(crate) struct Queue {
    pub name: String,
    pub spec: QueueSpec,
    timeout: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

impl Queue {
    pub fn new(name: &str, spec: QueueSpec, timeout: Duration) -> Queue {
        let seed = spec.shuffle.map_or(0, |(_, s)| s);
        Queue {
            name: name.into(),
            spec,
            timeout,
            state: Mutex::new(State { items: VecDeque::new(), closed: false, rng: ChaCha8Rng::seed_from_u64(seed) }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    fn closed(&self, node: &str, detail: String) -> EngineError {
        EngineError::QueueClosed { node: node.into(), queue: self.name.clone(), detail }
    }

    /// Waits until `ready` holds or the queue closes; errors after the timeout.
    fn wait<'a>(&'a self, node: &str, mut s: MutexGuard<'a, State>, what: &str, ready: impl Fn(&State) -> bool) -> Result<MutexGuard<'a, State>> {
        let deadline = Instant::now() + self.timeout;
        while !ready(&s) && !s.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(EngineError::Kernel {
                    node: node.into(),
                    op: "queue".into(),
                    detail: format!("queue '{}' waited {:?} to {what} ({} of {} elements)", self.name, self.timeout, s.items.len(), self.spec.capacity),
                });
            }
            self.changed.wait_for(&mut s, left);
        }
        Ok(s)
    }

    /// Checks one element against the queue's component types.
    pub fn check(&self, node: &str, elem: &[Tensor]) -> Result<()> {
        let bad = |detail: String| EngineError::Kernel { node: node.into(), op: "queue".into(), detail };
        if elem.len() != self.spec.dtypes.len() {
            return Err(bad(format!("queue '{}' holds {} components, got {}", self.name, self.spec.dtypes.len(), elem.len())));
        }
        for (i, t) in elem.iter().enumerate() {
            if t.dtype() != self.spec.dtypes[i] || !self.spec.shapes[i].accepts(t.shape()) {
                return Err(bad(format!(
                    "component {i} of queue '{}' is {}{}, got {}{}",
                    self.name,
                    self.spec.dtypes[i],
                    self.spec.shapes[i],
                    t.dtype(),
                    t.shape()
                )));
            }
        }
        Ok(())
    }

    /// Appends elements, each as its own wait for room.
    pub fn enqueue(&self, node: &str, elems: Vec<Vec<Tensor>>) -> Result<()> {
        for e in elems {
            self.check(node, &e)?;
            let s = self.lock();
            let mut s = self.wait(node, s, "enqueue", |s| s.items.len() < self.spec.capacity)?;
            if s.closed {
                return Err(self.closed(node, "cannot enqueue".into()));
            }
            s.items.push_back(e);
            drop(s);
            self.changed.notify_all();
        }
        Ok(())
    }

    /// Removes `n` elements (FIFO order, or uniformly at random beyond
    /// `min_after_dequeue` for a shuffling queue).
    /// The result is element-major: the components of the first element,
    /// then of the second, ...
    pub fn dequeue(&self, node: &str, n: usize) -> Result<Vec<Tensor>> {
        let keep = self.spec.shuffle.map_or(0, |(m, _)| m);
        let s = self.lock();
        let mut s = self.wait(node, s, "dequeue", |s| s.items.len() >= n + keep)?;
        if s.items.len() < n {
            let have = s.items.len();
            return Err(self.closed(node, format!("{have} elements left, {n} requested")));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let e = if self.spec.shuffle.is_some() {
                let len = s.items.len();
                let i = s.rng.random_range(0..len);
                s.items.swap_remove_back(i)
            } else {
                s.items.pop_front()
            };
            out.extend(e.into_iter().flatten());
        }
        drop(s);
        self.changed.notify_all();
        Ok(out)
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    pub fn size(&self) -> usize {
        self.lock().items.len()
    }
}
