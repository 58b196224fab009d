//! The results table: one JSON object per line of `results.jsonl`, one line
//! per finished sweep point.
//!
//! The experiment runner (`flowlab-experiments`) writes these lines and may
//! call [`read_results`] / [`read_results_file`] itself to resume or merge
//! runs: the shape is defined here, once. A writer appends each line with its
//! newline in one write, so a killed run can leave at most a *torn last line*
//! without a trailing newline; readers ignore it, and [`ResultsFile::complete_len`]
//! tells a resuming writer where to truncate before appending.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::ReportError;

/// One finished sweep point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    /// The point's index in the sweep expansion.
    pub index: u64,
    /// A hash of the point's parameters (the resume key).
    pub key: String,
    /// The point's own seed, derived from the experiment seed and the index.
    pub seed: u64,
    /// Dotted parameter keys (`strategy.sync.backup`) to numbers, strings or booleans.
    #[serde(default)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// Scalar results. JSON has no NaN: `serde_json` writes NaN as `null`, and
    /// `null` reads back as NaN.
    #[serde(default, deserialize_with = "nan_for_null_map")]
    pub metrics: BTreeMap<String, f64>,
    /// Per-step samples (e.g. `step_time_s`), for CDFs.
    #[serde(default, deserialize_with = "nan_for_null_series")]
    pub series: BTreeMap<String, Vec<f64>>,
    /// Why the point failed; `None` for a successful point.
    #[serde(default)]
    pub error: Option<String>,
    /// Wall-clock seconds the point took.
    #[serde(default)]
    pub elapsed_s: f64,
}

/// A results file as read: its rows and where its complete lines end.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsFile {
    pub rows: Vec<ResultRow>,
    /// Byte length of the complete, valid lines. A writer that resumes should
    /// truncate the file to this length before appending.
    pub complete_len: u64,
    /// Whether a torn last line (no trailing newline, not valid) was ignored.
    pub torn_tail: bool,
}

/// Reads a `results.jsonl` file into rows. Blank lines are skipped; a torn
/// last line is ignored; any other invalid line is an error naming the file
/// and line number.
pub fn read_results(path: &Path) -> Result<Vec<ResultRow>, ReportError> {
    Ok(read_results_file(path)?.rows)
}

/// Like [`read_results`], also telling where the complete lines end.
pub fn read_results_file(path: &Path) -> Result<ResultsFile, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReportError::io(path, e))?;
    parse_results(path, &text)
}

pub(crate) fn parse_results(path: &Path, text: &str) -> Result<ResultsFile, ReportError> {
    let mut rows = Vec::new();
    let mut offset = 0usize;
    let mut complete_len = 0u64;
    let mut torn_tail = false;
    for (number, line) in text.split_inclusive('\n').enumerate() {
        offset += line.len();
        let terminated = line.ends_with('\n');
        let body = line.trim();
        if body.is_empty() {
            if terminated {
                complete_len = offset as u64;
            }
            continue;
        }
        match serde_json::from_str::<ResultRow>(body) {
            Ok(row) if terminated => {
                rows.push(row);
                complete_len = offset as u64;
            }
            // A valid row that lacks its newline is the last line of a file
            // whose writer was interrupted between the two: keep the row, but
            // do not count it as complete so a resuming writer rewrites it.
            Ok(row) => rows.push(row),
            Err(_) if !terminated => torn_tail = true,
            Err(e) => {
                return Err(ReportError::BadResultLine {
                    path: path.to_path_buf(),
                    line: number + 1,
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(ResultsFile {
        rows,
        complete_len,
        torn_tail,
    })
}

fn nan_for_null_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let raw = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}

fn nan_for_null_series<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, Vec<f64>>, D::Error> {
    let raw = BTreeMap::<String, Vec<Option<f64>>>::deserialize(d)?;
    Ok(raw
        .into_iter()
        .map(|(k, v)| (k, v.into_iter().map(|x| x.unwrap_or(f64::NAN)).collect()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROW1: &str = r#"{"index":0,"key":"aa","seed":1,"params":{"workers":25,"model":"inception"},"metrics":{"throughput":100.5},"series":{"step_time_s":[1.0,2.0]},"error":null,"elapsed_s":0.5}"#;
    const ROW2: &str = r#"{"index":1,"key":"bb","seed":2,"params":{"workers":50},"metrics":{"throughput":null},"error":"boom","elapsed_s":0.1}"#;

    fn parse(text: &str) -> Result<ResultsFile, ReportError> {
        parse_results(Path::new("out/x/results.jsonl"), text)
    }

    #[test]
    fn reads_rows_with_defaults_and_nan_for_null() {
        let file = parse(&format!("{ROW1}\n\n{ROW2}\n")).unwrap();
        assert_eq!(file.rows.len(), 2);
        assert!(!file.torn_tail);
        let r = &file.rows[0];
        assert_eq!(r.params["workers"], serde_json::json!(25));
        assert_eq!(r.series["step_time_s"], vec![1.0, 2.0]);
        assert_eq!(r.error, None);
        let r = &file.rows[1];
        assert!(r.metrics["throughput"].is_nan());
        assert!(r.series.is_empty());
        assert_eq!(r.error.as_deref(), Some("boom"));
        assert_eq!(file.complete_len as usize, ROW1.len() + 2 + ROW2.len() + 1);
    }

    #[test]
    fn torn_last_line_is_ignored_and_not_counted_complete() {
        let text = format!("{ROW1}\n{}", &ROW2[..40]);
        let file = parse(&text).unwrap();
        assert_eq!(file.rows.len(), 1);
        assert!(file.torn_tail);
        assert_eq!(file.complete_len as usize, ROW1.len() + 1);
    }

    #[test]
    fn invalid_line_in_the_middle_names_file_and_line() {
        let text = format!("{ROW1}\n{}\n{ROW2}\n", &ROW2[..40]);
        let err = parse(&text).unwrap_err().to_string();
        assert_eq!(
            err,
            "out/x/results.jsonl:2: not a valid result row: EOF while parsing a value at line 1 column 40"
        );
    }

    #[test]
    fn invalid_terminated_last_line_is_an_error() {
        let err = parse(&format!("{ROW1}\n{{\"index\": 1}}\n"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "out/x/results.jsonl:2: not a valid result row: missing field `key` at line 1 column 12"
        );
    }

    #[test]
    fn rows_round_trip_through_json() {
        let file = parse(&format!("{ROW1}\n")).unwrap();
        let text = serde_json::to_string(&file.rows[0]).unwrap();
        let again: ResultRow = serde_json::from_str(&text).unwrap();
        assert_eq!(again, file.rows[0]);
    }
}
