//! Any bytes as a checkpoint file: decoding returns tensors or an error
//! naming the file, never a crash or an allocation abort.
#![no_main]

use flowlab_engine::checkpoint;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if let Ok(ck) = checkpoint::decode(data, Path::new("fuzz.safetensors")) {
        for t in ck.tensors.values() {
            assert_eq!(Some(t.num_elements()), t.shape().checked_num_elements());
        }
    }
});
