#!/usr/bin/env python3
"""Compare flowlab's systolic-array model with SCALE-Sim on the same layers.

Runs SCALE-Sim (pip: scalesim==3.0.0, numpy<2.4) in-process and
`flowlab systolic --json` as a subprocess on one config and one topology,
then prints per-layer compute cycles from both and the wall-clock times.

    python3 bench/scalesim/compare.py --flowlab target/release/flowlab \
        --array 32 --dataflow ws --layers 4 --bandwidth 100000

SCALE-Sim's "Total Cycles" is the index of the last cycle, so with no stall
flowlab's compute_cycles = SCALE-Sim's Total Cycles + 1 (= its "Total Cycles
(incl. prefetch)" when the prefetch overlaps nothing). See README.md.
"""
import argparse
import csv
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
    ap.add_argument("--array", type=int, default=32)
    ap.add_argument("--dataflow", default="ws", choices=["os", "ws", "is"])
    ap.add_argument("--sram", type=int, default=4096, help="KiB per SRAM")
    ap.add_argument("--bandwidth", type=int, default=100000, help="words per cycle")
    ap.add_argument("--json", action="store_true", help="print one JSON object per layer")
    ap.add_argument("--cycle-accurate", action="store_true", help="time flowlab's cycle-by-cycle model")
    args = ap.parse_args()

    from scalesim.scale_sim import scalesim  # imported late: --help works without it

    with tempfile.TemporaryDirectory() as tmp:
        lines = [l for l in open(args.topology) if l.strip()]
        if args.layers:
            lines = lines[: args.layers + 1]
        topo = os.path.join(tmp, "topo.csv")
        open(topo, "w").write("".join(lines))
        layout = os.path.join(tmp, "layout.csv")
        open(layout, "w").write("Layer name,\n")
        cfg = os.path.join(tmp, "cmp.cfg")
        open(cfg, "w").write(CFG.format(rows=args.array, cols=args.array, sram=args.sram, bw=args.bandwidth, df=args.dataflow))

        t0 = time.perf_counter()
        with redirect_stdout(io.StringIO()):
            s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo, layout=layout, input_type_gemm=False)
            s.run_scale(top_path=os.path.join(tmp, "out"))
        t_scalesim = time.perf_counter() - t0
        with open(os.path.join(tmp, "out", "cmp", "COMPUTE_REPORT.csv")) as f:
            rows = [[c.strip() for c in r] for r in csv.reader(f)]
        head, rows = rows[0], [r for r in rows[1:] if r and r[0]]
        col = {h: i for i, h in enumerate(head)}

        t0 = time.perf_counter()
        out = subprocess.run(
            [args.flowlab, "systolic", "--config", cfg, "--topology", topo, "--json"]
            + (["--cycle-accurate"] if args.cycle_accurate else []),
            check=True, capture_output=True, text=True,
        ).stdout
        t_flowlab = time.perf_counter() - t0
        ours = [json.loads(l) for l in out.splitlines() if l.strip()]

    if len(ours) != len(rows):
        sys.exit(f"layer count differs: flowlab {len(ours)}, SCALE-Sim {len(rows)}")
    # SCALE-Sim sizes the output as ceil((H - F) / S) + 1, counting a window
    # that hangs off the edge; flowlab uses the convolution's floor((H - F) / S) + 1.
    # Layers where the two differ are flagged and left out of the equality count.
    dims = [[int(x) for x in l.split(",")[1:8]] for l in lines[1:] if l.split(",")[0].strip()]
    equal = comparable = 0
    for o, r, d in zip(ours, rows, dims):
        h, w, fh, fw, _, _, st = d
        rounding_differs = (h - fh) % st != 0 or (w - fw) % st != 0
        ss_total = int(r[col["Total Cycles"]])
        ss_stall = int(r[col["Stall Cycles"]])
        ss_compute = ss_total - ss_stall + 1
        rec = {
            "layer": o["name"],
            "flowlab_compute_cycles": o["compute_cycles"],
            "scalesim_compute_cycles": ss_compute,
            "flowlab_stall_cycles": o["stall_cycles"],
            "scalesim_stall_cycles": ss_stall,
            "flowlab_mapping_efficiency_pct": round(100 * o["mapping_efficiency"], 4),
            "scalesim_mapping_efficiency_pct": round(float(r[col["Mapping Efficiency %"]]), 4),
        }
        rec["ofmap_rounding_differs"] = rounding_differs
        if not rounding_differs:
            comparable += 1
            equal += rec["flowlab_compute_cycles"] == ss_compute
        print(json.dumps(rec) if args.json else "  ".join(f"{k}={v}" for k, v in rec.items()))
    ss_cycles = sum(int(r[col["Total Cycles"]]) + 1 for r in rows)
    summary = {
        "layers": len(ours),
        "comparable_layers": comparable,
        "compute_cycles_equal": equal,
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


if __name__ == "__main__":
    main()
