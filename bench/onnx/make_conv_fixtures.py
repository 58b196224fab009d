"""Builds an ONNX model of grouped, depthwise and dilated convolutions with
onnx.helper (no PyTorch needed) and saves ONNX Runtime's output for a fixed
input beside it, in tests/data/onnx/ (committed; regenerates byte for byte):

    python3 -m venv /tmp/onnxenv && /tmp/onnxenv/bin/pip install onnx onnxruntime numpy
    /tmp/onnxenv/bin/python bench/onnx/make_conv_fixtures.py

The chain, on x [2, 8, 12, 12]:
  grouped    Conv group 4, 3x3, pads 1, bias          -> [2, 12, 12, 12]
  Relu
  depthwise  Conv group 12, 3x3, stride 2, pads 1      -> [2, 12, 6, 6]
  dilated    Conv 3x3 dilation 2, pads 2, bias         -> [2, 8, 6, 6]
  both       Conv group 2, 3x3 dilation 2, pads 2      -> [2, 4, 6, 6]
"""

import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "onnx")
NAME = "conv_groups"


def main():
    rng = np.random.default_rng(53)
    w = lambda *shape: rng.normal(0.0, 0.3, size=shape).astype(np.float32)
    inits = {
        "g.w": w(12, 2, 3, 3), "g.b": w(12),
        "d.w": w(12, 1, 3, 3),
        "a.w": w(8, 12, 3, 3), "a.b": w(8),
        "b.w": w(4, 4, 3, 3),
    }
    nodes = [
        helper.make_node("Conv", ["x", "g.w", "g.b"], ["g"], group=4, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["g"], ["r"]),
        helper.make_node("Conv", ["r", "d.w"], ["d"], group=12, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["d", "a.w", "a.b"], ["a"], dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Conv", ["a", "b.w"], ["y"], group=2, dilations=[2, 2], pads=[2, 2, 2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        NAME,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 6, 6])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="flowlab make_conv_fixtures.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    path = os.path.join(OUT, f"{NAME}.onnx")
    onnx.save(model, path)
    x = rng.normal(0.0, 1.0, size=(2, 8, 12, 12)).astype(np.float32)
    (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.save(os.path.join(OUT, f"{NAME}.x.npy"), x)
    np.save(os.path.join(OUT, f"{NAME}.output.npy"), y)
    print(f"{NAME}: output {y.shape}, parameters {sum(v.size for v in inits.values())}, onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
