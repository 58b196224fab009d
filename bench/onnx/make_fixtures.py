"""Exports the ONNX models flowlab's importer is checked on, and ONNX
Runtime's outputs for them.

Small models (under 1 MB) go to tests/data/onnx/ with their inputs and
ONNX Runtime's outputs as .npy, and are committed: the Rust tests compare
flowlab's outputs with them. The large ones (ResNet-18, a Transformer
encoder of base width) go to bench/onnx/out/ and are only regenerated here.

    python3 -m venv /tmp/onnxenv && /tmp/onnxenv/bin/pip install torch torchvision onnx onnxruntime onnxscript
    /tmp/onnxenv/bin/python bench/onnx/make_fixtures.py [--large]
"""

import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = os.path.join(ROOT, "tests", "data", "onnx")
LARGE = os.path.join(ROOT, "bench", "onnx", "out")
OPSET = 18


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x):
        return self.net(x)


class Cnn(nn.Module):
    """Convolutions with the paddings, pools and batch norms of ResNet and
    Inception blocks, small."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        self.a = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.b1 = nn.Conv2d(8, 4, 1)
        self.b2 = nn.Sequential(nn.AvgPool2d(3, stride=1, padding=1), nn.Conv2d(8, 4, 1))
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = nn.Linear(16, 5)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(x + self.a(x))
        x = torch.cat([self.b1(x), self.b2(x)], dim=1)
        x = torch.relu(self.down(x))
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Encoder(nn.Module):
    """Token embedding, two post-norm Transformer encoder layers with GELU
    (PyTorch's own nn.TransformerEncoderLayer), mean pooling, a classifier."""

    def __init__(self, vocab, d, heads, ff, layers, classes):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        h = self.encoder(self.embed(tokens))
        return self.head(h.mean(dim=1))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(12, 16, num_layers=1, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1, :])


class Masked(nn.Module):
    """Causal self-attention by masked_fill (a Where over a constant mask
    and computed scores) and a Where over a computed condition."""

    def __init__(self):
        super().__init__()
        self.q = nn.Linear(8, 8)

    def forward(self, x):
        s = x.shape[1]
        scores = self.q(x) @ x.transpose(1, 2)
        mask = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        att = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ x
        return torch.where(att > 0, att, 0.1 * att).mean(dim=1)


def export(name, model, inputs, folder, input_names, dynamic_batch=True, keep_batch_norm=False):
    """keep_batch_norm: BatchNormalization nodes stay (not folded into the
    convolutions), and PyTorch's train-mode output is saved beside them."""
    model.eval()
    path = os.path.join(folder, f"{name}.onnx")
    dyn = {n: {0: "batch"} for n in input_names} if dynamic_batch else None
    keep = dict(training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False) if keep_batch_norm else {}
    torch.onnx.export(model, tuple(torch.from_numpy(a) for a in inputs), path, input_names=input_names, output_names=["output"],
                      opset_version=OPSET, dynamic_axes=dyn, dynamo=False, **keep)
    if keep_batch_norm:
        model.train()
        with torch.no_grad():
            np.save(os.path.join(folder, f"{name}.train_output.npy"), model(*(torch.from_numpy(a) for a in inputs)).numpy())
        model.eval()
    m = onnx.load(path)
    onnx.checker.check_model(m)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, dict(zip(input_names, inputs)))
    for n, a in zip(input_names, inputs):
        np.save(os.path.join(folder, f"{name}.{n}.npy"), a)
    np.save(os.path.join(folder, f"{name}.output.npy"), out)
    ops = sorted({n.op_type for n in m.graph.node})
    params = sum(p.numel() for p in model.parameters())
    print(f"{name}: {os.path.getsize(path)} bytes, opset {OPSET}, {params} parameters, ops {' '.join(ops)}, output {out.shape}")


def bad_files():
    """Files the importer must refuse with a clear error (tests/data/onnx/bad/)."""
    from onnx import TensorProto, helper, numpy_helper

    bad = os.path.join(SMALL, "bad")
    os.makedirs(bad, exist_ok=True)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    relu = helper.make_node("Relu", ["x"], ["y"], name="act")
    g = helper.make_graph([relu], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)]), os.path.join(bad, "opset11.onnx"))
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="find"), helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("FusedMatMul", ["r", "r"], ["y"], name="fused", domain="com.microsoft"),
             helper.make_node("NonZero", ["r"], ["nz2"], name="find_again")]
    g = helper.make_graph(nodes, "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]), os.path.join(bad, "unsupported.onnx"))
    # a weight in an external data file that is not shipped beside it
    w = numpy_helper.from_array(np.ones((4, 4), dtype=np.float32), "w")
    if os.path.exists(os.path.join(bad, "external.weights")):
        os.remove(os.path.join(bad, "external.weights"))
    mm = helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")
    m = helper.make_model(helper.make_graph([mm], "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 18)])
    onnx.save_model(m, os.path.join(bad, "external.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="external.weights", size_threshold=0)
    os.remove(os.path.join(bad, "external.weights"))
    # the same with its data file beside it, and a weight that is not all ones
    good = os.path.join(SMALL, "external")
    os.makedirs(good, exist_ok=True)
    # onnx appends to an existing data file: start from none
    for f in [os.path.join(good, "matmul.weights"), os.path.join(bad, "external.weights")]:
        if os.path.exists(f):
            os.remove(f)
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    m = helper.make_model(helper.make_graph([mm], "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 18)])
    onnx.save_model(m, os.path.join(good, "matmul.onnx"), save_as_external_data=True, all_tensors_to_one_file=True, location="matmul.weights", size_threshold=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", action="store_true", help="also ResNet-18 and a base-width encoder into bench/onnx/out/")
    args = ap.parse_args()
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    os.makedirs(SMALL, exist_ok=True)
    export("mlp", Mlp(), [rng.standard_normal((4, 64), dtype=np.float32)], SMALL, ["x"])
    cnn = Cnn()
    with torch.no_grad():  # batch-norm statistics that are not the identity
        cnn.stem[1].running_mean.uniform_(-0.5, 0.5)
        cnn.stem[1].running_var.uniform_(0.5, 2.0)
        cnn.stem[1].weight.uniform_(0.5, 1.5)
        cnn.stem[1].bias.uniform_(-0.5, 0.5)
    export("cnn", cnn, [rng.standard_normal((2, 3, 32, 32), dtype=np.float32)], SMALL, ["x"])
    export("encoder", Encoder(50, 32, 4, 64, 2, 3), [rng.integers(0, 50, (2, 8), dtype=np.int64)], SMALL, ["tokens"])
    export("lstm", Lstm(), [rng.standard_normal((3, 5, 12), dtype=np.float32)], SMALL, ["x"])
    torch.manual_seed(1)
    export("cnn_bn", Cnn(), [rng.standard_normal((4, 3, 32, 32), dtype=np.float32)], SMALL, ["x"], keep_batch_norm=True)
    export("masked", Masked(), [rng.standard_normal((2, 5, 8), dtype=np.float32)], SMALL, ["x"])
    bad_files()
    if args.large:
        import torchvision

        os.makedirs(LARGE, exist_ok=True)
        export("resnet18", torchvision.models.resnet18(weights=None), [rng.standard_normal((8, 3, 224, 224), dtype=np.float32)], LARGE, ["x"])
        export("encoder_base", Encoder(32000, 512, 8, 2048, 2, 2), [rng.integers(0, 32000, (8, 128), dtype=np.int64)], LARGE, ["tokens"])
        export("resnet50", torchvision.models.resnet50(weights=None), [rng.standard_normal((8, 3, 224, 224), dtype=np.float32)], LARGE, ["x"])
        # batch norm kept (not folded into the convolutions): the same layers as the zoo's resnet50
        export("resnet50_bn", torchvision.models.resnet50(weights=None), [rng.standard_normal((2, 3, 224, 224), dtype=np.float32)], LARGE, ["x"], keep_batch_norm=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
