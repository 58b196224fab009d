#!/usr/bin/env python3
"""A profile taken at one batch size predicting the same model's step at
others (issue 53: one-device predictions within 10% at batch sizes other
than the profiled one).

For each model: `flowlab profile` at the profiled batch; then, for each
other batch, `flowlab place --profile` with that profile (nodes it timed at
other shapes are priced from that time scaled by the cost model's ratio),
the same with the profile's node records removed (every such node priced
by the model alone, as before the records existed), and `flowlab profile`
at that batch for the measured step (median of its timed steps). One
thread, one CPU device, all in one run of this script.

    python3 bench/profile-batches/run.py --flowlab target/release/flowlab
"""
import argparse, json, statistics, subprocess, tempfile, os

CASES = [  # model, profiled batch, other batches
    ("mlp", 128, [32, 512]),
    ("cnn", 32, [16, 64, 128]),
    ("lstm_lm", 32, [16, 64]),
]


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def profile(fl, model, batch, steps, out):
    run([fl, "profile", "--model", model, "--batch", str(batch), "--steps", str(steps), "--out", out])
    with open(out) as f:
        return json.load(f)


def predict(fl, model, batch, prof):
    out = run([fl, "place", "--model", model, "--batch", str(batch), "--devices", "1xcpu",
               "--profile", prof, "--placer", "single_device", "--json"])
    return json.loads(out)["step_seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flowlab", default="target/release/flowlab")
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp()
    print("| model | profiled at | batch | measured (ms) | scaled (ms) | error | model only (ms) | error |")
    print("|---|---|---|---|---|---|---|---|")
    for model, base, others in CASES:
        p = os.path.join(tmp, f"{model}-{base}.json")
        prof = profile(a.flowlab, model, base, 2 * a.steps, p)
        bare = os.path.join(tmp, f"{model}-{base}-bare.json")
        prof.pop("nodes", None)
        with open(bare, "w") as f:
            json.dump(prof, f)
        for b in others:
            measured = statistics.median(profile(a.flowlab, model, b, a.steps, os.path.join(tmp, f"{model}-{b}.json"))["step_seconds"])
            scaled, alone = predict(a.flowlab, model, b, p), predict(a.flowlab, model, b, bare)
            e = lambda x: f"{(x - measured) / measured * 100:+.1f}%"
            print(f"| {model} | {base} | {b} | {measured * 1e3:.2f} | {scaled * 1e3:.2f} | {e(scaled)} | {alone * 1e3:.2f} | {e(alone)} |", flush=True)


if __name__ == "__main__":
    main()
