//! Send and Recv: the ends of a cross-device edge, inserted only by the
//! partitioner. Attrs of both: `edge` ("node:output"), `send_device`,
//! `recv_device` (full device names), `comm_format` (a [`CommFormat`] name);
//! Recv also `dtype` and `shape`. A Send has one input and no outputs; a Recv
//! no inputs and one output.
//!
//! On the wire an f32 tensor travels in its CommFormat: as is for f32, else
//! encoded into an i8 tensor of exactly `CommFormat::bytes_for(n)` bytes,
//! which the receiving side decodes. Other dtypes always travel as is.
//! No kernels are registered yet: a kernel needs the step's rendezvous and
//! step id, which the executor does not hand to kernels; [`send_tensor`] and
//! [`recv_tensor`] are what those kernels will call.

use super::Registry;
use crate::dtype::DType;
use crate::error::{EngineError, Result};
use crate::graph::TensorType;
use crate::rendezvous::{Rendezvous, RendezvousKey};
use crate::shape::Shape;
use crate::tensor::Tensor;
use flowlab_hw::CommFormat;
use std::time::Duration;

pub(crate) fn register(r: &mut Registry) {
    r.def("Send", 1, Some(1), |c| {
        c.n.str("edge")?;
        c.n.str("recv_device")?;
        Ok(vec![])
    })
    .stateful();
    r.def("Recv", 0, Some(0), |c| {
        c.n.str("edge")?;
        c.n.str("send_device")?;
        Ok(vec![TensorType { dtype: c.n.dtype("dtype")?, shape: c.n.shape("shape")?.clone() }])
    })
    .stateful();
}

/// The format a tensor of `dtype` actually travels in: `format` for f32,
/// as is (F32, meaning "unchanged") for every other dtype.
pub fn wire_format(dtype: DType, format: CommFormat) -> CommFormat {
    if dtype == DType::F32 { format } else { CommFormat::F32 }
}

/// Encodes `t` in `format` and leaves it under `key`; returns the bytes sent.
pub fn send_tensor(rdv: &dyn Rendezvous, key: &RendezvousKey, t: &Tensor, format: CommFormat) -> Result<u64> {
    let format = wire_format(t.dtype(), format);
    let wire = if format == CommFormat::F32 {
        t.clone()
    } else {
        let bytes = format.encode(t.as_slice::<f32>()?);
        let n = bytes.len();
        Tensor::from_vec(bytes.into_iter().map(|b| b as i8).collect::<Vec<i8>>(), Shape::new(vec![n]))?
    };
    let sent = wire.size_in_bytes() as u64;
    rdv.send(key, wire)?;
    Ok(sent)
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
    let format = wire_format(dtype, format);
    let bad = |detail: String| EngineError::Rendezvous { key: key.to_string(), detail };
    let t = if format == CommFormat::F32 {
        wire
    } else {
        let bytes: Vec<u8> = wire.as_slice::<i8>()?.iter().map(|&b| b as u8).collect();
        let v = format.decode(&bytes).map_err(|e| bad(e.to_string()))?;
        Tensor::from_vec(v, shape.clone())?
    };
    if t.dtype() != dtype || t.shape() != shape {
        return Err(bad(format!("expected {dtype}{shape}, received {}{}", t.dtype(), t.shape())));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::DeviceName;
    use crate::rendezvous::LocalRendezvous;
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
