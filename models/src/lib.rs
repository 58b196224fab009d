//! Where every model flowlab runs comes from: the zoo's training graphs of
//! the paper's workloads ([`zoo`]) and models imported from ONNX files
//! ([`onnx`]). Engine programs, both simulators, the
//! experiment kinds and the CLI take their graphs from here, so a model is
//! built one way whoever runs it.

mod error;
pub mod npy;
pub mod onnx;
pub mod zoo;

pub use error::ModelError;
pub use zoo::{ModelGraph, StepSpec, ZooOptions};
