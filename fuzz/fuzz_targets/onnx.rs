//! Any bytes as an ONNX model: the importer returns a graph or an error
//! naming the file, never a crash, an allocation abort or a hang. (Seed
//! the corpus with tests/data/onnx/*.onnx.)
#![no_main]

use flowlab_models::onnx::{ImportOptions, import_bytes};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let opts = ImportOptions { batch: Some(2), ..Default::default() };
    if let Ok(m) = import_bytes(data, Path::new("/nonexistent"), "fuzz.onnx", &opts) {
        assert_eq!(m.outputs.iter().filter(|(_, o)| o.shape().to_shape().is_none()).count(), 0);
    }
});
