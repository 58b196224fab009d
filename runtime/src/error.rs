//! The crate's one error type: every variant names the file, task or address
//! a person has to fix.

use std::path::PathBuf;
use std::time::Duration;

/// An error of the distributed runtime.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot read cluster spec {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The YAML does not parse or has an unknown key (the message carries
    /// line and column).
    #[error("cluster spec {path}: {message}")]
    Yaml { path: PathBuf, message: String },
    /// The spec parses but describes no valid cluster.
    #[error("cluster spec {path}: {message}")]
    Spec { path: PathBuf, message: String },
    #[error("task {task} is not in the cluster spec ({known})")]
    NoSuchTask { task: String, known: String },
    #[error("task {task}: cannot bind address {address}: {source}")]
    Bind { task: String, address: String, source: std::io::Error },
    #[error("task {task}: address {address} does not resolve: {source}")]
    Resolve { task: String, address: String, source: std::io::Error },
    #[error("task {task} at {address} not reachable after {waited:?} ({attempts} attempts); last error: {source}")]
    Unreachable { task: String, address: String, waited: Duration, attempts: u32, source: std::io::Error },
    /// A message from another task that cannot be understood.
    #[error("bad message: {message}")]
    Message { message: String },
    /// The engine refused a tensor or a rendezvous operation.
    #[error("{message}")]
    Engine { message: String },
    /// A local task could not be started.
    #[error("cannot start task {task}: {message}")]
    Launch { task: String, message: String },
    /// A gRPC call to another task failed.
    #[error("task {task} at {address}: {message}")]
    Rpc { task: String, address: String, message: String },
}

impl From<flowlab_engine::EngineError> for RuntimeError {
    fn from(e: flowlab_engine::EngineError) -> RuntimeError {
        RuntimeError::Engine { message: e.to_string() }
    }
}

pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;
