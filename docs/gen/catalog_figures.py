#!/usr/bin/env python3
"""Writes each simulation entry of the catalog's figures into its file's
header: runs `flowlab run catalog:NAME` into a temporary folder, takes
`flowlab report DIR --figures` (the numbers each plot draws) and puts them
between the markers below, just above `name:`. Kinds that time real runs
(validate, distributed) are left out: their numbers differ from run to run.
tests/catalog_figures_are_current.rs fails while a block differs from what
a fresh run gives.

    python3 docs/gen/catalog_figures.py [--flowlab target/debug/flowlab] [NAME ...]
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

BEGIN = "# Figures of a fresh run (docs/gen/catalog_figures.py writes them, tests/catalog_figures_are_current.rs checks them):"
END = "# (end of figures)"
REAL_RUN_KINDS = {"validate", "distributed"}


def main():
    root = pathlib.Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowlab", default=str(root / "target/debug/flowlab"))
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    catalog = root / "experiments/catalog"
    names = args.names or sorted(p.stem for p in catalog.glob("*.yaml"))
    for name in names:
        path = catalog / f"{name}.yaml"
        text = path.read_text()
        kind = re.search(r"^kind:\s*(\S+)", text, re.M).group(1)
        if kind in REAL_RUN_KINDS:
            continue
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([args.flowlab, "run", f"catalog:{name}", "--out", out, "--jobs", "2"], check=True, stdout=subprocess.DEVNULL)
            figures = subprocess.run([args.flowlab, "report", out, "--figures"], check=True, capture_output=True, text=True).stdout
        block = f"{BEGIN}\n{figures}{END}\n"
        if BEGIN in text:
            text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n", lambda _: block, text, flags=re.S)
        else:
            text = re.sub(r"^name:", lambda _: block + "name:", text, count=1, flags=re.M)
        path.write_text(text)
        print(f"{name}: {figures.count(chr(10))} lines", file=sys.stderr)


if __name__ == "__main__":
    main()
