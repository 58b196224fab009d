//! Send and Recv: the ends of a cross-device edge, inserted only by the
//! partitioner. Attrs of both: `edge` ("node:output"), `send_device`,
//! `recv_device` (full device names), `comm_format` (a [`CommFormat`] name);
//! Recv also `dtype` and `shape`. A Send has one input and no outputs; a Recv
//! no inputs and one output.
//!
//! On the wire an f32 tensor travels in its CommFormat: as is for f32, else
//! encoded into an i8 tensor of exactly `CommFormat::bytes_for(n)` bytes,
//! which the receiving side decodes. Other dtypes always travel as is.
//!
//! The kernels find the step's rendezvous, step id, receive timeout and
//! statistics in [`StepComm`] (through `KernelCtx::comm`) and the node's
//! transfer (key, format, type) in [`TransferSpec`], both prepared once.
//! The executor receives asynchronously: it hands the arrived wire tensor to
//! the Recv kernel as its input, so a Recv never occupies a worker thread
//! while it waits; without one the kernel waits itself, at most the step's
//! receive timeout, and gives up at once when the step is aborted.

use super::{KernelCtx, Registry};
use crate::graph::NodeInfo;
use crate::framework::{Backend, DeviceName};
use crate::tensor::{DType, DeviceType};
use crate::error::{EngineError, Result};
use crate::tensor::TensorType;
use crate::framework::rendezvous::{Rendezvous, RendezvousKey};
use crate::tensor::{PartialShape, Shape};
use crate::tensor::Tensor;
use crate::framework::stats::{CommStats, TransferEnd, TransferStats};
use flowlab_hw::CommFormat;
use std::collections::HashMap;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub(crate) fn register(r: &mut Registry) {
    r.def("Send", 1, Some(1), |c| {
        c.n.str("edge")?;
        c.n.str("recv_device")?;
        Ok(vec![])
    })
    .stateful()
    .cheap();
    r.def("Recv", 0, Some(0), |c| {
        c.n.str("edge")?;
        c.n.str("send_device")?;
        Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: c.n.shape("shape")?.clone() }])
    })
    .stateful()
    .cheap();
    r.cpu("Send", &[], k_send);
    r.cpu("Recv", &[], k_recv);
    // A GPU's tensors cross through host memory: its Send copies the tensor
    // out of the device before the wire format applies, its Recv into the
    // device's memory after (as TensorFlow's GPU Send/Recv between
    // processes stage through the host).
    r.register_kernel("Send", DeviceType::Cuda, &[], k_send_from_device);
    r.register_kernel("Recv", DeviceType::Cuda, &[], k_recv_to_device);
}

fn k_send_from_device(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    c.inputs[0] = c.inputs[0].to_host()?;
    k_send(c)
}

fn k_recv_to_device(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let received = k_recv(c)?;
    match c.backend {
        Backend::Cuda(gpu) => received.iter().map(|t| t.to_cuda(gpu.allocator())).collect(),
        Backend::Host { .. } => Err(c.n.kernel_err("a GPU's Recv kernel ran on a host device")),
    }
}

/// The transfer of one Send or Recv node, decoded from its attrs once.
#[derive(Clone, Debug)]
pub(crate) struct TransferSpec {
    /// The key with step id 0.
    pub key: RendezvousKey,
    pub format: CommFormat,
    /// Name of the format as given in the attr (for statistics).
    pub format_name: String,
    /// Recv only: the declared type of the received tensor.
    pub ty: Option<TensorType>,
}

impl TransferSpec {
    /// Reads the attrs of a Send or Recv node.
    pub(crate) fn of(n: &NodeInfo) -> Result<TransferSpec> {
        let dev = |attr: &str| -> Result<DeviceName> {
            DeviceName::parse(n.str(attr)?).map_err(|e| n.attr_err(attr, e.to_string()))
        };
        let format_name = match n.attrs.get("comm_format") {
            Some(_) => n.str("comm_format")?.to_string(),
            None => "f32".to_string(),
        };
        let format: CommFormat = format_name.parse().map_err(|e: flowlab_hw::HwError| n.attr_err("comm_format", e.to_string()))?;
        let key = RendezvousKey { src_device: dev("send_device")?, dst_device: dev("recv_device")?, edge: n.str("edge")?.to_string(), step_id: 0 };
        let ty = if n.op == "Recv" { Some(TensorType { dtype: n.dtype("dtype")?, shape: n.shape("shape")?.clone() }) } else { None };
        Ok(TransferSpec { key, format, format_name, ty })
    }
}

/// Cumulative transfer counters of a session.
#[derive(Default)]
pub(crate) struct CommCounters {
    transfers: AtomicU64,
    bytes_sent: AtomicU64,
    bytes_f32: AtomicU64,
}

impl CommCounters {
    pub(crate) fn snapshot(&self) -> CommStats {
        CommStats {
            transfers: self.transfers.load(Ordering::Relaxed),
            bytes_sent: self.bytes_sent.load(Ordering::Relaxed),
            bytes_f32: self.bytes_f32.load(Ordering::Relaxed),
        }
    }
}

/// What the Send and Recv kernels of one step share: the step's
/// rendezvous and id, the receive timeout, and where statistics go.
pub(crate) struct StepComm<'a> {
    pub rdv: &'a dyn Rendezvous,
    pub step_id: u64,
    pub recv_timeout: Duration,
    /// How long a device's driver spins for an arrival before it sleeps.
    pub recv_spin: Duration,
    pub counters: &'a CommCounters,
    /// The instant step times are measured from.
    pub start: Instant,
    /// Per-transfer records, when the step is traced: sends leave their
    /// start here (by key), receives complete them.
    pub trace: Option<Mutex<TransferTrace>>,
    /// The step's first error, with its device.
    pub first_error: Mutex<Option<EngineError>>,
    /// Deliveries over emulated links, when the session has any.
    pub links: Option<&'a crate::framework::link::LinkDelivery<'a>>,
}

#[derive(Default)]
pub(crate) struct TransferTrace {
    /// (edge, destination) -> (start, bytes, format) of a send whose
    /// receive has not run here (yet, or at all: in another process).
    started: HashMap<(String, String), (f64, u64, String)>,
    pub done: Vec<TransferStats>,
    /// Receives whose send did not run here (another process's).
    pub received: Vec<TransferEnd>,
}

impl TransferTrace {
    /// The sends no receive here completed: in a task's partition, every
    /// send (their receivers are other processes).
    pub(crate) fn unmatched_sends(&mut self, send_device: &str) -> Vec<TransferEnd> {
        let mut v: Vec<TransferEnd> = self
            .started
            .drain()
            .map(|((edge, recv_device), (at_us, bytes, format))| TransferEnd { edge, send_device: send_device.to_string(), recv_device, format, bytes, at_us })
            .collect();
        v.sort_by(|a, b| a.at_us.total_cmp(&b.at_us).then_with(|| a.edge.cmp(&b.edge)));
        v
    }
}

impl StepComm<'_> {
    fn now_us(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e6
    }

    /// Records `err` (on `device`) as the step's error if it is the first,
    /// and aborts the rendezvous so every other device stops waiting.
    pub(crate) fn fail(&self, device: &str, err: EngineError) {
        let err = EngineError::OnDevice { device: device.to_string(), error: Box::new(err) };
        self.rdv.abort(&err);
        let mut first = self.first_error.lock();
        if first.is_none() {
            *first = Some(err);
        }
    }
}

fn comm<'a>(c: &KernelCtx<'a>) -> Result<(&'a StepComm<'a>, &'a TransferSpec)> {
    match (c.comm, c.transfer) {
        (Some(comm), Some(spec)) => Ok((comm, spec)),
        _ => Err(c.n.kernel_err("Send and Recv run only in a multi-device step (the partitioner inserts them)")),
    }
}

fn k_send(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (comm, spec) = comm(c)?;
    let t0 = comm.trace.as_ref().map(|_| comm.now_us());
    let t = &c.inputs[0];
    let raw = t.size_in_bytes() as u64;
    let key = spec.key.for_step(comm.step_id);
    let wire = encode_wire(t, spec.format)?;
    let sent = wire.size_in_bytes() as u64;
    // The start is recorded before the tensor leaves: the Recv on the other
    // device may run (and look for it) before this kernel returns.
    if let (Some(tr), Some(t0)) = (&comm.trace, t0) {
        let mut tr = tr.lock();
        tr.started.insert((key.edge.clone(), key.dst_device.to_string()), (t0, sent, spec.format_name.clone()));
    }
    let wire = match comm.links {
        Some(l) => l.send(&key, wire),
        None => Some(wire),
    };
    if let Some(wire) = wire {
        comm.rdv.send(&key, wire)?;
    }
    comm.counters.transfers.fetch_add(1, Ordering::Relaxed);
    comm.counters.bytes_sent.fetch_add(sent, Ordering::Relaxed);
    comm.counters.bytes_f32.fetch_add(raw, Ordering::Relaxed);
    Ok(vec![])
}

fn k_recv(c: &mut KernelCtx) -> Result<Vec<Tensor>> {
    let (comm, spec) = comm(c)?;
    let ty = spec.ty.as_ref().ok_or_else(|| c.n.kernel_err("Recv without a declared type"))?;
    let wire = match c.inputs.pop() {
        Some(w) => w,
        None => comm.rdv.recv(&spec.key.for_step(comm.step_id), comm.recv_timeout)?,
    };
    // The step's key (a copy of its strings) is built only when it is needed.
    let t = decode_wire(&spec.key, comm.step_id, wire, spec.format, ty.dtype, &ty.shape)?;
    if let Some(tr) = &comm.trace {
        let key = spec.key.for_step(comm.step_id);
        let end = comm.now_us();
        let mut tr = tr.lock();
        let dst = key.dst_device.to_string();
        match tr.started.remove(&(key.edge.clone(), dst.clone())) {
            Some((start, bytes, _)) => tr.done.push(TransferStats {
                edge: key.edge,
                send_device: key.src_device.to_string(),
                recv_device: dst,
                format: spec.format_name.clone(),
                bytes,
                start_us: start,
                end_us: end,
            }),
            // sent by another process: its start is in that one's timeline
            None => tr.received.push(TransferEnd {
                edge: key.edge,
                send_device: key.src_device.to_string(),
                recv_device: dst,
                format: spec.format_name.clone(),
                bytes: 0,
                at_us: end,
            }),
        }
    }
    Ok(vec![t])
}

/// The format a tensor of `dtype` actually travels in: `format` for f32,
/// as is (F32, meaning "unchanged") for every other dtype.
pub fn wire_format(dtype: DType, format: CommFormat) -> CommFormat {
    if dtype == DType::F32 { format } else { CommFormat::F32 }
}

/// Encodes `t` in `format` and leaves it under `key`; returns the bytes sent.
pub fn send_tensor(rdv: &dyn Rendezvous, key: &RendezvousKey, t: &Tensor, format: CommFormat) -> Result<u64> {
    let wire = encode_wire(t, format)?;
    let sent = wire.size_in_bytes() as u64;
    rdv.send(key, wire)?;
    Ok(sent)
}

/// `t` as it travels in `format`: itself (f32 or a non-f32 dtype), or its
/// encoded bytes as a flat i8 tensor.
fn encode_wire(t: &Tensor, format: CommFormat) -> Result<Tensor> {
    let format = wire_format(t.dtype(), format);
    if format == CommFormat::F32 {
        return Ok(t.clone());
    }
    let bytes = format.encode(t.as_slice::<f32>()?);
    let n = bytes.len();
    Tensor::from_vec(bytes.into_iter().map(|b| b as i8).collect::<Vec<i8>>(), Shape::new(vec![n]))
}

/// Takes the tensor under `key` and decodes it to `dtype` and `shape`.
pub fn recv_tensor(
    rdv: &dyn Rendezvous,
    key: &RendezvousKey,
    format: CommFormat,
    dtype: DType,
    shape: &Shape,
    timeout: Duration,
) -> Result<Tensor> {
    let wire = rdv.recv(key, timeout)?;
    let partial = PartialShape::new(shape.dims().iter().map(|&d| Some(d)).collect());
    decode_wire(key, key.step_id, wire, format, dtype, &partial)
}

/// Decodes a received wire tensor to `dtype` and a shape that fits `shape`.
/// An encoded tensor travels flat: its shape is `shape` with at most one
/// unknown dimension filled in from the element count. Errors name `key`
/// in step `step_id`.
pub(crate) fn decode_wire(
    key: &RendezvousKey,
    step_id: u64,
    wire: Tensor,
    format: CommFormat,
    dtype: DType,
    shape: &PartialShape,
) -> Result<Tensor> {
    let format = wire_format(dtype, format);
    let bad = |detail: String| EngineError::Rendezvous { key: key.for_step(step_id).to_string(), detail };
    let t = if format == CommFormat::F32 {
        wire
    } else {
        let bytes: &[u8] = bytemuck::cast_slice(wire.as_slice::<i8>()?);
        let v = format.decode(bytes).map_err(|e| bad(e.to_string()))?;
        let n = v.len();
        let known: usize = shape.dims().iter().flatten().product();
        let unknown = shape.dims().iter().filter(|d| d.is_none()).count();
        let dims: Vec<usize> = match unknown {
            0 => shape.dims().iter().flatten().copied().collect(),
            1 if known > 0 && n % known == 0 => shape.dims().iter().map(|d| d.unwrap_or(n / known)).collect(),
            _ => {
                return Err(bad(format!(
                    "{n} values in {format} do not fill shape {shape} (an encoded tensor may leave one dimension unknown)"
                )));
            }
        };
        Tensor::from_vec(v, Shape::new(dims))?
    };
    if t.dtype() != dtype || !shape.accepts(t.shape()) {
        return Err(bad(format!("expected {dtype}{shape}, received {}{}", t.dtype(), t.shape())));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::DeviceName;
    use crate::framework::rendezvous::LocalRendezvous;
    use std::sync::Arc;

    #[test]
    fn byte_counts_and_round_trip_through_a_send_recv_pair() {
        let r = Arc::new(LocalRendezvous::new());
        let v: Vec<f32> = (0..100).map(|i| (i as f32 - 50.0) * 0.37).collect();
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let t = Tensor::from_vec(v.clone(), Shape::new(vec![10, 10])).unwrap();
        for (step, (f, bytes)) in
            [("f32", 400), ("f16", 200), ("bf16", 200), ("int8", 104), ("int8:32", 100 + 4 * 4)].into_iter().enumerate()
        {
            let f: CommFormat = f.parse().unwrap();
            let key = RendezvousKey {
                src_device: DeviceName::full("localhost", 0, 0, "CPU", 0),
                dst_device: DeviceName::full("localhost", 0, 0, "CPU", 1),
                edge: "w:0".into(),
                step_id: step as u64,
            };
            let r2 = r.clone();
            let k2 = key.clone();
            let recv = std::thread::spawn(move || {
                recv_tensor(&*r2, &k2, f, DType::F32, &Shape::new(vec![10, 10]), Duration::from_secs(20))
            });
            assert_eq!(send_tensor(&*r, &key, &t, f).unwrap(), bytes, "{f}");
            assert_eq!(f.bytes_for(100), bytes, "{f}");
            let back = recv.join().unwrap().unwrap();
            assert_eq!(back.dims(), &[10, 10]);
            for (x, y) in v.iter().zip(back.to_vec::<f32>().unwrap()) {
                let bound = f.round_trip_bound(*x, max) * (1.0 + 1e-6);
                assert!(f64::from((x - y).abs()) <= bound, "{f}: {x} -> {y}");
            }
        }
        // Non-f32 tensors travel unchanged whatever the format.
        let key = RendezvousKey {
            src_device: DeviceName::full("localhost", 0, 0, "CPU", 0),
            dst_device: DeviceName::full("localhost", 0, 0, "CPU", 1),
            edge: "ids:0".into(),
            step_id: 0,
        };
        let ids = Tensor::from_vec(vec![1i64, 2, 3], Shape::new(vec![3])).unwrap();
        assert_eq!(send_tensor(&*r, &key, &ids, CommFormat::Bf16).unwrap(), 24);
        let got = recv_tensor(&*r, &key, CommFormat::Bf16, DType::I64, &Shape::new(vec![3]), Duration::from_secs(1)).unwrap();
        assert_eq!(got.to_vec::<i64>().unwrap(), vec![1, 2, 3]);
    }
}
