#!/usr/bin/env python3
"""TensorFlow's gRPC runtime on loopback: what one small remote tensor adds
to a step, the anchor for `flowlab bench cluster`'s RecvTensor rows.

Two `tf.distribute.Server` tasks of one job, each in its own process (task 1
in a child process), talk over loopback gRPC as TensorFlow's distributed
runtime does. A `tf.compat.v1.Session` on task 0's master runs one of two
graphs, each fetching a 4-float tensor:

- `remote`: the tensor is made on /job:worker/task:1 and consumed on task 0,
  so the step runs a partition on each task and task 0's Recv fetches the
  tensor with a `RecvTensor` call to task 1;
- `local`: the same two ops, both on task 0 (one partition, no RecvTensor).

`remote - local` is what the remote tensor adds to a step: its RecvTensor
plus the second task's `RunGraph` (the master runs both partitions at once).
Grappler and the graph optimizer are off, so nothing is folded away.

Prints JSON lines {"peer", "name", "median_us", "p10_us", "p90_us"}: the
quantiles of the time of one session run, over `--reps` batches of
`--iters` runs of each graph after a warm-up batch, the two graphs'
batches interleaved (A B A B) so that load changes hit both alike; last,
the differences of the two graphs' medians and p10s.

Not part of the test suite. Set-up: README.md beside this file (the
`tensorflow-cpu` package in ~/.cache/flowlab-peers).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(tf, threads):
    from tensorflow.core.protobuf import rewriter_config_pb2

    cfg = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                   inter_op_parallelism_threads=threads)
    cfg.graph_options.optimizer_options.opt_level = tf.compat.v1.OptimizerOptions.L0
    cfg.graph_options.rewrite_options.disable_meta_optimizer = True
    cfg.graph_options.rewrite_options.constant_folding = rewriter_config_pb2.RewriterConfig.OFF
    return cfg


def serve(hosts, task, threads):
    """Runs task `task` of the job until killed (the child process)."""
    import tensorflow as tf

    cluster = tf.train.ClusterSpec({"worker": hosts})
    server = tf.distribute.Server(cluster, job_name="worker", task_index=task,
                                  config=config(tf, threads), start=True)
    print("ready", flush=True)
    server.join()


def graph(tf, producer):
    """A 4-float tensor made on `producer` (a stateful op, so it is computed
    every run) and consumed on task 0."""
    g = tf.Graph()
    with g.as_default():
        with tf.device(producer):
            a = tf.random.uniform([4], seed=1)
        with tf.device("/job:worker/task:0/device:CPU:0"):
            b = tf.identity(a) + 1.0
    return g, b


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=15, help="timed batches per graph")
    p.add_argument("--iters", type=int, default=200, help="session runs per batch")
    p.add_argument("--threads", type=int, default=1, help="intra- and inter-op threads per task")
    p.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--hosts", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve is not None:
        return serve(a.hosts.split(","), a.serve, a.threads)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    hosts = [f"localhost:{free_port()}", f"localhost:{free_port()}"]
    child = subprocess.Popen([sys.executable, __file__, "--serve", "1", "--hosts", ",".join(hosts),
                              "--threads", str(a.threads)], stdout=subprocess.PIPE, text=True)
    try:
        if child.stdout.readline().strip() != "ready":
            sys.exit("tf_recv_tensor: task 1 did not start")
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        cluster = tf.train.ClusterSpec({"worker": hosts})
        server = tf.distribute.Server(cluster, job_name="worker", task_index=0,
                                      config=config(tf, a.threads), start=True)
        runs = {}
        for name, producer in [("remote", "/job:worker/task:1/device:CPU:0"),
                               ("local", "/job:worker/task:0/device:CPU:0")]:
            g, b = graph(tf, producer)
            sess = tf.compat.v1.Session(server.target, graph=g, config=config(tf, a.threads))
            runs[name] = (sess, b)
        times = {name: [] for name in runs}
        for rep in range(a.reps + 1):
            for name, (sess, b) in runs.items():
                for _ in range(a.iters):
                    t = time.perf_counter()
                    sess.run(b)
                    if rep > 0:  # the first batch warms up
                        times[name].append(time.perf_counter() - t)
        peer = f"tensorflow {tf.__version__}"
        q = {name: statistics.quantiles(ts, n=10) for name, ts in times.items()}
        for name, ts in times.items():
            print(json.dumps({"peer": peer, "name": f"tf_step_4xf32_{name}", "threads": a.threads,
                              "median_us": statistics.median(ts) * 1e6, "p10_us": q[name][0] * 1e6,
                              "p90_us": q[name][-1] * 1e6}), flush=True)
        # what the remote tensor adds: the difference of the two graphs'
        # quantiles (TensorFlow's gRPC runtime stalls some runs by
        # milliseconds here, so the p10 difference is the steadiest figure)
        print(json.dumps({"peer": peer, "name": "tf_step_4xf32_remote_minus_local", "threads": a.threads,
                          "median_us": (statistics.median(times["remote"]) - statistics.median(times["local"])) * 1e6,
                          "p10_us": (q["remote"][0] - q["local"][0]) * 1e6}), flush=True)
    finally:
        child.kill()
        child.wait()


if __name__ == "__main__":
    main()
