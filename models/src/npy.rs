//! `.npy` files as engine tensors, for `flowlab onnx run`'s inputs and
//! outputs and the ONNX fixtures' references (numpy's own format, read and
//! written by the npyz crate).

use crate::ModelError;
use flowlab_engine::{DType, Tensor};
use npyz::WriterBuilder;
use std::path::Path;

fn npy_err(path: &Path, detail: impl std::fmt::Display) -> ModelError {
    ModelError::Npy { file: path.display().to_string(), detail: detail.to_string() }
}

/// The tensor in the `.npy` file at `path` (C order; f32, f64, i64, i32,
/// i8 or bool elements).
pub fn read(path: &Path) -> Result<Tensor, ModelError> {
    let e = |d: String| npy_err(path, d);
    let bytes = std::fs::read(path).map_err(|x| e(format!("cannot read: {x}")))?;
    let npy = npyz::NpyFile::new(&bytes[..]).map_err(|x| e(format!("not an .npy file: {x}")))?;
    if npy.order() != npyz::Order::C {
        return Err(e("Fortran-ordered arrays are not read (save with numpy.ascontiguousarray)".into()));
    }
    let shape: Vec<usize> = npy.shape().iter().map(|&d| usize::try_from(d).map_err(|_| e(format!("dimension {d} too large")))).collect::<Result<_, _>>()?;
    let descr = npy.dtype().descr().trim_matches('\'').to_string();
    let io = |x: std::io::Error| e(format!("reading its {descr} data: {x}"));
    let t = match descr.as_str() {
        "<f4" => Tensor::from_vec(npy.into_vec::<f32>().map_err(io)?, shape),
        "<f8" => Tensor::from_vec(npy.into_vec::<f64>().map_err(io)?, shape),
        "<i8" => Tensor::from_vec(npy.into_vec::<i64>().map_err(io)?, shape),
        "<i4" => Tensor::from_vec(npy.into_vec::<i32>().map_err(io)?, shape),
        "|i1" => Tensor::from_vec(npy.into_vec::<i8>().map_err(io)?, shape),
        "|b1" => Tensor::from_vec(npy.into_vec::<bool>().map_err(io)?, shape),
        d => return Err(e(format!("element type {d} is not read (float32, float64, int64, int32, int8 or bool)"))),
    };
    t.map_err(|x| e(x.to_string()))
}

/// Writes `t` to `path` as `.npy`; f16 and bf16 are written as f32.
pub fn write(path: &Path, t: &Tensor) -> Result<(), ModelError> {
    let e = |d: String| npy_err(path, d);
    let shape: Vec<u64> = t.shape().dims().iter().map(|&d| d as u64).collect();
    let file = std::fs::File::create(path).map_err(|x| e(format!("cannot create: {x}")))?;
    let w = std::io::BufWriter::new(file);
    macro_rules! put {
        ($ty:ty, $data:expr) => {{
            let mut out = npyz::WriteOptions::<$ty>::new().default_dtype().shape(&shape).writer(w).begin_nd().map_err(|x| e(x.to_string()))?;
            out.extend($data).map_err(|x| e(x.to_string()))?;
            out.finish().map_err(|x| e(x.to_string()))
        }};
    }
    let te = |x: flowlab_engine::EngineError| e(x.to_string());
    match t.dtype() {
        DType::F32 => put!(f32, t.to_vec::<f32>().map_err(te)?),
        DType::F64 => put!(f64, t.to_vec::<f64>().map_err(te)?),
        DType::I64 => put!(i64, t.to_vec::<i64>().map_err(te)?),
        DType::I32 => put!(i32, t.to_vec::<i32>().map_err(te)?),
        DType::I8 => put!(i8, t.to_vec::<i8>().map_err(te)?),
        DType::Bool => put!(bool, t.to_vec::<bool>().map_err(te)?),
        DType::F16 | DType::BF16 => put!(f32, t.cast(DType::F32).map_err(te)?.to_vec::<f32>().map_err(te)?),
    }
}
