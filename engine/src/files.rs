//! Files the engine writes and reads: atomic replacement (so a crash never
//! leaves half a file where a good one was) and byte offsets for errors.
//! Layer 1: it imports only `error`.

use crate::error::{EngineError, Result};
use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` atomically (temp file, fsync, rename).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_else(|| "checkpoint".into());
    // A name no other writer uses: this process's id and a counter, so two
    // saves (threads or processes) never write into one temporary file.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let res = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if let Err(e) = res {
        if tmp.is_file() {
            let _ = std::fs::remove_file(&tmp);
        }
        return Err(EngineError::io(path, e));
    }
    Ok(())
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
