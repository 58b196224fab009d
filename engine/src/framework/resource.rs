//! Resources a stateful kernel reads or writes beyond its inputs: a
//! variable's value (owned by a session, shared by every step and device
//! that uses it) and a random op's run counter.

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

    pub fn lock(&self) -> MutexGuard<'_, Option<Tensor>> {
        self.value.lock().unwrap_or_else(|e| e.into_inner())
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
    Rng(Arc<Mutex<u64>>),
    Queue(Arc<crate::framework::Queue>),
}
