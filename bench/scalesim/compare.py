#!/usr/bin/env python3
"""Compare flowlab's systolic-array model with SCALE-Sim on the same layers.

Runs SCALE-Sim (pip: scalesim==3.0.0, numpy<2.4) in-process and
`flowlab systolic --scalesim-compat --json` as a subprocess on one config and
one topology, prints per-layer compute cycles from both and the wall-clock
times, and exits non-zero unless every layer's compute cycles are equal and,
in compat mode, its Total, Stall and incl.-prefetch cycles and DRAM ifmap and
filter reads and ofmap writes too (compat mode replays SCALE-Sim's memory
system whenever the config gives a DRAM bandwidth, as these configs do).

    python3 bench/scalesim/compare.py --flowlab target/release/flowlab \
        --array 32 --dataflow ws --select res5a_branch1,fc1000

flowlab runs in SCALE-Sim compatibility mode (`--scalesim-compat`): cycle
counts are the index of the last cycle, as SCALE-Sim's "Total Cycles" are,
and strided outputs are ceil((H - F) / S) + 1 wide, so with no stall flowlab's
compute_cycles must equal SCALE-Sim's Total Cycles - Stall Cycles exactly.
`--physical` runs flowlab's default mode instead and reports the differences
without asserting. See README.md.
"""
import argparse
import csv
import hashlib
import shutil
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

CFG = """[general]
run_name = cmp

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: {sram}
FilterSramSzkB: {sram}
OfmapSramSzkB: {sram}
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: {bw}
Dataflow: {df}
ReadRequestBuffer: 32
WriteRequestBuffer: 32

[layout]
IfmapCustomLayout: False
FilterCustomLayout: False
IfmapSRAMBankBandwidth: {bw}
IfmapSRAMBankNum: 1
IfmapSRAMBankPort: 2
FilterSRAMBankBandwidth: {bw}
FilterSRAMBankNum: 1
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false
SparseRep: ellpack_block
OptimizedMapping: false
BlockSize: 8
RandomNumberGeneratorSeed: 40

[run_presets]
InterfaceBandwidth: USER
UseRamulatorTrace: False
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flowlab", default=os.path.join(ROOT, "target", "release", "flowlab"))
    ap.add_argument("--topology", default=os.path.join(ROOT, "hw", "topologies", "resnet50.csv"))
    ap.add_argument("--layers", type=int, default=0, help="first N layers only (0: all)")
    ap.add_argument("--select", default="", help="comma list of layer names to keep (after --layers)")
    ap.add_argument("--array", type=int, default=32)
    ap.add_argument("--dataflow", default="ws", choices=["os", "ws", "is"])
    ap.add_argument("--sram", type=int, default=4096, help="KiB per SRAM")
    ap.add_argument("--bandwidth", type=int, default=100000, help="words per cycle")
    ap.add_argument("--json", action="store_true", help="print one JSON object per layer")
    ap.add_argument("--cycle-accurate", action="store_true", help="time flowlab's cycle-by-cycle model")
    ap.add_argument("--physical", action="store_true",
                    help="run flowlab in its default (physical) mode: report differences, assert nothing")
    ap.add_argument("--cache", default="",
                    help="directory keeping SCALE-Sim's COMPUTE_REPORT.csv per config and layer list, "
                         "so a second run (e.g. after rebuilding flowlab) skips SCALE-Sim")
    ap.add_argument("--scalesim-only", action="store_true", help="run SCALE-Sim only (to fill --cache) and stop")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        lines = [l for l in open(args.topology) if l.strip()]
        header, lines = lines[0], lines[1:]
        if args.layers:
            lines = lines[: args.layers]
        if args.select:
            keep = [n.strip() for n in args.select.split(",") if n.strip()]
            by_name = {l.split(",")[0].strip(): l for l in lines}
            missing = [n for n in keep if n not in by_name]
            if missing:
                sys.exit(f"--select: no layer named {', '.join(missing)} in {args.topology}")
            lines = [by_name[n] for n in keep]
        lines = [header] + lines
        topo = os.path.join(tmp, "topo.csv")
        open(topo, "w").write("".join(lines))
        layout = os.path.join(tmp, "layout.csv")
        open(layout, "w").write("Layer name,\n")
        cfg = os.path.join(tmp, "cmp.cfg")
        cfg_text = CFG.format(rows=args.array, cols=args.array, sram=args.sram, bw=args.bandwidth, df=args.dataflow)
        open(cfg, "w").write(cfg_text)

        key = hashlib.sha256((cfg_text + "".join(lines)).encode()).hexdigest()[:16]
        cached = os.path.join(args.cache, f"scalesim-{args.array}x{args.array}-{args.dataflow}-{key}.csv") if args.cache else ""
        if cached and os.path.exists(cached) and os.path.exists(cached + ".access"):
            report, t_scalesim = cached, float(open(cached + ".seconds").read())
            access = cached + ".access"
        else:
            from scalesim.scale_sim import scalesim  # imported late: --help works without it

            t0 = time.perf_counter()
            with redirect_stdout(io.StringIO()):
                s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout,
                             input_type_gemm=False)
                s.run_scale(top_path=os.path.join(tmp, "out"))
            t_scalesim = time.perf_counter() - t0
            report = os.path.join(tmp, "out", "cmp", "COMPUTE_REPORT.csv")
            access = os.path.join(tmp, "out", "cmp", "DETAILED_ACCESS_REPORT.csv")
            if cached:
                os.makedirs(args.cache, exist_ok=True)
                shutil.copy(report, cached)
                shutil.copy(access, cached + ".access")
                open(cached + ".seconds", "w").write(f"{t_scalesim}\n")
        with open(report) as f:
            rows = [[c.strip() for c in r] for r in csv.reader(f)]
        head, rows = rows[0], [r for r in rows[1:] if r and r[0]]
        col = {h: i for i, h in enumerate(head)}
        with open(access) as f:
            arows = [[c.strip() for c in r] for r in csv.reader(f)]
        ahead, arows = arows[0], [r for r in arows[1:] if r and r[0]]
        acol = {h: i for i, h in enumerate(ahead)}
        if args.scalesim_only:
            for r in rows:
                print(f"{r[0]}: Total Cycles {r[col['Total Cycles']]}, Stall Cycles {r[col['Stall Cycles']]}")
            print(f"SCALE-Sim seconds: {t_scalesim:.3f}")
            return

        t0 = time.perf_counter()
        out = subprocess.run(
            [args.flowlab, "systolic", "--config", cfg, "--topology", topo, "--json"]
            + (["--physical"] if args.physical else ["--scalesim-compat"])
            + (["--cycle-accurate"] if args.cycle_accurate else []),
            check=True, capture_output=True, text=True,
        ).stdout
        t_flowlab = time.perf_counter() - t0
        ours = [json.loads(l) for l in out.splitlines() if l.strip()]

    if len(ours) != len(rows):
        sys.exit(f"layer count differs: flowlab {len(ours)}, SCALE-Sim {len(rows)}")
    # SCALE-Sim sizes the output as ceil((H - F) / S) + 1, counting a window
    # that hangs off the edge; flowlab's physical mode uses the convolution's
    # floor((H - F) / S) + 1 (compat mode follows SCALE-Sim). Such layers are flagged.
    dims = [[int(x) for x in l.split(",")[1:8]] for l in lines[1:] if l.split(",")[0].strip()]
    equal = 0
    stalls_equal = 0
    for o, r, a, d in zip(ours, rows, arows, dims):
        h, w, fh, fw, _, _, st = d
        rounding_differs = (h - fh) % st != 0 or (w - fw) % st != 0
        ss_total = int(r[col["Total Cycles"]])
        ss_stall = int(r[col["Stall Cycles"]])
        ss_compute = ss_total - ss_stall
        rec = {
            "layer": o["name"],
            "flowlab_compute_cycles": o["compute_cycles"],
            "scalesim_compute_cycles": ss_compute,
            "equal": o["compute_cycles"] == ss_compute,
            "flowlab_stall_cycles": o["stall_cycles"],
            "scalesim_stall_cycles": ss_stall,
            "flowlab_mapping_efficiency_pct": round(100 * o["mapping_efficiency"], 4),
            "scalesim_mapping_efficiency_pct": round(float(r[col["Mapping Efficiency %"]]), 4),
            "ofmap_rounding_differs": rounding_differs,
        }
        # Stalls, the total with the first prefetch and the final drain, and
        # the DRAM traffic: SCALE-Sim's memory model, replayed by compat mode
        # whenever the DRAM bandwidth is given (always, in these configs).
        pairs = {
            "total_cycles": (o["total_cycles"], ss_total),
            "stall_cycles": (o["stall_cycles"], ss_stall),
            "total_cycles_incl_prefetch": (o["end_to_end_cycles"], int(r[col["Total Cycles (incl. prefetch)"]])),
            "ifmap_dram_reads": (o["ifmap_dram_bytes_read"] // o.get("word_bytes", 1), int(a[acol["DRAM IFMAP Reads"]])),
            "filter_dram_reads": (o["filter_dram_bytes_read"] // o.get("word_bytes", 1), int(a[acol["DRAM Filter Reads"]])),
            "ofmap_dram_writes": (o["ofmap_dram_bytes_written"] // o.get("word_bytes", 1), int(a[acol["DRAM OFMAP Writes"]])),
        }
        for k, (mine, theirs) in pairs.items():
            rec[f"flowlab_{k}"], rec[f"scalesim_{k}"] = mine, theirs
        rec["memory_equal"] = all(m == t for m, t in pairs.values())
        stalls_equal += rec["memory_equal"]
        equal += rec["equal"]
        print(json.dumps(rec) if args.json else "  ".join(f"{k}={v}" for k, v in rec.items()))
    ss_cycles = sum(int(r[col["Total Cycles"]]) for r in rows)
    summary = {
        "layers": len(ours),
        "compute_cycles_equal": equal,
        "memory_equal": stalls_equal,
        "sram_kib": args.sram,
        "bandwidth": args.bandwidth,
        "flowlab_mode": "physical" if args.physical else "scalesim-compat",
        "array": f"{args.array}x{args.array}",
        "dataflow": args.dataflow,
        "scalesim_seconds": round(t_scalesim, 3),
        "flowlab_seconds": round(t_flowlab, 4),
        "speedup": round(t_scalesim / t_flowlab, 1),
        "flowlab_model": "cycle-by-cycle" if args.cycle_accurate else "fast path",
        "scalesim_simulated_cycles_per_second": round(ss_cycles / t_scalesim),
        "flowlab_simulated_cycles_per_second": round(sum(o["total_cycles"] for o in ours) / t_flowlab),
    }
    print(json.dumps(summary))
    if not args.physical and equal != len(ours):
        sys.exit(f"compute cycles differ on {len(ours) - equal} of {len(ours)} layers")
    if not args.physical and stalls_equal != len(ours):
        sys.exit(f"stalls, totals or DRAM traffic differ on {len(ours) - stalls_equal} of {len(ours)} layers")


if __name__ == "__main__":
    main()
