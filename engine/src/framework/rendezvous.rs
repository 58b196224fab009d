//! Rendezvous: where a Send leaves a tensor and the matching Recv takes it.
//!
//! Contract. A [`RendezvousKey`] names one producer/consumer pair (source
//! device, destination device, edge "node:output") and the step; each key is
//! sent once and received once per step. The consumer may ask before or after
//! the producer sends. A receive never hangs: it ends with the tensor, or an
//! error naming the key when its deadline passes or the rendezvous is
//! aborted (a failing device aborts the step so the others stop waiting).
//! [`LocalRendezvous`] is the in-process implementation; the distributed
//! runtime implements [`Rendezvous`] over the network.

use crate::framework::DeviceName;
use crate::error::{EngineError, Result};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One transfer of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RendezvousKey {
    pub src_device: DeviceName,
    pub dst_device: DeviceName,
    /// The transferred tensor, "node:output" ("node:control" for a control edge).
    pub edge: String,
    /// Filled in per step (partitioning leaves it 0).
    pub step_id: u64,
}

impl RendezvousKey {
    /// The same transfer in step `step_id`.
    pub fn for_step(&self, step_id: u64) -> RendezvousKey {
        RendezvousKey { step_id, ..self.clone() }
    }
}

/// Hashes the edge, step and device ids only: keys that are equal hash
/// alike, and the device strings (job, type), which rarely tell two keys of
/// one rendezvous apart, cost nothing on every send and receive.
impl Hash for RendezvousKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.edge.hash(h);
        h.write_u64(self.step_id);
        h.write_u32(self.src_device.id.unwrap_or(u32::MAX));
        h.write_u32(self.dst_device.id.unwrap_or(u32::MAX));
    }
}

/// FNV-1a over the hashed bytes: the local table's keys are not chosen by
/// an adversary, and SipHash would dominate a small transfer's cost.
#[derive(Clone, Copy)]
struct KeyHasher(u64);

impl Default for KeyHasher {
    fn default() -> KeyHasher {
        KeyHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0 ^ n).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
    fn finish(&self) -> u64 {
        // Final avalanche so the low bits the table uses depend on every input bit.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^ (x >> 33)
    }
}

impl fmt::Display for RendezvousKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "'{}' from {} to {} (step {})", self.edge, self.src_device, self.dst_device, self.step_id)
    }
}

/// A place where Sends leave tensors for Recvs.
pub trait Rendezvous: Send + Sync {
    /// Leaves `tensor` under `key`; never blocks. Sending a key twice is an error.
    fn send(&self, key: &RendezvousKey, tensor: Tensor) -> Result<()>;
    /// Takes the tensor under `key`, waiting at most `timeout` for it.
    fn recv(&self, key: &RendezvousKey, timeout: Duration) -> Result<Tensor>;
    /// Asks for the tensor under `key` without waiting: `done` is called
    /// once, with the tensor (at once if it is there, else by the sender's
    /// thread) or with the abort error. Whoever calls this keeps its own
    /// deadline (the executor does: a device waits without a thread).
    /// Takes the key by value: a table that keeps it need not copy it.
    fn recv_async(&self, key: RendezvousKey, done: RecvCallback);
    /// Fails every pending and later send and recv with `err`'s message.
    fn abort(&self, err: &EngineError);
}

/// What [`Rendezvous::recv_async`] calls with the outcome.
pub type RecvCallback = Box<dyn FnOnce(Result<Tensor>) + Send>;

enum Slot {
    /// Sent, not yet received.
    Ready(Tensor),
    /// A receiver is waiting.
    Waiting,
    /// An asynchronous receiver waits for its callback.
    Callback(RecvCallback),
    /// Sent and received: the key is used up for this step.
    Done,
}

#[derive(Default)]
struct State {
    slots: HashMap<RendezvousKey, Slot, BuildHasherDefault<KeyHasher>>,
    aborted: Option<String>,
    /// Blocking receivers parked on the condition variable: a send wakes
    /// them only when there are any (a futex wake is a system call).
    sleepers: usize,
}

/// In-process rendezvous: a table of keys under one mutex, receivers wait
/// on a condition variable. One per session; [`LocalRendezvous::end_step`]
/// forgets a finished step's keys.
#[derive(Default)]
pub struct LocalRendezvous {
    state: Mutex<State>,
    cond: Condvar,
}

fn rdv_err(key: &RendezvousKey, detail: impl Into<String>) -> EngineError {
    EngineError::Rendezvous { key: key.to_string(), detail: detail.into() }
}

impl LocalRendezvous {
    pub fn new() -> LocalRendezvous {
        LocalRendezvous::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Forgets every key of step `step_id` (tensors sent but never received
    /// are dropped).
    pub fn end_step(&self, step_id: u64) {
        self.lock().slots.retain(|k, _| k.step_id != step_id);
    }

    /// Number of keys remembered (sent, awaited or used) over all steps.
    pub fn num_keys(&self) -> usize {
        self.lock().slots.len()
    }
}

impl Rendezvous for LocalRendezvous {
    fn send(&self, key: &RendezvousKey, tensor: Tensor) -> Result<()> {
        let mut s = self.lock();
        if let Some(msg) = &s.aborted {
            return Err(rdv_err(key, format!("send after abort: {msg}")));
        }
        match s.slots.get_mut(key) {
            Some(Slot::Ready(_)) | Some(Slot::Done) => Err(rdv_err(key, "sent twice in one step")),
            Some(slot @ Slot::Callback(_)) => {
                if let Slot::Callback(done) = std::mem::replace(slot, Slot::Done) {
                    drop(s);
                    done(Ok(tensor));
                }
                Ok(())
            }
            Some(slot @ Slot::Waiting) => {
                *slot = Slot::Ready(tensor);
                let wake = s.sleepers > 0;
                drop(s);
                if wake {
                    self.cond.notify_all();
                }
                Ok(())
            }
            None => {
                s.slots.insert(key.clone(), Slot::Ready(tensor));
                Ok(())
            }
        }
    }

    fn recv(&self, key: &RendezvousKey, timeout: Duration) -> Result<Tensor> {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        match s.slots.get(key) {
            Some(Slot::Done) => return Err(rdv_err(key, "received twice in one step")),
            Some(Slot::Waiting) | Some(Slot::Callback(_)) => return Err(rdv_err(key, "two receivers wait for one key")),
            Some(Slot::Ready(_)) => {}
            None => {
                s.slots.insert(key.clone(), Slot::Waiting);
            }
        }
        loop {
            if let Some(msg) = &s.aborted {
                return Err(rdv_err(key, format!("aborted: {msg}")));
            }
            if let Some(slot @ Slot::Ready(_)) = s.slots.get_mut(key)
                && let Slot::Ready(t) = std::mem::replace(slot, Slot::Done)
            {
                return Ok(t);
            }
            if let Some(Slot::Done) = s.slots.get(key) {
                return Err(rdv_err(key, "received twice in one step"));
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(rdv_err(
                    key,
                    format!("no tensor arrived within {timeout:?} (the Send on {} did not run)", key.src_device),
                ));
            }
            s.sleepers += 1;
            self.cond.wait_for(&mut s, deadline - now);
            s.sleepers -= 1;
        }
    }

    fn recv_async(&self, key: RendezvousKey, done: RecvCallback) {
        let key = &key;
        let mut s = self.lock();
        if let Some(msg) = &s.aborted {
            let e = rdv_err(key, format!("aborted: {msg}"));
            drop(s);
            return done(Err(e));
        }
        match s.slots.get_mut(key) {
            Some(Slot::Done) => {
                drop(s);
                done(Err(rdv_err(key, "received twice in one step")))
            }
            Some(Slot::Waiting) | Some(Slot::Callback(_)) => {
                drop(s);
                done(Err(rdv_err(key, "two receivers wait for one key")))
            }
            Some(slot @ Slot::Ready(_)) => {
                if let Slot::Ready(t) = std::mem::replace(slot, Slot::Done) {
                    drop(s);
                    done(Ok(t));
                }
            }
            None => {
                s.slots.insert(key.clone(), Slot::Callback(done));
            }
        }
    }

    fn abort(&self, err: &EngineError) {
        let mut s = self.lock();
        if s.aborted.is_none() {
            s.aborted = Some(err.to_string());
        }
        let msg = s.aborted.clone().unwrap_or_default();
        let waiting: Vec<(RendezvousKey, RecvCallback)> = s
            .slots
            .iter_mut()
            .filter(|(_, v)| matches!(v, Slot::Callback(_)))
            .map(|(k, v)| match std::mem::replace(v, Slot::Done) {
                Slot::Callback(done) => Some((k.clone(), done)),
                _ => None,
            })
            .flatten()
            .collect();
        drop(s);
        self.cond.notify_all();
        for (k, done) in waiting {
            done(Err(rdv_err(&k, format!("aborted: {msg}"))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::thread;

    fn key(edge: &str, step: u64) -> RendezvousKey {
        RendezvousKey {
            src_device: DeviceName::full("localhost", 0, 0, "CPU", 0),
            dst_device: DeviceName::full("localhost", 0, 0, "CPU", 1),
            edge: edge.into(),
            step_id: step,
        }
    }

    const LONG: Duration = Duration::from_secs(20);

    #[test]
    fn send_before_recv_and_recv_before_send_on_two_threads() {
        let r = Arc::new(LocalRendezvous::new());
        // Send first, receive later on another thread.
        r.send(&key("a:0", 1), Tensor::scalar(1f32)).unwrap();
        let r2 = r.clone();
        let got = thread::spawn(move || r2.recv(&key("a:0", 1), LONG)).join().unwrap().unwrap();
        assert_eq!(got.to_vec::<f32>().unwrap(), vec![1.0]);
        // Receiver waits first: the sender runs only once the receiver is parked.
        let r2 = r.clone();
        let waiter = thread::spawn(move || r2.recv(&key("b:0", 1), LONG));
        while !matches!(r.lock().slots.get(&key("b:0", 1)), Some(Slot::Waiting)) {
            thread::yield_now();
        }
        r.send(&key("b:0", 1), Tensor::scalar(2f32)).unwrap();
        assert_eq!(waiter.join().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![2.0]);
        // The same edge in another step is a different key.
        r.send(&key("a:0", 2), Tensor::scalar(3f32)).unwrap();
        assert_eq!(r.recv(&key("a:0", 2), LONG).unwrap().to_vec::<f32>().unwrap(), vec![3.0]);
        assert_eq!(r.num_keys(), 3);
        r.end_step(1);
        assert_eq!(r.num_keys(), 1);
    }

    #[test]
    fn a_key_is_used_once_per_step() {
        let r = LocalRendezvous::new();
        let k = key("x:0", 7);
        r.send(&k, Tensor::scalar(1f32)).unwrap();
        let e = r.send(&k, Tensor::scalar(1f32)).unwrap_err().to_string();
        let name = "'x:0' from /job:localhost/replica:0/task:0/device:CPU:0 to /job:localhost/replica:0/task:0/device:CPU:1 (step 7)";
        assert_eq!(e, format!("rendezvous {name}: sent twice in one step"));
        r.recv(&k, LONG).unwrap();
        assert_eq!(r.recv(&k, LONG).unwrap_err().to_string(), format!("rendezvous {name}: received twice in one step"));
        assert_eq!(r.send(&k, Tensor::scalar(1f32)).unwrap_err().to_string(), format!("rendezvous {name}: sent twice in one step"));
    }

    /// A channel the callbacks of `recv_async` report to.
    fn callback() -> (RecvCallback, std::sync::mpsc::Receiver<Result<Tensor>>) {
        let (tx, rx) = std::sync::mpsc::channel();
        (Box::new(move |r| tx.send(r).unwrap()), rx)
    }

    #[test]
    fn recv_async_before_and_after_send_and_once_per_step() {
        let r = LocalRendezvous::new();
        // Asked first: the sender's call runs the callback.
        let (done, rx) = callback();
        r.recv_async(key("p:0", 4), done);
        assert!(rx.try_recv().is_err(), "no tensor sent yet");
        r.send(&key("p:0", 4), Tensor::scalar(5f32)).unwrap();
        assert_eq!(rx.try_recv().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![5.0]);
        let e = r.send(&key("p:0", 4), Tensor::scalar(5f32)).unwrap_err().to_string();
        assert!(e.starts_with("rendezvous 'p:0' from /job:localhost") && e.ends_with("(step 4): sent twice in one step"), "{e}");
        // Sent first: the callback runs at once.
        r.send(&key("q:0", 4), Tensor::scalar(6f32)).unwrap();
        let (done, rx) = callback();
        r.recv_async(key("q:0", 4), done);
        assert_eq!(rx.try_recv().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![6.0]);
        let (done, rx) = callback();
        r.recv_async(key("q:0", 4), done);
        let e = rx.try_recv().unwrap().unwrap_err().to_string();
        assert!(e.ends_with("(step 4): received twice in one step"), "{e}");
    }

    #[test]
    fn keys_that_differ_only_in_unhashed_device_parts_stay_apart() {
        // The hash skips the job and device type: equal ids must still be told apart.
        let r = LocalRendezvous::new();
        let cpu = key("e:0", 1);
        let mut gpu = key("e:0", 1);
        gpu.src_device = DeviceName::full("localhost", 0, 0, "GPU", 0);
        r.send(&cpu, Tensor::scalar(1f32)).unwrap();
        r.send(&gpu, Tensor::scalar(2f32)).unwrap();
        assert_eq!(r.recv(&gpu, LONG).unwrap().to_vec::<f32>().unwrap(), vec![2.0]);
        assert_eq!(r.recv(&cpu, LONG).unwrap().to_vec::<f32>().unwrap(), vec![1.0]);
        assert_eq!(r.num_keys(), 2);
    }

    #[test]
    fn abort_fails_pending_and_later_async_receivers() {
        let r = LocalRendezvous::new();
        let (done, rx) = callback();
        r.recv_async(key("w:0", 2), done);
        r.abort(&EngineError::Kernel { node: "n".into(), op: "Neg".into(), detail: "bad".into() });
        let e = rx.try_recv().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("rendezvous 'w:0' from") && e.ends_with("(step 2): aborted: node 'n' (Neg): bad"), "{e}");
        let (done, rx) = callback();
        r.recv_async(key("later:0", 2), done);
        let e = rx.try_recv().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("rendezvous 'later:0' from") && e.ends_with("aborted: node 'n' (Neg): bad"), "{e}");
    }

    #[test]
    fn timeout_names_the_key_and_devices() {
        let r = LocalRendezvous::new();
        let e = r.recv(&key("never:0", 3), Duration::from_millis(20)).unwrap_err().to_string();
        assert_eq!(
            e,
            "rendezvous 'never:0' from /job:localhost/replica:0/task:0/device:CPU:0 to \
             /job:localhost/replica:0/task:0/device:CPU:1 (step 3): no tensor arrived within 20ms \
             (the Send on /job:localhost/replica:0/task:0/device:CPU:0 did not run)"
        );
    }

    #[test]
    fn abort_wakes_waiting_receivers_and_fails_later_calls() {
        let r = Arc::new(LocalRendezvous::new());
        let r2 = r.clone();
        let waiter = thread::spawn(move || r2.recv(&key("y:0", 1), LONG));
        while !matches!(r.lock().slots.get(&key("y:0", 1)), Some(Slot::Waiting)) {
            thread::yield_now();
        }
        r.abort(&EngineError::Kernel { node: "div".into(), op: "Div".into(), detail: "boom".into() });
        let e = waiter.join().unwrap().unwrap_err().to_string();
        assert!(e.starts_with("rendezvous 'y:0' from /job:localhost"), "{e}");
        assert!(e.ends_with("(step 1): aborted: node 'div' (Div): boom"), "{e}");
        let e = r.send(&key("z:0", 1), Tensor::scalar(1f32)).unwrap_err().to_string();
        assert!(e.ends_with("send after abort: node 'div' (Div): boom"), "{e}");
    }
}
