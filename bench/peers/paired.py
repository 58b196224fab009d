#!/usr/bin/env python3
"""Paired rounds of one `flowlab bench engine` row against its peer, for a
verdict that survives a shared machine's swings.

On this project's VMs the same kernel runs 1.5-2x slower for minutes at a
time (other tenants), so one flowlab run beside one peer run can land in
different spells and their ratio says little. Here every round runs both,
back to back, the order alternating between rounds, and the ratio is taken
within the round; the summary is the median of the rounds' ratios.

    python3 bench/peers/paired.py --case cnn --rounds 8
    python3 bench/peers/paired.py --case lstm --rounds 8
    python3 bench/peers/paired.py --case cnn --lockstep --blocks 40

`--lockstep` pairs much shorter stretches: one flowlab process
(`flowlab bench engine --only ROW --lockstep`) and one peer process per
thread count keep their steps built, and the driver alternates blocks of a
few steps between them (`--block-steps`, about a third of a second each),
so that both sides of a pair run within a second of each other. Each
block pair is one ratio; the summary is their median.

`ratio` is the peer's step time over flowlab's (above 1: flowlab is
faster). Prints one JSON line per round and thread count, then one summary
line per thread count (`"summary": true`). Needs `cargo build --release`
and the peers' virtual environment (README.md beside this file).
"""

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time

import peers

CASES = {
    # flowlab's row, the peer's name, and how the peer is measured
    "cnn": ("cnn_train_b64", "tensorflow"),
    "lstm": ("lstm_lm_train_b32", "pytorch"),
}

HERE = os.path.dirname(os.path.abspath(__file__))


def flowlab_ms(binary, row):
    """{threads: median ms} of one `flowlab bench engine --only row` run."""
    out = subprocess.run([binary, "bench", "engine", "--only", row, "--json"],
                         check=True, capture_output=True, text=True).stdout
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["threads"]: r["median_ms"] for r in recs if r["name"] == row}


def peer_ms(case, reps):
    """{threads: median ms} of one peer run (each in a fresh process)."""
    if case == "cnn":
        return {t: peers.run_isolated(peers.tf_cnn_step_secs, 64, t, reps) * 1e3 for t in (1, 2)}
    # lstm_lm.py measures both thread counts in one process, at flowlab's sizes
    out = subprocess.run([sys.executable, os.path.join(HERE, "lstm_lm.py"), "--steps", str(reps)],
                         check=True, capture_output=True, text=True).stdout
    recs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {r["threads"]: r["median_ms"] for r in recs}


def peer_step(case, threads):
    """One training step of the peer as a function, built in this process
    (which then runs the peer at `threads` threads)."""
    if case == "cnn":
        return peers.tf_cnn_train_step(64, threads)
    sys.path.insert(0, HERE)
    import lstm_lm

    return lstm_lm.train_step(threads)


def peer_serve(case, threads, conn):
    """The peer side of a lockstep: builds the step, warms it up, then
    answers each block size received with the seconds of that many steps
    (None ends it)."""
    step = peer_step(case, threads)
    for _ in range(3):
        step()
    conn.send("ready")
    while (n := conn.recv()) is not None:
        t = time.perf_counter()
        for _ in range(n):
            step()
        conn.send(time.perf_counter() - t)


def summary(row, peer, threads, ratios, flowlab, peer_times, unit):
    rs = sorted(ratios)
    return {
        "summary": True, "name": row, "peer": peer, "threads": threads, unit: len(rs),
        "median_ratio": round(statistics.median(rs), 3), "min_ratio": round(rs[0], 3), "max_ratio": round(rs[-1], 3),
        f"{unit}_flowlab_faster": sum(x > 1 for x in rs),
        "flowlab_median_ms": round(statistics.median(flowlab), 2),
        "peer_median_ms": round(statistics.median(peer_times), 2),
    }


def lockstep(args, row, peer):
    fl = subprocess.Popen([args.flowlab, "bench", "engine", "--only", row, "--lockstep"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    if fl.stdout.readline().strip() != "ready":
        sys.exit(f"paired: `flowlab bench engine --only {row} --lockstep` did not start (exit {fl.wait()})")
    n = args.block_steps or (5 if args.case == "cnn" else 15)
    ctx = multiprocessing.get_context("spawn")
    try:
        for t in (1, 2):
            # a fresh peer process per thread count: TensorFlow sizes its
            # pools once per process
            conn, child = ctx.Pipe()
            proc = ctx.Process(target=peer_serve, args=(args.case, t, child))
            proc.start()
            if conn.recv() != "ready":
                sys.exit(f"paired: the {peer} step did not start")

            def flowlab_block():
                fl.stdin.write(f"{t} {n}\n")
                fl.stdin.flush()
                line = fl.stdout.readline()
                if not line:
                    sys.exit(f"paired: flowlab's lockstep ended early (exit {fl.wait()})")
                return float(line)

            def peer_block():
                conn.send(n)
                return conn.recv()

            ratios, fs, ps = [], [], []
            for b in range(args.blocks):
                # alternate who goes first, so a drifting machine favours neither
                if b % 2 == 0:
                    f, p = flowlab_block(), peer_block()
                else:
                    p, f = peer_block(), flowlab_block()
                ratios.append(p / f)
                fs.append(f / n * 1e3)
                ps.append(p / n * 1e3)
                print(json.dumps({"name": row, "peer": peer, "block": b, "threads": t, "steps": n,
                                  "flowlab_ms": round(fs[-1], 2), "peer_ms": round(ps[-1], 2),
                                  "ratio": round(p / f, 3)}), flush=True)
            conn.send(None)
            proc.join()
            print(json.dumps(summary(row, peer, t, ratios, fs, ps, "blocks")), flush=True)
    finally:
        fl.stdin.close()
        fl.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30, help="timed peer steps per round and thread count")
    ap.add_argument("--flowlab", default=os.path.join(HERE, "..", "..", "target", "release", "flowlab"))
    ap.add_argument("--lockstep", action="store_true", help="alternate short blocks of steps instead of whole runs")
    ap.add_argument("--blocks", type=int, default=40, help="with --lockstep: block pairs per thread count")
    ap.add_argument("--block-steps", type=int, default=0,
                    help="with --lockstep: steps per block (0: 5 for cnn, 15 for lstm)")
    args = ap.parse_args()
    if args.rounds < 1 or args.blocks < 1 or args.block_steps < 0:
        ap.error("--rounds and --blocks must be at least 1, --block-steps at least 0")
    if not os.path.exists(args.flowlab):
        ap.error(f"--flowlab: {args.flowlab} does not exist (run `cargo build --release` first)")
    row, peer = CASES[args.case]
    if args.lockstep:
        lockstep(args, row, peer)
        return
    ratios = {1: [], 2: []}
    times = {1: ([], []), 2: ([], [])}
    for r in range(args.rounds):
        # alternate who goes first, so a drifting machine favours neither
        if r % 2 == 0:
            f = flowlab_ms(args.flowlab, row)
            p = peer_ms(args.case, args.reps)
        else:
            p = peer_ms(args.case, args.reps)
            f = flowlab_ms(args.flowlab, row)
        for t in (1, 2):
            if t not in f or t not in p:
                sys.exit(f"paired: round {r} has no {t}-thread figure (flowlab {f}, {peer} {p})")
            ratios[t].append(p[t] / f[t])
            times[t][0].append(f[t])
            times[t][1].append(p[t])
            print(json.dumps({"name": row, "peer": peer, "round": r, "threads": t, "flowlab_ms": round(f[t], 2),
                              "peer_ms": round(p[t], 2), "ratio": round(p[t] / f[t], 3)}), flush=True)
    for t in (1, 2):
        print(json.dumps(summary(row, peer, t, ratios[t], times[t][0], times[t][1], "rounds")), flush=True)


if __name__ == "__main__":
    main()
