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
}

impl ModelError {
    pub(crate) fn param(param: impl Into<String>, reason: impl Into<String>) -> Self {
        ModelError::InvalidParam { param: param.into(), reason: reason.into() }
    }
}
