//! Tensors in messages: dtype name, dims and raw little-endian element bytes.
//!
//! Contract: `from_proto(to_proto(t))` is `t` bit for bit (NaN payloads and
//! signed zeros included); a message with an unknown dtype or a byte count
//! that does not match its dims is an error naming both, never a panic.

use flowlab_engine::{DType, Tensor};
use half::{bf16, f16};

use crate::error::{Result, RuntimeError};
use crate::pb::TensorProto;

const DTYPES: [DType; 8] =
    [DType::F32, DType::F64, DType::F16, DType::BF16, DType::I8, DType::I32, DType::I64, DType::Bool];

fn bad(message: String) -> RuntimeError {
    RuntimeError::Message { message }
}

fn engine(e: flowlab_engine::EngineError) -> RuntimeError {
    RuntimeError::Engine { message: e.to_string() }
}

/// The element bytes of `t`, for every dtype stored as plain little-endian
/// values (all but `bool`).
fn raw_bytes(t: &Tensor) -> Option<&[u8]> {
    fn cast<T: flowlab_engine::Element + bytemuck::Pod>(t: &Tensor) -> Option<&[u8]> {
        t.as_slice::<T>().ok().map(bytemuck::cast_slice::<T, u8>)
    }
    match t.dtype() {
        DType::F32 => cast::<f32>(t),
        DType::F64 => cast::<f64>(t),
        DType::F16 => cast::<f16>(t),
        DType::BF16 => cast::<bf16>(t),
        DType::I8 => cast::<i8>(t),
        DType::I32 => cast::<i32>(t),
        DType::I64 => cast::<i64>(t),
        DType::Bool => None,
    }
}

/// A tensor lent to a message as its bytes: the message's `data` shares the
/// tensor's storage, so the only copy on the way out is the encoding into
/// the gRPC frame (a 2.7 MB weight set was copied twice before).
struct SharedElements(Tensor);

impl AsRef<[u8]> for SharedElements {
    fn as_ref(&self) -> &[u8] {
        // built only for tensors `raw_bytes` accepts
        raw_bytes(&self.0).unwrap_or(&[])
    }
}

/// The message form of `t`.
pub fn to_proto(t: &Tensor) -> Result<TensorProto> {
    let data = match t.dtype() {
        DType::Bool => t.as_slice::<bool>().map_err(engine)?.iter().map(|&b| u8::from(b)).collect::<Vec<u8>>().into(),
        _ => {
            raw_bytes(t).ok_or_else(|| bad(format!("tensor of dtype {} has no element bytes", t.dtype())))?;
            bytes::Bytes::from_owner(SharedElements(t.clone()))
        }
    };
    Ok(TensorProto { dtype: t.dtype().name().to_string(), dims: t.dims().iter().map(|&d| d as u64).collect(), data })
}

/// The dtype and dims a message names, checked against its `len` data
/// bytes.
pub(crate) fn checked(dtype: &str, dims: &[u64], len: usize) -> Result<(DType, Vec<usize>)> {
    let dtype = DTYPES
        .into_iter()
        .find(|d| d.name() == dtype)
        .ok_or_else(|| bad(format!("tensor message has unknown dtype `{dtype}`")))?;
    let dims: Vec<usize> = dims.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| {
        bad(format!("tensor message dims {dims:?} do not fit this machine"))
    })?;
    let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let want = n.and_then(|n| n.checked_mul(dtype.size_in_bytes()));
    if want != Some(len) {
        return Err(bad(format!("tensor message of dtype {dtype} and dims {dims:?} carries {len} bytes (expected {want:?})")));
    }
    Ok((dtype, dims))
}

/// The tensor a message carries.
pub fn from_proto(p: &TensorProto) -> Result<Tensor> {
    let (dtype, dims) = checked(&p.dtype, &p.dims, p.data.len())?;
    fn vec<T: flowlab_engine::Element + bytemuck::Pod>(data: &[u8], dims: Vec<usize>) -> Result<Tensor> {
        // copy into an aligned vector (the message's buffer may be
        // unaligned), without zeroing it first: a received weight set is
        // megabytes, and the zeroing was a pass as long as the copy
        let n = data.len() / std::mem::size_of::<T>();
        let mut v: Vec<T> = Vec::with_capacity(n);
        // SAFETY: `v` has room for `n` elements, `data` holds exactly
        // `n * size_of::<T>()` bytes (checked by the caller) and does not
        // overlap `v`; every bit pattern is a valid `T` (`T: Pod`), so the
        // first `n` elements are initialized once the bytes are copied.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * std::mem::size_of::<T>());
            v.set_len(n);
        }
        Tensor::from_vec(v, dims).map_err(engine)
    }
    match dtype {
        DType::F32 => vec::<f32>(&p.data, dims),
        DType::F64 => vec::<f64>(&p.data, dims),
        DType::F16 => vec::<f16>(&p.data, dims),
        DType::BF16 => vec::<bf16>(&p.data, dims),
        DType::I8 => vec::<i8>(&p.data, dims),
        DType::I32 => vec::<i32>(&p.data, dims),
        DType::I64 => vec::<i64>(&p.data, dims),
        DType::Bool => Tensor::from_vec(p.data.iter().map(|&b| b != 0).collect::<Vec<bool>>(), dims).map_err(engine),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_bit_for_bit() {
        let raw = [0.0, -0.0, 1.5, -3.25, f64::NAN, 1e30, -7.0, 2.0];
        for d in DTYPES {
            let t = Tensor::from_f64s(d, &raw, vec![2, 4]).unwrap();
            let back = from_proto(&to_proto(&t).unwrap()).unwrap();
            assert_eq!(back.dims(), t.dims());
            assert_eq!(to_proto(&back).unwrap().data, to_proto(&t).unwrap().data, "{d}");
            // the message's bytes are the element bytes, little-endian
            let direct: Vec<u8> = match d {
                DType::Bool => t.as_slice::<bool>().unwrap().iter().map(|&b| u8::from(b)).collect(),
                _ => (0..8).flat_map(|i| le_bytes(&t, i)).collect(),
            };
            assert_eq!(to_proto(&t).unwrap().data.as_ref(), &direct[..], "{d}");
        }
        // a NaN with a payload keeps it
        let t = Tensor::from_vec(vec![f32::from_bits(0x7fc0_1234)], vec![1]).unwrap();
        let back = from_proto(&to_proto(&t).unwrap()).unwrap();
        assert_eq!(back.as_slice::<f32>().unwrap()[0].to_bits(), 0x7fc0_1234);
    }

    /// Element `i` of `t` in little-endian bytes, through each type's own
    /// `to_le_bytes` rather than a cast of the storage.
    fn le_bytes(t: &Tensor, i: usize) -> Vec<u8> {
        match t.dtype() {
            DType::F32 => t.as_slice::<f32>().unwrap()[i].to_le_bytes().to_vec(),
            DType::F64 => t.as_slice::<f64>().unwrap()[i].to_le_bytes().to_vec(),
            DType::F16 => t.as_slice::<f16>().unwrap()[i].to_le_bytes().to_vec(),
            DType::BF16 => t.as_slice::<bf16>().unwrap()[i].to_le_bytes().to_vec(),
            DType::I8 => t.as_slice::<i8>().unwrap()[i].to_le_bytes().to_vec(),
            DType::I32 => t.as_slice::<i32>().unwrap()[i].to_le_bytes().to_vec(),
            DType::I64 => t.as_slice::<i64>().unwrap()[i].to_le_bytes().to_vec(),
            DType::Bool => vec![u8::from(t.as_slice::<bool>().unwrap()[i])],
        }
    }

    #[test]
    fn malformed_messages_are_errors_naming_the_problem() {
        let p = TensorProto { dtype: "f33".into(), dims: vec![1], data: vec![0; 4].into() };
        assert!(from_proto(&p).unwrap_err().to_string().contains("f33"));
        let p = TensorProto { dtype: "f32".into(), dims: vec![2, 3], data: vec![0; 20].into() };
        let e = from_proto(&p).unwrap_err().to_string();
        assert!(e.contains("20 bytes") && e.contains("[2, 3]"), "{e}");
        let p = TensorProto { dtype: "f32".into(), dims: vec![u64::MAX, 4], data: Vec::<u8>::new().into() };
        assert!(from_proto(&p).is_err());
    }
}
