#!/usr/bin/env python3
"""Compare flowlab-sim's flow-level model with SimGrid (textbook max-min).

Runs the cases printed by `cargo run -p flowlab-sim --example simgrid_cases`
(incast, sharded parameter servers, ring with two-hop flows) in SimGrid with
network/model:CM02, TCP-gamma 0, crosstraffic 0, bandwidth and latency
factors 1 and zero latency, and prints each flow's completion time from both
simulators and the largest relative difference.

Usage (from the repository root; needs Debian's python3-simgrid, run with
/usr/bin/python3):
    CARGO_TARGET_DIR=... cargo run -q -p flowlab-sim --example simgrid_cases > /tmp/cases.jsonl
    /usr/bin/python3 bench/simgrid/compare.py /tmp/cases.jsonl
"""
import json
import subprocess
import sys

BW = "125000000Bps"  # 1 Gbit/s, as in the example


def platform_xml(case):
    """A Full-routing zone: split-duplex link per host (star) or per ring cable."""
    n = case["hosts"]
    lines = [
        "<?xml version='1.0'?>",
        '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
        '<platform version="4.1">',
        ' <zone id="z" routing="Full">',
    ]
    lines += [f'  <host id="h{i}" speed="1Gf"/>' for i in range(n)]
    lines += [f'  <link id="l{i}" bandwidth="{BW}" latency="0" sharing_policy="SPLITDUPLEX"/>' for i in range(n)]
    pairs = sorted({(s, d) for s, d, _, _ in case["flows"]})
    for s, d in pairs:
        if case["topology"] == "star":
            hops = [(s, "UP"), (d, "DOWN")]
        else:
            # Ring cable i joins host i and i+1; UP is i -> i+1. Shortest way round.
            fwd = (d - s) % n
            if fwd <= n - fwd:
                hops = [((s + k) % n, "UP") for k in range(fwd)]
            else:
                hops = [((s - k - 1) % n, "DOWN") for k in range(n - fwd)]
        ctn = "".join(f'<link_ctn id="l{l}" direction="{dr}"/>' for l, dr in hops)
        lines.append(f'  <route src="h{s}" dst="h{d}" symmetrical="NO">{ctn}</route>')
    lines += [" </zone>", "</platform>"]
    return "\n".join(lines)


def run_simgrid(case_json):
    """Child process: one SimGrid engine per process."""
    from simgrid import Actor, Engine, Mailbox

    from maxmin import max_min_engine

    case = json.loads(case_json)
    e = max_min_engine("compare", platform_xml(case))
    done = {}

    def sender(i, size):
        Mailbox.by_name(f"m{i}").put(i, size)

    def receiver(i):
        Mailbox.by_name(f"m{i}").get()
        done[i] = Engine.clock

    for i, (s, d, b, _) in enumerate(case["flows"]):
        Actor.create(f"s{i}", e.host_by_name(f"h{s}"), sender, i, b)
        Actor.create(f"r{i}", e.host_by_name(f"h{d}"), receiver, i)
    e.run()
    print(json.dumps([done[i] for i in range(len(case["flows"]))]))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        run_simgrid(sys.argv[2])
        return
    worst_all = 0.0
    for line in open(sys.argv[1]):
        case = json.loads(line)
        out = subprocess.run([sys.executable, __file__, "--child", line.strip()],
                             capture_output=True, text=True, check=True)
        sg = json.loads(out.stdout.strip().splitlines()[-1])
        worst = 0.0
        print(f"== {case['case']} ({len(case['flows'])} flows)")
        print(f"{'src':>4} {'dst':>4} {'bytes':>10} {'flowlab_s':>12} {'simgrid_s':>12} {'rel_diff':>9}")
        for (s, d, b, t), g in zip(case["flows"], sg):
            rel = abs(t - g) / g if g > 0 else 0.0
            worst = max(worst, rel)
            print(f"{s:>4} {d:>4} {b:>10} {t:>12.6f} {g:>12.6f} {rel:>9.2e}")
        print(f"max relative difference: {worst:.2e}")
        worst_all = max(worst_all, worst)
    print(f"ALL CASES max relative difference: {worst_all:.2e}")


if __name__ == "__main__":
    main()
