//! The result store of one output directory: `experiment.yaml` (the input,
//! verbatim), `results.jsonl` (the source of truth: one row per finished
//! run) and `results.csv` (the same rows as a table).
//!
//! Each finished run is appended to both files with one write per line, so a
//! killed run leaves at most a torn last line. Opening a directory again
//! reads the rows already there (ignoring a torn line), rewrites both files
//! from them, and hands back the keys already done, so a resumed run neither
//! repeats nor loses a row. Rewrites go through a temporary file and a
//! rename, so they are never half done.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use flowlab_reports::{ResultRow, read_results_file};

use crate::error::ExperimentError;
use crate::params::display_value;

pub(crate) const EXPERIMENT_FILE: &str = "experiment.yaml";
pub(crate) const RESULTS_JSONL: &str = "results.jsonl";
pub(crate) const RESULTS_CSV: &str = "results.csv";

/// The columns of `results.csv`.
#[derive(Debug, Clone)]
pub(crate) struct Columns {
    pub(crate) params: Vec<String>,
    pub(crate) metrics: Vec<String>,
}

impl Columns {
    fn header(&self) -> String {
        let mut cells: Vec<String> = vec!["index".into(), "key".into(), "seed".into()];
        cells.extend(self.params.iter().cloned());
        cells.extend(self.metrics.iter().cloned());
        cells.push("error".into());
        csv_line(&cells)
    }

    fn row(&self, row: &ResultRow) -> String {
        let mut cells: Vec<String> = vec![row.index.to_string(), row.key.clone(), row.seed.to_string()];
        cells.extend(
            self.params
                .iter()
                .map(|p| row.params.get(p).map(display_value).unwrap_or_default()),
        );
        cells.extend(
            self.metrics
                .iter()
                .map(|m| row.metrics.get(m).map(f64::to_string).unwrap_or_default()),
        );
        cells.push(row.error.clone().unwrap_or_default());
        csv_line(&cells)
    }

    /// Columns for rows alone (when the experiment file cannot be loaded):
    /// the union of their keys, sorted.
    pub(crate) fn from_rows(rows: &[ResultRow]) -> Columns {
        let mut params = BTreeSet::new();
        let mut metrics = BTreeSet::new();
        for r in rows {
            params.extend(r.params.keys().cloned());
            metrics.extend(r.metrics.keys().cloned());
        }
        Columns {
            params: params.into_iter().collect(),
            metrics: metrics.into_iter().collect(),
        }
    }
}

/// One CSV line (RFC 4180 quoting), with its newline.
fn csv_line(cells: &[String]) -> String {
    let quoted: Vec<String> = cells
        .iter()
        .map(|c| {
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        })
        .collect();
    format!("{}\n", quoted.join(","))
}

/// An open output directory, appending rows as runs finish.
pub(crate) struct ResultStore {
    dir: PathBuf,
    jsonl: File,
    csv: File,
    columns: Columns,
}

impl ResultStore {
    /// Opens (creating if needed) `dir` for the experiment whose text is
    /// `experiment_text`. Without `fresh`, rows already there are kept and
    /// returned, except failed rows whose key is in `retry` (they are run
    /// again); with `fresh`, earlier results and report files are removed.
    pub(crate) fn open(
        dir: &Path,
        experiment_text: &str,
        columns: Columns,
        fresh: bool,
        retry: &HashSet<&str>,
    ) -> Result<(ResultStore, Vec<ResultRow>), ExperimentError> {
        std::fs::create_dir_all(dir).map_err(|e| ExperimentError::io(dir, e))?;
        let experiment_path = dir.join(EXPERIMENT_FILE);
        if fresh {
            clear_outputs(dir)?;
        } else if experiment_path.exists() {
            let existing = std::fs::read_to_string(&experiment_path).map_err(|e| ExperimentError::io(&experiment_path, e))?;
            if existing != experiment_text {
                return Err(ExperimentError::DifferentExperiment { dir: dir.to_path_buf() });
            }
        } else if dir.join(RESULTS_JSONL).exists() {
            // Results without the file they came from cannot be trusted to match.
            return Err(ExperimentError::DifferentExperiment { dir: dir.to_path_buf() });
        }
        write_atomically(&experiment_path, experiment_text.as_bytes())?;
        let rows = read_rows(dir)?;
        let rows: Vec<ResultRow> = dedup_rows(rows)
            .into_iter()
            .filter(|r| r.error.is_none() || !retry.contains(r.key.as_str()))
            .collect();
        rewrite(dir, &rows, &columns)?;
        let jsonl = append_handle(&dir.join(RESULTS_JSONL))?;
        let csv = append_handle(&dir.join(RESULTS_CSV))?;
        Ok((
            ResultStore {
                dir: dir.to_path_buf(),
                jsonl,
                csv,
                columns,
            },
            rows,
        ))
    }

    /// Appends one finished run to both files, each line in one write.
    pub(crate) fn append(&mut self, row: &ResultRow) -> Result<(), ExperimentError> {
        let mut line = serde_json::to_string(row).map_err(|e| {
            ExperimentError::io(self.dir.join(RESULTS_JSONL), std::io::Error::other(e))
        })?;
        line.push('\n');
        self.jsonl
            .write_all(line.as_bytes())
            .and_then(|()| self.jsonl.flush())
            .map_err(|e| ExperimentError::io(self.dir.join(RESULTS_JSONL), e))?;
        self.csv
            .write_all(self.columns.row(row).as_bytes())
            .and_then(|()| self.csv.flush())
            .map_err(|e| ExperimentError::io(self.dir.join(RESULTS_CSV), e))
    }

    /// Rewrites both files with all rows sorted by index.
    pub(crate) fn finish(self) -> Result<Vec<ResultRow>, ExperimentError> {
        drop(self.jsonl);
        drop(self.csv);
        let rows = dedup_rows(read_rows(&self.dir)?);
        rewrite(&self.dir, &rows, &self.columns)?;
        Ok(rows)
    }
}

/// The rows of `dir/results.jsonl` (none if it does not exist), a torn
/// last line ignored.
pub(crate) fn read_rows(dir: &Path) -> Result<Vec<ResultRow>, ExperimentError> {
    let path = dir.join(RESULTS_JSONL);
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(read_results_file(&path)?.rows)
}

/// One row per key, sorted by index: a successful row is kept over any
/// other; among failed rows the latest wins (a retry's error is the news).
pub(crate) fn dedup_rows(rows: Vec<ResultRow>) -> Vec<ResultRow> {
    let mut by_key: BTreeMap<String, ResultRow> = BTreeMap::new();
    for row in rows {
        let keep_old = by_key.get(&row.key).is_some_and(|kept| kept.error.is_none());
        if !keep_old {
            by_key.insert(row.key.clone(), row);
        }
    }
    let mut rows: Vec<ResultRow> = by_key.into_values().collect();
    rows.sort_by(|a, b| a.index.cmp(&b.index).then_with(|| a.key.cmp(&b.key)));
    rows
}

/// Writes `results.jsonl` and `results.csv` of `dir` from `rows`, in order.
pub(crate) fn rewrite(dir: &Path, rows: &[ResultRow], columns: &Columns) -> Result<(), ExperimentError> {
    let mut jsonl = String::new();
    let mut csv = columns.header();
    for row in rows {
        let line = serde_json::to_string(row)
            .map_err(|e| ExperimentError::io(dir.join(RESULTS_JSONL), std::io::Error::other(e)))?;
        jsonl.push_str(&line);
        jsonl.push('\n');
        csv.push_str(&columns.row(row));
    }
    write_atomically(&dir.join(RESULTS_JSONL), jsonl.as_bytes())?;
    write_atomically(&dir.join(RESULTS_CSV), csv.as_bytes())
}

/// Writes a file through a temporary sibling and a rename.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ExperimentError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| ExperimentError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| ExperimentError::io(path, e))
}

fn append_handle(path: &Path) -> Result<File, ExperimentError> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map_err(|e| ExperimentError::io(path, e))
}

/// Removes what a run and its report wrote (and nothing else).
fn clear_outputs(dir: &Path) -> Result<(), ExperimentError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ExperimentError::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| ExperimentError::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = [EXPERIMENT_FILE, RESULTS_JSONL, RESULTS_CSV, "index.html"].contains(&name.as_str())
            || name.ends_with(".png")
            || name.ends_with(".svg");
        if ours && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| ExperimentError::io(&path, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(index: u64, key: &str, error: Option<&str>) -> ResultRow {
        ResultRow {
            index,
            key: key.to_string(),
            seed: index + 100,
            params: [("workers".to_string(), serde_json::json!(index * 10))].into_iter().collect(),
            metrics: if error.is_none() {
                [("throughput".to_string(), 1.5 * index as f64)].into_iter().collect()
            } else {
                BTreeMap::new()
            },
            series: BTreeMap::new(),
            error: error.map(str::to_string),
            elapsed_s: 0.25,
        }
    }

    fn columns() -> Columns {
        Columns {
            params: vec!["workers".into()],
            metrics: vec!["throughput".into()],
        }
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
    }

    #[test]
    fn appends_rows_and_sorts_them_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, existing) = ResultStore::open(dir.path(), "name: x\n", columns(), false, &HashSet::new()).unwrap();
        assert!(existing.is_empty());
        store.append(&row(2, "b", None)).unwrap();
        store.append(&row(1, "a", Some("boom, \"bad\""))).unwrap();
        assert_eq!(lines(&dir.path().join(RESULTS_JSONL)).len(), 2);
        let rows = store.finish().unwrap();
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(
            lines(&dir.path().join(RESULTS_CSV)),
            [
                "index,key,seed,workers,throughput,error",
                "1,a,101,10,,\"boom, \"\"bad\"\"\"",
                "2,b,102,20,3,",
            ]
        );
        assert_eq!(std::fs::read_to_string(dir.path().join(EXPERIMENT_FILE)).unwrap(), "name: x\n");
    }

    #[test]
    fn reopening_drops_a_torn_line_and_retries_failed_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = ResultStore::open(dir.path(), "name: x\n", columns(), false, &HashSet::new()).unwrap();
        store.append(&row(0, "a", None)).unwrap();
        store.append(&row(1, "b", Some("boom"))).unwrap();
        drop(store);
        let jsonl = dir.path().join(RESULTS_JSONL);
        let mut text = std::fs::read_to_string(&jsonl).unwrap();
        text.push_str("{\"index\":2,\"key\":\"c\",\"se");
        std::fs::write(&jsonl, text).unwrap();

        let retry: HashSet<&str> = ["a", "b", "c"].into_iter().collect();
        let (store, existing) = ResultStore::open(dir.path(), "name: x\n", columns(), false, &retry).unwrap();
        assert_eq!(existing.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(lines(&jsonl).len(), 1);
        assert_eq!(lines(&dir.path().join(RESULTS_CSV)).len(), 2);
        drop(store);

        // Another shard's failed row is not this run's to retry: it stays.
        let (_, existing) = ResultStore::open(dir.path(), "name: x\n", columns(), false, &HashSet::new()).unwrap();
        assert_eq!(existing.len(), 1);
    }

    #[test]
    fn refuses_a_directory_of_another_experiment_unless_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = ResultStore::open(dir.path(), "name: x\n", columns(), false, &HashSet::new()).unwrap();
        store.append(&row(0, "a", None)).unwrap();
        drop(store);
        std::fs::write(dir.path().join("old.png"), b"png").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        let err = ResultStore::open(dir.path(), "name: y\n", columns(), false, &HashSet::new())
            .err()
            .unwrap();
        assert!(matches!(err, ExperimentError::DifferentExperiment { .. }), "{err}");
        let (_, existing) = ResultStore::open(dir.path(), "name: y\n", columns(), true, &HashSet::new()).unwrap();
        assert!(existing.is_empty());
        assert!(!dir.path().join("old.png").exists());
        assert!(dir.path().join("notes.txt").exists());
    }

    #[test]
    fn dedup_keeps_success_over_failure_and_the_latest_failure() {
        let rows = vec![
            row(1, "a", Some("first")),
            row(1, "a", None),
            row(1, "a", Some("after")),
            row(0, "b", Some("old")),
            row(0, "b", Some("new")),
        ];
        let kept = dedup_rows(rows);
        assert_eq!(kept.len(), 2);
        assert_eq!((kept[0].key.as_str(), kept[0].error.as_deref()), ("b", Some("new")));
        assert_eq!((kept[1].key.as_str(), kept[1].error.as_deref()), ("a", None));
    }
}
