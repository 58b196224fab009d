//! The one error type of `flowlab-hw`. Every variant names what the user has
//! to fix: the file and line, the key, the parameter, or the list of valid
//! names.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum HwError {
    #[error("unknown number format `{name}`; valid formats: {valid}")]
    UnknownFormat { name: String, valid: String },

    #[error("invalid number format `{name}`: {reason}")]
    InvalidFormat { name: String, reason: String },

    #[error("cannot decode {format}: {reason}")]
    Decode { format: String, reason: String },

    #[error("unknown {kind} `{name}`; similar names: {similar}")]
    UnknownName { kind: &'static str, name: String, similar: String },

    #[error("{path}: {message}")]
    Yaml { path: PathBuf, message: String },

    #[error("{path}: {key}: {message}")]
    InvalidValue { path: PathBuf, key: String, message: String },

    #[error("cannot read {path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },

    #[error("cannot write {path}: {error}")]
    Write { path: PathBuf, error: std::io::Error },

    #[error("{path}:{line}: {message}")]
    Parse { path: PathBuf, line: usize, message: String },

    #[error("unknown dataflow `{name}`; valid dataflows: os, ws, is")]
    UnknownDataflow { name: String },

    #[error("invalid parameter `{parameter}`: {message}")]
    InvalidParameter { parameter: String, message: String },

    #[error(
        "{buffer} SRAM too small: one fold needs {need_words} words in one half of the double buffer, \
         but {size_kib} KiB holds {have_words} words per half"
    )]
    SramTooSmall { buffer: &'static str, need_words: u64, have_words: u64, size_kib: u64 },

    #[error("refusing the {what}: {estimate}, beyond the limit of {limit}")]
    TooMuchWork { what: String, estimate: String, limit: String },

    #[error("systolic model internal inconsistency: {0}")]
    Internal(String),
}

/// Lists up to five names that share a prefix or a substring with `name`
/// (case-insensitive), falling back to all names when nothing is close.
pub(crate) fn similar_names<'a>(name: &str, names: impl Iterator<Item = &'a str> + Clone) -> String {
    let needle = name.to_ascii_lowercase();
    let stem: String = needle.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    let mut close: Vec<&str> = names
        .clone()
        .filter(|n| {
            let h: String = n.to_ascii_lowercase().chars().filter(|c| c.is_ascii_alphanumeric()).collect();
            !stem.is_empty()
                && (h.contains(&stem) || stem.contains(&h) || h.starts_with(&stem[..stem.len().min(3)]))
        })
        .collect();
    if close.is_empty() {
        close = names.collect();
    }
    close.truncate(if close.len() > 12 { 12 } else { close.len() });
    close.join(", ")
}
