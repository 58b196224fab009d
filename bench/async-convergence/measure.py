#!/usr/bin/env python3
"""Updates asynchronous training needs to reach a held-out accuracy, on the
real runtime: `flowlab train mlp --data digits --local-cluster ps=1,workers=W
--async --eval-every 2` for each worker count and seed, the first evaluated
update at or above the target. Prints a row per worker count (each seed and
the mean): the reference points of experiments/catalog/async-convergence.yaml.

    cargo build --release --bin flowlab
    python3 bench/async-convergence/measure.py [--target 0.90] [--seeds 4]

Real processes on this host: the figures vary from sitting to sitting; the
mean over seeds is what the catalog quotes.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def updates_to(target, workers, seed, epochs, flowlab):
    out = subprocess.run(
        [flowlab, "train", "mlp", "--data", "digits", "--epochs", str(epochs), "--seed", str(seed),
         "--local-cluster", f"ps=1,workers={workers}", "--async", "--eval-every", "2", "--json"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    ).stdout
    curve = json.loads(out)["accuracy_curve"]
    return next((u for u, a in curve if a >= target), None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", type=float, default=0.90)
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument("--workers", default="1,2,3,4,6,8")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--flowlab", default=os.path.join(ROOT, "target", "release", "flowlab"))
    a = p.parse_args()
    print(f"updates to {a.target:.2f} held-out accuracy, digits MLP, async, batch 32, {a.epochs} epochs")
    print("workers | " + " | ".join(f"seed {s}" for s in range(1, a.seeds + 1)) + " | mean")
    for w in [int(x) for x in a.workers.split(",")]:
        us = [updates_to(a.target, w, s, a.epochs, a.flowlab) for s in range(1, a.seeds + 1)]
        reached = [u for u in us if u is not None]
        mean = sum(reached) / len(reached) if len(reached) == len(us) else float("nan")
        print(f"{w} | " + " | ".join("-" if u is None else str(u) for u in us) + f" | {mean:.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
