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

/// A model by what a user writes: a zoo name, or an ONNX file (a path
/// ending in `.onnx`) imported at `opts.batch` for training (batch norm by
/// each batch's statistics, as PyTorch's `train()`) and made trainable with the
/// loss its output calls for (softmax cross entropy on `[batch, classes]`,
/// else mean squared error) and `opts.optimizer` (momentum 0.9 at 0.01,
/// the zoo's image models' rule, when none is given).
pub fn build_with(model: &str, opts: &ZooOptions) -> Result<ModelGraph, ModelError> {
    if !model.ends_with(".onnx") {
        return zoo::build_with(model, opts);
    }
    let path = std::path::Path::new(model);
    let m = onnx::import(path, &onnx::ImportOptions { batch: Some(opts.batch), training: true, ..Default::default() })?;
    let loss = onnx::Loss::default_for(&m);
    let name = path.file_stem().map_or_else(|| model.to_string(), |s| s.to_string_lossy().into_owned());
    let optimizer = opts.optimizer.clone().unwrap_or(flowlab_engine::Optimizer::Momentum { lr: 0.01, momentum: 0.9 });
    onnx::training(m, &name, opts.batch, loss, &optimizer)
}
