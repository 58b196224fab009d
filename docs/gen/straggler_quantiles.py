#!/usr/bin/env python3
"""Prints a measured straggler trace as the `straggler:` value a catalog
entry embeds (the binary carries catalog files, not data files): the
trace's factors reduced to their N mid-quantiles (sorted factor at
floor((i + 0.5) / N x count) for i < N), drawn pooled by every worker.

    python3 docs/gen/straggler_quantiles.py experiments/data/stragglers/host-inception-v3.csv [N]

The trace itself comes from `flowlab profile ... --step-factors FILE`
(the command is in the file's header).
"""
import sys


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    values = []
    for line in open(path):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            values.append(float(line.split(",")[0]))
        except ValueError:
            continue  # the header
    values.sort()
    picks = [values[int((i + 0.5) / n * len(values))] for i in range(n)]
    rows = [", ".join(f"{v:.4f}" for v in picks[k:k + 10]) for k in range(0, n, 10)]
    body = ",\n      ".join(rows)
    print("{ dist: trace, pooled: true, factors: [[\n      " + body + "]] }")


if __name__ == "__main__":
    main()
