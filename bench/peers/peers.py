#!/usr/bin/env python3
"""Peer measurements for `flowlab bench engine`: the same workloads run by
numpy (OpenBLAS), TensorFlow (graph mode, tf.compat.v1 Session) and PyTorch
(eager), printed as JSON lines of the same shape as `flowlab bench engine
--json` ({"name", "threads", "median_ms", "gflops"}, plus "peer").

Not part of the test suite. See README.md beside this file for set-up and for
how to compare the two outputs.
"""

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time


def emit(peer, name, threads, median_s, gflops=None, **extra):
    rec = {"peer": peer, "name": name, "threads": threads,
           "median_ms": median_s * 1e3, "gflops": gflops}
    rec.update(extra)
    print(json.dumps(rec), flush=True)


def median_secs(reps, fn):
    """Median seconds of `reps` timed calls after one warm-up call."""
    fn()
    times = []
    for _ in range(max(reps, 1)):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def note(msg):
    print(f"peers: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- numpy GEMM
def bench_numpy(quick):
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    for info in threadpool_info():
        if info.get("user_api") == "blas":
            note(f"numpy BLAS: {info.get('internal_api')} {info.get('version')} "
                 f"kernel={info.get('architecture')} max_threads={info.get('num_threads')} "
                 f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}")
    rng = np.random.default_rng(1)
    for n in ([1024] if quick else [1024, 2048]):
        a = rng.standard_normal((n, n), dtype=np.float32)
        b = rng.standard_normal((n, n), dtype=np.float32)
        c = np.empty((n, n), dtype=np.float32)
        reps = 3 if quick else (15 if n == 1024 else 7)
        for threads in (1, 2):
            with threadpool_limits(limits=threads, user_api="blas"):
                s = median_secs(reps, lambda: np.matmul(a, b, out=c))
            emit("numpy", f"gemm_f32_{n}", threads, s, 2.0 * n ** 3 / s / 1e9)


# ------------------------------------------------------------- TensorFlow v1
def mlp_train_graph(tf, batch):
    """MLP 784-512-512-10, ReLU, sparse softmax cross-entropy, SGD: the graph
    `flowlab bench engine` builds with the engine's API."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(1)
        x = tf.compat.v1.placeholder(tf.float32, [batch, 784], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [batch], name="y")
        h = x
        for i, (fan_in, fan_out) in enumerate([(784, 512), (512, 512), (512, 10)]):
            w = tf.compat.v1.get_variable(f"w{i}", [fan_in, fan_out],
                                          initializer=tf.compat.v1.glorot_uniform_initializer())
            b = tf.compat.v1.get_variable(f"b{i}", [fan_out], initializer=tf.compat.v1.zeros_initializer())
            h = tf.matmul(h, w) + b
            if i < 2:
                h = tf.nn.relu(h)
        logits = h
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    return g, x, y, logits, train, init


def cnn_train_graph(tf, batch):
    """TensorFlow's "Deep MNIST" CNN (conv 5x5x32, pool, conv 5x5x64, pool,
    dense 1024, dense 10, ReLU), sparse softmax cross-entropy, momentum 0.9:
    the zoo's `cnn` that `flowlab bench engine` times as cnn_train_b64."""
    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.set_random_seed(1)
        x = tf.compat.v1.placeholder(tf.float32, [batch, 28, 28, 1], name="x")
        y = tf.compat.v1.placeholder(tf.int32, [batch], name="y")
        glorot = tf.compat.v1.glorot_uniform_initializer()
        zeros = tf.compat.v1.zeros_initializer()
        h = x
        for i, (cin, cout) in enumerate([(1, 32), (32, 64)]):
            w = tf.compat.v1.get_variable(f"conv{i}", [5, 5, cin, cout], initializer=glorot)
            b = tf.compat.v1.get_variable(f"conv{i}_b", [cout], initializer=zeros)
            h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(h, w, [1, 1, 1, 1], "SAME"), b))
            h = tf.nn.max_pool2d(h, 2, 2, "SAME")
        h = tf.reshape(h, [batch, 7 * 7 * 64])
        for i, (fan_in, fan_out) in enumerate([(3136, 1024), (1024, 10)]):
            w = tf.compat.v1.get_variable(f"fc{i}", [fan_in, fan_out], initializer=glorot)
            b = tf.compat.v1.get_variable(f"fc{i}_b", [fan_out], initializer=zeros)
            h = tf.matmul(h, w) + b
            if i == 0:
                h = tf.nn.relu(h)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=h))
        train = tf.compat.v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss)
        init = tf.compat.v1.global_variables_initializer()
    return g, x, y, train, init


def tf_session(tf, graph, threads, optimize=True):
    cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                   inter_op_parallelism_threads=threads)
    if not optimize:
        # Grappler and the classic graph optimizer would fold the add chain
        # into a handful of nodes; the point is to time running every node.
        cfg.graph_options.rewrite_options.disable_meta_optimizer = True
        cfg.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
        cfg.graph_options.optimizer_options.do_constant_folding = False
        cfg.graph_options.optimizer_options.do_common_subexpression_elimination = False
    return tf.compat.v1.Session(graph=graph, config=cfg)


def run_isolated(fn, *args):
    """Runs `fn(*args)` in a fresh Python process. TensorFlow sizes its
    process-wide CPU thread pools from the first session's ConfigProto, so a
    second session in the same process would silently keep the first thread
    count."""
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


def import_tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.compat.v1.disable_eager_execution()
    return tf


def tf_train_step_secs(batch, threads, reps):
    import numpy as np

    tf = import_tf()
    rng = np.random.default_rng(2)
    xs = rng.random((batch, 784), dtype=np.float32)
    ys = rng.integers(0, 10, batch).astype(np.int32)
    g, x, y, _, train, init = mlp_train_graph(tf, batch)
    with tf_session(tf, g, threads) as sess:
        sess.run(init)
        return median_secs(reps, lambda: sess.run(train, {x: xs, y: ys}))


def tf_cnn_step(tf, batch):
    """The CNN's training graph with its fixed feed: (graph, train op,
    initializer, feed dict), as `tf_cnn_train_step` and `cnn_ops.py` run it."""
    import numpy as np

    rng = np.random.default_rng(2)
    xs = rng.random((batch, 28, 28, 1), dtype=np.float32)
    ys = rng.integers(0, 10, batch).astype(np.int32)
    g, x, y, train, init = cnn_train_graph(tf, batch)
    return g, train, init, {x: xs, y: ys}


def tf_cnn_train_step(batch, threads):
    """One CNN training step in TensorFlow as a function, its session
    initialised (TensorFlow then runs `threads` threads in this process)."""
    tf = import_tf()
    g, train, init, feed = tf_cnn_step(tf, batch)
    sess = tf_session(tf, g, threads)
    sess.run(init)
    return lambda: sess.run(train, feed)


def tf_cnn_step_secs(batch, threads, reps):
    return median_secs(reps, tf_cnn_train_step(batch, threads))


def tf_chain_secs(n_ops, reps):
    tf = import_tf()
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [], name="x")
        one = tf.constant(1.0)
        h = x
        for _ in range(n_ops):
            h = tf.add(h, one)
    with tf_session(tf, g, 1, optimize=False) as sess:
        got = sess.run(h, {x: 0.0})
        if got != float(n_ops):
            raise RuntimeError(f"chain of {n_ops} adds returned {got}")
        return median_secs(reps, lambda: sess.run(h, {x: 0.0}))


def bench_tf(quick):
    tf = import_tf()
    note(f"tensorflow {tf.__version__}")
    for batch in ([128] if quick else [128, 512]):
        for threads in (1, 2):
            s = run_isolated(tf_train_step_secs, batch, threads, 10 if quick else 50)
            emit("tensorflow", f"mlp_train_b{batch}", threads, s)
    for threads in (1, 2):
        s = run_isolated(tf_cnn_step_secs, 64, threads, 10 if quick else 30)
        emit("tensorflow", "cnn_train_b64", threads, s)
    # Executor overhead: a chain of 10,000 scalar adds, one Session.run.
    n_ops = 10_000
    s = run_isolated(tf_chain_secs, n_ops, 5 if quick else 20)
    emit("tensorflow", f"chain_add_{n_ops}", 1, s, us_per_op=s * 1e6 / n_ops)


# ----------------------------------------------------------------- PyTorch
def bench_torch(quick):
    import torch

    note(f"torch {torch.__version__}")
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    ).eval()
    x = torch.randn(1, 784)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        with torch.no_grad():
            s = median_secs(200 if quick else 2000, lambda: model(x))
        emit("torch", "mlp_infer_b1", threads, s)
    # The Deep MNIST CNN training step (cnn_train_b64), momentum 0.9.
    cnn = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(3136, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10),
    )
    opt = torch.optim.SGD(cnn.parameters(), lr=0.01, momentum=0.9)
    xb, yb = torch.rand(64, 1, 28, 28), torch.randint(0, 10, (64,))

    def cnn_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(cnn(xb), yb).backward()
        opt.step()

    for threads in (1, 2):
        torch.set_num_threads(threads)
        emit("torch", "cnn_train_b64", threads, median_secs(10 if quick else 30, cnn_step))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    ap.add_argument("--only", default="numpy,tf,torch",
                    help="comma-separated subset of numpy,tf,torch (default: all)")
    args = ap.parse_args()
    which = set(args.only.split(","))
    unknown = which - {"numpy", "tf", "torch"}
    if unknown:
        ap.error(f"--only: unknown peer(s) {sorted(unknown)}; choose from numpy, tf, torch")
    runners = [("numpy", bench_numpy), ("tf", bench_tf), ("torch", bench_torch)]
    for key, fn in runners:
        if key not in which:
            continue
        try:
            fn(args.quick)
        except ImportError as e:
            note(f"skipping {key}: {e} (see bench/peers/README.md to install it)")


if __name__ == "__main__":
    main()
