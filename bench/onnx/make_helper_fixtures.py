"""Builds ONNX models with onnx.helper (no PyTorch needed) for operators
PyTorch's small exports do not cover, and saves ONNX Runtime's output for a
fixed input beside each, in tests/data/onnx/ (committed; regenerates byte
for byte):

    python3 -m venv /tmp/onnxenv && /tmp/onnxenv/bin/pip install onnx onnxruntime numpy
    /tmp/onnxenv/bin/python bench/onnx/make_helper_fixtures.py

conv_groups, on x [2, 8, 12, 12]:
  grouped    Conv group 4, 3x3, pads 1, bias          -> [2, 12, 12, 12]
  Relu
  depthwise  Conv group 12, 3x3, stride 2, pads 1      -> [2, 12, 6, 6]
  dilated    Conv 3x3 dilation 2, pads 2, bias         -> [2, 8, 6, 6]
  both       Conv group 2, 3x3 dilation 2, pads 2      -> [2, 4, 6, 6]
  (ONNX Runtime refuses dilations with auto_pad SAME, so pads are given.)

gru_rnn, on x [seq 5, batch 3, 4] (layout 0):
  GRU bidirectional, hidden 6, linear_before_reset 1 (PyTorch's export)
      Y [5, 2, 3, 6] -> Transpose [5, 3, 2, 6] -> Reshape [5, 3, 12]
  GRU forward, hidden 6, linear_before_reset 0, initial_h from an
      initializer, Y [5, 1, 3, 6] -> Squeeze -> [5, 3, 6]
  RNN reverse, hidden 5, Y [5, 1, 3, 5] -> Reshape [5, 15]

seq_lens, on x [seq 5, batch 3, 4] with lengths 5, 3 and 1: a
  bidirectional LSTM (hidden 6) and a reverse GRU (hidden 4,
  linear_before_reset 1); the output is every Y and Y_h (and the LSTM's
  Y_c) flattened and concatenated, so steps beyond an element's length
  (zeros) and the final states are all compared. Also bad/seq_lens_too_long.onnx,
  a length beyond the sequence, which the importer refuses.
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "onnx")


def build(name, nodes, x_shape, y_shape, tensors):
    """The checked model of `nodes` over input x and output y."""
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(v, k) for k, v in tensors.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="flowlab make_helper_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def save(name, model, x, params):
    """Writes the model, x and ONNX Runtime's output for x."""
    path = os.path.join(OUT, f"{name}.onnx")
    onnx.save(model, path)
    (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.save(os.path.join(OUT, f"{name}.x.npy"), x)
    np.save(os.path.join(OUT, f"{name}.output.npy"), y)
    print(f"{name}: output {y.shape}, zeros {int((y == 0).sum())}, parameters {params}, onnxruntime {ort.__version__}")


def normal(rng, scale):
    return lambda *shape: rng.normal(0.0, scale, size=shape).astype(np.float32)


def conv_groups():
    rng = np.random.default_rng(53)
    w = normal(rng, 0.3)
    inits = {"g.w": w(12, 2, 3, 3), "g.b": w(12), "d.w": w(12, 1, 3, 3), "a.w": w(8, 12, 3, 3), "a.b": w(8), "b.w": w(4, 4, 3, 3)}
    nodes = [
        helper.make_node("Conv", ["x", "g.w", "g.b"], ["g"], group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Conv", ["r", "d.w"], ["d"], group=12, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "a.w", "a.b"], ["a"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Conv", ["a", "b.w"], ["y"], group=2, dilations=[2, 2], pads=[2, 2, 2, 2]),
    ]
    model = build("conv_groups", nodes, ["batch", 8, 12, 12], ["batch", 4, 6, 6], inits)
    save("conv_groups", model, normal(rng, 1.0)(2, 8, 12, 12), sum(v.size for v in inits.values()))


def gru_rnn():
    rng = np.random.default_rng(56)
    w = normal(rng, 0.4)
    inits = {
        "g1.W": w(2, 18, 4), "g1.R": w(2, 18, 6), "g1.B": w(2, 36),
        "g2.W": w(1, 18, 12), "g2.R": w(1, 18, 6), "g2.B": w(1, 36), "g2.h0": w(1, 3, 6),
        "r.W": w(1, 5, 6), "r.R": w(1, 5, 5), "r.B": w(1, 10),
    }
    consts = {"perm_shape": np.array([5, 3, 12], dtype=np.int64), "axis1": np.array([1], dtype=np.int64), "out_shape": np.array([5, 15], dtype=np.int64)}
    nodes = [
        helper.make_node("GRU", ["x", "g1.W", "g1.R", "g1.B"], ["g1"], hidden_size=6, direction="bidirectional", linear_before_reset=1),
        helper.make_node("Transpose", ["g1"], ["g1t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["g1t", "perm_shape"], ["g1r"]),
        helper.make_node("GRU", ["g1r", "g2.W", "g2.R", "g2.B", "", "g2.h0"], ["g2"], hidden_size=6),
        helper.make_node("Squeeze", ["g2", "axis1"], ["g2s"]),
        helper.make_node("RNN", ["g2s", "r.W", "r.R", "r.B"], ["r"], hidden_size=5, direction="reverse"),
        helper.make_node("Reshape", ["r", "out_shape"], ["y"]),
    ]
    model = build("gru_rnn", nodes, [5, 3, 4], [5, 15], {**inits, **consts})
    save("gru_rnn", model, normal(rng, 1.0)(5, 3, 4), sum(v.size for v in inits.values()))


def seq_lens():
    rng = np.random.default_rng(5656)
    w = normal(rng, 0.4)
    inits = {"l.W": w(2, 24, 4), "l.R": w(2, 24, 6), "l.B": w(2, 48), "g.W": w(1, 12, 4), "g.R": w(1, 12, 4), "g.B": w(1, 24)}
    consts = {"lens": np.array([5, 3, 1], dtype=np.int32), "flat": np.array([1, -1], dtype=np.int64)}
    nodes = [
        helper.make_node("LSTM", ["x", "l.W", "l.R", "l.B", "lens"], ["ly", "lh", "lc"], hidden_size=6, direction="bidirectional"),
        helper.make_node("GRU", ["x", "g.W", "g.R", "g.B", "lens"], ["gy", "gh"], hidden_size=4, direction="reverse", linear_before_reset=1),
    ]
    parts = ["ly", "lh", "lc", "gy", "gh"]
    nodes += [helper.make_node("Reshape", [p, "flat"], [p + "_f"]) for p in parts]
    nodes.append(helper.make_node("Concat", [p + "_f" for p in parts], ["y"], axis=1))
    width = 5 * 2 * 3 * 6 + 2 * 2 * 3 * 6 + 5 * 3 * 4 + 3 * 4
    model = build("seq_lens", nodes, [5, 3, 4], [1, width], {**inits, **consts})
    save("seq_lens", model, normal(rng, 1.0)(5, 3, 4), sum(v.size for v in inits.values()))
    # a length beyond the sequence: refused at import, naming the node
    for t in model.graph.initializer:
        if t.name == "lens":
            t.CopyFrom(numpy_helper.from_array(np.array([6, 3, 1], dtype=np.int32), "lens"))
    model.graph.node[0].name = "lstm"
    onnx.save(model, os.path.join(OUT, "bad", "seq_lens_too_long.onnx"))


if __name__ == "__main__":
    conv_groups()
    gru_rnn()
    seq_lens()
