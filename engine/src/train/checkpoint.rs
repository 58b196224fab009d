//! Checkpoints: every initialized variable of a session in one safetensors
//! file, plus a small JSON manifest beside it (`<file>.manifest.json`) that
//! lists the variables and the random ops' run counters.
//!
//! Writes are atomic: each file goes to a temporary name in the same
//! directory, is fsynced, then renamed over the old one, so a failed save
//! leaves the previous checkpoint intact. Reading validates the whole layout
//! and reports a corrupt or truncated file with its byte offset. Restoring
//! into a fresh session of the same graph continues bit-identically.

use crate::tensor::DType;
use crate::error::{EngineError, Result};
use crate::runtime::session::Session;
use crate::tensor::Shape;
use crate::tensor::{CpuStorage, Tensor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use crate::files::{byte_offset, write_atomic};
use std::path::{Path, PathBuf};

const MANIFEST_VERSION: u32 = 1;

/// The manifest written next to the tensor file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub version: u32,
    /// File name of the safetensors file (same directory).
    pub tensors: String,
    pub variables: Vec<ManifestEntry>,
    /// Run counters of seeded random ops, by node name.
    pub rng_counters: BTreeMap<String, u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ManifestEntry {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

#[derive(Serialize, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// The manifest path of a checkpoint file.
pub fn manifest_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".manifest.json");
    PathBuf::from(s)
}

/// Encodes named tensors as a safetensors file.
pub(crate) fn encode_safetensors(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut header = BTreeMap::new();
    let mut data = Vec::new();
    for (name, t) in tensors {
        let bytes = t.cpu().to_le_bytes();
        let start = data.len() as u64;
        data.extend_from_slice(&bytes);
        header.insert(
            name.clone(),
            HeaderEntry { dtype: t.dtype().safetensors_name().into(), shape: t.dims().to_vec(), data_offsets: [start, data.len() as u64] },
        );
    }
    let mut h = serde_json::to_vec(&header).map_err(|e| EngineError::Tensor(format!("checkpoint header: {e}")))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = Vec::with_capacity(8 + h.len() + data.len());
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(&data);
    Ok(out)
}

/// Decodes a safetensors file; errors name `file` and the byte offset.
pub(crate) fn decode_safetensors(file: &Path, b: &[u8]) -> Result<Vec<(String, Tensor)>> {
    let corrupt = |offset: u64, detail: String| EngineError::Corrupt { file: file.display().to_string(), offset, detail };
    if b.len() < 8 {
        return Err(corrupt(b.len() as u64, format!("truncated: {} bytes, the header length needs 8", b.len())));
    }
    let n = u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
    if n > (b.len() - 8) as u64 {
        return Err(corrupt(8, format!("header of {n} bytes extends past the end of the file ({} bytes)", b.len())));
    }
    let hdr = &b[8..8 + n as usize];
    let header: BTreeMap<String, serde_json::Value> = serde_json::from_slice(hdr).map_err(|e| {
        // The header is one line: the column locates the byte.
        let col = if e.line() <= 1 { e.column().saturating_sub(1) } else { 0 };
        corrupt(8 + col as u64, format!("bad header JSON: {e}"))
    })?;
    let data = &b[8 + n as usize..];
    let base = 8 + n;
    let mut out = Vec::new();
    for (name, v) in header {
        if name == "__metadata__" {
            continue;
        }
        let e: HeaderEntry = serde_json::from_value(v).map_err(|e| corrupt(8, format!("tensor '{name}': {e}")))?;
        let dt = DType::from_safetensors_name(&e.dtype).ok_or_else(|| corrupt(8, format!("tensor '{name}': unknown dtype '{}'", e.dtype)))?;
        let [s, t] = e.data_offsets;
        if s > t || t > data.len() as u64 {
            return Err(corrupt(
                base + s.min(data.len() as u64),
                format!("tensor '{name}': data [{s}, {t}) extends past the end of the data ({} bytes): truncated", data.len()),
            ));
        }
        let shape = Shape::new(e.shape);
        let want = (shape.num_elements() * dt.size_in_bytes()) as u64;
        if t - s != want {
            return Err(corrupt(base + s, format!("tensor '{name}': {} bytes for {dt}{shape}, which needs {want}", t - s)));
        }
        let st = CpuStorage::from_le_bytes(dt, &data[s as usize..t as usize])
            .ok_or_else(|| corrupt(base + s, format!("tensor '{name}': bytes do not decode as {dt}")))?;
        out.push((name, Tensor::from_storage(st, shape)));
    }
    Ok(out)
}

/// Saves every initialized variable of `sess` to `path` (+ manifest).
pub fn save(sess: &Session, path: &Path) -> Result<Manifest> {
    let vars = sess.variable_values();
    let bytes = encode_safetensors(&vars)?;
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        tensors: path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default(),
        variables: vars.iter().map(|(n, t)| ManifestEntry { name: n.clone(), dtype: t.dtype(), shape: t.dims().to_vec() }).collect(),
        rng_counters: sess.rng_counters().into_iter().collect(),
    };
    let m = serde_json::to_vec_pretty(&manifest).map_err(|e| EngineError::Tensor(format!("manifest: {e}")))?;
    write_atomic(path, &bytes)?;
    write_atomic(&manifest_path(path), &m)?;
    Ok(manifest)
}

/// Restores the variables (and random-op counters) saved at `path` into
/// `sess`. Every variable in the manifest must exist in the session's graph
/// with the same type.
pub fn restore(sess: &Session, path: &Path) -> Result<Manifest> {
    let mpath = manifest_path(path);
    let mtext = std::fs::read(&mpath).map_err(|e| EngineError::io(&mpath, e))?;
    let manifest: Manifest = serde_json::from_slice(&mtext).map_err(|e| EngineError::Corrupt {
        file: mpath.display().to_string(),
        offset: byte_offset(&mtext, e.line(), e.column()),
        detail: e.to_string(),
    })?;
    if manifest.version != MANIFEST_VERSION {
        return Err(EngineError::Corrupt {
            file: mpath.display().to_string(),
            offset: 0,
            detail: format!("manifest version {} is not supported (expected {MANIFEST_VERSION})", manifest.version),
        });
    }
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    let tensors: BTreeMap<String, Tensor> = decode_safetensors(path, &bytes)?.into_iter().collect();
    for entry in &manifest.variables {
        let t = tensors.get(&entry.name).ok_or_else(|| EngineError::Corrupt {
            file: path.display().to_string(),
            offset: 8,
            detail: format!("variable '{}' listed in the manifest is missing", entry.name),
        })?;
        sess.set_variable(&entry.name, t.clone())?;
    }
    for (name, c) in &manifest.rng_counters {
        sess.set_rng_counter(name, *c);
    }
    Ok(manifest)
}

