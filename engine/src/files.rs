//! Files the engine writes and reads: atomic replacement (so a crash never
//! leaves half a file where a good one was) and byte offsets for errors.
//! Layer 1: it imports only `error`.

use crate::error::{EngineError, Result};
use std::path::Path;

/// Writes `bytes` to `path` atomically ([`flowlab_files::write_atomic`]).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    flowlab_files::write_atomic(path, bytes).map_err(|e| EngineError::io(path, e))
}

/// Byte offset of a 1-based (line, column) position in `text`.
pub(crate) fn byte_offset(text: &[u8], line: usize, column: usize) -> u64 {
    let mut off = 0usize;
    for _ in 1..line.max(1) {
        match text[off..].iter().position(|&c| c == b'\n') {
            Some(p) => off += p + 1,
            None => break,
        }
    }
    (off + column.saturating_sub(1)) as u64
}
