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

`ratio` is the peer's step time over flowlab's (above 1: flowlab is
faster). Prints one JSON line per round and thread count, then one summary
line per thread count (`"summary": true`). Needs `cargo build --release`
and the peers' virtual environment (README.md beside this file).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=30, help="timed peer steps per round and thread count")
    ap.add_argument("--flowlab", default=os.path.join(HERE, "..", "..", "target", "release", "flowlab"))
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not os.path.exists(args.flowlab):
        ap.error(f"--flowlab: {args.flowlab} does not exist (run `cargo build --release` first)")
    row, peer = CASES[args.case]
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
        rs = sorted(ratios[t])
        print(json.dumps({
            "summary": True, "name": row, "peer": peer, "threads": t, "rounds": len(rs),
            "median_ratio": round(statistics.median(rs), 3), "min_ratio": round(rs[0], 3), "max_ratio": round(rs[-1], 3),
            "rounds_flowlab_faster": sum(x > 1 for x in rs),
            "flowlab_median_ms": round(statistics.median(times[t][0]), 2),
            "peer_median_ms": round(statistics.median(times[t][1]), 2),
        }), flush=True)


if __name__ == "__main__":
    main()
