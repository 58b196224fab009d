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
    fn header(&self) -> std::io::Result<String> {
        let mut cells: Vec<String> = vec!["index".into(), "key".into(), "seed".into()];
        cells.extend(self.params.iter().cloned());
        cells.extend(self.metrics.iter().cloned());
        cells.push("error".into());
        csv_line(&cells)
    }

    fn row(&self, row: &ResultRow) -> std::io::Result<String> {
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

/// One CSV line (the `csv` crate's RFC 4180 quoting), with its newline.
fn csv_line(cells: &[String]) -> std::io::Result<String> {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    w.write_record(cells)?;
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    String::from_utf8(bytes).map_err(std::io::Error::other)
}

/// An open output directory, appending rows as runs finish. It holds the
/// directory's lock (`.flowlab.lock`) until dropped, so a second run into
/// the same directory is refused instead of losing rows.
pub(crate) struct ResultStore {
    dir: PathBuf,
    jsonl: File,
    csv: File,
    columns: Columns,
    _lock: DirLock,
}

/// What opening a directory found and did.
#[derive(Debug, Clone, Default)]
pub(crate) struct Opened {
    /// Rows kept (this experiment's runs), sorted by index.
    pub(crate) rows: Vec<ResultRow>,
    /// The stored experiment.yaml differed from this experiment's text.
    pub(crate) changed: bool,
    /// Stored rows that are no run of this experiment (its points changed),
    /// moved to `results.superseded.jsonl`.
    pub(crate) superseded: u64,
}

/// Stored rows no longer in the experiment go here, appended, never deleted.
pub(crate) const SUPERSEDED_JSONL: &str = "results.superseded.jsonl";
const LOCK_FILE: &str = ".flowlab.lock";

/// An exclusive lock on an output directory, held through an OS file lock
/// (released by the OS when the process ends, even by kill -9).
pub(crate) struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of `dir` or says who holds it.
    pub(crate) fn take(dir: &Path) -> Result<DirLock, ExperimentError> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| ExperimentError::io(&path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default().trim().to_string();
                return Err(ExperimentError::Busy {
                    dir: dir.to_path_buf(),
                    holder: if holder.is_empty() { "another process".to_string() } else { holder },
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(ExperimentError::io(&path, e)),
        }
        let command: Vec<String> = std::env::args().collect();
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let holder = format!("pid {} (`{}`, since unix time {since})", std::process::id(), command.join(" "));
        file.set_len(0)
            .and_then(|()| file.write_all(holder.as_bytes()))
            .map_err(|e| ExperimentError::io(&path, e))?;
        Ok(DirLock { _file: file })
    }
}

impl ResultStore {
    /// Opens (creating if needed) `dir` for the experiment named `name` whose
    /// text is `experiment_text` and whose runs have the keys `all_keys`.
    ///
    /// Without `fresh`, stored rows of those runs are kept and returned,
    /// except failed rows whose key is in `retry` (they are run again);
    /// stored rows of runs the experiment no longer has (its points were
    /// edited) are moved to `results.superseded.jsonl`, not deleted. A
    /// directory holding another experiment (another `name:`) is refused.
    /// With `fresh`, earlier results and report files are removed.
    pub(crate) fn open(
        dir: &Path,
        name: &str,
        experiment_text: &str,
        columns: Columns,
        fresh: bool,
        all_keys: &HashSet<&str>,
        retry: &HashSet<&str>,
    ) -> Result<(ResultStore, Opened), ExperimentError> {
        ensure_dir(dir)?;
        let lock = DirLock::take(dir)?;
        let experiment_path = dir.join(EXPERIMENT_FILE);
        let mut changed = false;
        if fresh {
            clear_outputs(dir)?;
        } else if experiment_path.exists() {
            let existing = std::fs::read_to_string(&experiment_path).map_err(|e| ExperimentError::io(&experiment_path, e))?;
            if existing != experiment_text {
                let stored = stored_name(&existing);
                if stored.as_deref() != Some(name) {
                    return Err(ExperimentError::DifferentExperiment {
                        dir: dir.to_path_buf(),
                        stored: stored.unwrap_or_else(|| "?".to_string()),
                        name: name.to_string(),
                    });
                }
                changed = true;
            }
        } else if dir.join(RESULTS_JSONL).exists() {
            // Results without the file they came from: keep the rows that are
            // runs of this experiment, set the others aside.
            changed = true;
        }
        let rows = read_rows(dir)?;
        let (mine, stale): (Vec<ResultRow>, Vec<ResultRow>) =
            rows.into_iter().partition(|r| all_keys.contains(r.key.as_str()));
        if !stale.is_empty() {
            append_rows(&dir.join(SUPERSEDED_JSONL), &stale)?;
        }
        let rows: Vec<ResultRow> = dedup_rows(mine)
            .into_iter()
            .filter(|r| r.error.is_none() || !retry.contains(r.key.as_str()))
            .collect();
        rewrite(dir, &rows, &columns)?;
        write_atomically(&experiment_path, experiment_text.as_bytes())?;
        let jsonl = append_handle(&dir.join(RESULTS_JSONL))?;
        let csv = append_handle(&dir.join(RESULTS_CSV))?;
        Ok((
            ResultStore {
                dir: dir.to_path_buf(),
                jsonl,
                csv,
                columns,
                _lock: lock,
            },
            Opened {
                rows,
                changed,
                superseded: stale.len() as u64,
            },
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
        let csv_row = self.columns.row(row).map_err(|e| ExperimentError::io(self.dir.join(RESULTS_CSV), e))?;
        self.csv
            .write_all(csv_row.as_bytes())
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
    let csv_err = |e| ExperimentError::io(dir.join(RESULTS_CSV), e);
    let mut csv = columns.header().map_err(csv_err)?;
    for row in rows {
        let line = serde_json::to_string(row)
            .map_err(|e| ExperimentError::io(dir.join(RESULTS_JSONL), std::io::Error::other(e)))?;
        jsonl.push_str(&line);
        jsonl.push('\n');
        csv.push_str(&columns.row(row).map_err(csv_err)?);
    }
    write_atomically(&dir.join(RESULTS_JSONL), jsonl.as_bytes())?;
    write_atomically(&dir.join(RESULTS_CSV), csv.as_bytes())
}

/// Writes a file atomically ([`flowlab_files::write_atomic`]), the error
/// naming the file.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), ExperimentError> {
    flowlab_files::write_atomic(path, bytes).map_err(|e| ExperimentError::io(path, e))
}

/// Appends rows to a JSON-lines file (created if absent).
fn append_rows(path: &Path, rows: &[ResultRow]) -> Result<(), ExperimentError> {
    let mut text = String::new();
    for row in rows {
        let line = serde_json::to_string(row).map_err(|e| ExperimentError::io(path, std::io::Error::other(e)))?;
        text.push_str(&line);
        text.push('\n');
    }
    let mut file = append_handle(path)?;
    file.write_all(text.as_bytes()).map_err(|e| ExperimentError::io(path, e))
}

/// The `name:` of a stored experiment file, if it can be read.
fn stored_name(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct NameOnly {
        name: Option<String>,
    }
    serde_saphyr::from_str::<NameOnly>(text).ok()?.name
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
        let ours = [EXPERIMENT_FILE, RESULTS_JSONL, RESULTS_CSV, "index.html", flowlab_reports::RUN_INFO_FILE]
            .contains(&name.as_str())
            || name.ends_with(".png")
            || name.ends_with(".svg");
        if ours && path.is_file() {
            std::fs::remove_file(&path).map_err(|e| ExperimentError::io(&path, e))?;
        }
    }
    Ok(())
}

/// Creates the results directory `dir` (and its parents); a file there is
/// named as one, not as the system's "File exists".
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), ExperimentError> {
    if dir.exists() && !dir.is_dir() {
        return Err(ExperimentError::Usage(format!("{}: is a file; results go to a directory (pass --out to write elsewhere)", dir.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| ExperimentError::io(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_are_quoted_as_rfc_4180_says() {
        let cells: Vec<String> = ["a", "b,c", "d\"e", "f\ng", ""].iter().map(|c| c.to_string()).collect();
        assert_eq!(csv_line(&cells).unwrap(), "a,\"b,c\",\"d\"\"e\",\"f\ng\",\n");
    }

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

    fn keys() -> HashSet<&'static str> {
        ["a", "b", "c"].into_iter().collect()
    }

    /// Opens `dir` for an experiment named `x` or `y` (from its text) whose
    /// runs are `a`, `b`, `c`.
    fn open(dir: &Path, text: &str, retry: &HashSet<&str>) -> Result<(ResultStore, Opened), ExperimentError> {
        let name = text.trim_start_matches("name: ").lines().next().unwrap();
        ResultStore::open(dir, name, text, columns(), false, &keys(), retry)
    }

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect()
    }

    #[test]
    fn appends_rows_and_sorts_them_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, existing) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        assert!(existing.rows.is_empty());
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
        let (mut store, _) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        store.append(&row(0, "a", None)).unwrap();
        store.append(&row(1, "b", Some("boom"))).unwrap();
        drop(store);
        let jsonl = dir.path().join(RESULTS_JSONL);
        let mut text = std::fs::read_to_string(&jsonl).unwrap();
        text.push_str("{\"index\":2,\"key\":\"c\",\"se");
        std::fs::write(&jsonl, text).unwrap();

        let retry: HashSet<&str> = ["a", "b", "c"].into_iter().collect();
        let (store, existing) = open(dir.path(), "name: x\n", &retry).unwrap();
        assert_eq!(existing.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["a"]);
        assert_eq!(lines(&jsonl).len(), 1);
        assert_eq!(lines(&dir.path().join(RESULTS_CSV)).len(), 2);
        drop(store);

        // Another shard's failed row is not this run's to retry: it stays.
        let (_, existing) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        assert_eq!(existing.rows.len(), 1);
    }

    #[test]
    fn refuses_a_directory_of_another_experiment_unless_fresh() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        store.append(&row(0, "a", None)).unwrap();
        drop(store);
        std::fs::write(dir.path().join("old.png"), b"png").unwrap();
        std::fs::write(dir.path().join("notes.txt"), b"mine").unwrap();
        let err = open(dir.path(), "name: y\n", &HashSet::new()).err().unwrap();
        assert_eq!(
            err.to_string(),
            format!(
                "{}: holds results of experiment `x`, not `y`; pass --out to write elsewhere \
                 (or --fresh, which deletes the results stored there)",
                dir.path().display()
            )
        );
        let (_, existing) = ResultStore::open(dir.path(), "y", "name: y\n", columns(), true, &keys(), &HashSet::new()).unwrap();
        assert!(existing.rows.is_empty());
        assert!(!dir.path().join("old.png").exists());
        assert!(dir.path().join("notes.txt").exists());
    }

    #[test]
    fn an_edited_file_keeps_matching_rows_and_sets_the_others_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        store.append(&row(0, "a", None)).unwrap();
        store.append(&row(1, "b", None)).unwrap();
        drop(store);
        // A plot added: every stored run is still a run of the file.
        let (store, opened) = open(dir.path(), "name: x\nplots: []\n", &HashSet::new()).unwrap();
        assert_eq!((opened.rows.len(), opened.changed, opened.superseded), (2, true, 0));
        drop(store);
        // A point dropped: its row is moved aside, not lost.
        let only_a: HashSet<&str> = ["a", "c"].into_iter().collect();
        let (store, opened) = ResultStore::open(dir.path(), "x", "name: x\n", columns(), false, &only_a, &HashSet::new()).unwrap();
        assert_eq!((opened.rows.len(), opened.changed, opened.superseded), (1, true, 1));
        drop(store);
        assert_eq!(lines(&dir.path().join(RESULTS_JSONL)).len(), 1);
        let aside = lines(&dir.path().join(SUPERSEDED_JSONL));
        assert_eq!(aside.len(), 1);
        assert!(aside[0].contains("\"key\":\"b\""), "{aside:?}");
    }

    #[test]
    fn a_second_writer_is_refused_while_the_first_holds_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
        let err = open(dir.path(), "name: x\n", &HashSet::new()).err().unwrap().to_string();
        assert!(err.contains("in use by another flowlab run: pid"), "{err}");
        assert!(err.contains(&std::process::id().to_string()), "{err}");
        drop(store);
        open(dir.path(), "name: x\n", &HashSet::new()).unwrap();
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
