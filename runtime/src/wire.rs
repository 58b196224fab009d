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

/// The message form of `t`.
pub fn to_proto(t: &Tensor) -> Result<TensorProto> {
    fn bytes<T: flowlab_engine::Element + bytemuck::Pod>(t: &Tensor) -> Result<Vec<u8>> {
        Ok(bytemuck::cast_slice::<T, u8>(t.as_slice::<T>().map_err(engine)?).to_vec())
    }
    let data = match t.dtype() {
        DType::F32 => bytes::<f32>(t)?,
        DType::F64 => bytes::<f64>(t)?,
        DType::F16 => bytes::<f16>(t)?,
        DType::BF16 => bytes::<bf16>(t)?,
        DType::I8 => bytes::<i8>(t)?,
        DType::I32 => bytes::<i32>(t)?,
        DType::I64 => bytes::<i64>(t)?,
        DType::Bool => t.as_slice::<bool>().map_err(engine)?.iter().map(|&b| u8::from(b)).collect(),
    };
    Ok(TensorProto { dtype: t.dtype().name().to_string(), dims: t.dims().iter().map(|&d| d as u64).collect(), data: data.into() })
}

/// The tensor a message carries.
pub fn from_proto(p: &TensorProto) -> Result<Tensor> {
    let dtype = DTYPES
        .into_iter()
        .find(|d| d.name() == p.dtype)
        .ok_or_else(|| bad(format!("tensor message has unknown dtype `{}`", p.dtype)))?;
    let dims: Vec<usize> = p.dims.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| {
        bad(format!("tensor message dims {:?} do not fit this machine", p.dims))
    })?;
    let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    let want = n.and_then(|n| n.checked_mul(dtype.size_in_bytes()));
    if want != Some(p.data.len()) {
        return Err(bad(format!(
            "tensor message of dtype {dtype} and dims {dims:?} carries {} bytes (expected {want:?})",
            p.data.len()
        )));
    }
    fn vec<T: flowlab_engine::Element + bytemuck::Pod>(data: &[u8], dims: Vec<usize>) -> Result<Tensor> {
        // copy into an aligned vector: the message's buffer may be unaligned
        let mut v = vec![T::zeroed(); data.len() / std::mem::size_of::<T>()];
        bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(data);
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
        }
        // a NaN with a payload keeps it
        let t = Tensor::from_vec(vec![f32::from_bits(0x7fc0_1234)], vec![1]).unwrap();
        let back = from_proto(&to_proto(&t).unwrap()).unwrap();
        assert_eq!(back.as_slice::<f32>().unwrap()[0].to_bits(), 0x7fc0_1234);
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
