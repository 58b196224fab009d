//! ONNX tensors (initializers, `Constant` values) as engine tensors: the
//! typed repeated fields, `raw_data` (little-endian, what exporters write)
//! and external data files beside the model (`location`, `offset`,
//! `length`), as ONNX's `external_data_helper` lays them out.

use super::proto::TensorProto;
use flowlab_engine::{DType, Tensor};
use std::path::Path;

/// ONNX's `TensorProto.DataType` codes the importer reads.
pub(crate) fn dtype_of(code: i32) -> Result<DType, String> {
    Ok(match code {
        1 => DType::F32,
        3 => DType::I8,
        6 => DType::I32,
        7 => DType::I64,
        9 => DType::Bool,
        10 => DType::F16,
        11 => DType::F64,
        16 => DType::BF16,
        c => return Err(format!("element type {c} ({}) is not imported", type_name(c))),
    })
}

fn type_name(code: i32) -> &'static str {
    match code {
        0 => "undefined",
        2 => "uint8",
        4 => "uint16",
        5 => "int16",
        8 => "string",
        12 => "uint32",
        13 => "uint64",
        14 => "complex64",
        15 => "complex128",
        _ => "float8 or newer",
    }
}

/// The engine tensor of `t`; `dir` is the model file's folder, where
/// external data files are looked up.
pub(crate) fn to_tensor(t: &TensorProto, dir: &Path) -> Result<Tensor, String> {
    let dtype = dtype_of(t.data_type())?;
    let dims: Vec<usize> = t.dims.iter().map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}"))).collect::<Result<_, _>>()?;
    let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| format!("dimensions {dims:?} overflow"))?;
    let external;
    let raw: Option<&[u8]> = if t.data_location() == super::proto::tensor_proto::DataLocation::External {
        external = read_external(t, dir, n.checked_mul(dtype.size_in_bytes()).ok_or("size overflows")?)?;
        Some(&external)
    } else {
        t.raw_data.as_deref()
    };
    let e = |e: flowlab_engine::EngineError| e.to_string();
    if let Some(raw) = raw {
        if raw.len() != n * dtype.size_in_bytes() {
            return Err(format!("{} bytes of data for {n} elements of {dtype}", raw.len()));
        }
        return Tensor::from_le_bytes(dtype, dims, raw).map_err(e);
    }
    let want = |len: usize, field: &str| if len == n { Ok(()) } else { Err(format!("{len} values in {field} for {n} elements")) };
    match dtype {
        DType::F32 => want(t.float_data.len(), "float_data").and_then(|_| Tensor::from_vec(t.float_data.clone(), dims).map_err(e)),
        DType::F64 => want(t.double_data.len(), "double_data").and_then(|_| Tensor::from_vec(t.double_data.clone(), dims).map_err(e)),
        DType::I64 => want(t.int64_data.len(), "int64_data").and_then(|_| Tensor::from_vec(t.int64_data.clone(), dims).map_err(e)),
        DType::I32 => want(t.int32_data.len(), "int32_data").and_then(|_| Tensor::from_vec(t.int32_data.clone(), dims).map_err(e)),
        DType::Bool => want(t.int32_data.len(), "int32_data").and_then(|_| Tensor::from_vec(t.int32_data.iter().map(|&x| x != 0).collect::<Vec<_>>(), dims).map_err(e)),
        DType::I8 => want(t.int32_data.len(), "int32_data").and_then(|_| Tensor::from_vec(t.int32_data.iter().map(|&x| x as i8).collect::<Vec<_>>(), dims).map_err(e)),
        // f16 and bf16 travel as their 16 bits in int32_data
        DType::F16 | DType::BF16 => {
            want(t.int32_data.len(), "int32_data")?;
            let bytes: Vec<u8> = t.int32_data.iter().flat_map(|&x| (x as u16).to_le_bytes()).collect();
            Tensor::from_le_bytes(dtype, dims, &bytes).map_err(e)
        }
    }
}

/// The bytes of an external tensor: `location` relative to the model's
/// folder (never outside it), `offset` and `length` as written.
fn read_external(t: &TensorProto, dir: &Path, want: usize) -> Result<Vec<u8>, String> {
    let get = |k: &str| t.external_data.iter().find(|e| e.key() == k).map(|e| e.value().to_string());
    let location = get("location").ok_or("external data without a location")?;
    let rel = Path::new(&location);
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location '{location}' leaves the model's folder"));
    }
    let num = |k: &str| get(k).map(|v| v.parse::<u64>().map_err(|_| format!("external data {k} '{v}' is not a whole number"))).transpose();
    let offset = num("offset")?.unwrap_or(0);
    let length = num("length")?.unwrap_or(want as u64);
    if length != want as u64 {
        return Err(format!("external data length {length} for {want} bytes of data"));
    }
    let path = dir.join(rel);
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&path).map_err(|e| format!("external data file {}: {e}", path.display()))?;
    let size = f.metadata().map_err(|e| format!("external data file {}: {e}", path.display()))?.len();
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!("external data file {} holds {size} bytes, not {length} from offset {offset}", path.display()));
    }
    f.seek(SeekFrom::Start(offset)).map_err(|e| format!("external data file {}: {e}", path.display()))?;
    let mut buf = vec![0u8; want];
    f.read_exact(&mut buf).map_err(|e| format!("external data file {}: {e}", path.display()))?;
    Ok(buf)
}
