//! Files the importer refuses, each with the error a user can act on:
//! the file, and the node and operator where one is at fault. Made by
//! `bench/onnx/make_fixtures.py` and `make_helper_fixtures.py`
//! (tests/data/onnx/bad/) or cut here.

use flowlab_models::onnx::{ImportOptions, import, import_bytes};
use std::path::{Path, PathBuf};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/onnx")
}

fn batch(b: usize) -> ImportOptions {
    ImportOptions { batch: Some(b), ..Default::default() }
}

fn err(path: &Path, opts: &ImportOptions) -> String {
    import(path, opts).map(|_| ()).unwrap_err().to_string()
}

#[test]
fn a_truncated_or_foreign_file_is_not_an_onnx_model() {
    let bytes = std::fs::read(data().join("mlp.onnx")).unwrap();
    let e = import_bytes(&bytes[..bytes.len() / 2], Path::new("."), "half.onnx", &batch(2)).map(|_| ()).unwrap_err().to_string();
    assert!(e.starts_with("half.onnx: not an ONNX model: "), "{e}");
    let e = import_bytes(b"\x89PNG\r\n\x1a\n", Path::new("."), "picture.onnx", &batch(2)).map(|_| ()).unwrap_err().to_string();
    assert!(e.starts_with("picture.onnx: not an ONNX model"), "{e}");
    let e = err(&data().join("absent.onnx"), &batch(2));
    assert!(e.contains("absent.onnx: cannot read"), "{e}");
}

#[test]
fn an_opset_outside_the_range_is_named() {
    let f = data().join("bad/opset11.onnx");
    assert_eq!(err(&f, &batch(2)), format!("{}: opset 11 is outside the importer's 13..=21 (re-export with opset_version in that range)", f.display()));
}

#[test]
fn every_unsupported_operator_is_named_with_its_first_node() {
    let f = data().join("bad/unsupported.onnx");
    assert_eq!(err(&f, &batch(2)), format!("{}: 2 operator(s) flowlab does not import: NonZero (node 'find'), com.microsoft.FusedMatMul (node 'fused')", f.display()));
}

#[test]
fn a_missing_external_data_file_is_named() {
    let f = data().join("bad/external.onnx");
    let e = err(&f, &batch(2));
    assert!(e.starts_with(&format!("{}: initializer 'w': external data file ", f.display())) && e.contains("external.weights"), "{e}");
}

#[test]
fn a_symbolic_dimension_left_unbound_is_named_with_its_input() {
    let f = data().join("mlp.onnx");
    assert_eq!(
        err(&f, &ImportOptions::default()),
        format!("{}: input 'x': dimension 0 ('batch') is symbolic: bind it (--batch B for the first, --dim NAME=N for a named one)", f.display())
    );
}

/// The weight comes from the data file beside the model: y = x . w with
/// w = arange(16) as 4 x 4, so row r of y for x = e_r is row r of w.
#[test]
fn external_data_beside_the_model_is_read() {
    let m = import(&data().join("external/matmul.onnx"), &batch(4)).unwrap();
    let sess = flowlab_engine::Session::new(&m.graph).unwrap();
    sess.run(&[], &[], &[&m.graph.global_variables_initializer().unwrap()]).unwrap();
    let eye = flowlab_engine::Tensor::from_vec((0..16).map(|i| if i % 5 == 0 { 1f32 } else { 0.0 }).collect::<Vec<_>>(), [4, 4]).unwrap();
    let y = sess.run(&[(&m.inputs[0].placeholder, &eye)], &[&m.outputs[0].1], &[]).unwrap().remove(0);
    assert_eq!(y.to_vec::<f32>().unwrap(), (0..16).map(|i| i as f32).collect::<Vec<_>>());
}

/// Any byte string gives a model or an error: every prefix of a real file
/// and single-byte changes through it.
#[test]
fn no_byte_string_panics_the_importer() {
    let bytes = std::fs::read(data().join("cnn.onnx")).unwrap();
    for cut in (0..bytes.len()).step_by(97) {
        let _ = import_bytes(&bytes[..cut], Path::new("."), "cut.onnx", &batch(2));
    }
    for at in (0..bytes.len()).step_by(131) {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        let _ = import_bytes(&b, Path::new("."), "flipped.onnx", &batch(2));
    }
}

/// Found by the fuzzer (`fuzz/fuzz_targets/onnx.rs`): the
/// encoder fixture with one constant changed asks a reshape to
/// 2^63 - 1 rows; its element count overflowed instead of being refused.
#[test]
fn a_reshape_whose_size_overflows_is_refused_naming_the_node() {
    let f = data().join("bad/fuzz-reshape-overflow.onnx");
    assert_eq!(
        err(&f, &batch(2)),
        format!("{}: node '/encoder/layers.1/self_attn/Reshape_2' (Reshape): shape [8, 2, 9223372036854775807, 32] overflows", f.display())
    );
}

#[test]
fn a_sequence_length_beyond_the_sequence_is_named_with_its_node() {
    let f = data().join("bad/seq_lens_too_long.onnx");
    let e = err(&f, &batch(3));
    assert!(e.contains("'lstm'") && e.contains("sequence_lens [6.0, 3.0, 1.0] are not 3 lengths between 1 and 5"), "{e}");
}
