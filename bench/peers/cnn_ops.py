#!/usr/bin/env python3
"""The CNN training step (`cnn_train_b64`) op by op against TensorFlow's,
in paired rounds: each round runs `flowlab profile --model cnn --batch 64`
and a traced TensorFlow step (`RunOptions(trace_level=FULL_TRACE)`) back to
back, and the table keeps each op's best time over all rounds on each side
(flowlab's p10 per shape key, TensorFlow's minimum per node), so that a slow
spell of a shared machine in one round does not decide an op.

    python3 bench/peers/cnn_ops.py --threads 1 --rounds 3

Rows pair a fused flowlab op with TensorFlow's fused node (oneDNN's
`_MklNativeFusedConv2D` carries the bias and Relu, its MaxPoolGrad is
followed by a separate ReluGrad). `tf/fl` above 1: flowlab is faster.
Needs `cargo build --release` and the peers' virtual environment.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

import peers

HERE = os.path.dirname(os.path.abspath(__file__))

# (row, flowlab shape-key prefixes summed, TensorFlow node names summed). A
# tuple stands for alternatives, the first one whose keys all exist wins,
# each a prefix or a list of prefixes summed: builds before 2026-11-28
# evening ran MaxPool and _FusedMaxPoolGrad, and the convolutions apart
# from their pools.
CONV1_POOL1 = ("_FusedConv2DMaxPool f32[64,28,28,1]",
               ["_FusedConv2D f32[64,28,28,1]", "_MaxPoolWithWorkspace f32[64,28,28,32]"],
               ["_FusedConv2D f32[64,28,28,1]", "MaxPool f32[64,28,28,32]"])
CONV2_POOL2 = ("_FusedConv2DMaxPool f32[64,14,14,32]",
               ["_FusedConv2D f32[64,14,14,32]", "_MaxPoolWithWorkspace f32[64,14,14,64]"],
               ["_FusedConv2D f32[64,14,14,32]", "MaxPool f32[64,14,14,64]"])
ROWS = [
    ("conv2 + bias + Relu + pool2", [CONV2_POOL2], ["Relu_1", "MaxPool2d_1"]),
    ("conv2 input gradient", ["Conv2DBackpropInput f32[64,14,14,32]"], ["gradients/Conv2D_1_grad/Conv2DBackpropInput"]),
    ("conv2 filter gradient", ["Conv2DBackpropFilter f32[64,14,14,32]"], ["gradients/Conv2D_1_grad/Conv2DBackpropFilter"]),
    ("dense forward + bias + Relu", ["MatMul f32[64,3136] f32[3136,1024]", "BiasAdd f32[64,1024]", "Relu f32[64,1024]"],
     ["Relu_2"]),
    ("dense input gradient", ["MatMul f32[64,1024] f32[3136,1024]"], ["gradients/MatMul_grad/MatMul"]),
    ("dense filter gradient", ["MatMul f32[64,3136] f32[64,1024]"], ["gradients/MatMul_grad/MatMul_1"]),
    ("momentum, dense weight", ["ApplyMomentum f32[] f32[3136,1024]"], ["Momentum/update_fc0/ResourceApplyMomentum"]),
    ("conv1 + bias + Relu + pool1", [CONV1_POOL1], ["Relu", "MaxPool2d"]),
    ("conv1 filter gradient", ["Conv2DBackpropFilter f32[64,28,28,1]"], ["gradients/Conv2D_grad/Conv2DBackpropFilter"]),
    ("pool1 gradient + ReluGrad", [("_FusedMaxPoolGrad f32[64,28,28,32]", "_MaxPoolGradWithWorkspace i8[64,14,14,32]")],
     ["gradients/MaxPool2d_grad/MaxPoolGrad", "gradients/Relu_grad/ReluGrad"]),
    ("pool2 gradient + ReluGrad", [("_FusedMaxPoolGrad f32[64,14,14,64]", "_MaxPoolGradWithWorkspace i8[64,7,7,64]")],
     ["gradients/MaxPool2d_1_grad/MaxPoolGrad", "gradients/Relu_1_grad/ReluGrad"]),
    ("BiasAddGrad conv1", ["BiasAddGrad f32[64,28,28,32]"], ["gradients/BiasAdd_grad/BiasAddGrad"]),
    ("BiasAddGrad conv2", ["BiasAddGrad f32[64,14,14,64]"], ["gradients/BiasAdd_1_grad/BiasAddGrad"]),
]


def resolve(fl, spec):
    """The ms of one row entry (see ROWS), or None when its keys are missing."""
    for alt in spec if isinstance(spec, tuple) else (spec,):
        keys = [next((k for k in fl if k.startswith("cpu " + a)), None) for a in ([alt] if isinstance(alt, str) else alt)]
        if None not in keys:
            return sum(fl[k] for k in keys)
    return None


def tf_node_min_ms(threads, steps):
    """{node: minimum ms over `steps` traced steps} of TensorFlow's CNN step."""
    tf = peers.import_tf()
    g, train, init, feed = peers.tf_cnn_step(tf, 64)
    per = collections.defaultdict(list)
    with peers.tf_session(tf, g, threads) as sess:
        sess.run(init)
        for _ in range(5):
            sess.run(train, feed)
        opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
        for _ in range(steps):
            md = tf.compat.v1.RunMetadata()
            sess.run(train, feed, options=opts, run_metadata=md)
            step = collections.defaultdict(float)
            for dev in md.step_stats.dev_stats:
                for ns in dev.node_stats:
                    step[ns.node_name] += (ns.op_end_rel_micros - ns.op_start_rel_micros) / 1e3
            for k, v in step.items():
                per[k].append(v)
    return {k: min(v) for k, v in per.items()}


def flowlab_key_p10_ms(binary, threads, steps):
    """{shape key: p10 ms} of one `flowlab profile` run."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "profile.json")
        subprocess.run([binary, "profile", "--model", "cnn", "--batch", "64", "--threads", str(threads),
                        "--steps", str(steps), "--out", out], check=True, capture_output=True)
        with open(out) as f:
            shapes = json.load(f)["shapes"]
    return {k: v["p10"] * 1e3 for k, v in shapes.items()}


def total(found, names):
    """Sum of `names` in `found` (None when one is missing)."""
    vals = [found.get(n) for n in names]
    return None if any(v is None for v in vals) else sum(vals)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="traced steps per round on each side")
    ap.add_argument("--flowlab", default=os.path.join(HERE, "..", "..", "target", "release", "flowlab"))
    args = ap.parse_args()
    if args.rounds < 1 or args.steps < 1:
        ap.error("--rounds and --steps must be at least 1")
    if not os.path.exists(args.flowlab):
        ap.error(f"--flowlab: {args.flowlab} does not exist (run `cargo build --release` first)")
    best_fl, best_tf = {}, {}
    for r in range(args.rounds):
        fl = flowlab_key_p10_ms(args.flowlab, args.threads, args.steps)
        tfm = peers.run_isolated(tf_node_min_ms, args.threads, args.steps)
        for row, fl_prefixes, tf_names in ROWS:
            # a prefix names one shape key (the op and its input shapes)
            f = 0.0
            for spec in fl_prefixes:
                v = resolve(fl, spec)
                f = None if f is None or v is None else f + v
            t = total(tfm, tf_names)
            if f is not None:
                best_fl[row] = min(best_fl.get(row, f), f)
            if t is not None:
                best_tf[row] = min(best_tf.get(row, t), t)
        print(f"cnn_ops: round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print(f"{'op':30} {'flowlab ms':>11} {'tensorflow ms':>14} {'tf/fl':>6}")
    sums = [0.0, 0.0]
    for row, _, _ in ROWS:
        f, t = best_fl.get(row), best_tf.get(row)
        if f is None or t is None:
            print(f"{row:30} {'missing' if f is None else f'{f:.2f}':>11} {'missing' if t is None else f'{t:.2f}':>14}")
            continue
        sums[0] += f
        sums[1] += t
        print(f"{row:30} {f:11.2f} {t:14.2f} {t / f:6.2f}")
    print(f"{'sum of the rows above':30} {sums[0]:11.2f} {sums[1]:14.2f} {sums[1] / max(sums[0], 1e-9):6.2f}")


if __name__ == "__main__":
    main()
