"""Builds an ONNX model of an LSTM and a GRU over sequences of different
lengths (`sequence_lens`) with onnx.helper and saves ONNX Runtime's output
for a fixed input beside it, in tests/data/onnx/ (committed; regenerates
byte for byte):

    python3 -m venv /tmp/onnxenv && /tmp/onnxenv/bin/pip install onnx onnxruntime numpy
    /tmp/onnxenv/bin/python bench/onnx/make_seqlen_fixtures.py

On x [seq 5, batch 3, 4] with lengths 5, 3 and 1: a bidirectional LSTM
(hidden 6) and a reverse GRU (hidden 4, linear_before_reset 1); the output
is every Y and Y_h (and the LSTM's Y_c) flattened and concatenated, so
steps beyond an element's length (zeros) and the final states (the state
after the element's last step) are all compared.
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "onnx")
NAME = "seq_lens"


def main():
    rng = np.random.default_rng(5656)
    w = lambda *shape: rng.normal(0.0, 0.4, size=shape).astype(np.float32)
    inits = {
        "l.W": w(2, 24, 4), "l.R": w(2, 24, 6), "l.B": w(2, 48),
        "g.W": w(1, 12, 4), "g.R": w(1, 12, 4), "g.B": w(1, 24),
    }
    consts = {"lens": np.array([5, 3, 1], dtype=np.int32), "flat": np.array([1, -1], dtype=np.int64)}
    nodes = [
        helper.make_node("LSTM", ["x", "l.W", "l.R", "l.B", "lens"], ["ly", "lh", "lc"], hidden_size=6, direction="bidirectional"),
        helper.make_node("GRU", ["x", "g.W", "g.R", "g.B", "lens"], ["gy", "gh"], hidden_size=4, direction="reverse", linear_before_reset=1),
    ]
    parts = ["ly", "lh", "lc", "gy", "gh"]
    for p in parts:
        nodes.append(helper.make_node("Reshape", [p, "flat"], [p + "_f"]))
    nodes.append(helper.make_node("Concat", [p + "_f" for p in parts], ["y"], axis=1))
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5 * 2 * 3 * 6 + 2 * 2 * 3 * 6 + 5 * 3 * 4 + 3 * 4])],
        [numpy_helper.from_array(v, k) for k, v in {**inits, **consts}.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="flowlab make_seqlen_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(OUT, f"{NAME}.onnx")
    onnx.save(model, path)
    x = rng.normal(0.0, 1.0, size=(5, 3, 4)).astype(np.float32)
    (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.save(os.path.join(OUT, f"{NAME}.x.npy"), x)
    np.save(os.path.join(OUT, f"{NAME}.output.npy"), y)
    # a length beyond the sequence: refused at import, naming the node
    for t in model.graph.initializer:
        if t.name == "lens":
            t.CopyFrom(numpy_helper.from_array(np.array([6, 3, 1], dtype=np.int32), "lens"))
    model.graph.node[0].name = "lstm"
    onnx.save(model, os.path.join(OUT, "bad", "seq_lens_too_long.onnx"))
    print(f"{NAME}: output {y.shape}, zeros {int((y == 0).sum())}, parameters {sum(v.size for v in inits.values())}, onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
