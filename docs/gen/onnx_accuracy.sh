#!/bin/sh
# Writes docs/src/onnx-accuracy.md, the imported fixtures' largest errors
# against ONNX Runtime (and PyTorch's train mode), from a fresh run of the
# test that checks them (models/tests/onnx_matches_onnxruntime.rs).
set -e
cd "$(dirname "$0")/../.."
FLOWLAB_WRITE_DOCS=1 cargo test -q -p flowlab-models --test onnx_matches_onnxruntime the_manuals_accuracy_table_is_a_fresh_runs
