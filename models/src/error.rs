//! The one error type of `flowlab-models`: each variant names the model,
//! parameter, file or node at fault.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ModelError {
    /// A size outside what the architecture takes; `param` is its key.
    #[error("invalid parameter `{param}`: {reason}")]
    InvalidParam { param: String, reason: String },
    /// A model name the zoo does not know.
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel { name: String, known: String },
    /// The engine rejected a node while a zoo model was being built.
    #[error("building model `{model}`: {detail}")]
    ModelBuild { model: String, detail: String },
    /// An ONNX file that cannot be read or imported as a whole.
    #[error("{file}: {detail}")]
    Onnx { file: String, detail: String },
    /// An ONNX node the importer cannot turn into engine ops.
    #[error("{file}: node '{node}' ({op}): {detail}")]
    OnnxNode { file: String, node: String, op: String, detail: String },
    /// Operators of the file the importer does not know, every one named
    /// with the first node that uses it.
    #[error("{file}: {count} operator(s) flowlab does not import: {list}")]
    OnnxUnsupported { file: String, count: usize, list: String },
    /// An `.npy` file that cannot be read or written.
    #[error("{file}: {detail}")]
    Npy { file: String, detail: String },
}

impl ModelError {
    pub(crate) fn param(param: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError::InvalidParam { param: param.into(), reason: reason.into() }
    }
}
