//! The one error type of `flowlab-experiments`. Every variant names what a
//! person has to look at to fix it: the file with line and column for bad
//! experiment files, the directory for result stores.

use std::path::PathBuf;

/// Why an experiment could not be loaded, run or merged.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// `flowlab run` was stopped (Ctrl-C) before every run was done; what
    /// finished is stored and a rerun resumes from it.
    #[error("interrupted: {stored} of {runs} runs are stored in {}", out_dir.display())]
    Interrupted { out_dir: PathBuf, stored: u64, runs: u64 },

    /// A file or directory could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The experiment file is invalid at a known place.
    #[error("{origin}:{line}:{column}: {message}")]
    AtLocation {
        origin: String,
        line: u64,
        column: u64,
        message: String,
    },

    /// The experiment file is invalid, but no single place in it is to blame
    /// (e.g. one combination of sweep values).
    #[error("{origin}: {message}")]
    InFile { origin: String, message: String },

    /// `catalog:NAME` names no catalog entry.
    #[error("no catalog experiment `{name}`{suggestion} (the catalog has: {})", available.join(", "))]
    UnknownCatalogEntry {
        name: String,
        suggestion: String,
        available: Vec<String>,
    },

    /// A command-line value is malformed (e.g. `--shard 3`).
    #[error("{0}")]
    Usage(String),

    /// The output directory holds the results of another experiment (another
    /// `name:`), so resuming into it would mix two experiments.
    #[error(
        "{dir}: holds results of experiment `{stored}`, not `{name}`; pass --out to write elsewhere \
         (or --fresh, which deletes the results stored there)"
    )]
    DifferentExperiment { dir: PathBuf, stored: String, name: String },

    /// Another process is writing into the output directory.
    #[error("{dir}: in use by another flowlab run: {holder}; wait for it to finish, or pass --out to write elsewhere")]
    Busy { dir: PathBuf, holder: String },

    /// Result directories to merge do not hold the same experiment.
    #[error("{dir}: cannot merge: its experiment.yaml differs from the one in {first}")]
    MergeMismatch { dir: PathBuf, first: PathBuf },

    /// A stored results file could not be read.
    #[error(transparent)]
    Results(#[from] flowlab_reports::ReportError),

    /// A measurement on this host (a diagnosis's step runs, its profile)
    /// failed.
    #[error("{what}: {message}")]
    Measurement { what: String, message: String },

    /// The worker thread pool could not be started.
    #[error("cannot start {jobs} worker threads: {message}")]
    ThreadPool { jobs: usize, message: String },
}

impl ExperimentError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ExperimentError::Io {
            path: path.into(),
            source,
        }
    }
}
