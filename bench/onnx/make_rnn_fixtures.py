"""Builds an ONNX model of GRU and RNN layers with onnx.helper (no PyTorch
needed) and saves ONNX Runtime's output for a fixed input beside it, in
tests/data/onnx/ (committed; regenerates byte for byte):

    python3 -m venv /tmp/onnxenv && /tmp/onnxenv/bin/pip install onnx onnxruntime numpy
    /tmp/onnxenv/bin/python bench/onnx/make_rnn_fixtures.py

The chain, on x [seq 5, batch 3, 4] (layout 0):
  GRU bidirectional, hidden 6, linear_before_reset 1 (PyTorch's export)
      Y [5, 2, 3, 6] -> Transpose [5, 3, 2, 6] -> Reshape [5, 3, 12]
  GRU forward, hidden 6, linear_before_reset 0, initial_h from an
      initializer, Y [5, 1, 3, 6] -> Squeeze -> [5, 3, 6]
  RNN reverse, hidden 5, Y [5, 1, 3, 5] -> Reshape [5, 15]
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "onnx")
NAME = "gru_rnn"


def main():
    rng = np.random.default_rng(56)
    w = lambda *shape: rng.normal(0.0, 0.4, size=shape).astype(np.float32)
    inits = {
        "g1.W": w(2, 18, 4), "g1.R": w(2, 18, 6), "g1.B": w(2, 36),
        "g2.W": w(1, 18, 12), "g2.R": w(1, 18, 6), "g2.B": w(1, 36), "g2.h0": w(1, 3, 6),
        "r.W": w(1, 5, 6), "r.R": w(1, 5, 5), "r.B": w(1, 10),
    }
    consts = {
        "perm_shape": np.array([5, 3, 12], dtype=np.int64),
        "axis1": np.array([1], dtype=np.int64),
        "out_shape": np.array([5, 15], dtype=np.int64),
    }
    nodes = [
        helper.make_node("GRU", ["x", "g1.W", "g1.R", "g1.B"], ["g1"], hidden_size=6, direction="bidirectional", linear_before_reset=1),
        helper.make_node("Transpose", ["g1"], ["g1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["g1t", "perm_shape"], ["g1r"]),
        helper.make_node("GRU", ["g1r", "g2.W", "g2.R", "g2.B", "", "g2.h0"], ["g2"], hidden_size=6),
        helper.make_node("Squeeze", ["g2", "axis1"], ["g2s"]),
        helper.make_node("RNN", ["g2s", "r.W", "r.R", "r.B"], ["r"], hidden_size=5, direction="reverse"),
        helper.make_node("Reshape", ["r", "out_shape"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 15])],
        [numpy_helper.from_array(v, k) for k, v in {**inits, **consts}.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="flowlab make_rnn_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(OUT, f"{NAME}.onnx")
    onnx.save(model, path)
    x = rng.normal(0.0, 1.0, size=(5, 3, 4)).astype(np.float32)
    (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.save(os.path.join(OUT, f"{NAME}.x.npy"), x)
    np.save(os.path.join(OUT, f"{NAME}.output.npy"), y)
    print(f"{NAME}: output {y.shape}, parameters {sum(v.size for v in inits.values())}, onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
