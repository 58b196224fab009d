//! Checkpoints: a session's variables (and the random ops' run counters) in
//! one safetensors file, written and validated by the `safetensors` crate.
//!
//! Contract.
//! - [`save`] writes the whole checkpoint to a temporary file beside the
//!   target, fsyncs it, renames it over the target and fsyncs the
//!   directory: one atomic commit. Whatever fails, the file at `path` is
//!   either the previous checkpoint or the new one, never a mix.
//! - [`restore`] is all-or-nothing: it reads and validates the file (the
//!   crate's checks: header, offsets that tile the data without overlap or
//!   gaps, sizes against dtype and shape), then checks every tensor's name,
//!   dtype and shape against the session's graph, and only then sets any
//!   variable. Errors name the file and the tensor.
//! - [`CheckpointManager`] keeps numbered checkpoints in a directory, as
//!   TensorFlow's `tf.train.CheckpointManager` does: the newest `keep`
//!   survive, and restoring takes the newest one that reads intact,
//!   reporting each newer one it had to skip.

use crate::error::{EngineError, Result};
use crate::files::write_atomic;
use crate::runtime::session::Session;
use crate::tensor::{CpuStorage, DType, Shape, Tensor};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// `__metadata__` key naming the format, so a foreign safetensors file is
/// refused with a clear message.
const FORMAT_KEY: &str = "flowlab.format";
const FORMAT: &str = "flowlab-checkpoint-3";
/// The format before checksums: read, its tensors unchecked.
const FORMAT_UNCHECKED: &str = "flowlab-checkpoint-2";
/// `__metadata__` key holding each tensor's BLAKE3 checksum of its bytes
/// (JSON object, name to hex): a byte changed after the file was written
/// (a disk or a copy gone wrong) is found when it is read, and the
/// checkpoint is refused like any other unreadable one.
const CHECKSUMS_KEY: &str = "flowlab.blake3";
/// `__metadata__` key holding the random ops' run counters (JSON object).
const RNG_KEY: &str = "flowlab.rng_counters";
/// Prefix of the caller's own metadata keys (training step, epoch, ...).
const USER_PREFIX: &str = "user.";

/// What a checkpoint holds besides the tensors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointInfo {
    /// Variables, in file order (sorted by name): name, dtype, shape.
    pub variables: Vec<(String, DType, Vec<usize>)>,
    /// Run counters of the seeded random ops, by node name.
    pub rng_counters: BTreeMap<String, u64>,
    /// The caller's metadata (e.g. the training step).
    pub metadata: BTreeMap<String, String>,
}

/// A tensor as the safetensors serializer sees it.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn to_safetensors(d: DType) -> Dtype {
    match d {
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I8 => Dtype::I8,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::Bool => Dtype::BOOL,
    }
}

fn from_safetensors(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::I8 => DType::I8,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::BOOL => DType::Bool,
        _ => return None,
    })
}

fn bad(file: &Path, detail: impl Into<String>) -> EngineError {
    EngineError::Checkpoint { file: file.display().to_string(), detail: detail.into() }
}

/// The checkpoint of `tensors` (+ counters and metadata) as file bytes.
fn encode(
    tensors: &[(String, Tensor)],
    rng: &BTreeMap<String, u64>,
    metadata: &BTreeMap<String, String>,
    file: &Path,
) -> Result<Vec<u8>> {
    // A variable in device memory is copied to the host as it is written.
    let views: Vec<(String, Bytes)> = tensors
        .iter()
        .map(|(n, t)| {
            let host = t.to_host().map_err(|e| bad(file, format!("variable '{n}': {e}")))?;
            let data = host.cpu().map_err(|e| bad(file, format!("variable '{n}': {e}")))?.to_le_bytes();
            Ok((n.clone(), Bytes { dtype: to_safetensors(t.dtype()), shape: t.dims().to_vec(), data }))
        })
        .collect::<Result<_>>()?;
    let mut meta: HashMap<String, String> = metadata.iter().map(|(k, v)| (format!("{USER_PREFIX}{k}"), v.clone())).collect();
    meta.insert(FORMAT_KEY.into(), FORMAT.into());
    meta.insert(RNG_KEY.into(), serde_json::to_string(rng).map_err(|e| bad(file, format!("run counters: {e}")))?);
    let sums: BTreeMap<&str, String> = views.iter().map(|(n, b)| (n.as_str(), blake3::hash(&b.data).to_hex().to_string())).collect();
    meta.insert(CHECKSUMS_KEY.into(), serde_json::to_string(&sums).map_err(|e| bad(file, format!("checksums: {e}")))?);
    safetensors::serialize(views.iter().map(|(n, b)| (n.as_str(), b)), Some(meta)).map_err(|e| bad(file, format!("cannot encode: {e}")))
}

/// A checkpoint read and validated as a file, not yet matched to a graph.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    /// Tensors by name.
    pub tensors: BTreeMap<String, Tensor>,
    pub rng_counters: BTreeMap<String, u64>,
    pub metadata: BTreeMap<String, String>,
}

/// Decodes checkpoint bytes; `file` names them in errors. Never panics and
/// never allocates more than the bytes it is given imply.
pub fn decode(bytes: &[u8], file: &Path) -> Result<Checkpoint> {
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(file, format!("not a valid safetensors file: {e}")))?;
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| bad(file, format!("not a valid safetensors file: {e}")))?;
    let meta = header.metadata().clone().unwrap_or_default();
    let sums: Option<BTreeMap<String, String>> = match meta.get(FORMAT_KEY) {
        Some(f) if f == FORMAT => {
            let j = meta.get(CHECKSUMS_KEY).ok_or_else(|| bad(file, format!("no '{CHECKSUMS_KEY}' checksums in its metadata")))?;
            Some(serde_json::from_str(j).map_err(|e| bad(file, format!("metadata '{CHECKSUMS_KEY}': {e}")))?)
        }
        Some(f) if f == FORMAT_UNCHECKED => None,
        Some(f) => return Err(bad(file, format!("checkpoint format '{f}' is not {FORMAT}"))),
        None => return Err(bad(file, format!("a safetensors file, but not a flowlab checkpoint (no '{FORMAT_KEY}' in its metadata)"))),
    };
    let rng_counters: BTreeMap<String, u64> = match meta.get(RNG_KEY) {
        Some(j) => serde_json::from_str(j).map_err(|e| bad(file, format!("metadata '{RNG_KEY}': {e}")))?,
        None => BTreeMap::new(),
    };
    let metadata = meta.iter().filter_map(|(k, v)| k.strip_prefix(USER_PREFIX).map(|k| (k.to_string(), v.clone()))).collect();
    let mut tensors = BTreeMap::new();
    for (name, view) in st.tensors() {
        let dtype = from_safetensors(view.dtype())
            .ok_or_else(|| bad(file, format!("tensor '{name}': dtype {:?} is not one the engine has", view.dtype())))?;
        if let Some(sums) = &sums {
            let want = sums.get(&name).ok_or_else(|| bad(file, format!("tensor '{name}' has no checksum")))?;
            if blake3::hash(view.data()).to_hex().as_str() != want {
                return Err(bad(file, format!("tensor '{name}': its bytes do not match their checksum (changed after the checkpoint was written)")));
            }
        }
        let shape = Shape::new(view.shape().to_vec());
        let storage = CpuStorage::from_le_bytes(dtype, view.data())
            .ok_or_else(|| bad(file, format!("tensor '{name}': bytes do not decode as {dtype}")))?;
        let t = Tensor::from_vec_storage(storage, shape).map_err(|e| bad(file, format!("tensor '{name}': {e}")))?;
        tensors.insert(name, t);
    }
    Ok(Checkpoint { tensors, rng_counters, metadata })
}

/// Reads and validates the checkpoint file at `path`.
pub fn read(path: &Path) -> Result<Checkpoint> {
    let bytes = std::fs::read(path).map_err(|e| EngineError::io(path, e))?;
    decode(&bytes, path)
}

/// Saves every initialized variable of `sess` to `path` in one atomic commit.
pub fn save(sess: &Session, path: &Path) -> Result<CheckpointInfo> {
    save_with(sess, path, &BTreeMap::new())
}

/// [`save`] with the caller's metadata (strings by key), returned by
/// [`restore`] and [`read`].
pub fn save_with(sess: &Session, path: &Path, metadata: &BTreeMap<String, String>) -> Result<CheckpointInfo> {
    let mut vars = sess.variable_values()?;
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let rng: BTreeMap<String, u64> = sess.rng_counters().into_iter().collect();
    let bytes = encode(&vars, &rng, metadata, path)?;
    write_atomic(path, &bytes)?;
    Ok(CheckpointInfo {
        variables: vars.iter().map(|(n, t)| (n.clone(), t.dtype(), t.dims().to_vec())).collect(),
        rng_counters: rng,
        metadata: metadata.clone(),
    })
}

/// Saves `tensors` (variables by name, e.g. fetched from the tasks of a
/// cluster) to `path` in one atomic commit, like [`save_with`] does for a
/// session's variables; no random-op counters.
pub fn save_tensors(path: &Path, tensors: &[(String, Tensor)], metadata: &BTreeMap<String, String>) -> Result<CheckpointInfo> {
    let mut vars = tensors.to_vec();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    let bytes = encode(&vars, &BTreeMap::new(), metadata, path)?;
    write_atomic(path, &bytes)?;
    Ok(CheckpointInfo {
        variables: vars.iter().map(|(n, t)| (n.clone(), t.dtype(), t.dims().to_vec())).collect(),
        rng_counters: BTreeMap::new(),
        metadata: metadata.clone(),
    })
}

/// Restores the checkpoint at `path` into `sess`, all or nothing: every
/// variable of the graph must be in the file with its declared dtype and
/// shape, and every tensor in the file must be a variable of the graph;
/// otherwise nothing is changed and the error names the file and tensor.
pub fn restore(sess: &Session, path: &Path) -> Result<CheckpointInfo> {
    let ck = read(path)?;
    apply(sess, ck, path)
}

fn apply(sess: &Session, ck: Checkpoint, path: &Path) -> Result<CheckpointInfo> {
    let vars = sess.graph().variables();
    let mut plan = Vec::with_capacity(vars.len());
    for v in &vars {
        let name = v.name();
        let ty = v.tensor_type();
        let t = ck.tensors.get(&name).ok_or_else(|| bad(path, format!("variable '{name}' ({ty}) is not in the checkpoint")))?;
        if t.dtype() != ty.dtype || !ty.shape.accepts(t.shape()) {
            return Err(bad(path, format!("tensor '{name}' is {}{}, but the graph's variable is {ty}", t.dtype(), t.shape())));
        }
        plan.push((name, t.clone()));
    }
    if let Some(extra) = ck.tensors.keys().find(|k| !plan.iter().any(|(n, _)| n == *k)) {
        return Err(bad(path, format!("tensor '{extra}' is not a variable of this graph (a checkpoint of another model?)")));
    }
    for (name, t) in &plan {
        sess.set_variable(name, t.clone())?;
    }
    for (name, c) in &ck.rng_counters {
        sess.set_rng_counter(name, *c);
    }
    Ok(CheckpointInfo {
        variables: plan.iter().map(|(n, t)| (n.clone(), t.dtype(), t.dims().to_vec())).collect(),
        rng_counters: ck.rng_counters,
        metadata: ck.metadata,
    })
}

/// Numbered checkpoints `ckpt-<step>.safetensors` in one directory.
#[derive(Clone, Debug)]
pub struct CheckpointManager {
    dir: PathBuf,
    keep: usize,
}

/// What [`CheckpointManager::restore_latest`] restored.
#[derive(Clone, Debug)]
pub struct Restored {
    pub step: u64,
    pub path: PathBuf,
    pub info: CheckpointInfo,
    /// Newer checkpoints that could not be read, with the reason.
    pub skipped: Vec<String>,
}

const PREFIX: &str = "ckpt-";
const SUFFIX: &str = ".safetensors";

impl CheckpointManager {
    /// Checkpoints in `dir` (created when missing), keeping the newest
    /// `keep` (at least 1).
    pub fn new(dir: &Path, keep: usize) -> Result<CheckpointManager> {
        if keep == 0 {
            return Err(EngineError::Config { key: "keep".into(), detail: "must keep at least 1 checkpoint".into() });
        }
        std::fs::create_dir_all(dir).map_err(|e| EngineError::io(dir, e))?;
        Ok(CheckpointManager { dir: dir.to_path_buf(), keep })
    }

    /// The file of the checkpoint at `step`.
    pub fn path(&self, step: u64) -> PathBuf {
        self.dir.join(format!("{PREFIX}{step:012}{SUFFIX}"))
    }

    /// Steps of the checkpoint files present, oldest first (temporary files
    /// of an interrupted save are not checkpoints and are not listed).
    pub fn steps(&self) -> Result<Vec<u64>> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.dir).map_err(|e| EngineError::io(&self.dir, e))? {
            let e = e.map_err(|e| EngineError::io(&self.dir, e))?;
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(step) = name.strip_prefix(PREFIX).and_then(|s| s.strip_suffix(SUFFIX)).and_then(|s| s.parse::<u64>().ok()) {
                v.push(step);
            }
        }
        v.sort_unstable();
        Ok(v)
    }

    /// Saves `sess` as the checkpoint of `step` (with `metadata`), then
    /// removes all but the newest `keep` checkpoints.
    pub fn save(&self, sess: &Session, step: u64, metadata: &BTreeMap<String, String>) -> Result<PathBuf> {
        let path = self.path(step);
        save_with(sess, &path, metadata)?;
        self.prune()?;
        Ok(path)
    }

    /// Saves `tensors` (see [`save_tensors`]) as the checkpoint of `step`,
    /// then keeps the newest `keep` as [`CheckpointManager::save`] does.
    pub fn save_values(&self, tensors: &[(String, Tensor)], step: u64, metadata: &BTreeMap<String, String>) -> Result<PathBuf> {
        let path = self.path(step);
        save_tensors(&path, tensors, metadata)?;
        self.prune()?;
        Ok(path)
    }

    fn prune(&self) -> Result<()> {
        let steps = self.steps()?;
        for old in &steps[..steps.len().saturating_sub(self.keep)] {
            let p = self.path(*old);
            // a folder under a checkpoint's name is not ours to remove
            // (restoring skips it, naming it)
            if p.is_dir() {
                continue;
            }
            std::fs::remove_file(&p).map_err(|e| EngineError::io(&p, e))?;
        }
        Ok(())
    }

    /// Restores the newest checkpoint that reads intact and fits the graph;
    /// `None` when the directory holds none. Newer files that fail are
    /// reported in [`Restored::skipped`]; if every file fails, the newest
    /// one's error is returned.
    pub fn restore_latest(&self, sess: &Session) -> Result<Option<Restored>> {
        let steps = self.steps()?;
        let mut skipped = Vec::new();
        let mut first_err = None;
        for &step in steps.iter().rev() {
            let path = self.path(step);
            match read(&path) {
                Ok(ck) => {
                    let info = apply(sess, ck, &path)?;
                    return Ok(Some(Restored { step, path, info, skipped }));
                }
                Err(e) => {
                    skipped.push(e.to_string());
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(tensors: &[(&str, Tensor)]) -> Vec<u8> {
        let t: Vec<(String, Tensor)> = tensors.iter().map(|(n, t)| (n.to_string(), t.clone())).collect();
        encode(&t, &BTreeMap::from([("r".to_string(), 7u64)]), &BTreeMap::from([("step".to_string(), "3".to_string())]), Path::new("x"))
            .unwrap()
    }

    #[test]
    fn round_trip_keeps_tensors_counters_and_metadata() {
        let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], [3]).unwrap();
        let b = Tensor::from_vec(vec![7i64, 8], [2, 1]).unwrap();
        let c = decode(&ck(&[("a", a.clone()), ("b", b.clone())]), Path::new("x")).unwrap();
        assert_eq!(c.tensors["a"], a);
        assert_eq!(c.tensors["b"], b);
        assert_eq!(c.rng_counters["r"], 7);
        assert_eq!(c.metadata["step"], "3");
    }

    /// The file layout by hand (safetensors' published format: u64 header
    /// length, JSON header, data), so the checks below test the reader
    /// against bytes it did not write.
    fn by_hand(header: &str, data: &[u8]) -> Vec<u8> {
        let mut h = header.as_bytes().to_vec();
        while !h.len().is_multiple_of(8) {
            h.push(b' ');
        }
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend(h);
        out.extend(data);
        out
    }

    const META: &str = r#""__metadata__":{"flowlab.format":"flowlab-checkpoint-2"}"#;

    #[test]
    fn overlapping_offsets_are_refused() {
        // Two tensors claiming the same 8 bytes: "b" would read "a"'s data.
        let h = format!(
            r#"{{{META},"a":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}},"b":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}}"#
        );
        let e = decode(&by_hand(&h, &[0; 8]), Path::new("o.safetensors")).unwrap_err().to_string();
        assert!(e.starts_with("o.safetensors: not a valid safetensors file"), "{e}");
    }

    #[test]
    fn a_hand_written_file_decodes_and_a_size_mismatch_does_not() {
        let h = format!(r#"{{{META},"w":{{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}}}"#);
        let mut data = 1.0f32.to_le_bytes().to_vec();
        data.extend(2.5f32.to_le_bytes());
        let c = decode(&by_hand(&h, &data), Path::new("f")).unwrap();
        assert_eq!(c.tensors["w"].to_vec::<f32>().unwrap(), vec![1.0, 2.5]);
        let h = format!(r#"{{{META},"w":{{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}}}"#);
        assert!(decode(&by_hand(&h, &data), Path::new("f")).is_err());
        // A shape whose element count overflows.
        let h = format!(r#"{{{META},"w":{{"dtype":"F32","shape":[4611686018427387905,4],"data_offsets":[0,8]}}}}"#);
        assert!(decode(&by_hand(&h, &data), Path::new("f")).is_err());
    }

    /// Any one byte of any tensor changed after writing: refused, naming
    /// the file and the tensor.
    #[test]
    fn a_changed_byte_in_any_tensor_is_found() {
        let a = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], [3]).unwrap();
        let b = Tensor::from_vec(vec![7i64, 8], [2, 1]).unwrap();
        let bytes = ck(&[("a", a), ("b", b)]);
        let (header, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        let header = header + 8;
        let owner = |at: usize| meta.tensors().into_iter().find(|(_, i)| (i.data_offsets.0..i.data_offsets.1).contains(&(at - header))).unwrap().0;
        for at in header..bytes.len() {
            let mut changed = bytes.clone();
            changed[at] ^= 0x01;
            let e = decode(&changed, Path::new("c.safetensors")).unwrap_err().to_string();
            let name = owner(at);
            assert_eq!(e, format!("c.safetensors: tensor '{name}': its bytes do not match their checksum (changed after the checkpoint was written)"), "byte {at}");
        }
    }

    #[test]
    fn a_foreign_safetensors_file_is_named_as_such() {
        let h = r#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
        let e = decode(&by_hand(h, &[0; 4]), Path::new("m.safetensors")).unwrap_err().to_string();
        assert_eq!(e, "m.safetensors: a safetensors file, but not a flowlab checkpoint (no 'flowlab.format' in its metadata)");
    }
}
