//! Files beside the results that the page shows when present:
//! `run.json` (what the last run recorded about itself) and `summary.json`
//! (tables a kind computes over all its points, e.g. a `validate` kind's
//! MAPE and Kendall tau). A kind fills the page's summary section by writing
//! [`SummaryTable`]s with [`write_summaries`]; the page draws each as a
//! sortable table under the plots.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::ReportError;
use crate::spec::Role;

pub const RUN_INFO_FILE: &str = "run.json";
pub const SUMMARY_FILE: &str = "summary.json";

/// What a run records about itself for the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// `2026-11-24 21:30:05` (UTC).
    pub date: String,
    /// The flowlab version.
    pub version: String,
    /// The commit checked out when the binary was built and its cargo
    /// profile (`release`, `debug`).
    #[serde(default)]
    pub commit: String,
    #[serde(default)]
    pub profile: String,
    /// The command line, the program by its name and paths under the
    /// working directory relative to it (no machine's layout in it).
    pub command: String,
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
    pub ran: u64,
    pub resumed: u64,
    /// Free parameters fitted on the calibration points before the sweep ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationRecord>,
    /// The parameters every point shares once resolved (defaults filled
    /// in, a zoo model's compute taken), for the page's constants table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<ResolvedConstants>,
}

/// Resolved parameters with the same value in every point of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResolvedConstants {
    /// Dotted key to value, unset options left out.
    pub values: BTreeMap<String, serde_json::Value>,
    /// Which of them no point's file wrote: a default, or resolved from a
    /// key that was written (`model: inception_v3`).
    pub unwritten: BTreeSet<String>,
    /// The kind's settings that say what a plot shows (the model, the
    /// cluster's size, stragglers), for the plots' subtitles.
    #[serde(default)]
    pub headline: Vec<String>,
}

/// What fitting an experiment's `calibrate:` parameters found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationRecord {
    /// The optimizer, as named in the file.
    pub method: String,
    /// What was minimised.
    pub objective: String,
    /// The fitted value of each parameter, by dotted key.
    pub fitted: std::collections::BTreeMap<String, f64>,
    /// The range each parameter was searched in.
    pub ranges: std::collections::BTreeMap<String, [f64; 2]>,
    /// The objective at the fitted values.
    pub loss: f64,
    /// Simulations of the calibration points the fit ran (each evaluation
    /// runs every calibration point once).
    pub evaluations: u64,
    /// Calibration reference points fitted on.
    pub points: u64,
}

/// One published reference point against the value the run produced at the
/// same sweep point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReferenceCheck {
    /// The reference's source and legend label.
    pub source: String,
    pub label: String,
    /// The x key and value.
    pub x_key: String,
    pub x: f64,
    /// The metric compared.
    pub y_key: String,
    /// The other parameters pinned by the reference's `where:`, as
    /// `key=value` joined by spaces (empty if none): the series.
    pub series: String,
    pub role: Role,
    /// The published value.
    pub paper: f64,
    /// The run's value there (mean over repeats); `None` if the point failed.
    pub simulated: Option<f64>,
    /// (simulated - paper) / paper.
    pub relative_error: Option<f64>,
}

/// `summary.json`: a kind's tables and the reference points checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    #[serde(default)]
    pub references: Vec<ReferenceCheck>,
    #[serde(default)]
    pub tables: Vec<SummaryTable>,
}

/// `summary.json` as written now, or as a bare list of tables (before
/// reference points were checked).
#[derive(Deserialize)]
#[serde(untagged)]
enum SummaryFile {
    Current(Summary),
    Tables(Vec<SummaryTable>),
}

impl ReferenceCheck {
    /// The checks as a page table: role first, so held-out rows sort together.
    pub fn table(checks: &[ReferenceCheck]) -> SummaryTable {
        use serde_json::Value;
        let num = |v: Option<f64>| v.map_or(Value::Null, |x| serde_json::json!(x));
        SummaryTable {
            title: "Reference points against the run".into(),
            columns: ["role", "reference", "series", "x", "metric", "published", "run", "error %"]
                .map(String::from)
                .to_vec(),
            rows: checks
                .iter()
                .map(|c| {
                    vec![
                        Value::from(c.role.describe()),
                        Value::from(c.label.clone()),
                        Value::from(c.series.clone()),
                        serde_json::json!(c.x),
                        Value::from(c.y_key.clone()),
                        serde_json::json!(c.paper),
                        num(c.simulated),
                        num(c.relative_error.map(|e| e * 100.0)),
                    ]
                })
                .collect(),
            note: Some(
                "error = (run - published) / published. Calibration points had free parameters fitted to them \
                 (see run.json); only held-out points measure the model."
                    .into(),
            ),
        }
    }
}

/// One table of the page's summary section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryTable {
    pub title: String,
    pub columns: Vec<String>,
    /// Cells: numbers, strings or null (empty).
    pub rows: Vec<Vec<serde_json::Value>>,
    /// A line under the table (how it was computed, its source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Writes `<dir>/summary.json`.
pub fn write_summary(dir: &Path, summary: &Summary) -> Result<(), ReportError> {
    let path = dir.join(SUMMARY_FILE);
    let text = serde_json::to_string_pretty(summary).map_err(|e| ReportError::io(&path, std::io::Error::other(e)))?;
    flowlab_files::write_atomic(&path, text.as_bytes()).map_err(|e| ReportError::io(&path, e))
}

/// Reads `<dir>/summary.json` in either of its forms; empty if absent.
pub(crate) fn read_summary(dir: &Path) -> Result<Summary, ReportError> {
    Ok(match read_optional::<SummaryFile>(dir, SUMMARY_FILE)? {
        None => Summary::default(),
        Some(SummaryFile::Current(s)) => s,
        Some(SummaryFile::Tables(tables)) => Summary { references: Vec::new(), tables },
    })
}

/// Writes `<dir>/run.json`.
pub fn write_run_info(dir: &Path, info: &RunInfo) -> Result<(), ReportError> {
    let path = dir.join(RUN_INFO_FILE);
    let text = serde_json::to_string_pretty(info).map_err(|e| ReportError::io(&path, std::io::Error::other(e)))?;
    flowlab_files::write_atomic(&path, text.as_bytes()).map_err(|e| ReportError::io(&path, e))
}

/// Reads an optional JSON file of `dir`: `None` if absent, an error naming
/// the file if it is malformed.
pub(crate) fn read_optional<T: serde::de::DeserializeOwned>(dir: &Path, name: &str) -> Result<Option<T>, ReportError> {
    let path = dir.join(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReportError::io(&path, e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| ReportError::BadExperiment {
        path: path.clone(),
        message: e.to_string(),
    })
}

/// `YYYY-MM-DD hh:mm:ss` for seconds since the Unix epoch (UTC):
/// humantime's RFC 3339 form, read more easily without its `T` and `Z`.
pub fn utc_date(unix_s: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix_s);
    humantime::format_rfc3339_seconds(t).to_string().replace('T', " ").trim_end_matches('Z').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_match_known_instants() {
        // From `date -u -d @N`.
        assert_eq!(utc_date(0), "1970-01-01 00:00:00");
        assert_eq!(utc_date(951_782_400), "2000-02-29 00:00:00");
        assert_eq!(utc_date(1_795_555_805), "2026-11-24 21:30:05");
    }
}
