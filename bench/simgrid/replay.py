#!/usr/bin/env python3
"""Replay a cluster-simulator run's traffic in SimGrid and compare.

Reads the JSON line of `cargo run --release -p flowlab-sim --example
simgrid_replay -- TOPOLOGY WORKERS STEPS` (the benchmark's parameter-server
case: every flow the run started, with its start instant, endpoints, bytes
and the instant flowlab's flow model drained its last byte; the topology's
directed links and every route used), builds a SimGrid platform with one
shared link per directed link and the same routes, starts the same flows at
the same instants (`Comm.sendto_async`), and prints:

- the largest relative difference between the two drain ends over all flows
  (SimGrid CM02 with TCP-gamma 0, cross-traffic 0, factors 1, zero latency:
  textbook max-min fair sharing, which is what the flow model computes);
- the wall time of SimGrid's run against the flow model's replay of the
  same flows (`flowlab_replay_s`, best of three in the example).

Usage (Debian's python3-simgrid, run with /usr/bin/python3):
    /usr/bin/python3 bench/simgrid/replay.py /tmp/torus.json [more.json ...]
"""
import json
import sys
import time


def platform_xml(case):
    used = sorted({l for r in case["routes"].values() for l in r})
    hosts = sorted({int(x) for k in case["routes"] for x in k.split(",")})
    lines = [
        "<?xml version='1.0'?>",
        '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
        '<platform version="4.1">',
        ' <zone id="z" routing="Full">',
    ]
    lines += [f'  <host id="h{h}" speed="1Gf"/>' for h in hosts]
    lines += [f'  <link id="l{l}" bandwidth="{case["links"][l]!r}Bps" latency="0"/>' for l in used]
    for key, route in case["routes"].items():
        s, d = key.split(",")
        ctn = "".join(f'<link_ctn id="l{l}"/>' for l in route)
        lines.append(f'  <route src="h{s}" dst="h{d}" symmetrical="NO">{ctn}</route>')
    lines += [" </zone>", "</platform>"]
    return "\n".join(lines)


def run_simgrid(case):
    """Runs in a child process (one SimGrid engine per process); returns
    (drain ends, seconds of e.run())."""
    from simgrid import Actor, Comm, Engine, this_actor

    from maxmin import max_min_engine

    e = max_min_engine("replay", platform_xml(case))
    flows = case["flows"]
    hosts = {}
    ends = [None] * len(flows)

    def controller():
        comms = []
        for at, src, dst, size, _ in flows:
            if at > Engine.clock:
                this_actor.sleep_until(at)
            for h in (src, dst):
                if h not in hosts:
                    hosts[h] = e.host_by_name(f"h{h}")
            comms.append(Comm.sendto_async(hosts[src], hosts[dst], size))
        for i, c in enumerate(comms):
            c.wait()
            ends[i] = c.finish_time

    Actor.create("replay", e.host_by_name(f"h{flows[0][1]}"), controller)
    start = time.perf_counter()
    e.run()
    return ends, time.perf_counter() - start


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        case = json.load(open(sys.argv[2]))
        ends, secs = run_simgrid(case)
        print(json.dumps({"ends": ends, "seconds": secs}))
        return
    import subprocess

    print(f"{'topology':>12} {'workers':>7} {'steps':>5} {'flows':>7} {'instants':>8} "
          f"{'recomp':>7} {'flowlab_s':>10} {'simgrid_s':>10} {'ratio':>7} {'max_rel_diff':>12}")
    for path in sys.argv[1:]:
        case = json.load(open(path))
        out = subprocess.run([sys.executable, __file__, "--child", path],
                             capture_output=True, text=True, check=True)
        sg = json.loads(out.stdout.strip().splitlines()[-1])
        worst = 0.0
        for (at, _, _, _, mine), theirs in zip(case["flows"], sg["ends"]):
            span = theirs - at
            if span > 0:
                worst = max(worst, abs(mine - theirs) / span)
        print(f"{case['topology']:>12} {case['workers']:>7} {case['steps']:>5} {len(case['flows']):>7} "
              f"{case['drain_end_instants']:>8} {case['recomputations']:>7} {case['flowlab_replay_s']:>10.4f} "
              f"{sg['seconds']:>10.3f} {sg['seconds'] / case['flowlab_replay_s']:>7.1f} {worst:>12.2e}")


if __name__ == "__main__":
    main()
