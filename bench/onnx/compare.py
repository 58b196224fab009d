"""flowlab's ONNX import against ONNX Runtime on the large exports of
make_fixtures.py --large (ResNet-18, ResNet-50, a base-width Transformer
encoder): largest relative error of the outputs, import time, and the
forward pass's median time in the same sitting, both on the same threads.

    /tmp/onnxenv/bin/python bench/onnx/compare.py --flowlab target/release/flowlab [--threads 2] [--repeat 5] [--markdown docs/src/onnx-figures.md]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def ort_run(path, feeds, threads, repeat):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    t = time.perf_counter()
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    load = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        (out,) = sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    return out, load, float(np.median(times))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowlab", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--markdown", help="also write the table here (docs/src/onnx-figures.md, included by the manual)")
    args = ap.parse_args()
    rows = []
    print(f"{'model':14} {'rel err':>9} {'import s':>9} {'ort load s':>10} {'flowlab ms':>11} {'ort ms':>8} {'ratio':>6}")
    for name, inp in [("resnet18", "x"), ("resnet50", "x"), ("encoder_base", "tokens")]:
        path = os.path.join(OUT, f"{name}.onnx")
        x_file = os.path.join(OUT, f"{name}.{inp}.npy")
        if not os.path.exists(x_file):
            # resnet50 shares resnet18's input
            x_file = os.path.join(OUT, f"resnet18.{inp}.npy")
        x = np.load(x_file)
        want, load, ort_s = ort_run(path, {inp: x}, args.threads, args.repeat)
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([args.flowlab, "onnx", "run", path, "--input", f"{inp}={x_file}", "--output-dir", d, "--threads", str(args.threads), "--repeat", str(args.repeat), "--json"],
                               check=True, capture_output=True, text=True)
            rep = json.loads(r.stdout)
            got = np.load(os.path.join(d, "output.npy"))
        # ORT again after flowlab: the host's state drifts within a sitting
        _, _, ort_s2 = ort_run(path, {inp: x}, args.threads, args.repeat)
        ort_ms = 1e3 * min(ort_s, ort_s2)
        scale = np.abs(want).max()
        err = float((np.abs(got - want) / np.maximum(np.abs(want), 1e-2 * scale)).max())
        fl_ms = 1e3 * rep["forward_seconds"]
        print(f"{name:14} {err:9.2e} {rep['import_seconds']:9.3f} {load:10.3f} {fl_ms:11.1f} {ort_ms:8.1f} {fl_ms / ort_ms:6.2f}")
        rows.append(f"| {name} | {err:.1e} | {rep['import_seconds']:.2f} s | {fl_ms / ort_ms:.2f}x |")
    # torchvision's ResNet-50 with its batch norms kept, trained as imported,
    # against the zoo's resnet50: the simulated training step, batch 32
    sim_rows = []
    print(f"\n{'devices':8} {'zoo step s':>11} {'imported s':>11} {'ratio':>6}  (m_etf; one device: whole graph)")
    for devices in ["1xK40", "4xK40", "8xH100"]:
        steps = []
        for model in ["resnet50", os.path.join(OUT, "resnet50_bn.onnx")]:
            r = subprocess.run([args.flowlab, "place", "--model", model, "--batch", "32", "--devices", devices, "--placer", "m_etf", "--json"], check=True, capture_output=True, text=True)
            steps.append(json.loads(r.stdout))
        a, b = steps[0]["step_seconds"], steps[1]["step_seconds"]
        print(f"{devices:8} {a:11.4f} {b:11.4f} {b / a:6.3f}  params {steps[0]['params']} / {steps[1]['params']}")
        sim_rows.append(f"| {devices} | {a:.4f} s | {b:.4f} s | {b / a:.3f} |")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(f"<!-- written by bench/onnx/compare.py ({args.threads} threads, median of {args.repeat}); do not edit -->\n")
            f.write("| model (batch 8) | largest relative error | import | forward, flowlab / ONNX Runtime |\n|---|---|---|---|\n")
            f.write("\n".join(rows) + "\n\n")
            f.write("| devices (m_etf, batch 32) | zoo resnet50 step | imported torchvision ResNet-50 step | imported / zoo |\n|---|---|---|---|\n")
            f.write("\n".join(sim_rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
