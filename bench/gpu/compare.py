"""Puts real GPU step times (zoo_steps.py's JSON) beside the graph-level
simulator's prediction for the same model, batch and catalog device.

    python3 compare.py h100.json --device h100 [--flowlab target/release/flowlab] [--profile P]

For each measured (model, batch) it runs
`flowlab place --model M --batch B --devices 1x<device> --placer single_device --json`
and prints Markdown tables:
- the step: measured eager (PyTorch dispatching from the host) and replayed
  from a CUDA graph (the GPU's own time), the prediction, and the signed
  error (predicted - measured) / measured against the graph replay, the
  figure the simulator's device model describes;
- where the time goes: measured kernel time of conv and matmul ops (and the
  rest) against the simulator's priced op time of the same classes.
Rows the simulator has no twin for (cuDNN's fused LSTM) are marked.
"""
import argparse, json, subprocess, sys

# (model, batch) points whose measurements set a catalog figure: ResNet-50
# b32's convolution time set the H100's and H200's conv efficiency (the
# H200 runs the same kernels, so its point is no hold-out either). Every
# other point is held out.
CALIBRATION = {("resnet50", 32)}


def predict(flowlab, model, batch, device, profile):
    cmd = [flowlab, "place", "--model", model, "--batch", str(batch), "--devices", f"1x{device}",
           "--placer", "single_device", "--json"]
    if profile:
        cmd += ["--profile", profile]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def ms(x):
    return f"{x * 1e3:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("measured")
    ap.add_argument("--device", default="h100")
    ap.add_argument("--flowlab", default="target/release/flowlab")
    ap.add_argument("--profile")
    a = ap.parse_args()
    m = json.load(open(a.measured))
    print(f"{m['device']} ({m['sms']} SMs), torch {m['torch']}, cuDNN {m['cudnn']}, f32 with TF32 off\n")
    print("| figure | measured |\n|---|---|")
    for k, v in m["figures"].items():
        print(f"| {k} | {v:.3f} |")
    print()
    print("| model | batch | params (torch / zoo) | eager ms (p10-p90) | CUDA graph ms (p10-p90) | predicted ms | error vs graph | error vs eager |")
    print("|---|---|---|---|---|---|---|---|")
    errs, calib, classes = [], [], []
    for s in m["steps"]:
        zoo = s["model"].replace("_cudnn", "")
        p = predict(a.flowlab, zoo, s["batch"], a.device, a.profile)
        pred = p["step_seconds"]
        twin = not s["model"].endswith("_cudnn")
        g = s.get("graph_median_s")
        eg = (pred - g) / g if g else None
        ee = (pred - s["median_s"]) / s["median_s"]
        if twin and eg is not None:
            (calib if (zoo, s["batch"]) in CALIBRATION else errs).append(abs(eg))
        mark = "" if twin else " (fused cuDNN, not a twin)"
        graph = f"{ms(g)} ({ms(s['graph_p10_s'])}-{ms(s['graph_p90_s'])})" if g else s.get("graph_error", "-")
        print(f"| {s['model']}{mark} | {s['batch']} | {s['params']:,} / {p['params']:,} | "
              f"{ms(s['median_s'])} ({ms(s['p10_s'])}-{ms(s['p90_s'])}) | {graph} | {ms(pred)} | "
              f"{'-' if eg is None else f'{eg:+.1%}'} | {ee:+.1%} |")
        if twin and "error" not in s.get("by_class_s", {"error": 1}):
            classes.append((s, p["report"]["devices"][0].get("op_seconds_by_class", {})))
    if errs:
        print(f"\nMAPE against the CUDA-graph step, held out: {sum(errs) / len(errs):.1%} ({len(errs)} points)")
    if calib:
        print(f"calibration (set a catalog figure): {sum(calib) / len(calib):.1%} ({len(calib)} points: {sorted(CALIBRATION)})")
    print("\n| model | batch | conv measured / predicted ms | matmul measured / predicted ms | rest measured / predicted ms |")
    print("|---|---|---|---|---|")
    for s, pc in classes:
        mc = s["by_class_s"]
        rest_m = sum(v for k, v in mc.items() if k not in ("conv", "matmul"))
        rest_p = sum(v for k, v in pc.items() if k not in ("conv", "matmul"))
        cell = lambda k: f"{ms(mc.get(k, 0.0))} / {ms(pc.get(k, 0.0))}"
        print(f"| {s['model']} | {s['batch']} | {cell('conv')} | {cell('matmul')} | {ms(rest_m)} / {ms(rest_p)} |")


if __name__ == "__main__":
    sys.exit(main())
