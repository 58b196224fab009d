//! The one error type of `flowlab-reports`. Every variant names the file (and
//! line, key or plot) a person has to look at to fix the input.

use std::path::PathBuf;

/// Why a report (or one of its inputs) could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A line of a results file is not a valid result row. A torn *last*
    /// line (no trailing newline) is not an error: it is ignored.
    #[error("{path}:{line}: not a valid result row: {message}")]
    BadResultLine {
        path: PathBuf,
        line: usize,
        message: String,
    },

    /// The experiment file could not be parsed (the message carries line and
    /// column from the YAML parser).
    #[error("{path}: {message}")]
    BadExperiment { path: PathBuf, message: String },

    /// A plot specification is inconsistent in itself (e.g. a heat map
    /// without `z`), or does not fit the data (a log axis over text values).
    #[error("plot {plot}: {reason}")]
    InvalidPlot { plot: String, reason: String },

    /// A plot names a key that no successful result row has.
    #[error(
        "{path}: plot {plot}: key `{key}` ({role}) is in no result row; available keys: {}",
        available.join(", ")
    )]
    UnknownKey {
        path: PathBuf,
        plot: String,
        role: &'static str,
        key: String,
        available: Vec<String>,
    },

    /// The plotting library failed to draw or encode a chart.
    #[error("{path}: drawing failed: {message}")]
    Draw { path: PathBuf, message: String },
}

impl ReportError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ReportError::Io {
            path: path.into(),
            source,
        }
    }
}
