//! Resources a stateful kernel reads or writes beyond its inputs: a
//! variable's value (owned by a session, shared by every step and device
//! that uses it) and a random op's run counter.
//!
//! Locks and panics: optimizers update a variable in place under its lock,
//! so a kernel that panics halfway leaves the value torn. That lock is
//! std's, and its poison is an error ([`EngineError::TornVariable`]) until
//! the whole value is set again; a `Session` outlives a panicking step where
//! something catches the panic (a task of the gRPC runtime keeps serving).
//! Every other lock in the engine is `parking_lot`'s, which does not
//! poison: each of their critical sections inserts, takes or replaces a
//! value built before the lock was taken, so a panic cannot leave it half
//! written.

use crate::error::{EngineError, Result};
use crate::tensor::{Tensor, TensorType};
use std::sync::{Arc, Mutex, MutexGuard};

/// The value of one variable in one session.
pub(crate) struct VarSlot {
    pub name: String,
    pub ty: TensorType,
    value: Mutex<Option<Tensor>>,
}

impl VarSlot {
    /// An uninitialized variable of this name and type.
    pub fn new(name: &str, ty: &TensorType) -> VarSlot {
        VarSlot { name: name.to_string(), ty: ty.clone(), value: Mutex::new(None) }
    }

    /// The value, for reading or updating in place; an error if an update
    /// panicked halfway through it.
    pub fn lock(&self) -> Result<MutexGuard<'_, Option<Tensor>>> {
        self.value.lock().map_err(|_| EngineError::TornVariable(self.name.clone()))
    }

    /// Replaces the whole value, which also ends a torn state.
    pub fn set(&self, value: Option<Tensor>) {
        let mut guard = self.value.lock().unwrap_or_else(|torn| torn.into_inner());
        *guard = value;
        drop(guard);
        self.value.clear_poison();
    }

    /// The value, unless an update holds it now.
    #[cfg(test)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Option<Tensor>>> {
        self.value.try_lock().ok()
    }
}

/// State a kernel reads or writes beyond its inputs.
#[derive(Clone)]
pub(crate) enum Resource {
    Var(Arc<VarSlot>),
    Rng(Arc<parking_lot::Mutex<u64>>),
    Queue(Arc<crate::framework::Queue>),
}
