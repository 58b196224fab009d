//! `flowlab report DIR...`: merges the result directories of shards of one
//! experiment into one, then the report is rendered from it.

use std::path::{Path, PathBuf};

use crate::error::ExperimentError;
use crate::experiment::Experiment;
use crate::store::{Columns, DirLock, EXPERIMENT_FILE, dedup_rows, read_rows, rewrite, write_atomically};

/// What a merge produced.
#[derive(Debug, Clone)]
pub struct MergeSummary {
    pub out_dir: PathBuf,
    /// Distinct runs in the merged results.
    pub rows: u64,
    /// Of those, runs that failed.
    pub failed: u64,
    /// Runs the experiment has in all (if its file could be loaded).
    pub expected: Option<u64>,
}

/// Merges the results of `dirs` (which must hold the same experiment.yaml)
/// into `out` (the first directory if absent): one row per run, sorted by
/// index, `results.csv` rebuilt.
pub fn merge(dirs: &[PathBuf], out: Option<&Path>) -> Result<MergeSummary, ExperimentError> {
    let first = dirs
        .first()
        .ok_or_else(|| ExperimentError::Usage("report: give at least one result directory".into()))?;
    let read_text = |dir: &Path| {
        let path = dir.join(EXPERIMENT_FILE);
        std::fs::read_to_string(&path).map_err(|e| ExperimentError::io(&path, e))
    };
    let text = read_text(first)?;
    let out_dir = out.map_or_else(|| first.clone(), Path::to_path_buf);
    crate::store::ensure_dir(&out_dir)?;
    // Held while reading too: a run writing into `out_dir` would lose rows.
    let _lock = DirLock::take(&out_dir)?;
    let mut rows = Vec::new();
    for dir in dirs {
        if read_text(dir)? != text {
            return Err(ExperimentError::MergeMismatch {
                dir: dir.clone(),
                first: first.clone(),
            });
        }
        rows.extend(read_rows(dir)?);
    }
    let rows = dedup_rows(rows);
    let origin = first.join(EXPERIMENT_FILE).display().to_string();
    let experiment = Experiment::from_text(&origin, &text).ok();
    let columns = match &experiment {
        Some(e) => Columns {
            params: e.param_columns.clone(),
            metrics: e.metric_columns.clone(),
        },
        None => Columns::from_rows(&rows),
    };
    write_atomically(&out_dir.join(EXPERIMENT_FILE), text.as_bytes())?;
    rewrite(&out_dir, &rows, &columns)?;
    Ok(MergeSummary {
        out_dir,
        rows: rows.len() as u64,
        failed: rows.iter().filter(|r| r.error.is_some()).count() as u64,
        expected: experiment.map(|e| e.run_count()),
    })
}
